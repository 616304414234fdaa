"""The formation proxy: ``FormationTransport``.

A member reaches the members it may call at virtual addresses
``http://<member>.formation.invalid``. Every request its components make goes through
:class:`FormationTransport`, which does the five steps of docs/proxy.md in order:

1. a host under ``formation.invalid`` that is not exactly ``<callee>.formation.invalid``
   (lower case, no port, no userinfo, no trailing dot, ``Host`` header agreeing) for a
   member this one may call is refused with :class:`FormationRefused` before anything
   else happens: no door URL is looked up and no connection is opened;
2. the callee's real door URL is taken from the directory, waiting up to 10 s;
3. the real URL is checked against ``capabilities.network.allow``;
4. the component's ``Authorization``, ``x-murmur-*`` and hop-by-hop headers are removed
   and exactly one ``Authorization: Bearer <token>``, ``x-murmur-task-origin: peer`` and
   the running task's trust class are attached; URL and ``Host`` become the real door's;
5. a redirect is handed back as it is, never followed here, so the token never goes
   anywhere but the callee's door; a client that follows one may not reach a virtual
   address with the follow-up, whoever redirected (see ``docs/proxy.md``, "Redirects").

Requests to any other host pass the same allow-list and never carry a formation token.
A formation token is never written into a repr, a log line or an exception, and a
callee's real door address never into an error a component sees: only the runtime
holds door URLs, so :class:`DoorAddresses` rewrites each one the proxy has used into the
callee's virtual address (``FormationTransport.scrub``, also used by call-member).

This module, in order: the names a member's runtime gives the transport (the door
directory, the calling task, the trust source, the call hook); a callee's door and what
every view of one member's proxy shares; :class:`FormationTransport` and its steps. The
rest of the formation proxy sits beside it, one concern a module: ``proxy_errors`` (its
exceptions), ``virtual_names`` (step 1's reading of hosts and URL text),
``formation_headers`` (step 4's stripping), ``door_addresses`` (door addresses out of
errors) and ``formation_client`` (``FormationClient``, the client components use).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Protocol, Self

import httpx

from gateway.metrics import DoorMetrics, proxy_outcome
from gateway.protocol import CALL_DEPTH_HEADER, ORIGIN_HEADER, TRUST_HEADER
from gateway.proxy.call_bounds import CallBounds
from gateway.proxy.door_addresses import DoorAddresses as DoorAddresses
from gateway.proxy.door_addresses import SanitizedStream as _SanitizedStream
from gateway.proxy.door_addresses import scrubbed_failure as _scrubbed_failure

# The allow-list and the names live in gateway.proxy.egress, which a member imports at start
# without httpx; they are re-exported here for everything that imports them from here, as
# are the refusals, the names under formation.invalid and FormationClient, which live in
# modules of their own.
from gateway.proxy.egress import VIRTUAL_DOMAIN as VIRTUAL_DOMAIN
from gateway.proxy.egress import VIRTUAL_SUFFIX as VIRTUAL_SUFFIX
from gateway.proxy.egress import AllowList as AllowList
from gateway.proxy.egress import check_callees
from gateway.proxy.egress import default_port as _default_port
from gateway.proxy.egress import egress_reaches_loopback as egress_reaches_loopback
from gateway.proxy.formation_client import FormationClient as FormationClient
from gateway.proxy.formation_headers import forwarded_headers as _forwarded_headers
from gateway.proxy.formation_headers import header_key as _header_key
from gateway.proxy.formation_headers import without_runtime_headers as _without_runtime_headers
from gateway.proxy.inference import InferenceEgress as InferenceEgress
from gateway.proxy.proxy_errors import CallLimitReached as CallLimitReached
from gateway.proxy.proxy_errors import DoorUnavailable as DoorUnavailable
from gateway.proxy.proxy_errors import EgressRefused as EgressRefused
from gateway.proxy.proxy_errors import FormationRefused as FormationRefused
from gateway.proxy.proxy_errors import ModelBoundReached as ModelBoundReached
from gateway.proxy.proxy_errors import ProxyError as ProxyError
from gateway.proxy.virtual_names import check_raw_url as check_raw_url
from gateway.proxy.virtual_names import exact_virtual_name as exact_virtual_name
from gateway.proxy.virtual_names import names_formation as names_formation

#: How long a request waits for a callee's door URL to arrive on the channel.
DOOR_URL_WAIT_SECONDS: Final = 10.0
TRUSTED: Final = "trusted"
UNTRUSTED: Final = "untrusted"

_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: Set on a request's extensions when it was answered with a redirect, by a member's
#: door or by any other host: a request that follows it (httpx copies extensions onto the
#: follow-up) may not reach a virtual address, or a callee or an outside host could make
#: this member call someone on its behalf, with its token attached.
_FOLLOWS_REDIRECT: Final = "murmur.follows_redirect"
_ORIGIN_HEADER: Final = ORIGIN_HEADER.encode("ascii")
_CALL_DEPTH_HEADER: Final = CALL_DEPTH_HEADER.encode("ascii")
_TRUST_HEADER: Final = TRUST_HEADER.encode("ascii")
#: A call's trace context is the runtime's (gateway.trace.context): a component's own
#: ``traceparent`` and the ``tracestate`` that goes with it are replaced.
_TRACEPARENT: Final = b"traceparent"
_TRACE_HEADERS: Final = frozenset({_TRACEPARENT, b"tracestate"})


# --------------------------------------------------------------------------------------
# What the runtime gives the transport


class DoorDirectory(Protocol):
    """Where the callees' real door URLs arrive (the formation channel's later lines)."""

    async def wait_for(self, name: str, timeout: float) -> str:
        """The door URL of ``name``; raises ``TimeoutError`` when none arrives in time."""
        ...


#: The task whose agent code sends the request being handled (for the ``on_call`` hook's
#: record): set by the member's calls and by its forward proxy.
CALLING_TASK: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "murmur_calling_task", default=None)
#: The running task's trust class, or ``None`` when no task is running.
TrustSource = Callable[[], str | None]
#: Called once for every request sent to a member, with the callee and the virtual URL;
#: returns the ``traceparent`` to send (the call's span), or ``None`` to send none.
CallHook = Callable[[str, str], bytes | None]
#: Called with the name (or host) a refused request was addressed to.
RefusalHook = Callable[[str], None]


# --------------------------------------------------------------------------------------
# The transport


@dataclass(frozen=True, slots=True)
class _Door:
    """A callee's door as this proxy uses it, parsed once per URL the channel sent."""

    url: httpx.URL
    host: bytes                       # the Host header: the door's netloc
    address: tuple[str, int]          # where to connect: the door's host and port
    prefix: bytes                     # the door URL's own path, without a trailing /
    allowed: bool                     # capabilities.network.allow reaches it
    #: Real URLs by virtual raw path (``/`` and a few more): parsing a URL costs more
    #: than the rest of the hop together.
    urls: dict[bytes, httpx.URL]
    #: The stamps as header lines, by trust (trusted or not), for the hop in bytes; the
    #: token is in them, so no repr shows them.
    stamp_lines: dict[bool, bytes] = field(repr=False)

    def real_url(self, raw_path: bytes) -> httpx.URL:
        url = self.urls.get(raw_path)
        if url is None:
            url = self.url.copy_with(raw_path=self.prefix + raw_path)
            if len(self.urls) < _REAL_URL_CACHE:
                self.urls[raw_path] = url
        return url


@dataclass(frozen=True, slots=True)
class VirtualTarget:
    """A URL that is exactly a callee's virtual address, read once (the forward proxy
    keeps these by URL text)."""

    callee: str
    text: str                         # the virtual URL, as the call hook is told it
    path: str                         # its path, as the call bounds read it
    raw_path: bytes                   # its path and query, as sent to the door


@dataclass(frozen=True, slots=True)
class MemberHop:
    """A request to a member, stamped, as bytes: where its door is, and its head."""

    address: tuple[str, int]
    #: Request line and headers, the empty line included: the token is in it, so no
    #: repr shows it.
    head: bytes = field(repr=False)
    started: float                    # time.perf_counter() when it was stamped


_REAL_URL_CACHE: Final = 64


class SendParts(Protocol):
    """An inner transport's ``send_parts`` (gateway.proxy.aiohttp_transport): a request
    as its parts; errors name ``request``."""

    def __call__(self, method: str, url: httpx.URL, headers: Sequence[tuple[bytes, bytes]],
                 body: bytes, timeout: Mapping[str, float | None] | None,
                 request: httpx.Request) -> Awaitable[httpx.Response]: ...


_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


class _Shared:
    """What every view of one member's proxy shares: pool, credentials, grant."""

    __slots__ = ("addresses", "allow", "authorizations", "bounds", "door_wait", "doors",
                 "inference", "inner", "known", "metrics", "on_call", "on_refused",
                 "send_parts", "tokens", "virtual_hosts")

    def __init__(self, inner: httpx.AsyncBaseTransport, doors: DoorDirectory,
                 allow: AllowList, on_call: CallHook | None, door_wait: float,
                 tokens: Mapping[str, str], metrics: DoorMetrics | None,
                 bounds: CallBounds | None = None) -> None:
        self.inner = inner
        #: An inner transport that takes a request as its parts (aiohttp's): a call to a
        #: member then builds no second httpx.Request (3.5 us of a call's ~15 us here).
        #: Looked up by name: importing aiohttp here would load it into every agent
        #: process that imports this module for ``task.http`` (80 ms).
        self.send_parts: SendParts | None = getattr(inner, "send_parts", None)
        self.bounds = bounds
        self.metrics = metrics
        self.doors = doors
        self.allow = allow
        self.on_call = on_call
        self.door_wait = door_wait
        self.tokens = dict(tokens)
        self.authorizations = {name: b"Bearer " + token.encode("ascii")
                               for name, token in self.tokens.items()}
        self.virtual_hosts = {name + VIRTUAL_SUFFIX: name for name in self.tokens}
        self.known: dict[str, _Door] = {}
        self.addresses = DoorAddresses()
        self.on_refused: RefusalHook | None = None
        #: A model member's endpoint: its key attached and its counts kept there.
        self.inference: InferenceEgress | None = None

    def __repr__(self) -> str:  # never the tokens
        return "_Shared(...)"

    def scrub(self, text: str) -> str:
        """``text`` without any formation token or known door address."""
        for token in self.tokens.values():
            text = text.replace(token, "[token]")
        return self.addresses.scrub(text)


class FormationTransport(httpx.AsyncBaseTransport):
    """The formation proxy as an httpx transport (see the module docstring).

    ``tokens`` maps each member this one may call to its formation token; the names are
    the callees. ``trust`` gives the running task's trust class (``None``: no task, read
    as ``untrusted``). ``on_call(callee, virtual_url)`` is called once per request sent
    to a member, after every check passed; it sees only the virtual URL, and returns the
    call's ``traceparent`` (or ``None``). ``metrics`` counts each request sent to a
    member by callee and outcome, with its time to the callee's answer.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        *,
        tokens: Mapping[str, str],
        doors: DoorDirectory,
        allow: Iterable[str],
        trust: TrustSource = lambda: None,
        on_call: CallHook | None = None,
        door_wait: float = DOOR_URL_WAIT_SECONDS,
        metrics: DoorMetrics | None = None,
        bounds: CallBounds | None = None,
        on_refused: RefusalHook | None = None,
        inference: InferenceEgress | None = None,
    ) -> None:
        check_callees(tokens)
        self._shared = _Shared(inner, doors, AllowList(allow), on_call, door_wait, tokens,
                               metrics, bounds)
        self._trust = trust
        # Told of each request step 1 refuses (the name or host addressed), for the
        # operator's record; the component sees only the one refusal message.
        self._shared.on_refused = on_refused
        self._shared.inference = inference
        self._owns_inner = True

    @property
    def callees(self) -> frozenset[str]:
        """The members this one may call (the names, never the tokens)."""
        return frozenset(self._shared.tokens)

    @property
    def allow(self) -> AllowList:
        """The egress allow-list this proxy checks (the forward proxy's CONNECT uses it,
        so a tunnel and a request obey one grant)."""
        return self._shared.allow

    @property
    def inference(self) -> InferenceEgress | None:
        """A model member's endpoint (the forward proxy refuses a tunnel to it)."""
        return self._shared.inference

    def __repr__(self) -> str:
        return f"FormationTransport(callees={sorted(self._shared.tokens)!r})"

    def scrub(self, text: str) -> str:
        """``text`` fit for a component: every formation token as ``[token]`` and every
        door address this proxy has used as its callee's virtual address."""
        return self._shared.scrub(text)

    def with_trust(self, trust: str | None) -> FormationTransport:
        """A view for one task: the same pool and credentials, a fixed trust class.
        Closing the view leaves the shared pool open."""
        view = FormationTransport.__new__(FormationTransport)
        view._shared = self._shared
        view._trust = lambda: trust
        view._owns_inner = False
        return view

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = request.headers.raw
        callee = self._virtual_callee(request, raw)
        if callee is None:
            return await self._send_outside(request)
        return await self._send_to_member(request, raw, callee)

    async def aclose(self) -> None:
        if self._owns_inner:
            await self._shared.inner.aclose()
            if self._shared.inference is not None:
                await self._shared.inference.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self.aclose()

    # Step 1 ------------------------------------------------------------------------

    def _virtual_callee(self, request: httpx.Request,
                        raw: list[tuple[bytes, bytes]]) -> str | None:
        """The callee a request is addressed to, ``None`` for a real host; refuses every
        other use of ``formation.invalid`` before anything is looked up or opened."""
        url = request.url
        raw_host = url.raw_host.decode("ascii", "replace")
        hosts = [value.decode("latin-1") for name, value in raw if name.lower() == b"host"]
        userinfo = url.userinfo
        name = self._shared.virtual_hosts.get(raw_host)
        if (name is not None and hosts == [raw_host] and not userinfo and url.port is None
                and url.scheme == "http" and _FOLLOWS_REDIRECT not in request.extensions):
            return name                         # exactly a callee's address: the usual case
        addressed = (names_formation(raw_host)
                     or (userinfo and names_formation(userinfo.decode("ascii", "replace")))
                     or any(names_formation(host) for host in hosts))
        if not addressed:
            return None
        name = exact_virtual_name(raw_host)
        exact = (name is not None and url.scheme == "http" and url.port is None
                 and not userinfo and hosts == [raw_host]
                 and _FOLLOWS_REDIRECT not in request.extensions)
        if not exact or name not in self._shared.tokens:
            on_refused = self._shared.on_refused
            if on_refused is not None:
                on_refused(name or raw_host)
            raise FormationRefused(request)
        return name

    # Steps 2 to 5 ------------------------------------------------------------------

    async def _send_to_member(self, request: httpx.Request, raw: list[tuple[bytes, bytes]],
                              callee: str) -> httpx.Response:
        shared = self._shared
        door = shared.known.get(callee) or await self._door(request, callee)
        if not door.allowed:
            raise EgressRefused(
                f"capabilities.network.allow does not reach the door of member {callee!r}, "
                "which listens on loopback; add `localhost` to the grant",
                request=request)
        try:
            body = request.content              # built from bytes: read already
        except httpx.RequestNotRead:
            body = await request.aread()
        url_text = "" if shared.on_call is None else str(request.url)  # for the hook only
        headers = self._stamped(callee, door, request.method, request.url.path, url_text,
                                raw, body, request)
        # ``timeout`` is the only request extension forwarded to the inner transport.
        # ``trace`` in particular is dropped: httpcore hands it the outgoing headers,
        # token included.
        timeout = request.extensions.get("timeout")
        failure: httpx.TransportError | None = None
        started = time.perf_counter()
        try:
            if shared.send_parts is not None:   # errors name the component's request
                response = await shared.send_parts(
                    request.method, door.real_url(request.url.raw_path), headers, body,
                    timeout, request)
            else:
                extensions = {} if timeout is None else {"timeout": timeout}
                outgoing = httpx.Request(request.method, door.real_url(request.url.raw_path),
                                         headers=headers, stream=httpx.ByteStream(body),
                                         extensions=extensions)
                outgoing.read()   # in memory already; lets inner transports read .content
                response = await shared.inner.handle_async_request(outgoing)
        except Exception as exc:  # noqa: BLE001 - whatever failed below, its text is scrubbed
            # Against the component's own request, never the one holding the token, with
            # the token and the door's address scrubbed, and no chain back (raised below,
            # outside the except, so not even as __context__).
            failure = _scrubbed_failure(exc, request, shared.scrub)
        if failure is not None:
            self.call_unreachable(callee)
            raise failure
        self.call_answered(callee, response.status_code, started)
        response.request = request
        response.stream = _SanitizedStream(response.stream, request, shared.scrub)
        if "network_stream" in response.extensions:     # httpx's: its socket names the door
            response.extensions = {key: value for key, value in response.extensions.items()
                                   if key != "network_stream"}
        _mark_redirect(request, response)
        return response

    def _stamped(self, callee: str, door: _Door, method: str, path: str, url_text: str,
                 raw: list[tuple[bytes, bytes]], body: bytes, request: httpx.Request | None,
                 keys: list[bytes] | None = None) -> list[tuple[bytes, bytes]]:
        """Step 4: :meth:`_call_headers`, then the stamps (:meth:`_stamps`)."""
        headers = self._call_headers(callee, method, path, url_text, raw, body, request, keys)
        if body or method in _BODY_METHODS:
            headers.append((b"Content-Length", str(len(body)).encode("ascii")))
        headers += self._stamps(callee, door, self._trust() == TRUSTED)
        return headers

    def _call_headers(self, callee: str, method: str, path: str, url_text: str,
                      raw: list[tuple[bytes, bytes]], body: bytes,
                      request: httpx.Request | None,
                      keys: list[bytes] | None) -> list[tuple[bytes, bytes]]:
        """The component's headers stripped (``raw``, with their ``keys`` when read
        already), then the bounds spent (and the depth added), then the call hook told
        (``url_text``: the virtual URL) and its ``traceparent`` put in the component's
        place."""
        shared = self._shared
        headers = _forwarded_headers(raw, keys)
        bounds = shared.bounds
        if bounds is not None:      # a version 2 roster: the member's calls and depth
            bounds.spend(method, path, body, request)
            depth = bounds.depth(CALLING_TASK.get())
            if depth is not None:
                headers.append((_CALL_DEPTH_HEADER, depth))
        trace_parent = None if shared.on_call is None else shared.on_call(callee, url_text)
        if trace_parent is not None:    # the runtime's span, never the component's own
            headers = [header for header in headers
                       if _header_key(header[0]) not in _TRACE_HEADERS]
            headers.append((_TRACEPARENT, trace_parent))
        return headers

    def _stamps(self, callee: str, door: _Door, trusted: bool) -> list[tuple[bytes, bytes]]:
        """What every call to ``callee`` carries: the door's ``Host``, the token, the
        origin and the trust class."""
        return [(b"Host", door.host), (b"Authorization", self._shared.authorizations[callee]),
                (_ORIGIN_HEADER, b"peer"), (_TRUST_HEADER, b"trusted" if trusted else b"untrusted")]

    def call_answered(self, callee: str, status: int, started: float) -> None:
        """Count a request to ``callee`` that its door answered with ``status``;
        ``started`` is when it was sent (``time.perf_counter()``)."""
        metrics = self._shared.metrics
        if metrics is not None:
            metrics.proxy_call(callee, proxy_outcome(status), time.perf_counter() - started)

    def call_unreachable(self, callee: str) -> None:
        """Count a request to ``callee`` whose door could not be reached."""
        metrics = self._shared.metrics
        if metrics is not None:
            metrics.proxy_call(callee, "unreachable", None)

    # A hop in bytes (the forward proxy's) -------------------------------------------

    def virtual_target(self, url: httpx.URL) -> VirtualTarget | None:
        """``url`` as a hop to a member, when it is exactly a callee's virtual address
        (step 1's usual case); ``None`` for anything else, which goes the httpx way."""
        name = self._shared.virtual_hosts.get(url.raw_host.decode("ascii", "replace"))
        if name is None or url.scheme != "http" or url.port is not None or url.userinfo:
            return None
        return VirtualTarget(name, str(url), url.path, url.raw_path)

    def member_hop(self, target: VirtualTarget, method: str, raw: list[tuple[bytes, bytes]],
                   body: bytes, keys: list[bytes] | None = None) -> MemberHop | None:
        """Steps 2 to 4 of a request to ``target`` as the bytes of its head, for a caller
        that writes them to the door itself (the forward proxy); then it reports the
        answer with :meth:`call_answered` or :meth:`call_unreachable`.

        ``None`` while the callee's door is not known yet, or when the grant does not
        reach it: the httpx way (:meth:`handle_async_request`) then waits for the door,
        or refuses, as it does for every component. Raises what step 4 raises
        (:class:`CallLimitReached`). ``keys``: the names of ``raw`` as
        :func:`~gateway.proxy.formation_headers.header_key` reads them, when known."""
        door = self._shared.known.get(target.callee)
        if door is None or not door.allowed:
            return None
        headers = self._call_headers(target.callee, method, target.path, target.text, raw,
                                     body, None, keys)
        trusted = self._trust() == TRUSTED
        stamps = door.stamp_lines.get(trusted)
        if stamps is None:      # the same few lines on every call: made once a door
            stamps = door.stamp_lines[trusted] = b"".join(
                name + b": " + value + b"\r\n"
                for name, value in self._stamps(target.callee, door, trusted))
        lines = [b"%s %s%s HTTP/1.1\r\n" % (method.encode("ascii"), door.prefix,
                                              target.raw_path)]
        lines += [name + b": " + value + b"\r\n" for name, value in headers]
        if body or method in _BODY_METHODS:
            lines.append(b"Content-Length: %d\r\n" % len(body))
        lines += [stamps, b"\r\n"]
        return MemberHop(door.address, b"".join(lines), time.perf_counter())

    def doors_moved(self, callees: Iterable[str]) -> None:
        """``callees`` have new doors (a restarted member): their next request asks the
        directory again. Calls already sent to an old door fail there, at once."""
        for callee in callees:
            self._shared.known.pop(callee, None)

    async def _door(self, request: httpx.Request, callee: str) -> _Door:
        """The callee's door: asked of the directory once, and again only when the
        runtime says it moved (:meth:`doors_moved`)."""
        shared = self._shared
        door = shared.known.get(callee)
        if door is not None:
            return door
        try:
            text = await shared.doors.wait_for(callee, shared.door_wait)
        except TimeoutError:
            raise DoorUnavailable(
                f"the door address of member {callee!r} has not arrived on the formation "
                f"channel within {shared.door_wait:g} s", request=request) from None
        door = shared.known.get(callee)
        if door is None:
            url = httpx.URL(text)
            door = _Door(url=url, host=url.netloc,
                         address=(url.host, url.port or _default_port(url.scheme) or 80),
                         prefix=url.raw_path.split(b"?")[0].rstrip(b"/"),
                         allowed=shared.allow.allows(url), urls={}, stamp_lines={})
            shared.addresses.add(callee, url)
            shared.known[callee] = door
        return door

    async def _send_outside(self, request: httpx.Request) -> httpx.Response:
        if not self._shared.allow.allows(request.url):
            raise EgressRefused(
                f"capabilities.network.allow does not allow "
                f"{request.url.host}:{request.url.port or _default_port(request.url.scheme)}",
                request=request)
        inference = self._shared.inference
        if inference is not None and inference.matches(request.url):
            return await inference.send(_without_runtime_headers(request),
                                        CALLING_TASK.get())
        if request.url.scheme != "http":
            raise EgressRefused(f"an {request.url.scheme}:// URL goes through CONNECT "
                                f"{request.url.host}:{request.url.port or 443}, not as a "
                                "request to this proxy", request=request)
        response = await self._shared.inner.handle_async_request(
            _without_runtime_headers(request))
        _mark_redirect(request, response)
        return response


def _mark_redirect(request: httpx.Request, response: httpx.Response) -> None:
    """A redirect is never followed with a token attached: its follow-up may not use a
    virtual address, whoever answered with it (step 5)."""
    if response.status_code in _REDIRECT_STATUSES and "location" in response.headers:
        request.extensions[_FOLLOWS_REDIRECT] = True
