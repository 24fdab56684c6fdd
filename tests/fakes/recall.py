"""A hand-written fake of the recall port, and `observation()`, a stored observation built in memory."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from engram.domain.observation import Observation, Priority, Provenance, Scope, Source, TriggerSource
from engram.domain.recall import RecallQuery, RecallResult, SearchHit
from engram.domain.scopes import Principal, Visibility


def observation(
    tenant_id: str,
    title: str,
    *,
    type: str = "fact",
    scope: Scope = Scope.public,
    user_id: str | None = None,
    team_ids: Iterable[str] = (),
    narrative: str = "",
    verified: bool = True,
    priority: Priority = Priority.normal,
    tags: Iterable[str] = (),
    age_days: float = 1.0,
) -> Observation:
    created = datetime.now(UTC) - timedelta(days=age_days)
    return Observation(
        id=uuid.uuid4(),
        tenant_id=tenant_id,
        user_id=user_id,
        team_ids=list(team_ids),
        type=type,
        title=title,
        narrative=narrative,
        facts=[],
        concepts=[],
        tags=list(tags),
        key=None,
        content_hash=uuid.uuid4().hex,
        discovery_tokens=[],
        relevance_count=0,
        priority=priority,
        source=Source.user,
        verified=verified,
        confidence=1.0,
        scope=scope,
        trigger_source=TriggerSource.manual,
        provenance=Provenance(),
        valid_from=None,
        expires_at=None,
        superseded_by=None,
        created_at=created,
        updated_at=created,
    )


_WORD = re.compile(r"\w+", re.UNICODE)


class FakeRecall:
    """An in-memory `engram.ports.Recall`.

    - `honest=True` applies the R-7.2 visibility rules like the real service; `honest=False`
      returns every matching observation, sensitive ones included, to prove that chat-turn
      drops them itself.
    - `fail_streams` makes the queries of those streams raise; `slow_streams` never answer.
    - Every query is recorded in `queries`.
    """

    def __init__(
        self,
        observations: Iterable[Observation] = (),
        *,
        honest: bool = True,
        fail_streams: Iterable[str] = (),
        slow_streams: Iterable[str] = (),
    ) -> None:
        self.observations = list(observations)
        self.honest = honest
        self.fail_streams = set(fail_streams)
        self.slow_streams = set(slow_streams)
        self.queries: list[tuple[Principal, RecallQuery]] = []

    def add(self, *observations: Observation) -> None:
        self.observations.extend(observations)

    async def search(self, principal: Principal, query: RecallQuery) -> RecallResult:
        self.queries.append((principal, query))
        if query.stream_origin in self.fail_streams:
            raise ConnectionError(f"index unavailable for stream {query.stream_origin}")
        if query.stream_origin in self.slow_streams:
            import asyncio

            await asyncio.sleep(3600)
        words = {w.casefold() for w in _WORD.findall(query.text) if len(w) > 2}
        visibility = Visibility.for_principal(principal, want_sensitive=query.want_sensitive)
        hits: list[SearchHit] = []
        for obs in self.observations:
            if query.types and obs.type not in query.types:
                continue
            if self.honest and not visibility.allows(obs):
                continue
            text = {w.casefold() for w in _WORD.findall(obs.searchable_text())}
            overlap = len(words & text)
            if not overlap:
                continue
            boost = float(query.type_boosts.get(obs.type, 1.0))
            hits.append(
                SearchHit(
                    observation=obs,
                    score=overlap * boost,
                    lexical_rank=None,
                    vector_rank=None,
                    boosts={"type": boost},
                    stream_origin=query.stream_origin,
                )
            )
        hits.sort(key=lambda h: -h.score)
        return RecallResult(query_id=uuid.uuid4(), hits=hits[: query.limit])

    def asked_for_sensitive(self) -> list[Any]:
        return [q for _p, q in self.queries if q.want_sensitive]
