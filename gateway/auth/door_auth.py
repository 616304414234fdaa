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
   and path for the HTTP+JSON binding (the route, :func:`gateway.routes.classify`);
5. ``403 insufficient_scope``: a method outside what the credential reaches
   (:attr:`gateway.caller.Credential.reach`, decided in :mod:`gateway.caller` alone: a
   formation token exactly its five scopes and the agent card; a declared credential its
   scopes and both cards), whatever A2A version the request asks for (the reference's
   order: DoorAuth's checks come first; a call in another version that passes them gets
   the app's ``-32009``); a name no method of the door has passes for every credential
   but a formation token (the app answers ``-32601``);
6. ``403 peer_not_accepted``: a formation credential at a door that takes no peer tasks;
7. ``421 misdirected_request``: a ``Host`` that is not a loopback name with the door's
   port (DNS rebinding, :mod:`gateway.auth.hosts`);
8. a body that is not one JSON-RPC call gets its JSON-RPC error (``-32700`` malformed,
   ``-32600`` a batch or no string ``method``) from here, never partly served;
9. at a door whose formation bounds its calls (a version 2 roster), a member's
   task-starting call past ``limits.depth``: ``403 depth_exceeded``;
10. then past its edge's limits: ``403 limit_reached`` or ``429 rate_limited``
   (:mod:`gateway.auth.edge_limits`).

Then the ``Authorization`` and task origin/trust headers are removed, the
:class:`gateway.caller.Caller`, the request's :class:`gateway.routes.Route` and the parsed
JSON-RPC request are left on the scope, the body is replayed, and the app is called. A
public door (no credentials) makes check 7 alone (DNS rebinding), then hands every
request over as the ``public`` caller with the body unread. ``GET /healthz`` needs no
credential and no ``Host``. At a door with ``public_card``, a card request without
``Authorization`` passes check 7 alone and is served the public card
(:data:`gateway.caller.ANONYMOUS_CALLER`). docs/door-auth.md is the user's version of
this text.

The code follows the same order: ``DoorAuth.__call__`` runs the named steps (the head
scan, :mod:`gateway.auth.request_reading`; the credential, checks 1-3; the method, check
4; the permit, checks 5-8; the bounds, checks 9-10; the hand-over), each check refusing
by raising :class:`gateway.auth.refusals.Refused` with its row of the one table of
refusals. A bounded call is admitted by the last check, so that nothing refuses it once
it holds a place, and runs in ``__call__`` itself: a bounded door adds no ASGI layer and
no coroutine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gateway.auth.credentials import DeclaredBearer, JwtIssuer, OperatorToken, member_credential
from gateway.auth.edge_limits import EDGE_CALL, DoorBounds, EdgeCall, EdgeGuard, OnRefusal
from gateway.auth.hosts import HostCheck
from gateway.auth.refusals import REFUSALS, Refusal, Refused, answer, loggable, refuse_websocket
from gateway.auth.request_reading import (
    STRIPPED_HEADERS,
    Replay,
    check_declared_length,
    parse_rpc,
    read_rest,
    scan_head,
    without_stripped,
)
from gateway.auth.tokens import FormationVerifier, InvalidToken
from gateway.caller import (
    ANONYMOUS_CALLER,
    CALLER_SCOPE_KEY,
    KNOWN_METHODS,
    OPERATOR_METHODS,
    PUBLIC_CALLER,
    REFUSED_METHODS,
    RPC_SCOPE_KEY,
    Caller,
)
from gateway.errors import GatewayError
from gateway.metrics import DoorMetrics
from gateway.protocol import MEMBER_NAME_RE
from gateway.routes import CARD, HEALTH, ROUTE_SCOPE_KEY, RPC, Route, classify, rpc_route
from gateway.types import ASGIApp, Headers, Receive, Scope, Send

__all__ = ["MAX_CREDENTIAL_CHARS", "REFUSALS", "AuthPolicy", "DoorAuth", "Refusal", "loggable"]


logger = logging.getLogger("gateway.auth.door_auth")

#: Longest non-formation token tried against the door's credentials (JWTs included).
MAX_CREDENTIAL_CHARS = 8192
_FORMATION_PREFIX = "mft1."
_BEARER = b"Bearer "
#: How many verified formation ``Authorization`` values a door remembers, the oldest
#: dropped first (the verifier's own cache holds as many tokens).
_ADMITTED_LIMIT = 4096


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
    #: Bounds along the edges into this door (roster version 2; EdgeGuard, behind
    #: DoorAuth): ``None``, or bounds with nothing set, checks nothing more.
    bounds: DoorBounds | None = None

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


class _NotPermitted(GatewayError):
    """A valid formation token for another door; carries only the presenting member."""

    def __init__(self, member: str) -> None:
        super().__init__(member)
        self.member = member


class DoorAuth:
    """The door's auth middleware (pure ASGI). See the module text for the check order.

    ``__call__`` is every request's hot path: one pass over the headers, the common case
    tested first, per-policy values worked out once here, and a formation
    ``Authorization`` value this door verified before found with one lookup. Its steps
    are plain calls that raise :class:`Refused` on the refusal path only (an exception
    costs nothing until it is raised).
    """

    def __init__(self, app: ASGIApp, policy: AuthPolicy,
                 metrics: DoorMetrics | None = None,
                 on_bound: OnRefusal | None = None) -> None:
        self.app = app
        self.policy = policy
        #: Checks 9-10, at a door whose formation bounds its calls (``on_bound``: a call
        #: refused or slowed, for the door's metrics and trace).
        bounds = policy.bounds
        self._guard = (EdgeGuard(bounds, on_bound) if bounds is not None and bounds.bounded
                       else None)
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
        #: Check 7, the Host (a bound method, looked up once).
        self._host_ok = HostCheck(policy.public_port, policy.public_hosts).ok
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
        authorization, authorizations, host, hosts, trusted, content_length, kept = (
            scan_head(scope["headers"]))
        route = classify(scope)
        if route.kind is HEALTH and kind == "http" and scope["method"] in ("GET", "HEAD"):
            _hand_over(scope, kept, None, route, None)  # names nothing: no credential
            await self.app(scope, receive, send)
            return
        try:
            # 1-3: the credential (a request for the public card needs none: check 7 alone)
            anonymous = authorization is None and self._anonymous_card(scope, route)
            caller = (ANONYMOUS_CALLER if anonymous
                      else self._credential(authorization, authorizations, trusted))
            rpc: dict[str, Any] | None = None
            rpc_refusal: str | None = None
            body = b""
            if route.kind is RPC and kind == "http" and scope["method"] == "POST":
                # 4: the method is in the body, read only now that the caller is known
                if len(content_length) >= self._max_body_digits:
                    check_declared_length(content_length, self._max_body)
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client is gone: nobody to answer
                body = message.get("body", b"")
                if message.get("more_body", False) or len(body) > self._max_body:
                    read = await read_rest(receive, body, self._max_body)
                    if read is None:
                        return
                    body = read
                rpc, rpc_refusal = parse_rpc(body)
                if rpc is not None:
                    route = rpc_route(rpc["method"])
            # The request's label in the metrics from here on, refused or not.
            scope[ROUTE_SCOPE_KEY] = route
            if not anonymous:
                self._permit(caller, route)           # 5-6
            if not self._host_ok(scope, host, hosts):
                raise Refused("misdirected_request")              # 7
            if rpc_refusal is not None:
                raise Refused(rpc_refusal)                        # 8
            # 9-10 (a door without bounds pays one test here, not a call)
            call = (None if self._guard is None
                    else self._edge_call(caller, route.method, kept))
        except Refused as refused:
            await self._refuse(scope, receive, send, refused.code, refused.reason,
                               refused.retry_after, **refused.fields)
            return
        _hand_over(scope, kept, caller, route, rpc)
        if rpc is not None:
            receive = Replay(body, receive)
        if call is None:
            await self.app(scope, receive, send)
            return
        # A bounded call: left in EDGE_CALL for the task store while the app handles it.
        token = EDGE_CALL.set(call)
        try:
            await self.app(scope, receive, send)
        finally:
            EDGE_CALL.reset(token)
            call.released()

    # --- the same decision for a call that is no HTTP request (gRPC) -------------------

    def decide(self, headers: Headers, method: str) -> tuple[Caller, Headers]:
        """Checks 1-3 and 5-6 for a call whose method its framing names (a gRPC call,
        :mod:`gateway.grpc.interceptor`): the steps ``__call__`` runs, not a copy. Returns
        the caller and the headers its method may see (``Authorization`` and the trust
        header removed), or raises :class:`Refused`.

        Check 4 is the framing's (the method is the call's path); check 7, the ``Host``,
        guards browsers against DNS rebinding and no browser speaks gRPC; check 8 is the
        framing's own parsing."""
        if not self._authenticated:
            return PUBLIC_CALLER, without_stripped(headers)
        authorization, authorizations, _, _, trusted, _, kept = scan_head(headers)
        caller = self._credential(authorization, authorizations, trusted)
        self._permit(caller, rpc_route(method))
        return caller, kept

    def bound(self, caller: Caller, method: str, headers: Headers) -> EdgeCall | None:
        """Checks 9-10 for a call :meth:`decide` admitted: its :class:`EdgeCall` (release
        it when the call ends), ``None`` where nothing bounds it, or :class:`Refused`."""
        return self._edge_call(caller, method, headers)

    def refused(self, refused: Refused, framing: str, method: str) -> None:
        """Count and log a refusal another framing answers itself (a gRPC status)."""
        self._metrics.refusal(refused.code)
        if logger.isEnabledFor(logging.INFO):
            who = refused.fields.get("credential") or refused.fields.get("member")
            logger.info("door refused %s %s: %s%s%s", framing, loggable(method[:64]),
                        refused.code, f" {who}" if who else "",
                        f" ({refused.reason})" if refused.reason else "")

    # --- 9-10: the bounds along the edges (a version 2 roster) -------------------------

    def _edge_call(self, caller: Caller, method: str | None,
                   headers: Headers) -> EdgeCall | None:
        """Checks 9 and 10 (gateway.auth.edge_limits) for a member's task-starting call
        at a bounded door: its :class:`EdgeCall`, ``None`` where nothing bounds the
        request, or :class:`Refused`. The last check: nothing may refuse the call once
        it holds a place (the app's handling releases it)."""
        guard = self._guard
        if guard is None or not guard.bounds_call(caller, method):
            return None
        return guard.admit(caller, headers)

    # --- 1-3: the credential -----------------------------------------------------------

    def _anonymous_card(self, scope: Scope, route: Route) -> bool:
        """Whether a request without ``Authorization`` is one for the public card."""
        return self._public_card and route.kind is CARD and scope["type"] == "http" and (
            scope["method"] in ("GET", "HEAD"))

    def _credential(self, authorization: bytes | None, authorizations: int,
                    trusted: bool) -> Caller:
        """Checks 1-3: the Caller the request's one ``Authorization`` value stands for."""
        if authorization is None:
            raise Refused("unauthenticated")
        if authorizations != 1:
            self._verifications["refused"] += 1     # every 401 invalid_token is a refusal
            raise Refused("invalid_token", "not 'Bearer <token>'")
        admitted = self._admitted.get(authorization)
        if admitted is not None:  # a formation token this door verified before
            self._verifications["cached"] += 1
            return admitted[trusted]
        if not authorization.startswith(_BEARER):
            self._verifications["refused"] += 1
            raise Refused("invalid_token", "not 'Bearer <token>'")
        try:
            caller = self._authenticate(authorization, trusted)
        except InvalidToken as refused:
            self._verifications["refused"] += 1
            raise Refused("invalid_token", str(refused)) from None
        except _NotPermitted as verdict:
            self._verifications["refused"] += 1
            raise Refused("not_permitted", member=verdict.member) from None
        except Exception as exc:  # noqa: BLE001 - any failure to verify is a refusal
            # The class only: an exception's text could quote what it was handed.
            logger.warning("door: credential check raised %s; answered 401 invalid_token",
                           type(exc).__name__)
            self._verifications["refused"] += 1
            raise Refused("invalid_token", "verification error") from None
        self._verifications["verified"] += 1
        return caller


    # --- 4: the method -----------------------------------------------------------------

    # --- 5-7: the permit, then the Host ------------------------------------------------

    def _permit(self, caller: Caller, route: Route) -> None:
        """Checks 5-6: what the credential reaches, then peer tasks."""
        credential = caller.credential
        method = route.method
        if method is not None and method not in credential.reach and (
            method in KNOWN_METHODS or credential.kind == "member"
        ):
            # What a credential reaches is gateway.caller's decision (Credential.reach,
            # one set lookup here), the same on every binding. For any credential but a
            # formation token a name no method of the door has is no scope it lacks: the
            # app answers -32601 (A2A 1.0 section 9.5). A formation token is refused
            # anything outside its reach, named or not (the reference's table).
            raise Refused("insufficient_scope", credential=credential.name,
                          method=_method_label(method))
        if credential.kind == "member" and not self._accept_peer_tasks:
            raise Refused("peer_not_accepted", credential=credential.name)

    # --- a public door -----------------------------------------------------------------

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
            elif name in STRIPPED_HEADERS:
                stripped = True
        headers = without_stripped(scope["headers"]) if stripped else scope["headers"]
        route = classify(scope)
        if not self._host_ok(scope, host, hosts) and not _is_health_check(scope, route):
            await self._refuse(scope, receive, send, "misdirected_request")
            return
        _hand_over(scope, headers, PUBLIC_CALLER, route, None)
        await self.app(scope, receive, send)

    # --- the credentials ---------------------------------------------------------------

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

    # --- refusing ----------------------------------------------------------------------

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, code: str,
                      reason: str = "", retry_after: float | None = None,
                      **fields: str) -> None:
        status, headers, body = answer(code, fields, retry_after)
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
            await refuse_websocket(scope, receive, send, status, headers, body)
            return
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _hand_over(scope: Scope, headers: Headers, caller: Caller | None, route: Route,
               rpc: dict[str, Any] | None) -> None:
    """Leave on the scope what the app may read, and only that."""
    scope["headers"] = headers
    scope[ROUTE_SCOPE_KEY] = route
    if caller is None:
        scope.pop(CALLER_SCOPE_KEY, None)
    else:
        scope[CALLER_SCOPE_KEY] = caller
    if rpc is None:
        scope.pop(RPC_SCOPE_KEY, None)
    else:
        scope[RPC_SCOPE_KEY] = rpc


def _is_health_check(scope: Scope, route: Route) -> bool:
    """``GET``/``HEAD /healthz``, which names nothing and is never ``Host``-checked (a
    container probe uses the pod's address)."""
    return route.kind is HEALTH and scope["type"] == "http" and (
        scope["method"] in ("GET", "HEAD"))


def _method_label(method: str) -> str:
    """A method name fit to echo: known names as they are, anything else unnamed."""
    return method if method in OPERATOR_METHODS or method in REFUSED_METHODS else "this method"
