"""DoorAuth: the door's pure-ASGI auth middleware.

At an authenticated door every HTTP and WebSocket request goes through these checks, in
this order; the first failure answers and nothing after it is read (docs/door-auth.md):

1. ``401 unauthenticated``: no ``Authorization`` header (a token in the query string or a
   cookie is never looked at);
2. ``401 invalid_token``: not exactly ``Bearer <token>``, two headers, a token no
   credential accepts, any ``mft1`` token that does not verify, is another formation's or
   reaches a door in no formation, or any unexpected error while verifying;
3. ``403 not_permitted``: a valid formation token issued for another member's door;
4. the method is read: from the JSON-RPC body of ``POST /`` (bounded: ``413`` past
   ``max_body``), from the path for the agent card, ``resources/files`` and ``/metrics``
   (``Metrics``: the operator, or a declared credential with that scope), from the verb
   and path for the HTTP+JSON binding (:func:`gateway.a2a.rest_routes.match_rest`, whose
   body the REST endpoint reads);
5. ``403 insufficient_scope``: a method outside the credential's scopes, unless the
   request asks for an A2A version other than 1.0 (its method names are not ours: the
   app answers ``-32009`` before it looks a name up);
6. ``403 peer_not_accepted``: a formation credential at a door that takes no peer tasks;
7. ``421 misdirected_request``: a ``Host`` that is not a loopback name with the door's
   port (DNS rebinding);
8. a body that is not one JSON-RPC call gets its JSON-RPC error (``-32700`` malformed,
   ``-32600`` a batch or no string ``method``) from here, never partly served.

Then the ``Authorization`` and task origin/trust headers are removed, the
:class:`gateway.caller.Caller` and the parsed JSON-RPC request are left on the scope, the
body is replayed, and the app is called. A public door (no credentials) makes check 7
alone (DNS rebinding), then hands every request over as the ``public`` caller with the
body unread. ``GET /healthz`` needs no credential and no ``Host``. At a door with
``public_card``, a card request without ``Authorization`` passes check 7 alone and is
served the public card (:data:`gateway.caller.ANONYMOUS_CALLER`). docs/door-auth.md is
the user's version of this text.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.a2a.jsonrpc import STRICT_JSON
from gateway.a2a.rest_routes import RestRoute, match_rest
from gateway.auth.credentials import DeclaredBearer, JwtIssuer, OperatorToken, member_credential
from gateway.auth.tokens import FormationVerifier, InvalidToken
from gateway.caller import (
    ANONYMOUS_CALLER,
    CALLER_SCOPE_KEY,
    OPERATOR_METHODS,
    PUBLIC_CALLER,
    REFUSED_METHODS,
    REST_SCOPE_KEY,
    RPC_SCOPE_KEY,
    Caller,
)
from gateway.errors import GatewayError
from gateway.http_io import BodyTooLarge, requested_version, serves_version
from gateway.http_io import header as first_header
from gateway.metrics import METHOD_SCOPE_KEY, METRICS_METHOD, DoorMetrics
from gateway.protocol import (
    CARD_PATH,
    FILES_PATH,
    FILES_PREFIX,
    HEALTH_PATH,
    MEMBER_NAME_RE,
    METRICS_PATH,
    ORIGIN_HEADER,
    TRUST_HEADER,
    VERSION_HEADER,
    route_path,
)
from gateway.redaction import redact_request_text
from gateway.types import ASGIApp, Headers, Message, Receive, Scope, Send

__all__ = ["MAX_CREDENTIAL_CHARS", "REFUSALS", "AuthPolicy", "DoorAuth", "Refusal", "loggable"]


logger = logging.getLogger("gateway.auth.door_auth")

#: Longest non-formation token tried against the door's credentials (JWTs included).
MAX_CREDENTIAL_CHARS = 8192
_FORMATION_PREFIX = "mft1."
_BEARER = b"Bearer "
_TRUST_HEADER = TRUST_HEADER.encode("ascii")
_ORIGIN_HEADER = ORIGIN_HEADER.encode("ascii")
_VERSION_HEADER = VERSION_HEADER.encode("ascii")
#: Headers the app never sees: the credential, and origin/trust, which come only from it.
_STRIPPED_HEADERS = frozenset({
    b"authorization", _ORIGIN_HEADER, _TRUST_HEADER,
    _ORIGIN_HEADER.replace(b"-", b"_"), _TRUST_HEADER.replace(b"-", b"_"),
})


@dataclass(frozen=True)
class AuthPolicy:
    """What a door accepts. ``authenticated=False`` is a public door, which checks only
    the ``Host`` (DNS rebinding)."""

    authenticated: bool = False
    operator: OperatorToken | None = None
    bearers: tuple[DeclaredBearer, ...] = ()
    jwt_issuers: tuple[JwtIssuer, ...] = ()
    #: ``None``: a door in no formation, which refuses every ``mft1`` token.
    verifier: FormationVerifier | None = None
    #: This door's roster name; a formation token is valid here only when ``to`` is it.
    member: str | None = None
    accept_peer_tasks: bool = False
    max_body: int = 1 << 20
    #: Serve the card without its session extension to a request with no credential.
    public_card: bool = False
    #: Web origins whose pages may call the door (CORS, :mod:`gateway.auth.cors`); none: off.
    allow_origins: tuple[str, ...] = ()
    #: A listener beyond loopback (``--listen``): its local port, and the names its
    #: clients may send as ``Host`` there (each alone or with the port).
    public_port: int | None = None
    public_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.member is not None and (
            not isinstance(self.member, str) or MEMBER_NAME_RE.fullmatch(self.member) is None
        ):
            raise ValueError(f"member must match {MEMBER_NAME_RE.pattern}, got {self.member!r}")
        if self.verifier is not None and self.member is None:
            raise ValueError("a door with a formation verifier needs its roster name (member=)")
        if isinstance(self.max_body, bool) or not isinstance(self.max_body, int) or (
            self.max_body < 1
        ):
            raise ValueError(f"max_body must be a positive number of bytes, got {self.max_body!r}")


# -- the one table of refusals -----------------------------------------------------------

_REALM = 'Bearer realm="murmur"'


@dataclass(frozen=True, slots=True)
class Refusal:
    """How one refusal is answered. With ``rpc_code``: a JSON-RPC error in an HTTP 200."""

    status: int
    message: str
    www_authenticate: str | None = None
    rpc_code: int | None = None


#: Every answer DoorAuth gives itself, by its ``error`` code.
REFUSALS: dict[str, Refusal] = {
    "unauthenticated": Refusal(
        401, "This door needs a credential: send 'Authorization: Bearer <token>'.", _REALM),
    "invalid_token": Refusal(
        401, "The bearer token is not accepted at this door.",
        f'{_REALM}, error="invalid_token"'),
    "not_permitted": Refusal(
        403, "Member {member} holds no formation token for this member's door."),
    "insufficient_scope": Refusal(
        403, "The credential {credential} may not call {method}.",
        f'{_REALM}, error="insufficient_scope"'),
    "peer_not_accepted": Refusal(
        403, "This member takes no peer tasks (its manifest does not set "
             "exports.peer_tasks.accept: true)."),
    "payload_too_large": Refusal(
        413, "The request body is larger than this door accepts ({limit} bytes)."),
    "misdirected_request": Refusal(
        421, "This door answers only to a loopback Host (127.0.0.1, localhost or [::1]) "
             "with its own port."),
    "parse_error": Refusal(
        200, "Parse error: the body is not one UTF-8 JSON document.", rpc_code=-32700),
    "batch_refused": Refusal(
        200, "Invalid Request: a batch (JSON array) is not accepted; send one call per "
             "request.", rpc_code=-32600),
    "invalid_request": Refusal(
        200, "Invalid Request: expected one JSON-RPC object with a string 'method'.",
        rpc_code=-32600),
}


def _answer(code: str, **fields: str) -> tuple[int, Headers, bytes]:
    """Status, headers and body of the refusal ``code`` (fields fill its message)."""
    refusal = REFUSALS[code]
    message = refusal.message.format(**fields) if fields else refusal.message
    document: dict[str, Any]
    if refusal.rpc_code is None:
        document = {"error": code, "message": message}
    else:
        # JSON-RPC 2.0: the id of a request that could not be read is null.
        document = {"jsonrpc": "2.0", "id": None,
                    "error": {"code": refusal.rpc_code, "message": message}}
    body = json.dumps(document, separators=(",", ":")).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode("ascii")),
               (b"cache-control", b"no-store")]
    if refusal.www_authenticate is not None:
        headers.append((b"www-authenticate", refusal.www_authenticate.encode("ascii")))
    return refusal.status, headers, body


# -- log hygiene -------------------------------------------------------------------------

#: Control characters (C0, DEL, C1, line/paragraph separators) as visible escapes, so a
#: request cannot forge log lines or drive a terminal (CRLF, ANSI escape sequences).
_LOG_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]}
_LOG_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_LOG_LIMIT = 200


def loggable(text: str) -> str:
    """``text`` taken from a request, made safe for one log line: redacted, escaped, bounded."""
    # A client that put its token in the URL must not find it in the door's log.
    text = redact_request_text(text[: _LOG_LIMIT * 4]).translate(_LOG_ESCAPES)
    return text if len(text) <= _LOG_LIMIT else text[:_LOG_LIMIT] + "..."


# -- reading a request -------------------------------------------------------------------


class _NotPermitted(GatewayError):
    """A valid formation token for another door; carries only the presenting member."""

    def __init__(self, member: str) -> None:
        super().__init__(member)
        self.member = member


def _content_length(value: bytes) -> int:
    """A Content-Length value as a number; -1 when it is not one (the server judges it)."""
    return int(value) if value.isdigit() and len(value) < 20 else -1


async def _read_rest(receive: Receive, first: bytes, limit: int) -> bytes | None:
    """The whole body of a request whose first message brought ``first`` and said more
    follows (``BodyTooLarge`` past ``limit``); ``None`` if the client left."""
    chunks = [first]
    size = len(first)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


#: The C scanner behind json.loads, called directly: for a GetTask-sized body json.loads
#: spends more around the scan than in it. It is the door's strict reader's (no NaN or
#: Infinity), so DoorAuth and the app accept exactly the same documents.
_scan_json: Callable[[str, int], tuple[Any, int]] = (
    STRICT_JSON.scan_once  # type: ignore[attr-defined]  # set in JSONDecoder.__init__
)
_JSON_SPACE = " \t\n\r"


def _parse_rpc(body: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON-RPC request object (with a string method), or the refusal code.

    The body is parsed as ``json.loads(body)`` would (one UTF-8 JSON document, white
    space around it), but through the scanner directly."""
    try:
        text = body.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE)) if text[:1] in _JSON_SPACE else 0
        document, end = _scan_json(text, start)
    except (ValueError, RecursionError, StopIteration):  # StopIteration: no JSON value
        return None, "parse_error"
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return None, "parse_error"  # more after the JSON document
    # The json module builds exact dicts, lists and strs: ``type() is`` is isinstance here.
    if type(document) is dict:
        if type(document.get("method")) is str:
            return document, None
        return None, "invalid_request"
    return None, "batch_refused" if type(document) is list else "invalid_request"


class _Replay:
    """The app's receive after DoorAuth read the body: the body, then the client's own
    messages (so the app still learns of a disconnect). A class with slots, not a
    closure: one small object per request."""

    __slots__ = ("_body", "_receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> Message:
        body = self._body
        if body is None:
            return await self._receive()
        self._body = None
        return {"type": "http.request", "body": body, "more_body": False}


def _without_stripped(headers: Headers) -> Headers:
    for name, _ in headers:
        if name in _STRIPPED_HEADERS:
            return [h for h in headers if h[0] not in _STRIPPED_HEADERS]
    return headers


# -- Host (DNS rebinding) ----------------------------------------------------------------


def _usual_hosts(port: int | None) -> frozenset[bytes]:
    """The Host values clients send to a loopback door, for a set lookup per request."""
    if port is None:
        return frozenset()
    names = [b"127.0.0.1", b"localhost", b"[::1]"]
    hosts = {name + b":" + str(port).encode("ascii") for name in names}
    if port == 80:
        hosts.update(names)
    return frozenset(hosts)


def _without_port(host: bytes) -> bytes:
    """``name`` of ``name:port`` (``[v6]`` of ``[v6]:port``), in lower case."""
    if host.startswith(b"["):
        return host[:host.find(b"]") + 1].lower()
    return host.rsplit(b":", 1)[0].lower() if b":" in host else host.lower()


def _port_is_number(host: bytes) -> bool:
    """Whether ``host``'s port, when it has one, is a port number (1 to 5 digits)."""
    rest = host[host.find(b"]") + 1:] if host.startswith(b"[") else host
    if b":" not in rest:
        return True
    digits = rest.rsplit(b":", 1)[1]
    return digits.isdigit() and 0 < len(digits) <= 5


def _public_hosts(names: tuple[str, ...], port: int) -> frozenset[bytes]:
    """The Host values a listener beyond loopback answers: each name, alone or with the
    port (IPv6 addresses in brackets), in lower case."""
    hosts: set[bytes] = set()
    for name in names:
        text = name.lower().rstrip(".")
        if ":" in text and not text.startswith("["):
            text = f"[{text}]"
        if text.isascii():  # the launcher checked them; anything else matches nothing
            hosts.update({text.encode("ascii"), f"{text}:{port}".encode("ascii")})
    return frozenset(hosts)


def _loopback_host(host: bytes, port: int | None) -> bool:
    """Whether a Host value is a loopback name (127.0.0.0/8, localhost, [::1]) with
    ``port`` (absent: 80). ``port=None`` (a door on a UNIX socket): any port."""
    try:
        text = host.decode("ascii").lower()
    except UnicodeDecodeError:
        return False
    if text.startswith("["):
        name, bracket, port_part = text[1:].partition("]")
        if not bracket:
            return False
    else:
        name, colon, digits = text.partition(":")
        port_part = colon + digits
    if port_part:
        digits = port_part[1:]
        if port_part[0] != ":" or not digits.isdigit() or len(digits) > 5:
            return False
        given = int(digits)
    else:
        given = 80
    if port is not None and given != port:
        return False
    if name == "localhost":
        return not text.startswith("[")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback and (address.version == 6) == text.startswith("[")


# -- the middleware ----------------------------------------------------------------------

#: How many verified formation ``Authorization`` values a door remembers, the oldest
#: dropped first (the verifier's own cache holds as many tokens).
_ADMITTED_LIMIT = 4096


class DoorAuth:
    """The door's auth middleware (pure ASGI). See the module text for the check order.

    ``__call__`` is every request's hot path, kept to one coroutine: one pass over the
    headers, the common case tested first, per-policy values worked out once here, and a
    formation ``Authorization`` value this door verified before found with one lookup.
    """

    def __init__(self, app: ASGIApp, policy: AuthPolicy,
                 metrics: DoorMetrics | None = None) -> None:
        self.app = app
        self.policy = policy
        #: Refusals and credential checks are counted here (gateway.metrics).
        self._metrics = metrics if metrics is not None else DoorMetrics()
        self._verifications = self._metrics.verifications
        self._authenticated = policy.authenticated
        self._operator = policy.operator
        self._operator_caller = (
            Caller(policy.operator.credential, "operator", "trusted")
            if policy.operator is not None else None
        )
        self._bearers = tuple(
            (bearer, Caller(bearer.credential, "client", "untrusted"))
            for bearer in policy.bearers
        )
        self._issuers = policy.jwt_issuers
        self._accept_peer_tasks = policy.accept_peer_tasks
        self._public_card = policy.public_card
        self._max_body = policy.max_body
        #: A Content-Length with fewer digits than this cannot exceed max_body.
        self._max_body_digits = len(str(policy.max_body))
        self._member_callers: dict[tuple[str, bool], Caller] = {}
        self._hosts_by_port: dict[int | None, frozenset[bytes]] = {}
        #: The listener beyond loopback's public names, without a port.
        self._public_names = frozenset(
            _without_port(name) for name in _public_hosts(policy.public_hosts, 0))
        #: Formation ``Authorization`` values (``Bearer mft1...``) this door accepted, with
        #: their callers (untrusted, trusted): a member's repeated calls cost one lookup.
        #: Only formation tokens: they never expire (as in the verifier's cache), while
        #: JWTs do, and operator and declared tokens are compared in constant time.
        self._admitted: dict[bytes, tuple[Caller, Caller]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)  # lifespan and the like: untouched
            return
        if not self._authenticated:
            await self._public(scope, receive, send)
            return

        # One pass over the headers: note what the checks need, keep what the app may see.
        authorization: bytes | None = None
        authorizations = 0
        host: bytes | None = None
        hosts = 0
        trust_value = b""
        trust_headers = 0
        content_length = b""
        kept: Headers = []
        for header in scope["headers"]:
            name = header[0]
            if name == b"authorization":
                authorization = header[1]
                authorizations += 1
                continue
            if name == b"host":
                host = header[1]
                hosts += 1
            elif name == b"content-length":
                content_length = header[1]
            elif name in _STRIPPED_HEADERS:
                if name == _TRUST_HEADER:
                    trust_value = header[1]
                    trust_headers += 1
                continue
            kept.append(header)
        is_http = kind == "http"
        path: str = scope["path"]
        if scope.get("root_path") or "//" in path:
            path = route_path(scope)

        if path == HEALTH_PATH and is_http and scope["method"] in ("GET", "HEAD"):
            _hand_over(scope, kept, None, None)  # names nothing: no credential, no Host
            await self.app(scope, receive, send)
            return

        # 1-3: the credential (401), the formation token's door (403).
        if authorization is None:
            if self._public_card and path == CARD_PATH and is_http and (
                    scope["method"] in ("GET", "HEAD")):
                await self._anonymous_card(scope, receive, send, kept, host, hosts)
                return
            await self._refuse(scope, receive, send, "unauthenticated")
            return
        if authorizations != 1:
            self._verifications["refused"] += 1     # every 401 invalid_token is a refusal
            await self._refuse(scope, receive, send, "invalid_token", "not 'Bearer <token>'")
            return
        # Trusted only on exactly one trust header saying exactly "trusted".
        trusted = trust_headers == 1 and trust_value == b"trusted"
        admitted = self._admitted.get(authorization)
        if admitted is not None:  # a formation token this door verified before
            caller = admitted[trusted]
            self._verifications["cached"] += 1
        elif not authorization.startswith(_BEARER):
            self._verifications["refused"] += 1
            await self._refuse(scope, receive, send, "invalid_token", "not 'Bearer <token>'")
            return
        else:
            try:
                caller = self._authenticate(authorization, trusted)
            except InvalidToken as refused:
                self._verifications["refused"] += 1
                await self._refuse(scope, receive, send, "invalid_token", str(refused))
                return
            except _NotPermitted as verdict:
                self._verifications["refused"] += 1
                await self._refuse(scope, receive, send, "not_permitted", member=verdict.member)
                return
            except Exception as exc:  # noqa: BLE001 - any failure to verify is a refusal
                # The class only: an exception's text could quote what it was handed.
                logger.warning("door: credential check raised %s; answered 401 invalid_token",
                               type(exc).__name__)
                self._verifications["refused"] += 1
                await self._refuse(scope, receive, send, "invalid_token", "verification error")
                return
            self._verifications["verified"] += 1

        # 4: the method, read only now that the caller is known.
        method: str | None = None
        rpc: dict[str, Any] | None = None
        rpc_refusal: str | None = None
        rest: RestRoute | None = None
        body = b""
        if is_http and (path == "/" or not path.strip("/")) and scope["method"] == "POST":
            max_body = self._max_body
            try:
                if len(content_length) >= self._max_body_digits and (
                    _content_length(content_length) > max_body
                ):
                    raise BodyTooLarge
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client is gone: nobody to answer
                body = message.get("body", b"")
                if len(body) > max_body:
                    raise BodyTooLarge
                if message.get("more_body", False):
                    read = await _read_rest(receive, body, max_body)
                    if read is None:
                        return
                    body = read
            except BodyTooLarge:
                await self._refuse(scope, receive, send, "payload_too_large",
                                   limit=str(max_body))
                return
            rpc, rpc_refusal = _parse_rpc(body)
            if rpc is not None:
                method = rpc["method"]
        elif path == CARD_PATH:
            method = "AgentCard"
        elif path == FILES_PATH or path.startswith(FILES_PREFIX):
            method = "resources/files"
        elif path == METRICS_PATH:
            method = METRICS_METHOD
        elif is_http:
            match = match_rest(scope["method"], path)
            if match is not None and match.route is not None:
                rest = match.route
                method = rest.method

        if method is not None:
            scope[METHOD_SCOPE_KEY] = method      # the request's label (gateway.metrics)

        # 5-8: scope, peer tasks, Host, then a body that is not one call.
        credential = caller.credential
        if method is not None and not (
            credential.kind == "operator" or method in credential.scopes or method == "AgentCard"
        ) and ((rpc is None and rest is None) or _asks_for_1_0(scope)):
            # The operator may call anything (the app answers -32601 to an unknown name),
            # any accepted credential may read the agent card, and a call in another A2A
            # version goes on to the app's -32009: refused here, it would read like a
            # missing permission. Judged only on this refusal path: no cost per request.
            await self._refuse(scope, receive, send, "insufficient_scope",
                               credential=credential.name, method=_method_label(method))
            return
        if credential.kind == "member" and not self._accept_peer_tasks:
            await self._refuse(scope, receive, send, "peer_not_accepted",
                               credential=credential.name)
            return
        if not self._host_ok(scope, host, hosts):
            await self._refuse(scope, receive, send, "misdirected_request")
            return
        if rpc_refusal is not None:
            await self._refuse(scope, receive, send, rpc_refusal)
            return

        # Hand over: what the app may read, and only that.
        scope["headers"] = kept
        scope[CALLER_SCOPE_KEY] = caller
        if rpc is None:
            scope.pop(RPC_SCOPE_KEY, None)
            if rest is None:
                scope.pop(REST_SCOPE_KEY, None)
            else:
                scope[REST_SCOPE_KEY] = rest
            await self.app(scope, receive, send)
        else:
            scope[RPC_SCOPE_KEY] = rpc
            scope.pop(REST_SCOPE_KEY, None)
            await self.app(scope, _Replay(body, receive), send)

    async def _anonymous_card(self, scope: Scope, receive: Receive, send: Send,
                              kept: Headers, host: bytes | None, hosts: int) -> None:
        """The public card, to a request with no credential: check 7 alone."""
        if not self._host_ok(scope, host, hosts):
            await self._refuse(scope, receive, send, "misdirected_request")
            return
        _hand_over(scope, kept, ANONYMOUS_CALLER, None)
        await self.app(scope, receive, send)

    async def _public(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A public door: the ``Host`` check (421) and nothing else; every request that
        passes is the ``public`` caller's, its body unread (the app reads it)."""
        host: bytes | None = None
        hosts = 0
        stripped = False
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
                hosts += 1
            elif name in _STRIPPED_HEADERS:
                stripped = True
        headers = _without_stripped(scope["headers"]) if stripped else scope["headers"]
        if not self._host_ok(scope, host, hosts) and not _is_health_check(scope):
            await self._refuse(scope, receive, send, "misdirected_request")
            return
        _hand_over(scope, headers, PUBLIC_CALLER, None)
        await self.app(scope, receive, send)

    def _host_ok(self, scope: Scope, host: bytes | None, hosts: int) -> bool:
        """Check 7: exactly one ``Host``, a loopback name with the door's own port."""
        server = scope.get("server")
        port: int | None = server[1] if server else None
        usual = self._hosts_by_port.get(port)
        return hosts == 1 and host is not None and (
            (usual is not None and host in usual) or self._host_allowed(host, port))

    def _authenticate(self, authorization: bytes, trusted: bool) -> Caller:
        """The Caller an ``Authorization: Bearer <token>`` value stands for; InvalidToken
        or _NotPermitted otherwise."""
        token = authorization[7:].decode("latin-1")
        if token.startswith(_FORMATION_PREFIX):
            verifier = self.policy.verifier
            if verifier is None:
                raise InvalidToken("this door is in no formation")
            claims = verifier.verify(token)
            if claims.callee != self.policy.member:
                raise _NotPermitted(claims.caller)
            self._admit(authorization, claims.caller)
            return self._member_caller(claims.caller, trusted)
        if len(token) > MAX_CREDENTIAL_CHARS:
            raise InvalidToken("token too long")
        if self._operator_caller is not None and self._operator is not None and (
            self._operator.matches(token)
        ):
            return self._operator_caller
        for bearer, caller in self._bearers:
            if bearer.matches(token):
                return caller
        if token.count(".") == 2:
            for issuer in self._issuers:
                try:
                    credential = issuer.authenticate(token)
                except InvalidToken:
                    continue
                return Caller(credential, "client", "untrusted")
        raise InvalidToken("no credential of this door accepts the token")

    def _admit(self, authorization: bytes, member: str) -> None:
        """Remember a formation ``Authorization`` value that verified for this door."""
        admitted = self._admitted
        if len(admitted) >= _ADMITTED_LIMIT:
            admitted.pop(next(iter(admitted)), None)  # the oldest first
        admitted[authorization] = (self._member_caller(member, False),
                                   self._member_caller(member, True))

    def _member_caller(self, member: str, trusted: bool) -> Caller:
        key = (member, trusted)
        caller = self._member_callers.get(key)
        if caller is None:
            caller = Caller(member_credential(member), "peer",
                            "trusted" if trusted else "untrusted")
            if len(self._member_callers) < 4096:  # names come only from verified tokens
                self._member_callers[key] = caller
        return caller

    def _host_allowed(self, host: bytes, port: int | None) -> bool:
        """Whether ``host`` is a loopback name with ``port``, or on the listener beyond
        loopback one of its public names (the first request on a port notes its usual
        Host values, which later requests find at once)."""
        usual = self._hosts_by_port.get(port)
        if usual is None:
            usual = _usual_hosts(port)
            if port is not None and port == self.policy.public_port:
                usual = usual | _public_hosts(self.policy.public_hosts, port)
            if len(self._hosts_by_port) < 64:
                self._hosts_by_port[port] = usual
        if host in usual or _loopback_host(host, port):
            return True
        # On the listener beyond loopback, a public name with any port: a published port
        # (docker run -p 9443:8080, a Service) is not the one listened on, and the port
        # is no defence against DNS rebinding, the name is. Any port, but a number.
        return (port is not None and port == self.policy.public_port
                and _without_port(host) in self._public_names and _port_is_number(host))

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, code: str,
                      reason: str = "", **fields: str) -> None:
        status, headers, body = _answer(code, **fields)
        self._metrics.refusal(code)
        if logger.isEnabledFor(logging.INFO):
            who = fields.get("credential") or fields.get("member")
            logger.info(
                "door refused %s %s: %d %s%s%s",
                loggable(str(scope.get("method", "WEBSOCKET"))),
                loggable(str(scope.get("path", ""))), status, code,
                f" {who}" if who else "", f" ({reason})" if reason else "",
            )
        if scope["type"] == "websocket":
            await _refuse_websocket(scope, receive, send, status, headers, body)
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _hand_over(scope: Scope, headers: Headers, caller: Caller | None,
               rpc: dict[str, Any] | None) -> None:
    """Leave on the scope what the app may read, and only that."""
    scope["headers"] = headers
    scope.pop(REST_SCOPE_KEY, None)
    if caller is None:
        scope.pop(CALLER_SCOPE_KEY, None)
    else:
        scope[CALLER_SCOPE_KEY] = caller
    if rpc is None:
        scope.pop(RPC_SCOPE_KEY, None)
    else:
        scope[RPC_SCOPE_KEY] = rpc


def _is_health_check(scope: Scope) -> bool:
    """``GET``/``HEAD /healthz``, which names nothing and is never ``Host``-checked (a
    container probe uses the pod's address)."""
    if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
        return False
    path: str = scope["path"]
    if scope.get("root_path") or "//" in path:
        path = route_path(scope)
    return path == HEALTH_PATH


def _asks_for_1_0(scope: Scope) -> bool:
    """Whether a request asks for the A2A version the door serves (header or query)."""
    return serves_version(requested_version(scope, first_header(scope, _VERSION_HEADER)))


def _method_label(method: str) -> str:
    """A method name fit to echo: known names as they are, anything else unnamed."""
    return method if method in OPERATOR_METHODS or method in REFUSED_METHODS else "this method"


async def _refuse_websocket(scope: Scope, receive: Receive, send: Send, status: int,
                            headers: Headers, body: bytes) -> None:
    """Refuse a WebSocket before it is accepted: the HTTP answer where the server can send
    one (the ``websocket.http.response`` extension), else a close with 1008 (policy)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})
