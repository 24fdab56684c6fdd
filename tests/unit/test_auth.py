"""JWT verification: HS256 locally, RS256 with a PEM key or a JWKS endpoint (production IdPs)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from engram.domain.errors import Unauthorized
from engram.services.auth import Authenticator, issue_jwt
from engram.settings import Settings

CLAIMS = {"sub": "alice", "tenant_id": "acme", "teams": ["sales"], "permissions": ["read:AiObservation"]}


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def _token(key: Any, alg: str, **extra: Any) -> str:
    claims = {**CLAIMS, "exp": int(time.time()) + 60, **extra}
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": "k1"})


def test_hs256_round_trip_and_claims() -> None:
    secret = "s" * 48
    auth = Authenticator(Settings(engram_jwt_secret=secret), None)
    p = auth.principal_from_jwt(issue_jwt(secret, tenant_id="acme", user_id="alice", teams=["sales"]))
    assert (p.tenant_id, p.user_id, p.teams, p.is_human) == ("acme", "alice", frozenset({"sales"}), True)


def test_rs256_with_a_public_key(rsa_key: rsa.RSAPrivateKey) -> None:
    auth = Authenticator(Settings(engram_jwt_public_key=_pem(rsa_key), engram_jwt_audience="engram"), None)
    p = auth.principal_from_jwt(_token(rsa_key, "RS256", aud="engram"))
    assert p.permissions == frozenset({"read:AiObservation"})
    with pytest.raises(Unauthorized, match=r"(?i)audience"):
        auth.principal_from_jwt(_token(rsa_key, "RS256", aud="someone-else"))
    # an HS256 token signed with the public key text must not pass (algorithm confusion)
    with pytest.raises(Unauthorized):
        auth.principal_from_jwt(jwt.encode({**CLAIMS, "exp": time.time() + 60}, "x" * 64, algorithm="HS256"))


@pytest.fixture
def jwks_url(rsa_key: rsa.RSAPrivateKey) -> Iterator[str]:
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    server.shutdown()


def test_rs256_with_jwks(rsa_key: rsa.RSAPrivateKey, jwks_url: str) -> None:
    auth = Authenticator(Settings(engram_jwt_jwks_url=jwks_url), None)
    assert auth.principal_from_jwt(_token(rsa_key, "RS256")).user_id == "alice"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(Unauthorized, match="invalid token"):
        auth.principal_from_jwt(_token(other, "RS256"))


def test_claim_shapes_are_checked() -> None:
    secret = "s" * 48
    auth = Authenticator(Settings(engram_jwt_secret=secret), None)
    for bad in ({"teams": "sales"}, {"permissions": [1]}, {"tenant_id": ""}, {"sub": ""}):
        token = jwt.encode({**CLAIMS, "exp": time.time() + 60, **bad}, secret, algorithm="HS256")
        with pytest.raises(Unauthorized):
            auth.principal_from_jwt(token)
    with pytest.raises(Unauthorized, match="not configured"):
        Authenticator(Settings(engram_jwt_secret=None), None).principal_from_jwt("a.b.c")
