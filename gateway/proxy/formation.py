"""The formation proxy: ``FormationTransport`` and the egress allow-list.

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
"""

from __future__ import annotations

import contextvars
import re
import time
import unicodedata
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self
from urllib.parse import unquote

import httpx

# The allow-list and the names live in gateway.proxy.egress, which a member imports at start
# without httpx; they are re-exported here for everything that imports them from here.
from gateway.errors import GatewayError
from gateway.metrics import DoorMetrics, proxy_outcome
from gateway.protocol import MEMBER_NAME_RE, ORIGIN_HEADER, RUNTIME_HEADER_PREFIX, TRUST_HEADER
from gateway.proxy.egress import VIRTUAL_DOMAIN as VIRTUAL_DOMAIN
from gateway.proxy.egress import VIRTUAL_SUFFIX as VIRTUAL_SUFFIX
from gateway.proxy.egress import AllowList as AllowList
from gateway.proxy.egress import check_callees, virtual_address
from gateway.proxy.egress import default_port as _default_port
from gateway.proxy.egress import egress_reaches_loopback as egress_reaches_loopback

#: How long a request waits for a callee's door URL to arrive on the channel.
DOOR_URL_WAIT_SECONDS: Final = 10.0
TRUSTED: Final = "trusted"
UNTRUSTED: Final = "untrusted"

#: Headers that belong to the runtime on a call to a member. The whole ``x-murmur-``
#: namespace is the runtime's, so it goes too; names compare in lower case with ``_``
#: read as ``-``.
_AUTHORIZATION: Final = "authorization"
#: RFC 9110 section 7.6.1 plus the names proxies have historically treated the same way.
HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
#: Framing is recomputed from the body this transport forwards, never copied.
_RECOMPUTED: Final = frozenset({"host", "content-length"})
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: Set on a request's extensions when it was answered with a redirect, by a member's
#: door or by any other host: a request that follows it (httpx copies extensions onto the
#: follow-up) may not reach a virtual address, or a callee or an outside host could make
#: this member call someone on its behalf, with its token attached.
_FOLLOWS_REDIRECT: Final = "murmur.follows_redirect"
#: ``timeout`` is the only request extension forwarded to the inner transport. ``trace``
#: in particular is dropped: httpcore hands it the outgoing headers, token included.
_UNICODE_DOTS: Final = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


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


class ProxyError(GatewayError, httpx.TransportError):
    """The formation proxy refused a request or could not reach its callee."""


class FormationRefused(ProxyError):
    """A virtual address this member may not use. One class and one message for every
    case (not a callee, no such member, itself, a host trick), so a refusal tells a
    component nothing about which members exist."""

    MESSAGE: Final = (
        "refused by the formation proxy: the address is not "
        "http://<member>.formation.invalid for a member this member may call"
    )

    def __init__(self, request: httpx.Request | None = None) -> None:
        super().__init__(self.MESSAGE, request=request)


class EgressRefused(ProxyError):
    """The real URL is outside the sending component's ``capabilities.network.allow``.
    Its text says why, without a "refused" of its own: the class says it, and a failed
    member call already reads ``... failed: refused: <this text>``."""


class DoorUnavailable(ProxyError):
    """A callee's door URL did not arrive on the channel in time."""


# --------------------------------------------------------------------------------------
# Names under formation.invalid


def _readings(host: str) -> set[str]:
    """Every way a parser or resolver might read ``host``: percent-decoded (twice, for
    double encoding), NFKC-folded, with ideographic dots as dots, lower case, without
    trailing dots, and with punycode labels decoded."""
    readings: set[str] = set()
    text = host
    for _ in range(3):
        folded = unicodedata.normalize("NFKC", text).translate(_UNICODE_DOTS).lower()
        folded = folded.strip("[]").rstrip(".")
        readings.add(folded)
        readings.add(_decode_punycode(folded))
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return readings


def _decode_punycode(host: str) -> str:
    labels = []
    for label in host.split("."):
        if label.startswith("xn--"):
            try:
                label = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                pass
        labels.append(label)
    return unicodedata.normalize("NFKC", ".".join(labels)).translate(_UNICODE_DOTS).lower()


def names_formation(host: str) -> bool:
    """Whether any reading of ``host`` names something under ``formation.invalid``.

    Deliberately wide: ``coder.formation.invalid.evil.example`` and ``xformation.invalid``
    count too. A host that does is either exactly a callee's virtual address or refused.
    """
    lowered = host.lower()
    if host.isascii() and "%" not in host and "xn--" not in lowered:
        return VIRTUAL_DOMAIN in lowered      # the only reading of plain ASCII
    return any(VIRTUAL_DOMAIN in reading for reading in _readings(host))


def exact_virtual_name(authority: str) -> str | None:
    """The member name when ``authority`` is exactly ``<member>.formation.invalid``."""
    if not authority.endswith(VIRTUAL_SUFFIX):
        return None
    name = authority[: -len(VIRTUAL_SUFFIX)]
    return name if MEMBER_NAME_RE.fullmatch(name) else None


_RAW_URL = re.compile(r"^(?P<scheme>[^:/?#]*):?//(?P<authority>[^/?#]*)")


def check_raw_url(url: str) -> None:
    """Refuse a URL *text* that names ``formation.invalid`` in any but the exact form.

    httpx folds case, drops a default port and maps ideographic dots before a transport
    sees a URL, so ``CODER.formation.invalid`` and ``coder.formation.invalid:80`` can
    only be told apart here, from the text the component wrote. The transport repeats
    every check it still can on the parsed URL.
    """
    match = _RAW_URL.match(url.strip())
    if match is None:
        return
    authority = match["authority"]
    if not names_formation(authority):
        return
    if match["scheme"] != "http" or exact_virtual_name(authority) is None:
        raise FormationRefused()


# --------------------------------------------------------------------------------------
# Headers


def _header_key(name: bytes) -> bytes:
    """A header name as compared here: trimmed, lower case, ``_`` read as ``-``."""
    key = _HEADER_KEYS.get(name)
    if key is None:
        key = name.strip().lower().replace(b"_", b"-")
        if len(_HEADER_KEYS) < 512:           # clients repeat the same few names
            _HEADER_KEYS[name] = key
    return key


_HEADER_KEYS: dict[bytes, bytes] = {}


_DROPPED: Final = frozenset(
    name.encode("ascii") for name in HOP_BY_HOP | _RECOMPUTED | {_AUTHORIZATION})
_ORIGIN_HEADER: Final = ORIGIN_HEADER.encode("ascii")
_TRUST_HEADER: Final = TRUST_HEADER.encode("ascii")
_RUNTIME_PREFIX_BYTES: Final = RUNTIME_HEADER_PREFIX.encode("ascii")
_CONNECTION_NAMES: Final = (b"connection", b"proxy-connection")
#: A call's trace context is the runtime's (gateway.trace.context): a component's own
#: ``traceparent`` and the ``tracestate`` that goes with it are replaced.
_TRACEPARENT: Final = b"traceparent"
_TRACE_HEADERS: Final = frozenset({_TRACEPARENT, b"tracestate"})


def _forwarded_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The component's headers minus ``Authorization``, the ``x-murmur-`` namespace,
    hop-by-hop headers, every header a ``Connection`` header names, and the framing and
    ``Host`` headers this transport sets itself."""
    keys = [_header_key(name) for name, _ in raw]
    named: set[bytes] = set()
    for key, (_, value) in zip(keys, raw, strict=True):
        if key in _CONNECTION_NAMES:
            named.update(_header_key(token) for token in value.split(b","))
    return [header for key, header in zip(keys, raw, strict=True)
            if key not in _DROPPED and key not in named
            and not key.startswith(_RUNTIME_PREFIX_BYTES)]


def _without_runtime_headers(request: httpx.Request) -> httpx.Request:
    """A real-host request minus the ``x-murmur-`` headers (the same request when it has
    none). Its own ``Authorization`` (an API key of the component's) and all its other
    headers stay."""
    raw = request.headers.raw
    kept = [(name, value) for name, value in raw
            if not _header_key(name).startswith(_RUNTIME_PREFIX_BYTES)]
    if len(kept) == len(raw):
        return request
    return httpx.Request(request.method, request.url, headers=kept, stream=request.stream,
                         extensions=request.extensions)


# --------------------------------------------------------------------------------------
# Door addresses in errors

#: How error texts write a loopback door's host besides the door URL's own spelling.
_LOOPBACK_SPELLINGS: Final = ("127.0.0.1", "localhost", "[::1]", "::1")


class DoorAddresses:
    """The real door addresses this proxy has used, and their removal from error text.

    Each known door's port, written ``[scheme://]<host>:<port>`` with the door URL's own
    host or any loopback spelling (``127.0.0.1``, ``localhost``, ``[::1]``), or as the
    socket address an OSError quotes (``('127.0.0.1', <port>)``, ``('::1', <port>, 0,
    0)``), becomes the callee's virtual address. Only error paths call :meth:`scrub`;
    the pattern is rebuilt when a door is added (once per callee).
    """

    __slots__ = ("_hosts", "_members", "_pattern")

    def __init__(self) -> None:
        self._members: dict[str, str] = {}          # port (text) -> callee
        self._hosts: set[str] = set(_LOOPBACK_SPELLINGS)
        self._pattern: re.Pattern[str] | None = None

    def __repr__(self) -> str:  # never the addresses
        return f"DoorAddresses({len(self._members)} doors)"

    def add(self, member: str, url: httpx.URL) -> None:
        port = url.port if url.port is not None else _default_port(url.scheme)
        if port is None:
            return
        self._members[str(port)] = member
        host = url.host
        self._hosts.update((host, f"[{host}]") if ":" in host else (host,))
        self._pattern = None

    def scrub(self, text: str) -> str:
        """``text`` with every spelling of a known door address as the virtual address."""
        if not self._members:
            return text
        pattern = self._pattern
        if pattern is None:
            pattern = self._pattern = self._compile()
        return pattern.sub(self._virtual, text)

    def _compile(self) -> re.Pattern[str]:
        # Longest first, so "[::1]" is taken whole before "::1" could match inside it.
        hosts = sorted(self._hosts, key=len, reverse=True)
        written = "|".join(re.escape(host) for host in hosts)
        quoted = "|".join(re.escape(host) for host in hosts if not host.startswith("["))
        ports = "|".join(sorted(self._members, key=len, reverse=True))
        return re.compile(
            rf"(?i:(?:[a-z][a-z0-9+.-]*://)?(?:{written})):(?P<port>{ports})(?![0-9])"
            rf"|\(\s*'(?i:{quoted})',\s*(?P<quoted>{ports})(?:,\s*[0-9]+)*\s*\)")

    def _virtual(self, match: re.Match[str]) -> str:
        port = match["port"]
        if port is not None:
            return virtual_address(self._members[port])
        return f"({virtual_address(self._members[match['quoted']])})"


def _scrubbed_failure(exc: Exception, request: httpx.Request,
                      scrub: Callable[[str], str]) -> httpx.TransportError:
    """What a component sees of ``exc``, raised below the proxy on a call to a member:
    the same httpx class (anything else: ``httpx.TransportError`` naming its class) with
    the text scrubbed, against the component's own request, and with no chain back."""
    text = scrub(str(exc))
    if isinstance(exc, httpx.TransportError):
        try:
            return type(exc)(text, request=request)
        except TypeError:       # a subclass with a constructor of its own
            pass
    return httpx.TransportError(f"{type(exc).__name__}: {text}", request=request)


# --------------------------------------------------------------------------------------
# The transport


@dataclass(frozen=True, slots=True)
class _Door:
    """A callee's door as this proxy uses it, parsed once per URL the channel sent."""

    url: httpx.URL
    host: bytes                       # the Host header: the door's netloc
    prefix: bytes                     # the door URL's own path, without a trailing /
    allowed: bool                     # capabilities.network.allow reaches it
    #: Real URLs by virtual raw path (``/`` and a few more): parsing a URL costs more
    #: than the rest of the hop together.
    urls: dict[bytes, httpx.URL]

    def real_url(self, raw_path: bytes) -> httpx.URL:
        url = self.urls.get(raw_path)
        if url is None:
            url = self.url.copy_with(raw_path=self.prefix + raw_path)
            if len(self.urls) < _REAL_URL_CACHE:
                self.urls[raw_path] = url
        return url


_REAL_URL_CACHE: Final = 64
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


class _Shared:
    """What every view of one member's proxy shares: pool, credentials, grant."""

    __slots__ = ("addresses", "allow", "authorizations", "door_wait", "doors", "inner",
                 "known", "metrics", "on_call", "tokens", "virtual_hosts")

    def __init__(self, inner: httpx.AsyncBaseTransport, doors: DoorDirectory,
                 allow: AllowList, on_call: CallHook | None, door_wait: float,
                 tokens: Mapping[str, str], metrics: DoorMetrics | None) -> None:
        self.inner = inner
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
    ) -> None:
        check_callees(tokens)
        self._shared = _Shared(inner, doors, AllowList(allow), on_call, door_wait, tokens,
                               metrics)
        self._trust = trust
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
            raise FormationRefused(request)
        return name

    # Steps 2 to 5 ------------------------------------------------------------------

    async def _send_to_member(self, request: httpx.Request, raw: list[tuple[bytes, bytes]],
                              callee: str) -> httpx.Response:
        shared = self._shared
        door = shared.known.get(callee) or await self._door(request, callee)
        if not door.allowed:
            raise EgressRefused(
                f"capabilities.network.allow does not reach member {callee!r}'s "
                "door, which listens on loopback; add `localhost` to the grant",
                request=request)
        authorization = shared.authorizations[callee]
        try:
            body = request.content              # built from bytes: read already
        except httpx.RequestNotRead:
            body = await request.aread()
        headers = _forwarded_headers(raw)
        trace_parent = None if shared.on_call is None else shared.on_call(callee, str(request.url))
        if trace_parent is not None:    # the runtime's span, never the component's own
            headers = [header for header in headers
                       if _header_key(header[0]) not in _TRACE_HEADERS]
            headers.append((_TRACEPARENT, trace_parent))
        headers.append((b"Host", door.host))
        if body or request.method in _BODY_METHODS:
            headers.append((b"Content-Length", str(len(body)).encode("ascii")))
        trust = b"trusted" if self._trust() == TRUSTED else b"untrusted"
        headers += [(b"Authorization", authorization), (_ORIGIN_HEADER, b"peer"),
                    (_TRUST_HEADER, trust)]
        timeout = request.extensions.get("timeout")
        extensions = {} if timeout is None else {"timeout": timeout}
        outgoing = httpx.Request(request.method, door.real_url(request.url.raw_path),
                                 headers=headers, stream=httpx.ByteStream(body),
                                 extensions=extensions)
        outgoing.read()       # in memory already; lets inner transports read .content
        failure: httpx.TransportError | None = None
        started = time.perf_counter()
        try:
            response = await shared.inner.handle_async_request(outgoing)
        except Exception as exc:  # noqa: BLE001 - whatever failed below, its text is scrubbed
            # Against the component's own request, never the one holding the token, with
            # the token and the door's address scrubbed, and no chain back (raised below,
            # outside the except, so not even as __context__).
            failure = _scrubbed_failure(exc, request, shared.scrub)
        metrics = shared.metrics
        if failure is not None:
            if metrics is not None:
                metrics.proxy_call(callee, "unreachable", None)
            raise failure
        if metrics is not None:
            metrics.proxy_call(callee, proxy_outcome(response.status_code),
                               time.perf_counter() - started)
        response.request = request
        response.stream = _SanitizedStream(response.stream, request, shared.scrub)
        if "network_stream" in response.extensions:     # httpx's: its socket names the door
            response.extensions = {key: value for key, value in response.extensions.items()
                                   if key != "network_stream"}
        _mark_redirect(request, response)
        return response

    async def _door(self, request: httpx.Request, callee: str) -> _Door:
        """The callee's door. A door URL arrives once per formation and a door never
        moves (a peer that ends, ends the formation), so it is asked for only once."""
        shared = self._shared
        door = shared.known.get(callee)
        if door is not None:
            return door
        try:
            text = await shared.doors.wait_for(callee, shared.door_wait)
        except TimeoutError:
            raise DoorUnavailable(
                f"member {callee!r}'s door address has not arrived on the formation channel "
                f"within {shared.door_wait:g} s", request=request) from None
        door = shared.known.get(callee)
        if door is None:
            url = httpx.URL(text)
            door = _Door(url=url, host=url.netloc,
                         prefix=url.raw_path.split(b"?")[0].rstrip(b"/"),
                         allowed=shared.allow.allows(url), urls={})
            shared.addresses.add(callee, url)
            shared.known[callee] = door
        return door

    async def _send_outside(self, request: httpx.Request) -> httpx.Response:
        if not self._shared.allow.allows(request.url):
            raise EgressRefused(
                f"capabilities.network.allow does not allow "
                f"{request.url.host}:{request.url.port or _default_port(request.url.scheme)}",
                request=request)
        response = await self._shared.inner.handle_async_request(
            _without_runtime_headers(request))
        _mark_redirect(request, response)
        return response


def _mark_redirect(request: httpx.Request, response: httpx.Response) -> None:
    """A redirect is never followed with a token attached: its follow-up may not use a
    virtual address, whoever answered with it (step 5)."""
    if response.status_code in _REDIRECT_STATUSES and "location" in response.headers:
        request.extensions[_FOLLOWS_REDIRECT] = True


class _SanitizedStream(httpx.AsyncByteStream):
    """A member's response body: a failure while reading it is re-raised against the
    component's own request with the token and door address scrubbed, as for a failure
    to send."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream,
                 request: httpx.Request, scrub: Callable[[str], str]) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        self._request = request
        self._scrub = scrub

    async def __aiter__(self) -> AsyncIterator[bytes]:
        failure: httpx.TransportError | None = None
        try:
            async for chunk in self._inner:
                yield chunk
        except Exception as exc:  # noqa: BLE001 - whatever failed below, its text is scrubbed
            failure = _scrubbed_failure(exc, self._request, self._scrub)
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


# --------------------------------------------------------------------------------------
# The client components use


class _Cookies(httpx.Cookies):
    """httpx's cookie jar, minus its most expensive no-op: parsing a response that sets
    no cookie (a quarter of a client's CPU per JSON-RPC call)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class FormationClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` that also vets the URL *text* it is given (see
    :func:`check_raw_url`) before httpx normalizes it; ``task.http`` is one."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport, **kwargs: Any) -> None:
        base_url = kwargs.get("base_url")
        if isinstance(base_url, str):
            check_raw_url(base_url)
        kwargs.setdefault("follow_redirects", False)
        super().__init__(transport=transport, **kwargs)
        self._cookies = _Cookies(self._cookies)

    def build_request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Request:
        if isinstance(url, str):
            try:
                check_raw_url(url)
            except FormationRefused:
                raise FormationRefused(self._request_or_none(method, url)) from None
        try:
            return super().build_request(method, url, **kwargs)
        except (httpx.InvalidURL, UnicodeError):
            # A name httpx cannot even parse (bad punycode such as xn--coder-) under
            # formation.invalid gets the one refusal too, never a parser's error.
            if names_formation(str(url)):
                raise FormationRefused(None) from None
            raise

    def _request_or_none(self, method: str, url: str) -> httpx.Request | None:
        """The refused request, for the exception's ``request``, when httpx can parse it."""
        try:
            return super().build_request(method, url)
        except (httpx.InvalidURL, ValueError, TypeError):
            return None
