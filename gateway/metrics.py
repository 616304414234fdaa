"""A door's metrics: counted as plain numbers on the request path, written in the
Prometheus text format when ``GET /metrics`` asks (docs/metrics.md).

In this order:

1. :class:`DoorMetrics` holds the counts. One event loop runs a door, its proxy and its
   forward proxy, so a count is a dict increment: no lock and no prometheus_client
   object on the request path (each costs a door request more than the 5 % the issue
   allows; loadtests/bench_door.py measures what this costs);
2. :class:`RequestMetrics`, a pure-ASGI middleware in front of DoorAuth, times every
   HTTP request and counts it by method and status (the method is the one DoorAuth
   read, on the :class:`gateway.routes.Route` it leaves on the scope); DoorAuth counts
   refusals by ``error`` and credential checks by result; the formation proxy counts
   its calls by callee and outcome; push delivery (:mod:`gateway.push.delivery`, off
   the request path) counts its events by outcome;
3. a scrape (:meth:`DoorMetrics.render`) turns the counts, and the tasks the door holds
   by state, into metric families through prometheus_client's exposition, imported then
   and not before: a member that is never scraped never loads it.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

from gateway.caller import METRICS_METHOD, OPERATOR_METHODS, REFUSED_METHODS
from gateway.routes import ROUTE_SCOPE_KEY, Route
from gateway.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_TYPE", "METRICS_METHOD", "DoorMetrics",
           "RequestMetrics", "proxy_outcome"]

#: Prometheus text exposition format 0.0.4.
CONTENT_TYPE: Final = b"text/plain; version=0.0.4; charset=utf-8"

#: Method label values: every name a door knows; any other name is ``other`` (a caller
#: must not be able to grow the label set), a request answered before its method was
#: read is ``none``.
_KNOWN_METHODS: Final = OPERATOR_METHODS | REFUSED_METHODS | {METRICS_METHOD}
#: Histogram bounds in seconds, from a cached GetTask to a long stream.
BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                  2.5, 5.0, 10.0, 30.0, 60.0)

#: What becomes of a push notification event (``push_event``), in the order it meets them.
PUSH_OUTCOMES: Final = ("queued", "delivered", "failed", "refused", "dropped")

TaskStates = Callable[[], Mapping[str, int]]
#: The clock requests are timed by, found once.
_clock: Final = time.perf_counter


class _Histogram:
    """Counts per bucket (not cumulative: one increment per observation) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return buckets


class _MethodStats:
    """The requests of one method label: counts by status, and their durations."""

    __slots__ = ("histogram", "statuses")

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.histogram = _Histogram()


class DoorMetrics:
    """The counts of one door (and of its member's proxies)."""

    def __init__(self) -> None:
        #: Request counts by the method DoorAuth read (``None``: none was), each known
        #: name its own entry; every unknown name shares the ``other`` entry.
        self.by_method: dict[str | None, _MethodStats] = {}
        self.refusals: dict[str, int] = {}
        self.verifications: dict[str, int] = {"verified": 0, "cached": 0, "refused": 0}
        self.proxy_calls: dict[tuple[str, str], int] = {}
        self.proxy_seconds: dict[str, _Histogram] = {}
        #: A model member's tokens by (member, model, ``input`` or ``output``), and its
        #: tool runs by (member, tool, outcome).
        self.model_tokens: dict[tuple[str, str, str], int] = {}
        self.tool_runs: dict[tuple[str, str, str], int] = {}
        #: Calls a bound refused or slowed (gateway.auth.edge_limits, the member's own
        #: calls limit), by (caller, limit, error).
        self.bounds: dict[tuple[str, str, str], int] = {}
        #: Push notification events by outcome (gateway.push.delivery): each event is
        #: counted ``queued`` when handed to its configuration's queue, then once as it
        #: settles; the difference is what is waiting or being sent now.
        self.push_events: dict[str, int] = dict.fromkeys(PUSH_OUTCOMES, 0)
        #: The tasks the door holds, by state; the door sets it to its tasks' counts.
        self.task_states: TaskStates = dict

    # --- counting (the request path) ---------------------------------------------------

    def method_stats(self, method: str | None) -> _MethodStats:
        """The entry of ``method``: looked up once per request, made on first use."""
        stats = self.by_method.get(method)
        if stats is None:
            if method is not None and method not in _KNOWN_METHODS:
                method = "other"        # never a key per unknown name: the set stays small
                stats = self.by_method.get(method)
            if stats is None:
                stats = self.by_method[method] = _MethodStats()
        return stats

    def request(self, method: str | None, status: int, seconds: float) -> None:
        stats = self.method_stats(method)
        stats.statuses[status] = stats.statuses.get(status, 0) + 1
        stats.histogram.observe(seconds)

    def refusal(self, error: str) -> None:
        self.refusals[error] = self.refusals.get(error, 0) + 1

    def bound_refusal(self, error: str, caller: str, limit: str, value: int) -> None:
        """A call a bound refused (``depth_exceeded``, ``limit_reached``) or slowed
        (``rate_limited``), by limit (a door's answer is counted with its refusals too,
        where DoorAuth answers it)."""
        key = (caller, limit, error)
        self.bounds[key] = self.bounds.get(key, 0) + 1

    def push_event(self, outcome: str) -> None:
        """One push notification event ``queued``, or settled: ``delivered``,
        ``failed`` (given up), ``refused`` or ``dropped`` (its queue was full)."""
        self.push_events[outcome] = self.push_events.get(outcome, 0) + 1

    def verification(self, result: str) -> None:
        self.verifications[result] += 1

    def proxy_call(self, callee: str, outcome: str, seconds: float | None) -> None:
        key = (callee, outcome)
        self.proxy_calls[key] = self.proxy_calls.get(key, 0) + 1
        if seconds is not None:
            histogram = self.proxy_seconds.get(callee)
            if histogram is None:
                histogram = self.proxy_seconds[callee] = _Histogram()
            histogram.observe(seconds)

    def model_call(self, member: str, model: str, input_tokens: int,
                   output_tokens: int) -> None:
        for kind, count in (("input", input_tokens), ("output", output_tokens)):
            key = (member, model, kind)
            self.model_tokens[key] = self.model_tokens.get(key, 0) + count

    def tool_run(self, member: str, tool: str, outcome: str) -> None:
        key = (member, tool, outcome)
        self.tool_runs[key] = self.tool_runs.get(key, 0) + 1

    # --- scraping ----------------------------------------------------------------------

    def render(self) -> bytes:
        """Every series, in the Prometheus text format."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return bytes(generate_latest(registry))

    def families(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        labelled = sorted((method or "none", stats) for method, stats in self.by_method.items())
        requests = CounterMetricFamily(
            "murmur_door_requests", "HTTP requests the door answered, by method and status.",
            labels=["method", "status"])
        for method, stats in labelled:
            for status, count in sorted(stats.statuses.items()):
                requests.add_metric([method, str(status)], count)
        yield requests
        seconds = HistogramMetricFamily(
            "murmur_door_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method.",
            labels=["method"])
        for method, stats in labelled:
            seconds.add_metric([method], stats.histogram.cumulative(), stats.histogram.total)
        yield seconds
        refusals = CounterMetricFamily(
            "murmur_door_refusals", "Requests DoorAuth refused, by the error it answered.",
            labels=["error"])
        for error, count in sorted(self.refusals.items()):
            refusals.add_metric([error], count)
        yield refusals
        verifications = CounterMetricFamily(
            "murmur_door_token_verifications",
            "Credential checks: verified now, admitted from the door's cache of verified "
            "formation tokens, or refused.", labels=["result"])
        for result, count in self.verifications.items():
            verifications.add_metric([result], count)
        yield verifications
        tasks = GaugeMetricFamily("murmur_door_tasks",
                                  "Tasks the door holds now (ended ones it still keeps "
                                  "included), by state.", labels=["state"])
        for state, count in sorted(self.task_states().items()):
            tasks.add_metric([state], count)
        yield tasks
        yield from self._proxy_families()
        yield from self._model_families()
        yield from self._push_families()

    def _proxy_families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        calls = CounterMetricFamily(
            "murmur_proxy_calls", "Requests this member's formation proxy sent to a member, "
            "by callee and outcome.", labels=["callee", "outcome"])
        for (callee, outcome), count in sorted(self.proxy_calls.items()):
            calls.add_metric([callee, outcome], count)
        yield calls
        seconds = HistogramMetricFamily(
            "murmur_proxy_call_duration_seconds",
            "Time from a proxied request's sending to its callee's answer (headers), by "
            "callee.", labels=["callee"])
        for callee, histogram in sorted(self.proxy_seconds.items()):
            seconds.add_metric([callee], histogram.cumulative(), histogram.total)
        yield seconds


    def _model_families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        tokens = CounterMetricFamily(
            "murmur_model_tokens", "Tokens a model member's endpoint reported, by member, "
            "model and kind (input or output).", labels=["member", "model", "kind"])
        for labels, count in sorted(self.model_tokens.items()):
            tokens.add_metric(list(labels), count)
        yield tokens
        runs = CounterMetricFamily(
            "murmur_model_tool_runs", "Tools a model member's model called, by member, tool "
            "and outcome.", labels=["member", "tool", "outcome"])
        for labels, count in sorted(self.tool_runs.items()):
            runs.add_metric(list(labels), count)
        yield runs
        bounds = CounterMetricFamily(
            "murmur_bound_refusals", "Member calls a bound refused or slowed (roster "
            "version 2), by caller, limit and error.", labels=["caller", "limit", "error"])
        for labels, count in sorted(self.bounds.items()):
            bounds.add_metric(list(labels), count)
        yield bounds

    def _push_families(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        events = CounterMetricFamily(
            "murmur_push_events", "Push notification events, by outcome: queued for a "
            "webhook, then delivered, failed (given up), refused or dropped (its "
            "configuration's queue was full).", labels=["outcome"])
        for outcome, count in self.push_events.items():
            events.add_metric([outcome], count)
        yield events
        settled = sum(count for outcome, count in self.push_events.items()
                      if outcome != "queued")
        yield GaugeMetricFamily(
            "murmur_push_events_pending", "Push notification events queued and not yet "
            "settled: waiting for their webhook, or being sent.",
            value=max(self.push_events.get("queued", 0) - settled, 0))


class _Collector:
    """The door's counts as a prometheus_client collector (read at scrape time)."""

    def __init__(self, metrics: DoorMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self._metrics.families()


def proxy_outcome(status: int) -> str:
    """The outcome label of a callee's answer: ``ok`` (2xx, 3xx), ``refused`` (401, 403:
    the callee's DoorAuth), ``client_error`` (other 4xx), ``server_error`` (5xx);
    ``unreachable`` is a call that got no answer."""
    if status < 400:
        return "ok"
    if status in (401, 403):
        return "refused"
    return "client_error" if status < 500 else "server_error"


class RequestMetrics:
    """Pure-ASGI middleware: every HTTP request timed and counted by method and status."""

    def __init__(self, app: ASGIApp, metrics: DoorMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._by_method = metrics.by_method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = _clock()
        status = 0

        # Not a coroutine: it hands back send's own awaitable, one frame less a message.
        def send_counted(message: Message) -> Awaitable[None]:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            # DoorMetrics.request and _Histogram.observe, inlined: this runs once per
            # request, and a method's entry is made once (method_stats) and then found.
            route: Route | None = scope.get(ROUTE_SCOPE_KEY)
            method = None if route is None else route.method
            stats = self._by_method.get(method) or self.metrics.method_stats(method)
            statuses = stats.statuses
            statuses[status] = statuses.get(status, 0) + 1
            seconds = _clock() - started
            histogram = stats.histogram
            histogram.counts[bisect_left(BUCKETS, seconds)] += 1
            histogram.total += seconds
