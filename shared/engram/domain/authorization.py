"""The one authorization rule for every write path (R-16.4).

Remember (`POST /api/ai/memory`), mark over HTTP, a mark sent through `POST /api/ai/events`,
chat extraction, the agent paths and whatever comes later all ask `authorize_write` before
they create an observation, with the principal the write acts for and what the observation
would be: its owner, scope and teams. Nothing can be planted in a team, in another user's
memory or in the sensitive scope through one path that `remember` would refuse.

- owner: a principal writes into its own memory; a tenant-wide observation (owner None) or one
  owned by another user needs `manage:AiObservation`.
- team: needs at least one team, and membership of every team named (unless
  `manage:AiObservation`).
- sensitive: needs `view:SensitiveAiMemory` (a sensitive observation is visible to exactly
  the holders of that permission).
- every write needs `create:AiObservation`.

Pure: no I/O; `Forbidden` / `Unprocessable` name what is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engram.domain.errors import Forbidden, Unprocessable
from engram.domain.observation import Scope
from engram.domain.scopes import Permission, Principal, PrincipalKind


@dataclass(frozen=True)
class WriteRequest:
    """What a write would create: whose observation, in which scope, for which teams."""

    owner: str | None
    scope: Scope
    team_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, owner: str | None, scope: Scope, team_ids: Iterable[str] = ()) -> WriteRequest:
        return cls(owner, scope, frozenset(team_ids))


def authorize_write(principal: Principal, request: WriteRequest) -> None:
    """Raise unless `principal` may create an observation as `request` describes."""
    if not principal.has(Permission.create_observation):
        raise Forbidden(f"permission {Permission.create_observation.value!r} is required")
    manages = principal.has(Permission.manage_observation)
    if request.owner is None:
        if request.scope is Scope.private:
            raise Unprocessable("scope", "a tenant-wide observation cannot be private (use public or team)")
        if not manages:
            raise Forbidden(f"a tenant-wide observation needs {Permission.manage_observation.value!r}")
    elif request.owner != principal.user_id and not manages:
        raise Forbidden(f"writing into another user's memory needs {Permission.manage_observation.value!r}")
    if request.scope is Scope.team:
        if not request.team_ids:
            raise Unprocessable("team_ids", "a team observation needs at least one team id")
        missing = request.team_ids - principal.teams
        if missing and not manages:
            raise Forbidden(f"not a member of team(s) {sorted(missing)}")
    if request.scope is Scope.sensitive and not principal.has(Permission.view_sensitive):
        raise Forbidden(f"a sensitive observation needs {Permission.view_sensitive.value!r}")


def may_write(principal: Principal, request: WriteRequest) -> bool:
    try:
        authorize_write(principal, request)
    except (Forbidden, Unprocessable):
        return False
    return True


def extractor_for(tenant_id: str, user_id: str, *, may_store_sensitive: bool) -> Principal:
    """Chat extraction acts for the user who chatted, with no more authority than that user had
    when the turn was recorded (chat-turn states it in the event): their own memory, no team,
    sensitive only if they may see sensitive memories."""
    permissions = {Permission.create_observation.value}
    if may_store_sensitive:
        permissions.add(Permission.view_sensitive.value)
    return Principal(tenant_id, user_id, PrincipalKind.agent, frozenset(), frozenset(permissions))
