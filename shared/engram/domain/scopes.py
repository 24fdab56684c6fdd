"""Who may see and do what (R-7.2, R-12). Pure rules; adapters translate them into filters."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from engram.domain.errors import Forbidden
from engram.domain.observation import Observation, Scope, Source


class Permission(StrEnum):
    """Permission strings as carried in a JWT (`action:Subject`, CASL style, R-12.2)."""

    read_observation = "read:AiObservation"
    create_observation = "create:AiObservation"
    update_observation = "update:AiObservation"
    delete_observation = "delete:AiObservation"
    manage_observation = "manage:AiObservation"
    create_feedback = "create:AiObservationFeedback"
    create_event = "create:AiEvent"
    read_event = "read:AiEvent"
    read_session = "read:AiSession"
    read_summary = "read:AiSummary"
    view_devtools = "view:FE_DevTools"
    view_sensitive = "view:SensitiveAiMemory"
    manage_all = "manage:all"


class PrincipalKind(StrEnum):
    human = "human"
    agent = "agent"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller, always inside exactly one tenant."""

    tenant_id: str
    user_id: str | None
    kind: PrincipalKind = PrincipalKind.human
    teams: frozenset[str] = field(default_factory=frozenset)
    permissions: frozenset[str] = field(default_factory=frozenset)

    def has(self, permission: Permission | str) -> bool:
        """`manage:all` grants everything; `manage:X` grants every action on subject X."""
        perm = str(permission)
        if perm in self.permissions or Permission.manage_all in self.permissions:
            return True
        _action, _, subject = perm.partition(":")
        return f"manage:{subject}" in self.permissions

    @property
    def is_human(self) -> bool:
        return self.kind is PrincipalKind.human

    @property
    def source(self) -> Source:
        return Source.user if self.is_human else Source.agent


@dataclass(frozen=True)
class Visibility:
    """What a recall or listing may return, as data every store and index can filter on.

    - private: only its owner (`user_id`)
    - team: members of one of its teams, plus its owner
    - public: every user of the tenant (also when `user_id` is NULL: tenant-wide)
    - sensitive: only with `view:SensitiveAiMemory`, and only when sensitive memories are
      requested explicitly (never in standard chat context)
    """

    tenant_id: str
    user_id: str | None
    teams: frozenset[str]
    include_sensitive: bool
    hidden_ids: frozenset[str] = frozenset()

    @classmethod
    def for_principal(cls, principal: Principal, *, want_sensitive: bool = False) -> Visibility:
        return cls(
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            teams=principal.teams,
            include_sensitive=want_sensitive and principal.has(Permission.view_sensitive),
        )

    def allows(self, obs: Observation) -> bool:
        if obs.tenant_id != self.tenant_id:
            return False
        if str(obs.id) in self.hidden_ids:
            return False
        owner = self.user_id is not None and obs.user_id == self.user_id
        if obs.scope is Scope.private:
            return owner
        if obs.scope is Scope.team:
            return owner or bool(self.teams.intersection(obs.team_ids))
        if obs.scope is Scope.public:
            return True
        return self.include_sensitive  # sensitive


def require(principal: Principal, permission: Permission) -> None:
    """Forbidden unless the principal holds `permission`."""
    if not principal.has(permission):
        raise Forbidden(f"permission {permission.value!r} is required")


def require_sensitive(principal: Principal, wanted: bool, what: str) -> None:
    """Forbidden when `what` asks for sensitive observations the principal may not see (asking
    is refused, not silently narrowed: the caller learns why nothing sensitive came back)."""
    if wanted and not principal.has(Permission.view_sensitive):
        raise Forbidden(f"{what} needs {Permission.view_sensitive.value!r}")
