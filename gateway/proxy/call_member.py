"""The call-member client: how a running task calls the members it may call.

One :class:`MemberCalls` belongs to one running task. ``call_member`` offers the callee
an A2A 1.0 ``SendMessage`` (``returnImmediately``) through the formation proxy and
returns a :class:`CallHandle` as soon as the callee's door holds the task, or at once
when the callee is busy (``-32050``), in which case the task is offered again in the
background, with backoff, until the door takes it or the call's deadline passes.
``await handle`` is the callee's answer, read with ``SubscribeToTask`` and, if the
stream fails, by polling ``GetTask``. ``cancel_outstanding`` ends every call still
running when the calling task ends. A CallFailed an agent sees names the callee's
virtual address, never its door's: every failure is scrubbed by the proxy, which alone
knows the door addresses, as it settles. Decisions the documents leave open are in
``docs/proxy.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import random
import re
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Final

import httpx

from gateway.errors import GatewayError
from gateway.protocol import A2A_VERSION, INTERRUPTED_STATES, PEERS_ENV, TERMINAL_STATES, TaskState

# The helpers that need no httpx live in gateway.proxy.egress (a member imports them at start
# without httpx) and are re-exported here.
from gateway.proxy.egress import (
    answer_text,
    egress_reaches_loopback,
    peers_environ,
    virtual_address,
)
from gateway.proxy.egress import parts_text as _parts_text
from gateway.proxy.formation import (
    DoorUnavailable,
    EgressRefused,
    FormationClient,
    FormationRefused,
    FormationTransport,
)
from gateway.sse import aevent_data

__all__ = [
    "PEERS_ENV", "CallFailed", "CallHandle", "Backoff", "MemberCalls", "peers_environ",
    "virtual_address", "fence_answer", "egress_reaches_loopback", "JsonRpcSender",
    "answer_text",
]

#: ``task.http``'s default timeouts; the call-member client bounds its own requests by
#: the call's deadline on top of these.
DEFAULT_TIMEOUT: Final = httpx.Timeout(30.0)
MEMBER_BUSY_CODE: Final = -32050
MEMBER_BUSY_REASON: Final = "MEMBER_BUSY"
COMPLETED: Final = TaskState.COMPLETED
# A callee in one of INTERRUPTED_STATES waits for input the caller cannot give through
# call-member: the call ends there, and the callee's task is canceled with the others
# when the calling task ends.

#: States of a CallFailed that are not A2A task states.
REFUSED: Final = "refused"
DEADLINE: Final = "deadline"
TRANSPORT_ERROR: Final = "transport error"
CALLER_ENDED: Final = "canceled by the caller"
ERROR: Final = "error"


class CallFailed(GatewayError):
    """A call to a member did not produce an answer. ``state`` is the callee's task state
    (``TASK_STATE_FAILED``, ``..._CANCELED``, ``..._REJECTED``, ``..._INPUT_REQUIRED``...)
    or one of ``refused``, ``deadline``, ``transport error``, ``canceled by the caller``,
    ``error``; ``detail`` is the callee's own message or the reason."""

    def __init__(self, member: str, state: str, detail: str = "") -> None:
        self.member = member
        self.state = state
        self.detail = detail
        text = f"call to member {member!r} failed: {state}"
        super().__init__(f"{text}: {detail}" if detail else text)


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


class _RpcError(GatewayError):
    def __init__(self, code: int, message: str, data: Any) -> None:
        super().__init__(f"JSON-RPC error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True, slots=True)
class _Busy:
    retry_after: float | None


class CallHandle:
    """One call. ``await handle`` is the callee's answer text, or raises CallFailed.

    ``state`` is ``offering`` (busy, offered again in the background), ``held`` (the
    callee's door holds the task), then the final task state or a CallFailed state.
    """

    def __init__(self, member: str, deadline: float | None) -> None:
        self.member = member
        self.deadline = deadline
        self.task_id: str | None = None
        self.state = "offering"
        self.message_id = uuid.uuid4().hex
        self._answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._answer.add_done_callback(_retrieve)
        self._placed = asyncio.Event()   # held, first busy answer, or failed
        self._reached = False            # the door held the task or answered busy
        self._runner: asyncio.Task[None] | None = None
        self._offer: asyncio.Task[_Busy | dict[str, Any]] | None = None
        self._remote_open = False        # the callee holds a task that is not final
        self._offer_settled = False      # held or failed: offer_settled was called

    def __repr__(self) -> str:
        return f"CallHandle(member={self.member!r}, state={self.state!r})"

    def done(self) -> bool:
        return self._answer.done()

    def __await__(self) -> Generator[Any, None, str]:
        # Shielded: a caller that stops waiting does not cancel the call itself.
        return asyncio.shield(self._answer).__await__()

    async def outcome(self) -> str:
        """The answer, or the failure as text: what ``answers()`` fences."""
        try:
            return await self
        except CallFailed as failure:
            return str(failure)


def _retrieve(future: asyncio.Future[str]) -> None:
    if not future.cancelled():
        future.exception()


def fence_answer(member: str, text: str) -> str:
    """``text`` in a Markdown code fence whose info string is ``member:<name>``; the fence
    is one backtick longer than any backtick run inside, so no answer can close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{ticks}member:{member}\n{body}{ticks}"


def _task_state(task: Mapping[str, Any]) -> str:
    status = task.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    return state if isinstance(state, str) else "TASK_STATE_UNSPECIFIED"


def busy_retry_after(data: Any) -> float | None:
    """``retryAfterMs`` of a ``-32050`` error, in seconds. A2A 1.0's JSON-RPC binding puts
    typed details in ``data`` as a list (``{"@type": ".../google.rpc.ErrorInfo",
    "reason": "MEMBER_BUSY", "metadata": {"retryAfterMs": "250"}}``, metadata values are
    strings); a single ErrorInfo object and a number are read too."""
    details = data if isinstance(data, list) else [data]
    for detail in details:
        if not isinstance(detail, Mapping) or detail.get("reason") != MEMBER_BUSY_REASON:
            continue
        metadata = detail.get("metadata")
        value = metadata.get("retryAfterMs") if isinstance(metadata, Mapping) else None
        value = detail.get("retryAfterMs") if value is None else value
        if not isinstance(value, str | int | float):
            continue
        try:
            millis = float(value)
        except ValueError:
            continue
        if math.isfinite(millis) and millis >= 0:
            return millis / 1000.0
    return None


class MemberCalls:
    """The calls of one running task (the agent API's ``task.call_member``,
    ``task.answers``, ``task.peers`` and ``task.http``).

    ``transport`` is the member's :class:`FormationTransport` (shared by its tasks; this
    object uses a view of it with ``trust`` fixed and never closes the shared pool).
    ``peers`` are the members it may call, in roster order. ``deadline`` is the call
    deadline on ``clock`` (``time.monotonic``): the task's, else the formation's, else
    ``None`` for none.
    """

    def __init__(
        self,
        transport: FormationTransport,
        *,
        peers: Sequence[str],
        trust: str | None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff = Backoff(),
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        unknown = [name for name in peers if name not in transport.callees]
        if unknown:
            raise ValueError(f"peers {unknown} have no formation token in the transport")
        self.peers: tuple[str, ...] = tuple(peers)
        self.deadline = deadline
        view = transport.with_trust(trust)
        self.http: httpx.AsyncClient = FormationClient(transport=view, timeout=timeout)
        self._scrub = view.scrub
        self._sender = JsonRpcSender(view, timeout=timeout)
        self._clock = clock
        self._backoff = backoff
        self._calls: list[CallHandle] = []
        self._ids = itertools.count(1)
        self._ended = False

    def __repr__(self) -> str:
        return f"MemberCalls(peers={self.peers!r}, calls={len(self._calls)})"

    @property
    def calls(self) -> tuple[CallHandle, ...]:
        """Every call made so far, in the order made."""
        return tuple(self._calls)

    def unanswered(self) -> list[CallHandle]:
        return [handle for handle in self._calls if not handle.done()]

    # The agent API -------------------------------------------------------------------

    async def call_member(self, name: str, text: str) -> CallHandle:
        """Offer ``text`` to member ``name`` as a new task; return once its door holds
        the task or has answered busy. Raises CallFailed when the first offer fails."""
        if name not in self.peers:
            raise CallFailed(name, REFUSED, FormationRefused.MESSAGE)
        if self._ended:
            raise CallFailed(name, CALLER_ENDED, "the calling task has ended")
        handle = CallHandle(name, self.deadline)
        self._calls.append(handle)
        handle._runner = asyncio.create_task(self._run(handle, text),
                                             name=f"call-member {name}")
        await handle._placed.wait()
        if not handle._reached:
            self._calls.remove(handle)
            await handle   # raises the CallFailed of the first offer
        return handle

    async def answers(self, handles: Iterable[CallHandle] | None = None) -> str:
        """Wait for every call made so far (or ``handles``) and return each answer fenced
        under ``member:<name>``, in call order, separated by a blank line. A failed call
        is fenced too, its text being the failure."""
        chosen = list(self._calls if handles is None else handles)
        outcomes = await asyncio.gather(*(handle.outcome() for handle in chosen))
        return "\n\n".join(fence_answer(handle.member, text)
                           for handle, text in zip(chosen, outcomes, strict=True))

    async def cancel_outstanding(self) -> None:
        """The calling task ended or was canceled: stop every busy offer, and cancel
        (``CancelTask``) every task a callee holds that has not finished, including one
        taken by an offer still on the wire when the task ended. Idempotent."""
        self._ended = True
        await asyncio.gather(*(self._abandon(handle) for handle in self._calls))

    async def aclose(self) -> None:
        await self.cancel_outstanding()
        await self.http.aclose()

    # One call --------------------------------------------------------------------------

    def offer_settled(self, handle: CallHandle, failure: CallFailed | None) -> None:
        """Called once per call, in the call's own task, when its offer is settled: the
        callee's door holds the task (``handle.task_id``; ``failure`` is None), or the
        offer failed before any door held it. Nothing here; a subclass records calls."""

    def _settle_offer(self, handle: CallHandle, failure: CallFailed | None) -> None:
        if not handle._offer_settled:
            handle._offer_settled = True
            self.offer_settled(handle, failure)

    async def _run(self, handle: CallHandle, text: str) -> None:
        try:
            reply = await self._place(handle, text)
            answer = await self._follow(handle, reply)
        except CallFailed as failure:
            handle.state = failure.state
            self._settle_offer(handle, failure)
            _settle(handle, self._scrubbed(failure))
        except Exception as exc:  # noqa: BLE001 - any bug ends the call, not the task
            handle.state = ERROR
            broken = CallFailed(handle.member, ERROR, f"{type(exc).__name__}: {exc}")
            self._settle_offer(handle, broken)
            _settle(handle, self._scrubbed(broken))
        else:
            _settle(handle, answer)
        finally:
            handle._placed.set()

    def _scrubbed(self, failure: CallFailed) -> CallFailed:
        """``failure`` as the agent may see it: a ``detail`` that named a door address
        (a transport error, a callee's own text) is rebuilt without it, and without the
        exception chain that held the original."""
        detail = self._scrub(failure.detail)
        if detail == failure.detail:
            return failure
        return CallFailed(failure.member, failure.state, detail)

    async def _place(self, handle: CallHandle, text: str) -> dict[str, Any]:
        """Offer the task until the door holds it (its SendMessage result)."""
        params = {
            "message": {"messageId": handle.message_id, "role": "ROLE_USER",
                        "parts": [{"text": text}]},
            "configuration": {"returnImmediately": True},
        }
        delay = self._backoff.busy_initial
        while True:
            remaining = self._remaining(handle)
            if remaining is not None and remaining <= 0:
                raise CallFailed(handle.member, DEADLINE,
                                 "the member stayed busy until the call's deadline")
            handle._offer = asyncio.create_task(self._offer_once(handle, params, remaining))
            # Shielded, so an offer on the wire when the calling task ends still lands
            # and its task can be canceled (see _abandon).
            reply = await asyncio.shield(handle._offer)
            handle._offer = None
            if not isinstance(reply, _Busy):
                self._held(handle, reply)
                return reply
            handle.state = "offering"
            handle._reached = True
            handle._placed.set()
            wait = self._busy_delay(reply.retry_after, delay)
            delay = min(delay * 2, self._backoff.busy_max)
            remaining = self._remaining(handle)
            await asyncio.sleep(wait if remaining is None else max(0.0, min(wait, remaining)))

    def _held(self, handle: CallHandle, reply: Mapping[str, Any]) -> None:
        task = reply.get("task")
        if isinstance(task, Mapping):
            handle.task_id = str(task.get("id", "")) or None
            handle._remote_open = handle.task_id is not None and \
                _task_state(task) not in TERMINAL_STATES
        handle.state = "held"
        handle._reached = True
        handle._placed.set()
        self._settle_offer(handle, None)

    def _busy_delay(self, retry_after: float | None, delay: float) -> float:
        if retry_after is not None:
            return self._backoff.jittered(min(retry_after, self._backoff.retry_after_cap))
        return self._backoff.jittered(delay)

    async def _offer_once(self, handle: CallHandle, params: dict[str, Any],
                          remaining: float | None) -> _Busy | dict[str, Any]:
        limit = None if remaining is None else remaining + self._backoff.settle
        try:
            return await self._rpc(handle.member, "SendMessage", params, limit)
        except _RpcError as error:
            if error.code == MEMBER_BUSY_CODE:
                return _Busy(busy_retry_after(error.data))
            raise CallFailed(handle.member, ERROR, str(error)) from None
        except TimeoutError:
            raise CallFailed(handle.member, DEADLINE,
                             "the member did not take the task before the call's deadline"
                             ) from None

    async def _follow(self, handle: CallHandle, reply: Mapping[str, Any]) -> str:
        """The callee's answer to a task its door holds."""
        message = reply.get("message")
        if isinstance(message, Mapping) and "task" not in reply:
            handle.state = COMPLETED      # a direct Message answer keeps no task
            return _parts_text(message.get("parts"))
        task = reply.get("task")
        if not isinstance(task, Mapping) or handle.task_id is None:
            raise CallFailed(handle.member, ERROR, "SendMessage answered neither a task "
                                                   "nor a message")
        try:
            async with asyncio.timeout(self._remaining(handle)):
                final = task if _is_final(task) else await self._wait_final(handle)
        except TimeoutError:
            await self._cancel_remote(handle)
            raise CallFailed(handle.member, DEADLINE,
                             "no answer before the call's deadline; its task was canceled"
                             ) from None
        return self._answer_of(handle, final)

    def _answer_of(self, handle: CallHandle, task: Mapping[str, Any]) -> str:
        state = _task_state(task)
        handle.state = state
        handle._remote_open = state not in TERMINAL_STATES
        if state == COMPLETED:
            return answer_text(task)
        raise CallFailed(handle.member, state, answer_text(task))

    async def _wait_final(self, handle: CallHandle) -> Mapping[str, Any]:
        task_id = handle.task_id
        assert task_id is not None
        with contextlib.suppress(_StreamFailed):
            seen = await self._stream_until_final(handle.member, task_id)
            if seen is not None:
                return seen
        return await self._poll_until_final(handle.member, task_id)

    async def _stream_until_final(self, member: str, task_id: str) -> Mapping[str, Any]:
        """Follow ``SubscribeToTask`` until a final state, then read the whole task once
        with ``GetTask`` (the stream's events carry it only in parts)."""
        async with contextlib.aclosing(self._subscribe(member, task_id)) as events:
            async for event in events:
                task = event.get("task")
                if isinstance(task, Mapping) and _is_final(task):
                    return task
                update = event.get("statusUpdate")
                if isinstance(update, Mapping) and _is_final(update):
                    break
            else:
                raise _StreamFailed("the stream ended before the task did")
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
                if _is_final(task):
                    return task
            await asyncio.sleep(self._backoff.jittered(delay))
            delay = min(delay * 1.5, self._backoff.poll_max)

    async def _get_task(self, member: str, task_id: str) -> Mapping[str, Any]:
        try:
            task = await self._rpc(member, "GetTask", {"id": task_id}, None)
        except _RpcError as error:
            raise CallFailed(member, ERROR, f"GetTask: {error}") from None
        return task

    async def _abandon(self, handle: CallHandle) -> None:
        runner = handle._runner
        if runner is not None and not runner.done():
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        offer = handle._offer
        if offer is not None:
            handle._offer = None
            await self._land(handle, offer)
        if handle._remote_open:
            await self._cancel_remote(handle)
        if not handle.done():
            handle.state = CALLER_ENDED
            _settle(handle, CallFailed(handle.member, CALLER_ENDED,
                                       "the calling task ended before the answer arrived"))

    async def _land(self, handle: CallHandle, offer: asyncio.Task[_Busy | dict[str, Any]]
                    ) -> None:
        """Let an offer already on the wire answer (briefly), to learn of a task taken
        just as the calling task ended."""
        done, _ = await asyncio.wait({offer}, timeout=self._backoff.settle)
        if not done:
            offer.cancel()
            return
        if offer.cancelled() or offer.exception() is not None:
            return
        reply = offer.result()
        if not isinstance(reply, _Busy):
            self._held(handle, reply)

    async def _cancel_remote(self, handle: CallHandle) -> None:
        """Best effort: a failure here leaves the callee's own deadline to end it."""
        if handle.task_id is None:
            return
        with contextlib.suppress(CallFailed, _RpcError, TimeoutError):
            await self._rpc(handle.member, "CancelTask", {"id": handle.task_id},
                            self._backoff.cancel_timeout)
        handle._remote_open = False

    def _remaining(self, handle: CallHandle) -> float | None:
        return None if handle.deadline is None else handle.deadline - self._clock()

    # JSON-RPC over the proxy -----------------------------------------------------------

    def _envelope(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}

    async def _rpc(self, member: str, method: str, params: Mapping[str, Any],
                   limit: float | None) -> dict[str, Any]:
        """One JSON-RPC call; its ``result``, or _RpcError, or CallFailed."""
        async with asyncio.timeout(limit), _call_errors(member):
            status, content = await self._sender.send(virtual_address(member) + "/",
                                                      self._envelope(method, params))
        return _rpc_result(member, status, content)

    async def _subscribe(self, member: str, task_id: str
                         ) -> AsyncGenerator[dict[str, Any], None]:
        """The StreamResponse objects of ``SubscribeToTask``; _StreamFailed on anything
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
                    raise _StreamFailed(f"HTTP {response.status_code} {kind}")
                async for data in aevent_data(response.aiter_lines()):
                    yield _stream_event(data)
        except CallFailed as failure:
            raise _StreamFailed(str(failure)) from None


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


class _StreamFailed(GatewayError):
    """The stream cannot be used; the caller falls back to polling GetTask."""


def _settle(handle: CallHandle, outcome: str | CallFailed) -> None:
    if handle._answer.done():
        return
    if isinstance(outcome, CallFailed):
        handle._answer.set_exception(outcome)
    else:
        handle._answer.set_result(outcome)


def _is_final(task_or_update: Mapping[str, Any]) -> bool:
    state = _task_state(task_or_update)
    return state in TERMINAL_STATES or state in INTERRUPTED_STATES


@contextlib.asynccontextmanager
async def _call_errors(member: str) -> AsyncIterator[None]:
    """Map the proxy's refusals and transport failures to CallFailed."""
    try:
        yield
    except FormationRefused:
        raise CallFailed(member, REFUSED, FormationRefused.MESSAGE) from None
    except EgressRefused as exc:
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
        raise _RpcError(code if isinstance(code, int) else 0, str(error.get("message", "")),
                        error.get("data"))
    if status != 200:
        detail = f"HTTP {status}"
        if isinstance(document, dict) and isinstance(document.get("error"), str):
            detail += f" {document['error']}"
        raise CallFailed(member, REFUSED if status in (401, 403) else ERROR, detail)
    result = document.get("result") if isinstance(document, dict) else None
    if not isinstance(result, dict):
        raise CallFailed(member, ERROR, "the door's answer is not a JSON-RPC result")
    return result


def _stream_event(data: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except ValueError:
        raise _StreamFailed("an event that is not JSON") from None
    result = document.get("result") if isinstance(document, dict) else None
    if not isinstance(result, dict):
        raise _StreamFailed("an event that is not a JSON-RPC result")
    return result
