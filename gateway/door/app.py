"""build_door(): one member's door, the A2A 1.0 JSON-RPC and HTTP+JSON bindings and its
agent card behind the project's own DoorAuth.

Routes (pure ASGI; the :class:`gateway.routes.Route` DoorAuth classified and left on the
scope, so a path is matched once):

* ``POST /`` (any all-slashes path): JSON-RPC, :mod:`gateway.door.jsonrpc_binding`;
* ``GET /.well-known/agent-card.json``: the card, :mod:`gateway.door.card`;
* ``GET /resources/files/<path>``: a file under the session's ``out/`` (operator only);
* ``GET /healthz``: ``200 ok``, naming nothing;
* ``GET /metrics``: the door's metrics, Prometheus text (:mod:`gateway.metrics`; the
  operator or a declared credential with the ``Metrics`` scope; 404 at a public door);
* every other path: the HTTP+JSON binding, :mod:`gateway.door.rest_binding` (``/message:send``,
  ``/tasks/{id}``, ...), on the same handlers as JSON-RPC; ``404`` for anything else.

The :class:`Door` it returns is what the member runtime drives: the ASGI ``app``, the
member's ``tasks`` (:class:`DoorTasks`: :class:`LocalTasks` over a task ``store`` here, or a
gateway member's relay, :func:`gateway.relay.tasks.build_gateway_door`), the ``trace`` bus,
``stop_requested`` (``murmur.StopSession`` and ``after_task: exit`` set it), the
wind-down for SIGTERM, and in-process tasks for ``mur run --task``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import mimetypes
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.auth.cors import Cors
from gateway.auth.credentials import OPERATOR_CREDENTIAL
from gateway.auth.door_auth import AuthPolicy, DoorAuth
from gateway.caller import Caller, caller_of
from gateway.door.card import CardInfo, CardRoute
from gateway.door.jsonrpc_binding import JsonRpcBinding
from gateway.door.local_methods import LocalMethods
from gateway.door.media_types import AcceptedModes
from gateway.door.methods import A2AMethods
from gateway.door.rest_binding import RestBinding
from gateway.door.streams import StreamLimits
from gateway.door.task_listeners import KeptTask, TaskJournal, TaskListener
from gateway.door.task_record import new_id
from gateway.door.tasks import (
    DEFAULT_MAX_FINISHED,
    DEFAULT_MAX_FINISHED_BYTES,
    AgentFn,
    GateConfig,
    TaskStore,
    acts_as_operator,
)
from gateway.http_io import header, send_error, send_not_allowed, send_response
from gateway.metrics import CONTENT_TYPE, DoorMetrics, RequestMetrics
from gateway.protocol import FILES_PREFIX
from gateway.proxy.egress import AllowList
from gateway.push.configs import DoorCredentials
from gateway.push.notifications import PushNotifications
from gateway.routes import (
    CARD,
    FILES,
    HEALTH,
    METRICS,
    REST,
    ROUTE_SCOPE_KEY,
    RPC,
    Route,
    classify,
)
from gateway.sse import KeepAlive
from gateway.trace.bus import TraceBus
from gateway.types import ASGIApp, Headers, Receive, Scope, Send

if TYPE_CHECKING:
    from gateway.grpc.server import GrpcServer

log = logging.getLogger("murmur.door")

FILE_CHUNK = 64 * 1024

#: The caller of tasks the runtime submits itself (``mur run --task``): the operator.
OPERATOR_CALLER = Caller(OPERATOR_CREDENTIAL, "operator", "trusted")


@dataclass(frozen=True, slots=True)
class DoorSettings:
    """Everything the door needs to know, in the gateway's own terms (the launcher
    adapts ``murmur.yaml`` and the session to it)."""

    card: CardInfo
    gate: GateConfig = field(default_factory=GateConfig)
    #: The session's ``out/`` directory, served under ``/resources/files/``.
    out_dir: Path | None = None
    #: Ended tasks kept for GetTask/ListTasks; older ones are forgotten first.
    max_finished_tasks: int = DEFAULT_MAX_FINISHED
    #: The bytes (estimated) those ended tasks may hold together; past it, likewise.
    max_finished_bytes: int = DEFAULT_MAX_FINISHED_BYTES
    #: The bounds on live streams, per owner, per task and at the door (docs/limits.md).
    streams: StreamLimits = field(default_factory=StreamLimits)
    #: Where push notifications may be sent (``network.push.allow``, host[:port]
    #: entries, docs/push.md); none: the door sends none and refuses their methods.
    push_allow: tuple[str, ...] = ()
    #: Where every change of a task is also kept (the session's ``tasks.db``, written
    #: off the request path), when anywhere (docs/durable-tasks.md).
    journal: TaskJournal | None = None
    #: The tasks an earlier session of this member kept, oldest first: the door starts
    #: with them (``mur run --resume``, a restart; docs/durable-tasks.md).
    earlier_tasks: tuple[KeptTask, ...] = ()


@dataclass(frozen=True, slots=True)
class PublicGrpc:
    """A published door's gRPC binding beyond loopback: where it binds (``host``,
    ``port``; 0: the kernel picks), the name its clients dial (``name``), and its TLS
    certificate and key (PEM bytes) when the listener has them (docs/grpc.md)."""

    host: str
    port: int
    name: str
    tls_cert: bytes | None = None
    tls_key: bytes | None = None


class DoorTasks(Protocol):
    """What stands behind a door's bindings: the tasks of this member. Two
    kinds: :class:`LocalTasks` (the agent runs here, in a :class:`TaskStore`) and the
    relay of a gateway member (:class:`gateway.relay.tasks.RelayTasks`, the tasks run in the
    upstream A2A server). The member runtime drives either through :class:`Door`."""

    #: The A2A methods over these tasks, binding-neutral: the door builds its JSON-RPC
    #: and HTTP+JSON bindings over them.
    methods: A2AMethods

    @property
    def held(self) -> int:
        """The tasks the member holds now (running, waiting, or in flight)."""

    def state_counts(self) -> dict[str, int]:
        """How many tasks the door holds in each state (``GET /metrics``)."""

    def on_stop(self, listener: Callable[[str], None]) -> None: ...
    def on_task_end(self, listener: TaskListener) -> None: ...
    def request_stop(self, reason: str) -> None: ...
    async def submit(self, text: str, caller: Caller) -> str: ...
    def task(self, task_id: str) -> dict[str, Any]: ...
    async def result(self, task_id: str) -> dict[str, Any]: ...
    def cancel(self, task_id: str, reason: str | None) -> None: ...
    def close_gate(self) -> None: ...
    def refuse_queued(self, reason: str) -> int: ...
    def cancel_running(self, reason: str) -> int: ...
    async def drained(self) -> None: ...
    async def aclose(self) -> None: ...


class LocalTasks:
    """The tasks of a member whose agent runs in this process: the door's TaskStore and
    the A2A methods over it."""

    def __init__(self, agent: AgentFn, settings: DoorSettings, trace: TraceBus,
                 policy: AuthPolicy | None = None, metrics: DoorMetrics | None = None) -> None:
        self.store = TaskStore(agent, settings.gate, trace,
                               max_finished=settings.max_finished_tasks,
                               max_finished_bytes=settings.max_finished_bytes)
        self.store.journal = settings.journal
        self.store.restore(settings.earlier_tasks)
        #: Push notifications, at a door whose manifest allows webhooks somewhere; a
        #: configuration never carries a credential ``policy`` accepts.
        self.push = (PushNotifications(
            self.store, AllowList(settings.push_allow), trace,
            is_door_secret=DoorCredentials(policy), metrics=metrics)
            if settings.push_allow else None)
        self.methods: A2AMethods = LocalMethods(
            self.store, trace, stop=self.store.request_stop, streams=settings.streams.book(),
            push=self.push)

    @property
    def held(self) -> int:
        return self.store.held

    def state_counts(self) -> dict[str, int]:
        return self.store.state_counts()

    def on_stop(self, listener: Callable[[str], None]) -> None:
        self.store.on_stop(listener)

    def on_task_end(self, listener: TaskListener) -> None:
        self.store.on_task_end(listener)

    def request_stop(self, reason: str) -> None:
        self.store.request_stop(reason)

    def submit_now(self, text: str, caller: Caller) -> str:
        message = {"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}
        record = self.store.send(message, caller)
        record.revealed = True
        return record.id

    async def submit(self, text: str, caller: Caller) -> str:
        return self.submit_now(text, caller)

    def task(self, task_id: str) -> dict[str, Any]:
        return self.store.visible(task_id, OPERATOR_CALLER).snapshot()

    async def result(self, task_id: str) -> dict[str, Any]:
        record = self.store.visible(task_id, OPERATOR_CALLER)
        await self.store.settled(record, interrupted=False)
        return record.snapshot()

    def cancel(self, task_id: str, reason: str | None) -> None:
        self.store.cancel(self.store.visible(task_id, OPERATOR_CALLER), reason)

    def close_gate(self) -> None:
        self.store.close_gate()

    def refuse_queued(self, reason: str) -> int:
        return self.store.refuse_queued(reason)

    def cancel_running(self, reason: str) -> int:
        return self.store.cancel_running(reason)

    async def drained(self) -> None:
        await self.store.drained()

    async def aclose(self) -> None:
        if self.push is not None:
            await self.push.aclose()


#: Cards kept for the addresses a listener beyond loopback was reached at (past it, each
#: is built for its request).
_HOST_CARDS = 16
#: The card of the request being served, at a door with a listener beyond loopback (set
#: by ``Door._serve``): ``GetExtendedAgentCard`` answers with the one naming the address
#: the caller reached, as the card route does.
_REQUEST_CARD: contextvars.ContextVar[CardRoute | None] = contextvars.ContextVar(
    "murmur_request_card", default=None)


class Door:
    """One member's door and the handles the member runtime needs on it: the routes,
    DoorAuth in front, and the member's tasks (:class:`DoorTasks`) behind."""

    def __init__(self, tasks: DoorTasks, settings: DoorSettings, policy: AuthPolicy,
                 trace: TraceBus, card: CardRoute, metrics: DoorMetrics | None = None) -> None:
        self.settings = settings
        #: What ``GET /metrics`` shows; the member's proxies count into it too.
        self.metrics = metrics if metrics is not None else DoorMetrics()
        self.metrics.task_states = tasks.state_counts
        self.policy = policy
        self.trace = trace
        self.tasks = tasks
        #: Set when the session should end: ``murmur.StopSession`` or ``after_task: exit``.
        self.stop_requested = asyncio.Event()
        self.stop_reason: str | None = None
        self._stop_callbacks: list[Callable[[str], None]] = []
        tasks.on_stop(self._stopping)
        self._card = card
        #: The card served on a listener of its own (``--listen``), by its local port, and
        #: by the address its clients used.
        self._cards_by_port: dict[int, CardRoute] = {}
        self._cards_by_host: dict[str, CardRoute] = {}
        # The methods take what the card says: the media types a message's parts may
        # have (a gateway member's are its upstream's), and the extended card.
        tasks.methods.use_card(AcceptedModes.of_card(card.card), self._extended_card)
        # The bindings, thin over the one set of methods, share the streams' one timer.
        keepalive = KeepAlive.for_door()
        self._rpc = JsonRpcBinding(tasks.methods, max_body=policy.max_body,
                                   keepalive=keepalive)
        self._rest = RestBinding(tasks.methods, max_body=policy.max_body,
                                 keepalive=keepalive)
        #: The gRPC binding's server, while it serves (serve_grpc), and the address its
        #: listeners' cards name for it when the door is published (else none).
        self._grpc: GrpcServer | None = None
        self._public_grpc = ""
        self.public_grpc_port = 0
        self._out_root = (os.path.realpath(settings.out_dir)
                          if settings.out_dir is not None else None)
        #: The A2A app without DoorAuth (for benchmarks and tests that set the Caller).
        self.inner_app: ASGIApp = _DoorApp(self)
        #: The door as served: DoorAuth in front of the A2A app, each request counted in
        #: front of both, and CORS in front of all when the policy names origins.
        #: DoorAuth: in front of the A2A app here, and the same decision on the gRPC
        #: binding (gateway.grpc.interceptor).
        self.auth = DoorAuth(self.inner_app, policy, self.metrics, on_bound=self._bound_refused)
        self.app: ASGIApp = RequestMetrics(self.auth, self.metrics)
        if policy.allow_origins:
            self.app = Cors(self.app, policy.allow_origins)

    def _bound_refused(self, error: str, caller: str, limit: str, value: int) -> None:
        """A call EdgeGuard refused or slowed: counted, and a ``limit_reached`` record."""
        self.metrics.bound_refusal(error, caller, limit, value)
        self.trace.emit("limit_reached", caller=caller, limit=limit, value=value,
                        error=error)

    @property
    def store(self) -> TaskStore:
        """The task store of a door whose agent runs here (not a gateway member's)."""
        if not isinstance(self.tasks, LocalTasks):
            raise TypeError("a gateway member's door has no local task store")
        return self.tasks.store

    @property
    def held(self) -> int:
        """The tasks the member holds now."""
        return self.tasks.held

    # --- control ---------------------------------------------------------------------

    @property
    def card(self) -> dict[str, Any]:
        """The agent card as served now."""
        return self._card.card

    def set_url(self, url: str) -> None:
        """Name the door's own URL on its card, once the socket is bound."""
        self._card.set_url(url)

    async def serve_grpc(self, public: PublicGrpc | None = None) -> str | None:
        """Serve the gRPC binding on a loopback port of its own (gateway.grpc) and list it
        on the card; its address (``127.0.0.1:<port>``), or ``None`` without the ``grpc``
        extra. ``public``: also at a published door's address, listed on the cards of its
        listeners (:attr:`public_grpc_port` is the port bound there). Call it in the loop
        the door serves in, before the card is signed."""
        from gateway.grpc import available
        if not available():
            return None
        from gateway.grpc.server import GrpcServer, PublicAddress
        server = GrpcServer(self.tasks.methods, self.auth)
        await server.start(public=PublicAddress(public.host, public.port, public.tls_cert,
                                                public.tls_key) if public else None)
        self._grpc = server
        self._card.set_grpc_url(server.url)
        if public is not None:
            self.public_grpc_port = server.public_port
            self._public_grpc = f"{public.name}:{server.public_port}"
            self._cards_by_port = {port: card.at(card.info.door_url, self._public_grpc)
                                   for port, card in self._cards_by_port.items()}
            self._cards_by_host.clear()
        return server.url

    async def stop_grpc(self, grace: float = 2.0) -> None:
        """Stop the gRPC binding (calls in flight have ``grace`` seconds)."""
        server, self._grpc = self._grpc, None
        if server is not None:
            await server.stop(grace)

    def sign_card(self, signature: dict[str, str], public_key: bytes) -> bool:
        """Serve the card with ``signature`` when it verifies (gateway/door/card.py)."""
        return self._card.sign(signature, public_key)

    def add_listener(self, port: int, url: str) -> None:
        """A request that arrives on local ``port`` (a listener beyond loopback) is
        served a card naming ``url``: the address its clients reach the door at."""
        self._cards_by_port[port] = self._card.at(url, self._public_grpc)

    def _card_for(self, scope: Scope) -> CardRoute:
        """The card for a request: on a listener beyond loopback, the one naming the
        address the client used (its ``Host``, which DoorAuth let through as one of the
        listener's public names: behind a published port, only the client knows the
        port it reached), else the door's own."""
        if not self._cards_by_port:
            return self._card
        server = scope.get("server")
        listener = self._cards_by_port.get(server[1]) if server else None
        if listener is None:
            return self._card
        host = header(scope, b"host")
        if not host:
            return listener
        url = f"{scope.get('scheme', 'http')}://{host.decode('latin-1')}"
        card = self._cards_by_host.get(url)
        if card is None:
            card = self._card.at(url, self._public_grpc)
            if len(self._cards_by_host) < _HOST_CARDS:
                self._cards_by_host[url] = card
        return card

    def _extended_card(self) -> dict[str, Any] | None:
        """The extended card for the request being served (``GetExtendedAgentCard``)."""
        card = _REQUEST_CARD.get()
        return (card if card is not None else self._card).extended

    def on_stop(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` when the session is asked to stop (once)."""
        self._stop_callbacks.append(callback)

    def on_task_end(self, listener: TaskListener) -> None:
        """Call ``listener(task)`` with each task's final Task dict."""
        self.tasks.on_task_end(listener)

    def request_stop(self, reason: str) -> None:
        """Ask the session to stop: ``stop_requested`` is set, callbacks run."""
        self.tasks.request_stop(reason)

    def _stopping(self, reason: str) -> None:
        self.stop_reason = reason
        self.stop_requested.set()
        for callback in self._stop_callbacks:
            try:
                callback(reason)
            except Exception:  # one broken callback must not keep the others from running
                log.exception("stop callback %r failed", callback)

    def submit(self, text: str, *, caller: Caller = OPERATOR_CALLER) -> str:
        """Put a task on this door in-process (``mur run --task``), through the gate like
        any SendMessage; returns its id. ListTasks lists it and CancelTask reaches it.
        Raises ``RpcError`` (``-32050``) when the gate refuses it. Call it in the loop.
        A local door only; :meth:`start_task` serves both kinds."""
        if not isinstance(self.tasks, LocalTasks):
            raise TypeError("a gateway member's door takes tasks with start_task()")
        return self.tasks.submit_now(text, caller)

    async def start_task(self, text: str, *, caller: Caller = OPERATOR_CALLER) -> str:
        """:meth:`submit` for either kind of door (a gateway member's task is started in
        its upstream, which takes a request)."""
        return await self.tasks.submit(text, caller)

    def task(self, task_id: str) -> dict[str, Any]:
        """The Task ``task_id`` as the operator sees it (``RpcError`` -32001 if unknown)."""
        return self.tasks.task(task_id)

    async def result(self, task_id: str) -> dict[str, Any]:
        """Wait until task ``task_id`` ends and return its final Task dict."""
        return await self.tasks.result(task_id)

    def cancel(self, task_id: str, reason: str | None = None) -> None:
        """Cancel task ``task_id`` as the operator would (``RpcError`` -32002 if ended)."""
        self.tasks.cancel(task_id, reason)

    def close_gate(self) -> None:
        """Take no new task from now on (``-32050`` to every new SendMessage)."""
        self.tasks.close_gate()

    def refuse_queued(self, reason: str = "the member is shutting down") -> int:
        """End every waiting task TASK_STATE_REJECTED with ``reason``; how many."""
        return self.tasks.refuse_queued(reason)

    def cancel_all(self, reason: str = "the member is shutting down") -> int:
        """Cancel every running task (TASK_STATE_CANCELED, its agent cancelled); how many."""
        return self.tasks.cancel_running(reason)

    def wind_down(self, reason: str = "the member is shutting down") -> tuple[int, int]:
        """SIGTERM, lifeline or deadline: close the gate, refuse the queued tasks, cancel
        the running ones. Returns (cancelled, refused)."""
        self.close_gate()
        refused = self.refuse_queued(reason)
        return self.cancel_all(reason), refused

    def close_streams(self) -> None:
        """End every ``murmur.WatchSession`` stream (before the server shuts down, so no
        open stream holds it); trace sinks keep receiving records."""
        self.trace.close()

    async def drained(self) -> None:
        """Wait until no agent code runs any more (bound it with ``asyncio.wait_for``)."""
        await self.tasks.drained()

    async def aclose(self) -> None:
        """Let go of what the tasks hold (a gateway member's upstream connections)."""
        await self.tasks.aclose()

    # --- routing -----------------------------------------------------------------------

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        route: Route | None = scope.get(ROUTE_SCOPE_KEY)
        if route is None:  # the app without DoorAuth (benchmarks, tests): classify here
            route = scope[ROUTE_SCOPE_KEY] = classify(scope)
        if self._cards_by_port and (route.kind is RPC or route.kind is REST):
            token = _REQUEST_CARD.set(self._card_for(scope))
            try:
                await self._route(scope, receive, send, route)
            finally:
                _REQUEST_CARD.reset(token)
            return
        await self._route(scope, receive, send, route)

    async def _route(self, scope: Scope, receive: Receive, send: Send, route: Route) -> None:
        kind = route.kind
        method = scope["method"]
        if kind is RPC:
            if method == "POST":
                await self._rpc(scope, receive, send)
            else:
                await send_not_allowed(send, b"POST")
        elif kind is CARD:
            if method in ("GET", "HEAD"):
                await self._card_for(scope)(scope, receive, send)
            else:
                await send_not_allowed(send, b"GET, HEAD")
        elif kind is HEALTH:
            if method in ("GET", "HEAD"):
                await send_response(send, 200, b"ok", [(b"content-type", b"text/plain")],
                                    head=method == "HEAD")
            else:
                await send_not_allowed(send, b"GET, HEAD")
        elif kind is METRICS and self.policy.authenticated:
            # DoorAuth let only the operator or a credential with the Metrics scope
            # through; a public door has no one to show them to (its 404 below).
            if method in ("GET", "HEAD"):
                await send_response(send, 200, self.metrics.render(),
                                    [(b"content-type", CONTENT_TYPE)], head=method == "HEAD")
            else:
                await send_not_allowed(send, b"GET, HEAD")
        elif kind is FILES and route.path.startswith(FILES_PREFIX):
            if method in ("GET", "HEAD"):
                await self._file(scope, send, route.path[len(FILES_PREFIX):],
                                 caller_of(scope))
            else:
                await send_not_allowed(send, b"GET, HEAD")
        else:
            await self._rest(scope, receive, send)  # the HTTP+JSON binding, or 404

    async def _file(self, scope: Scope, send: Send, relative: str, caller: Caller) -> None:
        """A regular file under ``out/``: no ``..``, no absolute path, no way out through a
        symlink, never a FIFO, socket or device. Anything else, and any caller but the
        operator, is the same 404. Nothing here waits on the file: it is opened without
        blocking (:func:`_open_regular`) and read in a worker thread."""
        path = self._out_file(relative) if acts_as_operator(caller) else None
        opened = _open_regular(path) if path is not None else None
        if path is None or opened is None:
            await send_error(send, 404, "not_found", "No such file under the session's out/.")
            return
        fd, info = opened
        try:
            media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
            headers: Headers = [
                (b"content-type", media_type.encode("latin-1")),
                (b"content-length", str(info.st_size).encode("ascii")),
                (b"x-content-type-options", b"nosniff"),
                (b"cache-control", b"no-store"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            if scope["method"] == "HEAD":
                await send({"type": "http.response.body", "body": b""})
                return
            remaining = info.st_size
            while True:
                chunk = await asyncio.to_thread(os.read, fd, min(FILE_CHUNK, max(remaining, 1)))
                remaining -= len(chunk)
                last = not chunk or remaining <= 0
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return
        finally:
            os.close(fd)

    def _out_file(self, relative: str) -> str | None:
        root = self._out_root
        if root is None or not relative or "\x00" in relative or "\\" in relative:
            return None
        segments = relative.split("/")
        if any(segment in ("", ".", "..") for segment in segments):
            return None
        target = os.path.realpath(os.path.join(root, *segments))
        return target if target.startswith(root + os.sep) else None


class _DoorApp:
    """The door's routes as an ASGI 3 application object (servers that tell ASGI 2 from
    ASGI 3 by ``__call__`` see a coroutine function)."""

    __slots__ = ("_door",)

    def __init__(self, door: Door) -> None:
        self._door = door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._door._serve(scope, receive, send)


def _open_regular(path: str) -> tuple[int, os.stat_result] | None:
    """``path`` opened for reading when it is a regular file, else None.

    An agent can leave a FIFO in ``out/``, and a plain ``open`` of a FIFO waits for a
    writer, freezing the event loop. So: ``lstat`` first (no open at all for anything but
    a regular file), then an open that cannot wait (``O_NONBLOCK``) or follow a symlink
    swapped in meanwhile (``O_NOFOLLOW``), then ``fstat`` of what was opened, which must
    be that same regular file.
    """
    try:
        seen = os.lstat(path)
        if not stat.S_ISREG(seen.st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (
            seen.st_dev, seen.st_ino):
        os.close(fd)
        return None
    return fd, info


def build_door(agent: AgentFn, settings: DoorSettings, *, policy: AuthPolicy | None = None,
               trace: TraceBus | None = None, metrics: DoorMetrics | None = None) -> Door:
    """One member's door: ``agent`` runs each task, ``settings`` say what the card shows
    and how the gate holds tasks, ``policy`` is what DoorAuth accepts (default: a public
    door), ``trace`` receives the door's trace records (default: a new bus), ``metrics``
    the counts ``GET /metrics`` shows (default: the door's own; a member passes the one
    its proxies count into too)."""
    policy = policy if policy is not None else AuthPolicy()
    trace = trace if trace is not None else TraceBus()
    info = replace(settings.card, push_notifications=True) if settings.push_allow \
        else settings.card
    card = CardRoute(info, authenticated=policy.authenticated)
    metrics = metrics if metrics is not None else DoorMetrics()
    return Door(LocalTasks(agent, settings, trace, policy, metrics), settings, policy, trace,
                card, metrics)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
