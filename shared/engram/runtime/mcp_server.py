"""Engram as an MCP server (R-1.3): the memory API's use cases as tools and resources for agents.

Every tool calls the same service memory-api calls, with the caller's principal resolved by
`engram.services.auth` on every call (an agent key or a JWT: from the HTTP headers of the
Streamable HTTP transport, or the credentials `engram mcp` was started with over stdio), so
every rule holds as it does over REST: scopes and teams (`authorize_write`), sensitive memories,
"(unverified)" marks, and that only a person verifies.

What goes wrong is an MCP error with a clear message: a tool answers `isError` with the reason
(the argument at fault, "forbidden: ...", "not found: ..."), a resource read a JSON-RPC error;
a dependency that is down says so and when to retry. Nothing is a bare crash.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime, tzinfo
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from engram.adapters.failures import failure_kind
from engram.bootstrap import Services, get_services, recall_service
from engram.domain.deliveries import reason
from engram.domain.errors import Conflict, Forbidden, NotFound, RecallUnavailable, Unauthorized, Unprocessable
from engram.domain.injection import MAX_TAGS
from engram.domain.models import FeedbackKind
from engram.domain.observation import Key, Observation, Priority, Scope, Tag, TeamId, TypeName
from engram.domain.periods import parse_within
from engram.domain.recall import RecallQuery
from engram.domain.recall_text import DEFAULT_TOKEN_BUDGET, render_recall_text
from engram.domain.scopes import Principal, require_sensitive
from engram.domain.text import find_unstorable
from engram.runtime import mcp_guide as guide
from engram.runtime.guards import RETRY_AFTER_SECONDS
from engram.runtime.mcp_results import Accepted, Expiring, Forgotten, Found, Hit, MemoryView, Remembered
from engram.services.feedback import FeedbackRequest
from engram.services.memory import MarkRequest, RememberRequest
from engram.services.profile import stable_block
from engram.services.recall_plan import MAX_LIMIT, MAX_QUERY_CHARS, validate_query_text

# who is calling: resolved on every call, so a revoked agent key is refused from the next call on
Credentials = Callable[[Context], Awaitable[Principal]]

OBSERVATION_URI = "engram://observations/{observation_id}"
HISTORY_URI = "engram://observations/{observation_id}/history"
JSON = "application/json"


def _message(exc: BaseException) -> str | None:
    """The clear message for what a caller did wrong or what is down; None: an unexpected error."""
    if isinstance(exc, Unauthorized):
        return f"not authenticated: {exc}"
    if isinstance(exc, Forbidden):
        return f"forbidden: {exc}"
    if isinstance(exc, NotFound):
        return f"not found: {exc}"
    if isinstance(exc, Conflict):
        return f"conflict: {exc}"
    if isinstance(exc, Unprocessable):
        return f"invalid argument '{exc.field}': {exc}"
    if isinstance(exc, RecallUnavailable):
        return f"unavailable: {exc}"
    kind = failure_kind(exc)
    if kind == "outage":
        return f"a dependency is unavailable; retry in {RETRY_AFTER_SECONDS} s"
    if kind == "data":
        return f"a value cannot be stored: {reason(exc)}"
    return None


@contextlib.contextmanager
def _answering() -> Iterator[None]:
    """Domain errors and outages as tool errors the model can read (anything else stays a crash)."""
    try:
        yield
    except ToolError:
        raise
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "arguments"
        raise ToolError(f"invalid argument '{field}': {first.get('msg', 'invalid')}") from exc
    except Exception as exc:
        message = _message(exc)
        if message is None:
            raise
        raise ToolError(message) from exc


def _storable(**arguments: Any) -> None:
    """Text PostgreSQL cannot store (NUL, lone surrogates) is refused, naming the argument (R-16.1)."""
    found = find_unstorable(arguments, "")
    if found is not None:
        raise ToolError(f"invalid argument '{found[0]}': {found[1]}")


@contextlib.contextmanager
def _time_zone_argument() -> Iterator[None]:
    """An unknown zone name (`zones.time_zone`'s ValueError) as the tool error naming the argument."""
    try:
        yield
    except ValueError as exc:
        raise ToolError(f"invalid argument 'time_zone': {exc}") from exc


async def _zone(services: Any, principal: Principal, name: str | None) -> tzinfo:
    """The user's time zone: `name`, else the one they named last, else the deployment's."""
    with _time_zone_argument():
        zone: tzinfo = await services.memory.zone_of(principal, name)
    return zone


async def _search_zone(services: Any, principal: Principal, name: str | None, query: str) -> tzinfo | None:
    """The zone a search of `query` reads days in (`MemoryService.search_zone`)."""
    with _time_zone_argument():
        zone: tzinfo | None = await services.memory.search_zone(principal, name, query)
    return zone


def _id_lines(observations: Sequence[Observation]) -> str:
    """One line per observation, its id and title, for a model's feedback and forget calls."""
    return "".join(f"- {o.id}: {' '.join(o.title.split())[:80]}\n" for o in observations)


def _observation_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise ResourceNotFoundError(f"no observation {value!r}: an observation id is a UUID") from exc


Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="what to look for, in words")]
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description="at most this many memories")]
Types = Annotated[list[TypeName], Field(max_length=20, description="only these observation types; empty: all")]
Sensitive = Annotated[bool, Field(description="include sensitive memories (needs view:SensitiveAiMemory)")]
AsOf = Annotated[datetime | None, Field(description="what was valid at that moment (ISO 8601); null: now")]
TimeZone = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=64,
        description="the user's IANA time zone, e.g. Europe/Berlin (their today and yesterday, the dates shown); "
        "null: the one the user named last in a chat, else the server's",
    ),
]
ScopeArg = Annotated[Scope, Field(description="private (default), team, public or sensitive")]
Teams = Annotated[list[TeamId], Field(max_length=64, description="the teams of a 'team' observation")]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
ObservationId = Annotated[uuid.UUID, Field(description="the observation's id (from recall, search or remember)")]


ServicesSource = Callable[[], Awaitable[Services]]


def build_server(credentials: Credentials, services: ServicesSource = get_services) -> MCPServer:
    """The MCP server: eight tools and two resource templates over the process's services."""
    server = MCPServer("engram", title="Engram memory", instructions=guide.INSTRUCTIONS, version="0.1.0")
    tools = Tools(credentials, services)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    forgets = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
    for name, description, hints in (
        ("remember", guide.REMEMBER, writes),
        ("recall", guide.RECALL, reads),
        ("profile", guide.PROFILE, reads),
        ("search", guide.SEARCH, reads),
        ("mark", guide.MARK, writes),
        ("feedback", guide.FEEDBACK, writes),
        ("forget", guide.FORGET, forgets),
        ("expiring", guide.EXPIRING, reads),
    ):
        server.tool(name=name, description=description, annotations=hints)(getattr(tools, name))
    server.resource(OBSERVATION_URI, name="observation", description=guide.OBSERVATION, mime_type=JSON)(
        tools.observation
    )
    server.resource(HISTORY_URI, name="observation history", description=guide.HISTORY, mime_type=JSON)(tools.history)
    return server


class Tools:
    """The tools and resources; each resolves the caller first, then calls memory-api's service."""

    def __init__(self, credentials: Credentials, services: ServicesSource) -> None:
        self.credentials = credentials
        self.services = services

    async def remember(
        self,
        ctx: Context,
        title: Annotated[str, Field(min_length=1, max_length=500, description="a short title")],
        narrative: Annotated[str, Field(max_length=20_000, description="the details, in full sentences")] = "",
        type: Annotated[TypeName, Field(description="fact, decision, preference, event, note, ...")] = "note",
        facts: Annotated[list[str], Field(max_length=100, description="short atomic statements")] = [],  # noqa: B006
        tags: Tags = [],  # noqa: B006
        scope: ScopeArg = Scope.private,
        team_ids: Teams = [],  # noqa: B006
        key: Annotated[Key | None, Field(description="a stable key: the same key updates, not adds")] = None,
        priority: Priority = Priority.normal,
        owner: Annotated[Literal["me", "tenant"], Field(description="'tenant': tenant-wide (manage)")] = "me",
        expires_at: Annotated[datetime | None, Field(description="when it stops being true (ISO 8601)")] = None,
        said_at: Annotated[
            datetime | None, Field(description="when it was said, for an import of history (ISO 8601, with a zone)")
        ] = None,
    ) -> Remembered:
        _storable(title=title, narrative=narrative, facts=facts, tags=tags, key=key, team_ids=team_ids)
        with _answering():
            principal = await self.credentials(ctx)
            body = RememberRequest(
                title=title,
                narrative=narrative,
                type=type,
                facts=facts,
                tags=tags,
                scope=scope,
                team_ids=team_ids,
                key=key,
                priority=priority,
                owner=owner,
                expires_at=expires_at,
                said_at=said_at,
            )
            written = await (await self.services()).memory.remember(principal, body)
        return Remembered(outcome=written.outcome.value, observation=MemoryView.of(written.observation))

    async def mark(
        self,
        ctx: Context,
        text: Annotated[str, Field(min_length=1, max_length=20_000, description="the chat text to keep")],
        title: Annotated[str | None, Field(max_length=500)] = None,
        type: TypeName = "note",
        tags: Tags = [],  # noqa: B006
        scope: ScopeArg = Scope.private,
        team_ids: Teams = [],  # noqa: B006
        priority: Priority = Priority.normal,
    ) -> Accepted:
        _storable(text=text, title=title, tags=tags, team_ids=team_ids)
        with _answering():
            principal = await self.credentials(ctx)
            body = MarkRequest(
                text=text, title=title, type=type, tags=tags, scope=scope, team_ids=team_ids, priority=priority
            )
            return Accepted(id=await (await self.services()).memory.mark(principal, body))

    async def feedback(
        self,
        ctx: Context,
        kind: FeedbackKind,
        observation_id: Annotated[uuid.UUID | None, Field(description="for every kind but 'rated'")] = None,
        rating: Annotated[int | None, Field(ge=1, le=5, description="for 'rated': 1 (useless) .. 5")] = None,
        query_id: Annotated[uuid.UUID | None, Field(description="for 'rated': a recall's or search's id")] = None,
    ) -> Accepted:
        with _answering():
            principal = await self.credentials(ctx)
            body = FeedbackRequest(kind=kind, observation_id=observation_id, rating=rating, query_id=query_id)
            return Accepted(id=await (await self.services()).feedback.submit(principal, body))

    async def forget(self, ctx: Context, observation_id: ObservationId) -> Forgotten:
        with _answering():
            principal = await self.credentials(ctx)
            deleted = await (await self.services()).curation.delete(principal, observation_id)
        return Forgotten(id=deleted.id, title=deleted.title)

    async def recall(
        self,
        ctx: Context,
        query: Query,
        limit: Limit = 10,
        types: Types = [],  # noqa: B006
        sensitive: Sensitive = False,
        budget: Annotated[int, Field(ge=50, le=32_000, description="token budget of the text")] = DEFAULT_TOKEN_BUDGET,
        as_of: AsOf = None,
        time_zone: TimeZone = None,
    ) -> str:
        _storable(query=query)
        with _answering():
            principal = await self.credentials(ctx)
            text = validate_query_text(query, "query")
            require_sensitive(principal, sensitive, "sensitive recall")
            services = await self.services()
            zone = await _zone(services, principal, time_zone)
            result = await recall_service(services).search(
                principal,
                RecallQuery(
                    text=text, limit=limit, types=tuple(types), want_sensitive=sensitive, as_of=as_of, zone=zone
                ),
            )
        body = (
            render_recall_text(result.hits, token_budget=budget, zone=zone)
            or "Nothing found in memory for this query.\n"
        )
        ids = _id_lines([h.observation for h in result.hits])
        footer = f"\nquery_id: {result.query_id}\n" + (f"ids of the memories found:\n{ids}" if ids else "")
        return body + footer

    async def profile(self, ctx: Context, time_zone: TimeZone = None) -> str:
        with _answering():
            principal = await self.credentials(ctx)
            services = await self.services()
            zone = await _zone(services, principal, time_zone)
            found = await services.memory.profile(principal, zone)
        if not found:
            return "Nothing is known yet about this user's preferences or identity.\n"
        ids = _id_lines(found)
        return f"{stable_block(found, zone)}\n\nids of the entries:\n{ids}"

    async def search(
        self,
        ctx: Context,
        query: Query,
        limit: Limit = 10,
        types: Types = [],  # noqa: B006
        mode: Annotated[Literal["hybrid", "lexical", "vector"], Field(description="how to match")] = "hybrid",
        sensitive: Sensitive = False,
        as_of: AsOf = None,
        time_zone: TimeZone = None,
    ) -> Found:
        _storable(query=query)
        with _answering():
            principal = await self.credentials(ctx)
            text = validate_query_text(query, "query")
            require_sensitive(principal, sensitive, "sensitive recall")
            services = await self.services()
            zone = await _search_zone(services, principal, time_zone, text)
            wanted = RecallQuery(
                text=text, limit=limit, types=tuple(types), want_sensitive=sensitive, mode=mode, as_of=as_of, zone=zone
            )
            result = await recall_service(services).search(principal, wanted)
        hits = [
            Hit(
                observation=MemoryView.of(h.observation),
                score=h.score,
                lexical_rank=h.lexical_rank,
                vector_rank=h.vector_rank,
            )
            for h in result.hits
        ]
        return Found(query_id=result.query_id, hits=hits)

    async def expiring(
        self,
        ctx: Context,
        within: Annotated[str, Field(max_length=16, description="e.g. '7d', '12h', '2w'")] = "7d",
        sensitive: Sensitive = False,
    ) -> Expiring:
        with _answering():
            principal = await self.credentials(ctx)
            window = parse_within(within, "within")
            found = await (await self.services()).curation.expiring(principal, window, include_sensitive=sensitive)
        return Expiring(within=within, items=[MemoryView.of(o) for o in found])

    async def observation(self, observation_id: str, ctx: Context) -> str:
        with _reading(OBSERVATION_URI.format(observation_id=observation_id)):
            principal = await self.credentials(ctx)
            found = await (await self.services()).memory.get(principal, _observation_id(observation_id))
        return found.model_dump_json()

    async def history(self, observation_id: str, ctx: Context) -> str:
        with _reading(HISTORY_URI.format(observation_id=observation_id)):
            principal = await self.credentials(ctx)
            found = await (await self.services()).memory_history.history(principal, _observation_id(observation_id))
        return found.model_dump_json()


@contextlib.contextmanager
def _reading(uri: str) -> Iterator[None]:
    """Domain errors of a resource read as JSON-RPC errors: not found (-32602) or the reason (-32603)."""
    try:
        yield
    except ResourceError:
        raise
    except NotFound as exc:
        raise ResourceNotFoundError(f"{uri}: {exc}") from exc
    except Exception as exc:
        message = _message(exc)
        if message is None:
            raise
        raise ResourceError(f"{uri}: {message}") from exc
