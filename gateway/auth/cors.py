"""CORS for a door, so a web page may call it: off unless the capsule's manifest names the
origins (``network.cors.allow_origins``), and then a pure-ASGI layer in front of DoorAuth.

For a request whose ``Origin`` this door allows, in this order:

1. a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) is answered here,
   ``204``, without a credential, and goes no further: the methods and request headers
   a client of either binding sends (``Authorization``, ``A2A-Version``,
   ``A2A-Extensions``, ``Content-Type``), how long the browser may keep the answer, and
   ``Access-Control-Allow-Private-Network`` when the browser asks for it (a public page
   calling a door on loopback);
2. every other request goes on to DoorAuth unchanged, credential checks and all, and its
   answer, whatever it is (a ``401`` too, so the page can read why), gains
   ``Access-Control-Allow-Origin: <origin>``, ``Vary: Origin`` and the response headers a
   page may read.

A request without ``Origin``, or from an origin not allowed, passes through untouched: a
preflight from such a page reaches DoorAuth, which refuses it as any request without a
credential, and the browser then refuses the call. No cookie is ever accepted, so no
``Access-Control-Allow-Credentials`` is sent: a page authenticates with a bearer token.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.types import ASGIApp, Headers, Message, Receive, Scope, Send

#: Request headers a page may send (both bindings' clients send these).
ALLOWED_REQUEST_HEADERS = b"Authorization, A2A-Version, A2A-Extensions, Content-Type"
ALLOWED_METHODS = b"GET, POST, DELETE, OPTIONS"
#: Response headers a page may read beside the CORS-safelisted ones.
EXPOSED_HEADERS = b"Retry-After, WWW-Authenticate, A2A-Version, ETag"
#: Seconds a browser may reuse a preflight's answer.
PREFLIGHT_MAX_AGE = b"600"


class Cors:
    """Answers preflights from ``origins`` and marks every answer to them (module text).
    ``*`` among the origins allows every origin (each answer names the page's own)."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        self.app = app
        self._origins = frozenset(origin.encode("ascii") for origin in origins)
        self._any = b"*" in self._origins

    def allows(self, origin: bytes) -> bool:
        return self._any or origin in self._origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin: bytes | None = None
        preflight = False
        private_network = False
        for name, value in scope["headers"]:
            if name == b"origin":
                origin = value
            elif name == b"access-control-request-method":
                preflight = True
            elif name == b"access-control-request-private-network":
                private_network = value.lower() == b"true"
        if origin is None or not self.allows(origin):
            await self.app(scope, receive, send)
            return
        if preflight and scope["method"] == "OPTIONS":
            await _preflight(send, origin, private_network)
            return
        await self.app(scope, receive, _marking(send, origin))


def _marked(headers: Headers, origin: bytes) -> Headers:
    kept = [(name, value) for name, value in headers if name != b"vary"]
    vary = [value for name, value in headers if name == b"vary"]
    kept.extend([
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", EXPOSED_HEADERS),
        (b"vary", b", ".join([*vary, b"Origin"])),
    ])
    return kept


def _marking(send: Send, origin: bytes) -> Send:
    async def marked_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": _marked(list(message.get("headers", ())), origin)}
        await send(message)
    return marked_send


async def _preflight(send: Send, origin: bytes, private_network: bool) -> None:
    headers: Headers = [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-methods", ALLOWED_METHODS),
        (b"access-control-allow-headers", ALLOWED_REQUEST_HEADERS),
        (b"access-control-max-age", PREFLIGHT_MAX_AGE),
        (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        (b"content-length", b"0"),
    ]
    if private_network:
        headers.append((b"access-control-allow-private-network", b"true"))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
