"""The httpx side of a member's calls, built by ``CallsSeam`` on a task's first calls.

:func:`formation_transport` is the member's formation proxy, its pool made by the first
request; :class:`TracedCalls` is the calls object of one running task, writing one
``member_call`` trace record per call, and a ``member_call_answer`` for a call whose
answer came after its task ended. This module imports httpx, the proxy and the
call-member client, so a member imports it only when a task asks for its calls: httpx
alone costs a member's start some 30 ms of CPU.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping

import httpx

from gateway.metrics import DoorMetrics
from gateway.proxy.call_bounds import CallBounds, DepthOf
from gateway.proxy.call_member import CallFailed, CallHandle, MemberCalls
from gateway.proxy.egress import virtual_address
from gateway.proxy.formation import CALLING_TASK, DoorDirectory, FormationTransport
from gateway.proxy.inference import InferenceEgress
from gateway.trace.bus import TraceBus
from gateway.trace.context import Span, TaskSpans, call_span, traceparent

#: The task whose agent code is running (set when its calls object is made, so the calls
#: it makes see it; the forward proxy sets it for a request that names its task).
_CURRENT_TASK = CALLING_TASK
#: True inside the call-member client, whose requests are traced once per call.
_IN_CALL_MEMBER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "murmur_in_call_member", default=False)
#: The span of the call-member call whose requests are being sent: its offer, polls and
#: stream all carry it, as one call.
_CALL_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "murmur_call_span", default=None)


def formation_transport(*, tokens: Mapping[str, str], doors: DoorDirectory,
                        allow: Iterable[str], trace: TraceBus, spans: TaskSpans,
                        make_inner: Callable[[], httpx.AsyncBaseTransport],
                        metrics: DoorMetrics | None = None,
                        bounds: tuple[int | None, DepthOf | None] | None = None,
                        inference: InferenceEgress | None = None
                        ) -> FormationTransport:
    """The member's formation proxy; ``make_inner`` makes its pool on the first request.
    ``bounds`` (a version 2 roster): the member's ``limits.calls`` and the depth of each
    task's calls. Raises ``ValueError`` for a grant entry that is not a host or a bad
    callee. ``inference``: a model member's endpoint, its key and counts (the egress)."""

    def on_request(callee: str, url: str) -> bytes:
        # call_member's own requests are traced once per call (TracedCalls) and carry
        # that call's span; a request an agent sends to a member with task.http or
        # through the forward proxy is a call of its own, traced here.
        span = _CALL_SPAN.get()
        if span is not None:
            return traceparent(span)
        task_id = _CURRENT_TASK.get()
        span = call_span(None if task_id is None else spans(task_id))
        if not _IN_CALL_MEMBER.get():   # call-member's cancels: no call of their own
            trace.emit("member_call", task_id=task_id, callee=callee, url=url, via="http",
                       **span.fields())
        return traceparent(span)

    def on_limit(calls: int) -> None:
        trace.emit("limit_reached", task_id=_CURRENT_TASK.get(), limit="member.calls",
                   value=calls, error="limit_reached")
        if metrics is not None:
            metrics.bound_refusal("limit_reached", "self", "member.calls", calls)

    def on_refused(addressed: str) -> None:
        refused_call(trace, _CURRENT_TASK.get(), addressed, "http")

    call_bounds = None if bounds is None else CallBounds(
        calls=bounds[0], depth_of=bounds[1], on_limit=on_limit)
    return FormationTransport(_FirstUse(make_inner), tokens=tokens, doors=doors,
                              allow=allow, on_call=on_request, metrics=metrics,
                              bounds=call_bounds, on_refused=on_refused,
                              inference=inference)


#: What the operator's record says of a call the member's own proxy refused.
REFUSED_REASON = "no edge: the roster does not let this member call it"


def refused_call(trace: TraceBus, task_id: str | None, addressed: str, via: str) -> None:
    """The operator's record of a refused call (``member_call_refused``): the agent's
    own refusal stays the reference's one message, this names what it addressed."""
    trace.emit("member_call_refused", task_id=task_id, callee=addressed[:64], via=via,
               reason=REFUSED_REASON)


def task_calls(transport: FormationTransport, *, trace: TraceBus, task_id: str,
               span: Span | None, peers: tuple[str, ...], trust: str | None,
               deadline: float | None) -> TracedCalls:
    """The calls object of the task ``task_id`` (whose span is ``span``), whose agent
    code is now running."""
    _CURRENT_TASK.set(task_id)
    return TracedCalls(transport, trace=trace, task_id=task_id, span=span, peers=peers,
                       trust=trust, deadline=deadline)


class TracedCalls(MemberCalls):
    """``MemberCalls`` that writes one ``member_call`` record per call: the callee and
    its virtual address, never its door URL or token; the call's span (a child of the
    task's); and the callee's task id. The record is written when the offer is settled:
    when the callee's door holds the task (after any busy answers, so the task id is
    known), or when the offer failed (with the failure's ``outcome``)."""

    def __init__(self, transport: FormationTransport, *, trace: TraceBus, task_id: str,
                 span: Span | None, peers: tuple[str, ...], trust: str | None,
                 deadline: float | None) -> None:
        super().__init__(transport, peers=peers, trust=trust, deadline=deadline)
        self._trace = trace
        self._task_id = task_id
        self._span = span

    async def call_member(self, name: str, text: str) -> CallHandle:
        if name not in self.peers:   # refused below; the operator's record says so
            refused_call(self._trace, self._task_id, str(name), "call_member")
        # The call's task (made in super().call_member) inherits both: its requests
        # carry the span, and offer_settled, which runs in it, reads it back.
        flag = _IN_CALL_MEMBER.set(True)
        call = _CALL_SPAN.set(call_span(self._span))
        try:
            return await super().call_member(name, text)
        finally:
            _CALL_SPAN.reset(call)
            _IN_CALL_MEMBER.reset(flag)

    def offer_settled(self, handle: CallHandle, failure: CallFailed | None) -> None:
        span = _CALL_SPAN.get() or call_span(self._span)
        fields = {"callee_task_id": handle.task_id} if failure is None else {
            "outcome": failure.state}
        self._trace.emit("member_call", task_id=self._task_id, callee=handle.member,
                         url=virtual_address(handle.member), **span.fields(),
                         **{key: value for key, value in fields.items() if value is not None})

    def answered_late(self, handle: CallHandle, answer: str | CallFailed) -> None:
        """A call the callee took while the task ran, answered after the task ended: its
        answer goes into the trace (``member_call_answer``), since no turn will read it.
        Runs in the call's own task, which still carries the call's span."""
        span = _CALL_SPAN.get() or call_span(self._span)
        text = answer if isinstance(answer, str) else str(answer)
        self._trace.emit("member_call_answer", task_id=self._task_id, callee=handle.member,
                         callee_task_id=handle.task_id, state=handle.state, answer=text,
                         **span.fields())

    async def cancel_outstanding(self) -> None:
        flag = _IN_CALL_MEMBER.set(True)
        try:
            await super().cancel_outstanding()
        finally:
            _IN_CALL_MEMBER.reset(flag)


class _FirstUse(httpx.AsyncBaseTransport):
    """The proxy's inner transport, made by its first request: a pool costs a member's
    start more CPU than anything else it builds (httpx's loads the system's CA
    certificates, aiohttp's imports aiohttp), and most members never send a request.
    One event loop runs every request, so the pool is made once."""

    def __init__(self, make_inner: Callable[[], httpx.AsyncBaseTransport]) -> None:
        self._make_inner = make_inner
        self._inner: httpx.AsyncBaseTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = self._make_inner()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()
