"""JSON-RPC to a member through the formation proxy, and a task followed to its end.

The lower half of the call-member client (``call_member`` is the calls themselves). In
order: the default timeouts and :class:`Backoff`, the delays a call waits; the request
side, :class:`JsonRpcSender`, one JSON-RPC POST straight on a transport; the exceptions
this half raises and call-member catches; :class:`MemberRpc`, what call-member says to a
callee's door (a JSON-RPC call, ``GetTask``, ``SubscribeToTask``) and how it follows a
task to a final state (the stream, else polling); then the reading side: the proxy's
refusals and transport failures as :class:`~gateway.proxy.call_failed.CallFailed`, a
JSON-RPC answer, a stream event, and whether a task's state is final.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from gateway.errors import GatewayError
from gateway.protocol import (
    A2A_VERSION,
    APPROVAL_METADATA_KEY,
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    TaskState,
)
from gateway.proxy.call_failed import ERROR, REFUSED, TRANSPORT_ERROR, CallFailed
from gateway.proxy.egress import virtual_address
from gateway.proxy.formation_client import FormationClient
from gateway.proxy.proxy_errors import (
    CallLimitReached,
    DoorUnavailable,
    EgressRefused,
    FormationRefused,
)
from gateway.sse import aevent_data

#: ``task.http``'s default timeouts; the call-member client bounds its own requests by
#: the call's deadline on top of these.
DEFAULT_TIMEOUT: Final = httpx.Timeout(30.0)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays, in seconds. Busy offers wait at least the callee's ``retryAfterMs`` (at
    most ``retry_after_cap``), else ``busy_initial`` doubling to ``busy_max``; polls
    start at ``poll_initial`` and grow by half to ``poll_max``. Every delay is jittered
    upward by up to ``jitter`` of itself and never runs past the call's deadline."""

    busy_initial: float = 0.05
    busy_max: float = 2.0
    retry_after_cap: float = 30.0
    poll_initial: float = 0.05
    poll_max: float = 2.0
    jitter: float = 0.25
    #: How long an offer already sent may still answer after the deadline or the end
    #: of the calling task, so a task the callee took is seen, and canceled.
    settle: float = 2.0
    #: Bound on a CancelTask sent when a call is abandoned.
    cancel_timeout: float = 5.0
    #: A stream silent this long is given up for polling.
    stream_idle: float = 60.0
    #: Consecutive transport errors while polling before the call fails.
    poll_errors: int = 3

    def jittered(self, delay: float) -> float:
        return delay * (1.0 + random.uniform(0.0, self.jitter))


class JsonRpcSender:
    """One JSON-RPC POST straight on a transport: no cookies, redirects, auth flow or
    event hooks, which an ``httpx.AsyncClient`` spends most of a call's CPU on. The URL
    is the caller's (call-member builds it from a peer's name), so ``FormationClient``'s
    check of URL text has nothing to add; the transport's checks all apply."""

    def __init__(self, transport: httpx.AsyncBaseTransport, *,
                 timeout: httpx.Timeout = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None) -> None:
        self._transport = transport
        self._extensions = {"timeout": timeout.as_dict()}
        self._headers = [("Accept", "application/json"), ("A2A-Version", A2A_VERSION),
                         ("Content-Type", "application/json"), *(headers or {}).items()]
        self._urls: dict[str, httpx.URL] = {}       # parsing a URL is the dearest step

    async def send(self, url: str, envelope: Mapping[str, Any]) -> tuple[int, bytes]:
        """POST ``envelope``; the HTTP status and the whole body."""
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = httpx.URL(url)
            if len(self._urls) < 64:
                self._urls[url] = parsed
        body = json.dumps(envelope, separators=(",", ":")).encode()
        request = httpx.Request("POST", parsed, headers=self._headers, content=body,
                                extensions=self._extensions)
        response = await self._transport.handle_async_request(request)
        try:
            return response.status_code, await response.aread()
        finally:
            await response.aclose()


class RpcErrorReply(GatewayError):
    """A JSON-RPC error answer from a callee's door (``-32050`` busy among them), which
    call-member reads and never lets out."""

    def __init__(self, code: int, message: str, data: Any) -> None:
        super().__init__(f"JSON-RPC error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class RateLimited(GatewayError):
    """A callee's door answered ``429 rate_limited`` (an edge's ``concurrent`` or
    ``per_minute``, docs/bounds.md): call-member offers the task again after
    ``retry_after`` seconds, as it does for a busy member."""

    def __init__(self, retry_after: float | None) -> None:
        super().__init__("rate limited")
        self.retry_after = retry_after


#: A door's refusals for bounds along the edges, whose message names the limit.
_BOUND_REFUSALS: Final = frozenset({"limit_reached", "depth_exceeded"})


def _retry_after_ms(document: Any) -> float | None:
    value = document.get("retryAfterMs") if isinstance(document, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value) / 1000


class StreamFailed(GatewayError):
    """The stream cannot be used; the caller falls back to polling GetTask."""


class MemberRpc:
    """What call-member says to a callee's door through the formation proxy, and how it
    follows a task there to a final state; :class:`~gateway.proxy.call_member.MemberCalls`
    is one. ``transport`` is the view of the member's FormationTransport the calls use;
    ``http`` (``task.http``) and the JSON-RPC sender both send through it."""

    def __init__(self, transport: httpx.AsyncBaseTransport, *, backoff: Backoff,
                 timeout: httpx.Timeout) -> None:
        self.http: httpx.AsyncClient = FormationClient(transport=transport, timeout=timeout)
        self._sender = JsonRpcSender(transport, timeout=timeout)
        self._backoff = backoff
        self._ids = itertools.count(1)

    # JSON-RPC over the proxy -----------------------------------------------------------

    def _envelope(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}

    async def _rpc(self, member: str, method: str, params: Mapping[str, Any],
                   limit: float | None) -> dict[str, Any]:
        """One JSON-RPC call; its ``result``, or RpcErrorReply, or CallFailed."""
        async with asyncio.timeout(limit), _call_errors(member):
            status, content = await self._sender.send(virtual_address(member) + "/",
                                                      self._envelope(method, params))
        return _rpc_result(member, status, content)

    async def _get_task(self, member: str, task_id: str) -> Mapping[str, Any]:
        try:
            task = await self._rpc(member, "GetTask", {"id": task_id}, None)
        except RpcErrorReply as error:
            raise CallFailed(member, ERROR, f"GetTask: {error}") from None
        return task

    async def _subscribe(self, member: str, task_id: str
                         ) -> AsyncGenerator[dict[str, Any], None]:
        """The StreamResponse objects of ``SubscribeToTask``; StreamFailed on anything
        that is not a clean event stream."""
        timeout = httpx.Timeout(30.0, read=self._backoff.stream_idle)
        try:
            async with _call_errors(member), self.http.stream(
                    "POST", virtual_address(member) + "/",
                    json=self._envelope("SubscribeToTask", {"id": task_id}),
                    headers={"A2A-Version": A2A_VERSION, "Accept": "text/event-stream"},
                    timeout=timeout) as response:
                kind = response.headers.get("content-type", "")
                if response.status_code != 200 or not kind.startswith("text/event-stream"):
                    raise StreamFailed(f"HTTP {response.status_code} {kind}")
                async for data in aevent_data(response.aiter_lines()):
                    yield _stream_event(data)
        except CallFailed as failure:
            raise StreamFailed(str(failure)) from None

    # Following a task ----------------------------------------------------------------

    async def _stream_until_final(self, member: str, task_id: str) -> Mapping[str, Any]:
        """Follow ``SubscribeToTask`` until a final state, then read the whole task once
        with ``GetTask`` (the stream's events carry it only in parts)."""
        async with contextlib.aclosing(self._subscribe(member, task_id)) as events:
            async for event in events:
                task = event.get("task")
                if isinstance(task, Mapping) and is_final(task):
                    return task
                update = event.get("statusUpdate")
                if isinstance(update, Mapping) and is_final(update):
                    break
            else:
                raise StreamFailed("the stream ended before the task did")
        return await self._get_task(member, task_id)

    async def _poll_until_final(self, member: str, task_id: str) -> Mapping[str, Any]:
        delay = self._backoff.poll_initial
        errors = 0
        while True:
            try:
                task = await self._get_task(member, task_id)
                errors = 0
            except CallFailed as failure:
                errors += 1
                if failure.state != TRANSPORT_ERROR or errors >= self._backoff.poll_errors:
                    raise
            else:
                if is_final(task):
                    return task
            await asyncio.sleep(self._backoff.jittered(delay))
            delay = min(delay * 1.5, self._backoff.poll_max)


@contextlib.asynccontextmanager
async def _call_errors(member: str) -> AsyncIterator[None]:
    """Map the proxy's refusals and transport failures to CallFailed."""
    try:
        yield
    except FormationRefused:
        raise CallFailed(member, REFUSED, FormationRefused.MESSAGE) from None
    except (EgressRefused, CallLimitReached) as exc:
        raise CallFailed(member, REFUSED, str(exc)) from None
    except DoorUnavailable as exc:
        raise CallFailed(member, TRANSPORT_ERROR, str(exc)) from None
    except httpx.HTTPError as exc:
        raise CallFailed(member, TRANSPORT_ERROR, f"{type(exc).__name__}: {exc}") from None


def _rpc_result(member: str, status: int, content: bytes) -> dict[str, Any]:
    try:
        document = json.loads(content)
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), Mapping) \
            and "jsonrpc" in document:
        error = document["error"]
        code = error.get("code")
        raise RpcErrorReply(code if isinstance(code, int) else 0,
                            str(error.get("message", "")), error.get("data"))
    if status != 200:
        error = document.get("error") if isinstance(document, dict) else None
        if status == 429 and error == "rate_limited":
            raise RateLimited(_retry_after_ms(document))
        detail = f"HTTP {status}"
        if isinstance(error, str):
            detail += f" {error}"
            if error in _BOUND_REFUSALS and isinstance(document.get("message"), str):
                detail += f": {document['message'][:300]}"     # names the limit reached
        raise CallFailed(member, REFUSED if status in (401, 403) else ERROR, detail)
    result = document.get("result") if isinstance(document, dict) else None
    if not isinstance(result, dict):
        raise CallFailed(member, ERROR, "the door's answer is not a JSON-RPC result")
    return result


def _stream_event(data: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError:
        raise StreamFailed("an event that is not JSON") from None
    result = document.get("result") if isinstance(document, dict) else None
    if not isinstance(result, dict):
        raise StreamFailed("an event that is not a JSON-RPC result")
    return result


def is_final(task_or_update: Mapping[str, Any]) -> bool:
    """Whether a call's wait ends here: an ended task, or one that waits for what the
    caller cannot give; a task waiting for the operator's approval is waited on."""
    state = task_state(task_or_update)
    if state == TaskState.AUTH_REQUIRED and awaits_approval(task_or_update):
        return False
    return state in TERMINAL_STATES or state in INTERRUPTED_STATES


def awaits_approval(task_or_update: Mapping[str, Any]) -> bool:
    """Whether the status says the task waits for the operator (docs/bounds.md)."""
    status = task_or_update.get("status")
    message = status.get("message") if isinstance(status, Mapping) else None
    metadata = message.get("metadata") if isinstance(message, Mapping) else None
    return isinstance(metadata, Mapping) and metadata.get(APPROVAL_METADATA_KEY) == "waiting"


def task_state(task: Mapping[str, Any]) -> str:
    status = task.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    return state if isinstance(state, str) else "TASK_STATE_UNSPECIFIED"
