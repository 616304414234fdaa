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

This module, in order: the busy answer; :class:`CallHandle`, one call; the fenced
answer and the busy answer's ``retryAfterMs``; :class:`MemberCalls`, the calls of one
task (the agent API, then one call: its offers, its answer, its end); how a call
settles. Beside it: ``call_failed`` (:class:`CallFailed` and its states) and
``member_rpc`` (the backoff, and the JSON-RPC under every call: the stream and the
polling), whose names a caller imports from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

from gateway.protocol import PEERS_ENV, TERMINAL_STATES, TaskState
from gateway.proxy.call_failed import CALLER_ENDED, DEADLINE, ERROR, REFUSED, CallFailed

# The helpers that need no httpx live in gateway.proxy.egress (a member imports them at start
# without httpx) and are re-exported here.
from gateway.proxy.egress import (
    answer_text,
    egress_reaches_loopback,
    failure_text,
    peers_environ,
    virtual_address,
)
from gateway.proxy.egress import parts_text as _parts_text
from gateway.proxy.formation import FormationTransport
from gateway.proxy.member_rpc import (
    DEFAULT_TIMEOUT,
    Backoff,
    JsonRpcSender,
    MemberRpc,
    RateLimited,
    RpcErrorReply,
)
from gateway.proxy.member_rpc import StreamFailed as _StreamFailed
from gateway.proxy.member_rpc import is_final as _is_final
from gateway.proxy.member_rpc import task_state as _task_state
from gateway.proxy.pending_answer import PendingAnswer
from gateway.proxy.proxy_errors import FormationRefused

__all__ = [
    "PEERS_ENV", "CallFailed", "CallHandle", "Backoff", "MemberCalls", "peers_environ",
    "virtual_address", "fence_answer", "fence", "egress_reaches_loopback", "JsonRpcSender",
    "answer_text",
]

MEMBER_BUSY_CODE: Final = -32050
MEMBER_BUSY_REASON: Final = "MEMBER_BUSY"
COMPLETED: Final = TaskState.COMPLETED
# A callee in one of INTERRUPTED_STATES waits for input the caller cannot give through
# call-member: the call ends there, and the callee's task is canceled with the others
# when the calling task ends.

#: The delays of a call made without its own (frozen, so one serves every call).
_BACKOFF: Final = Backoff()


@dataclass(frozen=True, slots=True)
class _Busy:
    retry_after: float | None


class CallHandle(PendingAnswer):
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
        super().__init__()
        self._placed = asyncio.Event()   # held, first busy answer, or failed
        self._reached = False            # the door held the task or answered busy
        self._runner: asyncio.Task[None] | None = None
        self._offer: asyncio.Task[_Busy | dict[str, Any]] | None = None
        self._remote_open = False        # the callee holds a task that is not final
        self._offer_settled = False      # held or failed: offer_settled was called
        #: The callee took the task while the calling task still ran: it outlives the
        #: caller (never canceled for the caller's end), and its answer is still read.
        self._taken_in_time = False

    def __repr__(self) -> str:
        return f"CallHandle(member={self.member!r}, state={self.state!r})"

def fence_answer(member: str, text: str) -> str:
    """``text`` in a Markdown code fence whose info string is ``member:<name>``."""
    return fence(f"member:{member}", text)


def fence(label: str, text: str) -> str:
    """``text`` in a Markdown code fence whose info string is ``label``; the fence is one
    backtick longer than any backtick run inside, so no answer can close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{ticks}{label}\n{body}{ticks}"


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


class MemberCalls(MemberRpc):
    """The calls of one running task (the agent API's ``task.call_member``,
    ``task.answers``, ``task.peers`` and ``task.http``).

    ``transport`` is the member's :class:`FormationTransport` (shared by its tasks; this
    object uses a view of it with ``trust`` fixed and never closes the shared pool).
    ``peers`` are the members it may call, in roster order. ``deadline`` is the call
    deadline on ``clock`` (``time.monotonic``): the task's, else the formation's, else
    ``None`` for none. What it says to a callee's door, and how it follows a task there,
    are :class:`~gateway.proxy.member_rpc.MemberRpc`'s.
    """

    def __init__(
        self,
        transport: FormationTransport,
        *,
        peers: Sequence[str],
        trust: str | None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff = _BACKOFF,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        unknown = [name for name in peers if name not in transport.callees]
        if unknown:
            raise ValueError(f"peers {unknown} have no formation token in the transport")
        self.peers: tuple[str, ...] = tuple(peers)
        self.deadline = deadline
        view = transport.with_trust(trust)
        super().__init__(view, backoff=backoff, timeout=timeout)
        self._scrub = view.scrub
        self._clock = clock
        self._calls: list[CallHandle] = []
        self._closing: asyncio.Task[None] | None = None
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
        """The calling task ended or was canceled. As the reference says, ``CancelTask``
        goes only to a task a callee took just after it ended (an offer still on the wire
        then); every busy offer stops. A task a callee took while the calling task ran
        keeps running: its answer is still read, and given to :meth:`answered_late`.
        Idempotent."""
        self._ended = True
        await asyncio.gather(*(self._abandon(handle) for handle in self._calls))

    async def aclose(self) -> None:
        """The calling task is over: :meth:`cancel_outstanding`, then the client closes
        once the calls that outlive the task have their answers."""
        await self.cancel_outstanding()
        if self._closing is not None:
            return
        outliving = [handle._runner for handle in self._calls
                     if handle._runner is not None and not handle._runner.done()]
        self._closing = asyncio.get_running_loop().create_task(
            self._close_after(outliving), name="murmur-calls-closing")
        if not outliving:
            await self._closing

    @property
    def closed(self) -> bool:
        """Closed, the calls that outlived the task included."""
        return self._closing is not None and self._closing.done()

    async def end(self) -> None:
        """The session ends: calls that outlived their task stop following it (the
        session's end is their callees' too) and the client closes. Idempotent."""
        if self._closing is None:
            await self.aclose()
        closing = self._closing
        if closing is not None and not closing.done():
            closing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await closing

    async def _close_after(self, runners: list[asyncio.Task[None]]) -> None:
        try:
            await asyncio.gather(*runners, return_exceptions=True)
        finally:
            await self.http.aclose()

    def answered_late(self, handle: CallHandle, answer: str | CallFailed) -> None:
        """Called once for a call whose answer came after the calling task ended (its
        callee took it while the task ran). Nothing here; a subclass records it."""

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
        outcome: str | CallFailed
        try:
            reply = await self._place(handle, text)
            outcome = await self._follow(handle, reply)
        except CallFailed as failure:
            handle.state = failure.state
            self._settle_offer(handle, failure)
            outcome = self._scrubbed(failure)
        except Exception as exc:  # noqa: BLE001 - any bug ends the call, not the task
            handle.state = ERROR
            broken = CallFailed(handle.member, ERROR, f"{type(exc).__name__}: {exc}")
            self._settle_offer(handle, broken)
            outcome = self._scrubbed(broken)
        finally:
            handle._placed.set()
        _settle(handle, outcome)
        if self._ended and handle._taken_in_time:
            self.answered_late(handle, outcome)

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
        handle._taken_in_time = not self._ended
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
        except RpcErrorReply as error:
            if error.code == MEMBER_BUSY_CODE:
                return _Busy(busy_retry_after(error.data))
            raise CallFailed(handle.member, ERROR, str(error)) from None
        except RateLimited as limited:      # an edge's concurrent or per_minute: wait it out
            return _Busy(limited.retry_after)
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
        raise CallFailed(handle.member, state, failure_text(task))

    async def _wait_final(self, handle: CallHandle) -> Mapping[str, Any]:
        task_id = handle.task_id
        assert task_id is not None
        with contextlib.suppress(_StreamFailed):
            seen = await self._stream_until_final(handle.member, task_id)
            if seen is not None:
                return seen
        return await self._poll_until_final(handle.member, task_id)

    async def _abandon(self, handle: CallHandle) -> None:
        if handle._taken_in_time:
            return  # taken while the caller ran: it keeps running, its answer is read
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
        with contextlib.suppress(CallFailed, RpcErrorReply, TimeoutError):
            await self._rpc(handle.member, "CancelTask", {"id": handle.task_id},
                            self._backoff.cancel_timeout)
        handle._remote_open = False

    def _remaining(self, handle: CallHandle) -> float | None:
        return None if handle.deadline is None else handle.deadline - self._clock()


def _settle(handle: CallHandle, outcome: str | CallFailed) -> None:
    if handle._answer.done():
        return
    if isinstance(outcome, CallFailed):
        handle._answer.set_exception(outcome)
    else:
        handle._answer.set_result(outcome)

