"""Authentication (R-12.1): JWTs for humans (HS256 locally, RS256 with a key or JWKS), agent keys.

JWT claims: `tenant_id` (or `tid`), `sub` (user), `teams`, `permissions`, `exp` (required).
Agent keys (`egk_...`) are random 256-bit secrets stored as SHA-256 and resolved through the
`AgentKeyDirectory` port (a narrow SECURITY DEFINER function on PostgreSQL), since the tenant
is not known before the key is.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engram.domain.errors import Unauthorized
from engram.domain.hashing import secret_hash
from engram.domain.scopes import Principal, PrincipalKind
from engram.ports import AgentKeyDirectory, UnitOfWork
from engram.settings import Settings

if TYPE_CHECKING:
    import jwt

# PyJWT (with `cryptography`) is imported where a token is checked or issued, not at import: the
# event workers build the same services but never authenticate, and start ~50 ms sooner for it.

AGENT_KEY_PREFIX = "egk_"


@dataclass(frozen=True)
class IssuedKey:
    id: uuid.UUID
    secret: str


def new_agent_secret() -> str:
    return AGENT_KEY_PREFIX + secrets.token_urlsafe(32)


class Authenticator:
    def __init__(self, settings: Settings, keys: AgentKeyDirectory | None) -> None:
        self.settings = settings
        self.keys = keys
        self._jwks: jwt.PyJWKClient | None = None

    def _verification_key(self, token: str) -> tuple[Any, list[str]]:
        import jwt

        s = self.settings
        if s.engram_jwt_jwks_url:
            if self._jwks is None:
                self._jwks = jwt.PyJWKClient(s.engram_jwt_jwks_url, cache_keys=True, lifespan=300)
            return self._jwks.get_signing_key_from_jwt(token).key, ["RS256", "ES256"]
        if s.engram_jwt_public_key:
            return s.engram_jwt_public_key, ["RS256", "ES256"]
        if s.engram_jwt_secret:
            return s.engram_jwt_secret.get_secret_value(), ["HS256"]
        raise Unauthorized("JWT authentication is not configured on this server")

    def principal_from_jwt(self, token: str) -> Principal:
        import jwt

        try:
            key, algorithms = self._verification_key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                audience=self.settings.engram_jwt_audience,
                issuer=self.settings.engram_jwt_issuer,
                leeway=self.settings.engram_jwt_leeway_seconds,
                options={"require": ["exp", "sub"], "verify_aud": bool(self.settings.engram_jwt_audience)},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthorized("the token has expired") from exc
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid token: {exc}") from exc
        tenant = claims.get("tenant_id") or claims.get("tid")
        if not isinstance(tenant, str) or not tenant or len(tenant) > 128:
            raise Unauthorized("the token carries no tenant ('tenant_id' claim)")
        teams = claims.get("teams") or []
        permissions = claims.get("permissions") or []
        if not isinstance(teams, list) or not all(isinstance(t, str) for t in teams):
            raise Unauthorized("'teams' must be a list of strings")
        if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
            raise Unauthorized("'permissions' must be a list of strings")
        sub = claims["sub"]
        if not isinstance(sub, str) or not sub or len(sub) > 128:
            raise Unauthorized("'sub' must be a non-empty string")
        return Principal(
            tenant_id=tenant,
            user_id=sub,
            kind=PrincipalKind.human,
            teams=frozenset(teams),
            permissions=frozenset(permissions),
        )

    async def principal_from_agent_key(self, secret: str) -> Principal:
        if not secret.startswith(AGENT_KEY_PREFIX) or len(secret) > 200:
            raise Unauthorized("malformed agent key")
        digest = secret_hash(secret)
        # resolved on every request (one indexed lookup), never cached: a key revoked in any
        # process or by `engram agent-key revoke` is refused from the next request on
        if self.keys is None:
            raise Unauthorized("agent keys need the database")
        found = await self.keys.resolve(digest)
        if found is None:
            raise Unauthorized("unknown or revoked agent key")
        principal = Principal(
            tenant_id=found.tenant_id,
            user_id=found.user_id,
            kind=PrincipalKind.agent,
            teams=found.teams,
            permissions=found.permissions,
        )
        return principal

    async def authenticate(self, authorization: str | None, agent_key: str | None) -> Principal:
        if agent_key:
            return await self.principal_from_agent_key(agent_key.strip())
        if not authorization:
            raise Unauthorized("missing credentials: send 'Authorization: Bearer <JWT>' or 'X-Agent-Key'")
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return self.principal_from_jwt(value.strip())
        if scheme.lower() == "agentkey" and value.strip():
            return await self.principal_from_agent_key(value.strip())
        raise Unauthorized("unsupported authorization scheme; use 'Bearer <JWT>'")


def issue_jwt(
    secret: str,
    *,
    tenant_id: str,
    user_id: str,
    teams: list[str] | None = None,
    permissions: list[str] | None = None,
    ttl_seconds: int = 3600,
    now: float | None = None,
) -> str:
    """A HS256 token for local use and tests (production tokens come from the identity provider)."""
    import jwt

    issued = int(now if now is not None else time.time())
    claims = {
        "sub": user_id,
        "tenant_id": tenant_id,
        "teams": teams or [],
        "permissions": permissions or [],
        "iat": issued,
        "exp": issued + ttl_seconds,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


async def create_agent_key(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    name: str,
    user_id: str | None,
    teams: list[str],
    permissions: list[str],
) -> IssuedKey:
    secret = new_agent_secret()
    key_id = uuid.uuid4()
    async with uow.tenant(tenant_id) as tx:
        await tx.agent_keys.create(
            key_id, name=name, key_hash=secret_hash(secret), user_id=user_id, teams=teams, permissions=permissions
        )
    return IssuedKey(key_id, secret)
