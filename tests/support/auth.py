"""Shared helpers for the DoorAuth tests (no tests here): the test door (DoorAuth in front
of an app that echoes what it received), credentials of every kind, JSON-RPC bodies, raw
ASGI calls, and the one 401 every unacceptable token gets."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ed25519
from jwt.algorithms import OKPAlgorithm

from gateway.auth.credentials import DeclaredBearer, JwtIssuer, OperatorToken
from gateway.auth.door_auth import AuthPolicy, DoorAuth
from gateway.auth.tokens import FormationKey, FormationVerifier
from gateway.caller import CALLER_SCOPE_KEY, PUBLIC_CALLER, RPC_SCOPE_KEY

FORMATION = "frm_0190c0de00007000800000000000beef"
OTHER_FORMATION = "frm_0190c0de00007000800000000000cafe"
BASE_URL = "http://127.0.0.1:8000"
CI_TOKEN = "ci-token-0123456789abcdef-0123456789"
KEY = FormationKey.generate()
JWT_KEY = ed25519.Ed25519PrivateKey.generate()


def mint(caller: str = "planner", callee: str = "coder", formation: str = FORMATION,
         key: FormationKey = KEY) -> str:
    return key.mint(formation=formation, caller=caller, callee=callee)


def rpc(method: Any = "GetTask", request_id: Any = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {"id": "t1"}}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


#: The header an A2A 1.0 client sends. DoorAuth refuses an out-of-scope method whatever
#: version a call asks for; the app answers -32009 to a call that passed it in another.
A2A_1_0 = {"A2A-Version": "1.0"}


def bearer_1_0(token: str) -> dict[str, str]:
    """``bearer(token)`` in a call that asks for A2A 1.0."""
    return {**bearer(token), **A2A_1_0}


@dataclass
class EchoApp:
    """An ASGI app that answers with what it received, and remembers every call."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.calls.append({"type": "lifespan"})
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            return
        caller = scope.get(CALLER_SCOPE_KEY)
        seen: dict[str, Any] = {
            "type": scope["type"],
            "path": scope["path"],
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "caller": None if caller is None else {
                "kind": caller.credential.kind, "name": caller.credential.name,
                "member": caller.credential.member, "origin": caller.origin,
                "trust": caller.trust, "public": caller is PUBLIC_CALLER,
            },
            "rpc": scope.get(RPC_SCOPE_KEY),
        }
        self.calls.append(seen)
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": json.dumps(seen)})
            await send({"type": "websocket.close", "code": 1000})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        seen["body"] = body.decode("utf-8", "replace")
        answer = json.dumps(seen).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})


@dataclass
class Door:
    """A test door: DoorAuth in front of an EchoApp, and the credentials it accepts."""

    app: DoorAuth
    echo: EchoApp
    operator: OperatorToken

    def client(self, base_url: str = BASE_URL) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=base_url)

    async def post(self, body: Any = None, headers: Any = None, path: str = "/",
                   content: bytes | None = None) -> httpx.Response:
        async with self.client() as client:
            if content is None:
                content = json.dumps(rpc() if body is None else body).encode()
            return await client.post(path, content=content, headers=headers,
                                     timeout=10)

    async def get(self, path: str, headers: Any = None) -> httpx.Response:
        async with self.client() as client:
            return await client.get(path, headers=headers, timeout=10)


def jwt_issuer(scopes: Iterable[str] | None = ("GetTask",),
               kind: type[JwtIssuer] = JwtIssuer) -> JwtIssuer:
    jwk = {**OKPAlgorithm.to_jwk(JWT_KEY.public_key(), as_dict=True), "kid": "k1"}
    return kind.from_jwks("corp", "https://id.example", "coder", ["EdDSA"], {"keys": [jwk]},
                          scopes)


def corp_jwt() -> str:
    import time

    return jwt.encode({"iss": "https://id.example", "aud": "coder", "sub": "ci-bot",
                       "exp": int(time.time()) + 300},
                      JWT_KEY, algorithm="EdDSA", headers={"kid": "k1"})


def make_door(**changes: Any) -> Door:
    """A door for member "coder" in FORMATION with every kind of credential declared."""
    operator = OperatorToken.generate()
    options: dict[str, Any] = {
        "authenticated": True,
        "operator": operator,
        "bearers": (DeclaredBearer("ci", CI_TOKEN, frozenset({"SendMessage", "GetTask"})),),
        "jwt_issuers": (jwt_issuer(),),
        "verifier": FormationVerifier(KEY.public_bytes, FORMATION),
        "member": "coder",
        "accept_peer_tasks": True,
    }
    options.update(changes)
    echo = EchoApp()
    return Door(app=DoorAuth(echo, AuthPolicy(**options)), echo=echo, operator=operator)


def error_of(response: httpx.Response) -> str:
    return str(response.json()["error"])


def asgi_scope(headers: list[tuple[bytes, bytes]], path: str = "/", method: str = "POST",
               kind: str = "http", extensions: dict[str, Any] | None = None) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": kind, "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": headers, "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000),
    }
    if kind == "http":
        scope["method"] = method
    if extensions is not None:
        scope["extensions"] = extensions
    return scope


async def call_asgi(app: Any, scope: dict[str, Any],
                    incoming: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Call ``app`` with ``incoming`` messages; return what it sent."""
    pending = list(incoming)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return {"type": "http.disconnect" if scope["type"] == "http" else "websocket.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


INVALID_BODY = {"error": "invalid_token",
                "message": "The bearer token is not accepted at this door."}
INVALID_CHALLENGE = 'Bearer realm="murmur", error="invalid_token"'


def assert_invalid_token(response: httpx.Response) -> None:
    """The one 401 every unacceptable token gets: same status, body and challenge."""
    assert response.status_code == 401
    assert response.json() == INVALID_BODY
    assert response.headers["www-authenticate"] == INVALID_CHALLENGE
