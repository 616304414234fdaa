"""The door's side of a gateway member's upstream: the A2A server the door stands in
front of (docs/gateway.md), spoken to over HTTP. In this order:

1. the card: :func:`fetch_card` reads it at ``card_path`` (and
   ``gateway.relay.interfaces.upstream_interface`` finds the interface to speak to on it,
   or refuses with :class:`UpstreamCardError` naming what the card offers instead);
2. the client, :class:`UpstreamClient`: one aiohttp session (measured at a fraction of
   httpx's CPU per request, ``loadtests/bench_proxy.py``), requests framed for the
   upstream's interface (:class:`JsonRpcFraming`, with the door's own request ids,
   ``gateway.relay.rest_framing.RestFraming`` or ``gateway.relay.v03_framing.V03Framing``),
   the framing's ``A2A-Version`` and the manifest's
   headers and nothing of the caller's; :meth:`UpstreamClient.call` for a unary answer,
   :meth:`UpstreamClient.stream` for Server-Sent Events read as they arrive;
3. failures: an upstream's own JSON-RPC error is raised as :class:`UpstreamError` and
   passes through to the caller as it came; anything else (no connection, a reset, an
   HTTP status that is not 200, a body that is not JSON-RPC) is the door's ``-32603``
   naming the member and what went wrong, never the upstream's address (an aiohttp
   exception's text holds it, so only the exception's type is ever shown).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, Protocol

import aiohttp

from gateway.a2a.jsonrpc import STRICT_JSON, RpcError, dumps
from gateway.errors import GatewayError
from gateway.protocol import A2A_VERSION, VERSION_HEADER
from gateway.sse import byte_events

#: The most a single answer or Server-Sent Event of the upstream may hold; past it the
#: answer is refused as not JSON-RPC (a bound on the door's memory, docs/limits.md).
MAX_UPSTREAM_BYTES: Final = 16 * 1024 * 1024
CONNECT_SECONDS: Final = 10.0
CARD_SECONDS: Final = 5.0


class UpstreamCardError(GatewayError):
    """The upstream's card cannot be served behind a door; the text says what it offers."""


class UpstreamError(RpcError):
    """The upstream's own JSON-RPC error, passed through to the caller unchanged."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.upstream = error  # first: RpcError's __init__ reads self.message
        super().__init__("INTERNAL_ERROR")

    @property
    def code(self) -> int:
        return int(self.upstream["code"])

    @property
    def message(self) -> str:
        return str(self.upstream.get("message", ""))

    def error_object(self) -> dict[str, Any]:
        return self.upstream


def not_answered(member: str, what: str) -> RpcError:
    """The door's ``-32603`` for an upstream that did not answer: names the member."""
    return RpcError("INTERNAL_ERROR", f"member {member!r} did not answer: its A2A server {what}")


# --------------------------------------------------------------------------------------
# 1. The card (its interfaces: gateway.relay.interfaces)


async def fetch_card(session: aiohttp.ClientSession, card_url: str,
                     headers: Mapping[str, str]) -> dict[str, Any]:
    """The upstream's card; ``OSError``/``aiohttp.ClientError``/``TimeoutError`` when it
    does not answer yet, :class:`UpstreamCardError` when it answers with no card."""
    async with asyncio.timeout(CARD_SECONDS):
        async with session.get(card_url, headers=dict(headers),
                               allow_redirects=False) as response:
            if response.status != 200:
                raise UpstreamCardError(f"{card_url} answered HTTP {response.status}, not "
                                        "an agent card (check agent.a2a.card_path)")
            body = await response.content.read(MAX_UPSTREAM_BYTES + 1)
    try:
        card = json.loads(body) if len(body) <= MAX_UPSTREAM_BYTES else None
    except ValueError:
        card = None
    if not isinstance(card, dict):
        raise UpstreamCardError(f"{card_url} answered with something that is not an agent "
                                "card (a JSON object)")
    return card


# --------------------------------------------------------------------------------------
# 2. The client


class UpstreamFraming(Protocol):
    """How requests to the upstream are written and its answers read, for the interface
    its card offers: :class:`JsonRpcFraming` here, ``gateway.relay.rest_framing.RestFraming``,
    ``gateway.relay.v03_framing.V03Framing``. ``version``: the ``A2A-Version`` sent."""

    version: str

    def request(self, method: str, params: Mapping[str, Any]) -> tuple[str, str, bytes | None]:
        """The verb, URL and body of a request for ``method``."""

    def answer(self, status: int, body: bytes, member: str, method: str) -> Any:
        """The result of a whole answer to ``method``;
        :class:`UpstreamError` for the upstream's own error, :func:`not_answered` for
        anything that is not an answer."""

    def event(self, data: bytes, member: str, method: str) -> Any:
        """The result of one Server-Sent Event's data (or the error it carries)."""


class JsonRpcFraming:
    """A2A 1.0 over JSON-RPC: every request a ``POST`` to the interface URL, with the
    door's own request ids."""

    version = A2A_VERSION

    def __init__(self, url: str) -> None:
        self.url = url
        self._ids = itertools.count(1)

    def request(self, method: str, params: Mapping[str, Any]) -> tuple[str, str, bytes | None]:
        body = dumps({"jsonrpc": "2.0", "id": next(self._ids), "method": method,
                      "params": params})
        return "POST", self.url, body

    def answer(self, status: int, body: bytes, member: str, method: str) -> Any:
        if status != 200:
            raise not_answered(member, f"answered HTTP {status}")
        return jsonrpc_result(body, member)

    def event(self, data: bytes, member: str, method: str) -> Any:
        return jsonrpc_result(data, member)


def jsonrpc_result(data: bytes, member: str) -> Any:
    """The ``result`` of one JSON-RPC response, or the error it carries."""
    value = read_json(data)
    if not isinstance(value, dict):
        raise not_answered(member, "sent something that is not JSON-RPC")
    error = value.get("error")
    if isinstance(error, dict) and type(error.get("code")) is int and \
            isinstance(error.get("message"), str):
        raise UpstreamError(error)
    if "result" not in value:
        raise not_answered(member, "sent a JSON-RPC answer with no result")
    return value["result"]


def read_json(body: bytes) -> Any:
    """``body`` as strict JSON; None when it is not JSON or is over the door's bound."""
    try:
        return STRICT_JSON.decode(body.decode("utf-8")) \
            if len(body) <= MAX_UPSTREAM_BYTES else None
    except (ValueError, RecursionError):
        return None


class UpstreamClient:
    """One upstream at ``url`` for the member ``member`` (the name the door's errors
    use), spoken to in the binding its card offers (``framing``: JSON-RPC by default).
    Calls and streams have a pool each (``limit`` and ``stream_limit`` connections), so
    streams held open never take the connection a call (the door's own follower's, the
    operator's) needs. The sessions are made in the running loop on first use."""

    def __init__(self, url: str, *, member: str, headers: Mapping[str, str],
                 limit: int = 100, stream_limit: int = 100,
                 framing: UpstreamFraming | None = None) -> None:
        self.url = url
        self.member = member
        self._framing = framing if framing is not None else JsonRpcFraming(url)
        self._headers = {**headers, "Content-Type": "application/json",
                         VERSION_HEADER: self._framing.version}
        self._stream_headers = {**self._headers, "Accept": "text/event-stream"}
        self._limit = limit
        self._stream_limit = stream_limit
        self._session: aiohttp.ClientSession | None = None
        self._stream_session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # the member, never the address
        return f"UpstreamClient(member={self.member!r})"

    @property
    def session(self) -> aiohttp.ClientSession:
        """The calls' pool."""
        if self._session is None or self._session.closed:
            self._session = new_session(self._limit)
        return self._session

    @property
    def stream_session(self) -> aiohttp.ClientSession:
        """The streams' pool."""
        if self._stream_session is None or self._stream_session.closed:
            self._stream_session = new_session(self._stream_limit)
        return self._stream_session

    async def aclose(self) -> None:
        for session in (self._session, self._stream_session):
            if session is not None:
                await session.close()
        self._session = self._stream_session = None

    async def call(self, method: str, params: Mapping[str, Any], *,
                   trace_parent: bytes | None = None) -> Any:
        """The upstream's result for one request; :class:`UpstreamError` for its own
        error, the door's ``-32603`` for anything else. ``trace_parent``: the
        ``traceparent`` to send (the task's span, so the upstream's spans are its
        children)."""
        verb, url, body = self._framing.request(method, params)
        headers = self._headers if trace_parent is None else {
            **self._headers, "traceparent": trace_parent.decode("ascii")}
        try:
            async with self.session.request(verb, url, data=body, headers=headers,
                                            allow_redirects=False) as response:
                status = response.status
                answer = await response.content.read(MAX_UPSTREAM_BYTES + 1)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise not_answered(self.member, _failure(exc)) from None
        return self._framing.answer(status, answer, self.member, method)

    async def stream(self, method: str, params: Mapping[str, Any], *,
                     trace_parent: bytes | None = None) -> AsyncIterator[Any]:
        """The result of each event of a streaming request, as each arrives. Opening
        happens before this returns, so a refusal is the request's own answer; a stream
        that breaks later raises in the iteration. ``trace_parent`` as for :meth:`call`."""
        verb, url, body = self._framing.request(method, params)
        headers = self._stream_headers if trace_parent is None else {
            **self._stream_headers, "traceparent": trace_parent.decode("ascii")}
        try:
            response = await self.stream_session.request(
                verb, url, data=body, headers=headers, allow_redirects=False)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise not_answered(self.member, _failure(exc)) from None
        if response.status != 200 or not response.content_type.startswith("text/event-stream"):
            try:  # a whole answer to a stream request: one error (or result), then done
                answer = await response.content.read(MAX_UPSTREAM_BYTES + 1)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise not_answered(self.member, _failure(exc)) from None
            finally:
                response.release()
            return _single(self._framing.answer(response.status, answer, self.member, method))
        return self._events(response, method)

    async def _events(self, response: aiohttp.ClientResponse,
                      method: str) -> AsyncIterator[Any]:
        try:
            async for data in _sse_data(response.content, self.member):
                yield self._framing.event(data, self.member, method)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise not_answered(self.member, _failure(exc)) from None
        finally:
            response.close()


def new_session(limit: int = 100) -> aiohttp.ClientSession:
    """The aiohttp session the door speaks to an upstream with: a pool of ``limit``
    connections kept alive, no total timeout (a blocking SendMessage lasts as long as its
    task), a bounded connect, redirects never followed (each call says so)."""
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=15.0,
                                     enable_cleanup_closed=False)
    timeout = aiohttp.ClientTimeout(total=None, connect=CONNECT_SECONDS,
                                    sock_connect=CONNECT_SECONDS)
    return aiohttp.ClientSession(connector=connector, timeout=timeout,
                                 skip_auto_headers=("User-Agent",), trust_env=False)


async def _single(result: Any) -> AsyncIterator[Any]:
    yield result


def _failure(exc: BaseException) -> str:
    """What went wrong, by the exception's type alone (its text names the address)."""
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError):
        return "cannot be reached"
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "did not answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError |
                  ConnectionResetError):
        return "closed the connection before it answered"
    return f"failed ({type(exc).__name__})"


async def _sse_data(content: aiohttp.StreamReader, member: str) -> AsyncIterator[bytes]:
    """The ``data`` of each Server-Sent Event on ``content`` as it completes
    (:class:`gateway.sse.SseEvents`); one event is bounded by :data:`MAX_UPSTREAM_BYTES`."""
    pending = b""
    events = byte_events()
    async for chunk in content.iter_any():
        pending += chunk
        while True:
            end = pending.find(b"\n")
            if end < 0:
                break
            line, pending = pending[:end].rstrip(b"\r"), pending[end + 1:]
            data = events.line(line)
            if data is not None:
                yield data
        if len(events) + len(pending) > MAX_UPSTREAM_BYTES:
            raise not_answered(member, "sent an event larger than the door reads")
    last = events.end()
    if last is not None:
        yield last
