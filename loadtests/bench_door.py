"""Door throughput and latency: the door with DoorAuth (formation token), the same door
without DoorAuth, and an a2a-sdk server (DefaultRequestHandler + InMemoryTaskStore) with
the same trivial agent; GetTask and SendMessage; requests/s, p50 and p99. Both bindings:
JSON-RPC (``POST /``) on all three, and HTTP+JSON (``GET /tasks/{id}``, ``POST
/message:send``) on the door with DoorAuth (the same token) and on a2a-sdk's own REST
server (``create_rest_routes``, the same handler and agent): rows ``door+auth REST`` and
``a2a-sdk REST``, and the ratios door REST / door JSON-RPC and door REST / a2a-sdk REST.

Then the agent process (launcher/member/agent_process.py): a trivial python agent
(``async def run(task): return "ok"``) served by the door (no DoorAuth) through an
``AgentProcess`` (a fresh interpreter on a socketpair, as a member runtime runs its
agent code), without Landlock (``agent process``) and confined with the plan a member
gives it, Landlock and the seccomp socket filter (``agent process+landlock``), against
the same door with an in-process AgentFn (``in-process agent``): SendMessage (blocking,
JSON-RPC) at concurrency 1 (the latency one task adds: p50 and p99, and the p50 and p99
difference, goal within 1 ms) and at
``--concurrency`` (throughput, and its ratio to the in-process agent's). Server CPU per
request there counts the agent process's CPU too.

Each server runs under uvicorn in a process of its own on 127.0.0.1:0 (its port read
from its first stdout line); the load comes from another process: ``wrk`` is not used
(not installed here), a bounded asyncio generator with keep-alive connections and a
minimal HTTP/1.1 reader is. Every phase is bounded in time and in request count
(``--max-requests``); the whole run takes about six minutes (3 rounds of 3 s per row
and method, the paired turns of each ratio, then 3 rounds of 3 s per agent row and
concurrency). Results:
``loadtests/results/bench_door.json`` and ``.md``.

Every ratio of the door's own costs (``metrics_on_vs_off``, ``bounds_vs_no_bounds``,
``durable_vs_memory``, ``chain_vs_*``, ``auth_vs_no_auth``, ``door_rest_vs_door_jsonrpc``)
is measured apart from the rounds, with the two rows taking turns under one load
generator while both servers stay up (``load_pair``): 12 turns of 0.5 s each, in the
order A B B A A B ..., each turn's server CPU read from the scheduler's own count
(``schedstat``, to the nanosecond) from its start to the start of that server's next turn,
so that what a turn left behind (a writer's commits) is counted with it. A ratio is the
median over the turns of two turns side by side in time. Rounds of 3 s, a minute apart
for the same pair, met different bursts of load from elsewhere on this machine, and
servers whose heaps had grown by different amounts: two copies of the same door moved
up to 8 % apart from round to round. The rounds give each row's figures, and the same
ratios round by round are kept in the JSON (``ratios_from_rounds``). ``--pair-turns``
sets the number of turns.

``door+auth no metrics`` is the door with DoorAuth but no request counted for ``GET
/metrics`` (gateway.metrics): ``metrics_on_vs_off`` is what counting costs (goal: within
5 %). On a shared machine that served pair moves by more than 5 % from one run to the
next, so the same two apps are also called in process, straight as ASGI apps, round by
round (``metrics_on_vs_off_GetTask_cpu_in_process``; the counting's CPU per request);
``..._served_estimate`` is that counting cost against a served GetTask's CPU.
``--metrics-only`` measures that pair alone (``bench_door_metrics.json``, ``.md``).

``auth_vs_no_auth`` is what DoorAuth alone costs: ``door+auth no metrics`` over ``door``,
neither of them counting requests (``door+auth`` over ``door``, as it was measured
before, charged DoorAuth with the counting too, whose cost has a goal of its own).

``door+auth bounds`` is the door with DoorAuth and every edge limit of a version 2 roster
set on the caller's edge (``depth``, ``calls``, ``concurrent``, ``per_minute``, none ever
reached, docs/bounds.md): ``bounds_vs_no_bounds`` is what checking them costs (goal
>= 0.95). ``--bounds-only`` measures that pair alone (``bench_door_bounds.json``, ``.md``).

``door+auth durable`` is the door with DoorAuth keeping every task in a tasks.db as a
member does (launcher/home/task_db.py, written by its own thread):
``durable_vs_memory`` is what that costs (goal >= 0.9). ``--durable-only`` measures that
pair alone (``bench_door_durable.json``, ``.md``).

``--trace-only``: the door with DoorAuth writing every record of its trace to a
``trace.jsonl``: as a member's runtime did before the chain (``door+auth trace before``:
each record redacted again by the writer), as it does now (``door+auth chained trace``:
the hash chain, docs/audit.md, and one redaction), and now without the chain
(``door+auth trace``). ``chain_vs_before`` is the goal (>= 0.95), ``chain_vs_no_chain``
what the chain alone costs (``bench_door_trace.json``, ``.md``).

    .venv/bin/python loadtests/bench_door.py [--duration 3] [--rounds 3] [--concurrency 16]
        [--metrics-only | --bounds-only | --trace-only | --durable-only]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "loadtests" / "results"
SERVERS = ("door+auth", "door+auth-bounds", "door+auth-durable", "door+auth-nometrics",
           "door", "a2a-sdk", "a2a-sdk-rest")
#: ``--trace-only``: the door writing its trace to a file, without and with the hash
#: chain (docs/audit.md, "The sealed record").
TRACE_SERVERS = ("door+auth-trace-before", "door+auth-trace", "door+auth-chain")
#: ``--metrics-only``: the cost of counting every request for ``GET /metrics``.
METRICS_SERVERS = ("door+auth", "door+auth-nometrics")
#: ``--bounds-only``: the cost of a version 2 roster's edge limits (docs/bounds.md).
BOUNDS_SERVERS = ("door+auth", "door+auth-bounds")
#: ``--durable-only``: the cost of keeping every task in tasks.db (docs/durable-tasks.md).
DURABLE_SERVERS = ("door+auth", "door+auth-durable")
#: The agent process section: a door without DoorAuth whose trivial python agent runs
#: in-process, in an agent process, or in a confined one (one server process each).
AGENT_SERVERS = ("agent-fn", "agent-process", "agent-process-landlock")
AGENT_ROWS: dict[str, str] = {
    "in-process agent": "agent-fn",
    "agent process": "agent-process",
    "agent process+landlock": "agent-process-landlock",
}
#: The latency section's concurrency (the throughput one is ``--concurrency``).
LATENCY_CONCURRENCY = 1
BENCH_AGENT = "async def run(task):\n    return \"ok\"\n"
BINDINGS = ("jsonrpc", "rest")
#: Each row of the results: its server process and the binding the load speaks. The door
#: serves both bindings from one process; a2a-sdk's JSON-RPC and REST apps are separate.
#: Measured in this order within a round, and in the reverse order every other round: the
#: first phase of a block on a process runs slower (its task store still filling), and no
#: row should always be the one that pays for it. (The ratios of the door's own costs come
#: from the rows taking turns, PAIRED_RATIOS; the rounds give each row's figures.)
ROWS: dict[str, tuple[str, str]] = {
    "door+auth REST": ("door+auth", "rest"),
    "door+auth no metrics": ("door+auth-nometrics", "jsonrpc"),
    "door+auth": ("door+auth", "jsonrpc"),
    "door+auth bounds": ("door+auth-bounds", "jsonrpc"),
    "door+auth durable": ("door+auth-durable", "jsonrpc"),
    "door+auth trace before": ("door+auth-trace-before", "jsonrpc"),
    "door+auth trace": ("door+auth-trace", "jsonrpc"),
    "door+auth chained trace": ("door+auth-chain", "jsonrpc"),
    "door": ("door", "jsonrpc"),
    "a2a-sdk": ("a2a-sdk", "jsonrpc"),
    "a2a-sdk REST": ("a2a-sdk-rest", "rest"),
}
#: The order of the rows in the tables (the JSON-RPC rows first, as before).
SHOWN = ("door+auth", "door+auth bounds", "door+auth durable", "door+auth no metrics", "door",
         "a2a-sdk", "door+auth REST", "a2a-sdk REST", "door+auth trace before", "door+auth trace",
         "door+auth chained trace")
METHODS = ("GetTask", "SendMessage")
WARMUP_SECONDS = 1.0
MAX_REQUESTS = 200_000  # per phase, warm-up included: far above what 4 s reach here

# --- the servers (run in their own process) ------------------------------------------


def door_app(with_auth: bool, agent: Any = None, metrics: bool = True,
             bounds: bool = False, trace: str | None = None,
             durable: bool = False) -> tuple[Any, str | None]:
    """The door with a trivial agent (``agent``, else an in-process one); with DoorAuth,
    a formation door and a caller token; without ``metrics``, DoorAuth in front of the
    A2A app with no request counted (the door before ``GET /metrics``, but for DoorAuth's
    own refusal and verification counts: one dict increment a request); with ``bounds``,
    every edge limit set on the caller's edge and a depth, none of them ever reached;
    with ``durable``, every task also kept in a tasks.db (launcher/home/task_db.py), as a
    member's door keeps them."""
    from gateway.auth.door_auth import AuthPolicy, DoorAuth
    from gateway.auth.edge_limits import DoorBounds, EdgeLimits
    from gateway.auth.tokens import FormationKey, FormationVerifier
    from gateway.door.app import DoorSettings, build_door
    from gateway.door.card import CardInfo
    from gateway.door.tasks import GateConfig, TaskRun

    async def trivial(run: TaskRun) -> str:
        return "ok"

    trivial = agent if agent is not None else trivial
    settings = DoorSettings(
        card=CardInfo(name="bench", description="benchmark", version="1"),
        gate=GateConfig(concurrency=64, queue_depth=1024), max_finished_tasks=20_000)
    if durable:
        import tempfile

        from launcher.home.task_db import TaskDb

        settings = dataclasses.replace(settings, journal=TaskDb.open(
            Path(tempfile.mkdtemp(prefix="bench-tasks-")), max_finished=20_000))
    if not with_auth:
        return build_door(trivial, settings).inner_app, None
    formation = "frm_" + uuid.uuid4().hex
    key = FormationKey.generate()
    limits = DoorBounds(depth=1000, incoming={"planner": EdgeLimits(
        calls=10**12, concurrent=10**9, per_minute=10**12)}) if bounds else None
    policy = AuthPolicy(authenticated=True,
                        verifier=FormationVerifier(key.public_bytes, formation),
                        member="coder", accept_peer_tasks=True, bounds=limits)
    token = key.mint(formation=formation, caller="planner", callee="coder")
    door = build_door(trivial, settings, policy=policy)
    if trace is not None:
        # As a member's runtime writes it: every record of the door's bus to trace.jsonl,
        # chained (``prev``) or not.
        import tempfile

        from launcher.home.trace import TraceWriter

        path = Path(tempfile.mkdtemp(prefix="bench-trace-")) / "trace.jsonl"
        writer = TraceWriter(path, session_id="ses_" + uuid.uuid4().hex
                             if trace == "chain" else None)
        if trace == "before":    # as members wrote before the chain: redacted twice
            door.trace.add_sink(lambda record: writer.write(record["event"], **{
                k: v for k, v in record.items() if k not in ("ts", "event")}))
        else:
            door.trace.add_sink(lambda record: writer.write_redacted(record["event"],
                                                                     record))
    return (door.app if metrics else DoorAuth(door.inner_app, policy)), token


def sdk_handler(card: Any) -> Any:
    """a2a-sdk's request handler (DefaultRequestHandler, InMemoryTaskStore) over a trivial
    agent that answers every task with one artifact: what every a2a-sdk row serves."""
    from a2a.helpers.proto_helpers import new_task
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import Part, TaskState

    class Trivial(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task = context.current_task
            if task is None:
                assert context.task_id and context.context_id and context.message
                task = new_task(context.task_id, context.context_id,
                                TaskState.TASK_STATE_SUBMITTED, history=[context.message])
                await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task.id, task.context_id)
            await updater.add_artifact([Part(text="ok")], name="result")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError

    return DefaultRequestHandler(agent_executor=Trivial(), task_store=InMemoryTaskStore(),
                                 agent_card=card)


def sdk_card(binding: str, url: str) -> Any:
    """The card of the a2a-sdk rows, with its one interface."""
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface

    return AgentCard(
        name="bench", description="benchmark", version="1",
        supported_interfaces=[AgentInterface(url=url, protocol_binding=binding,
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"])


def sdk_app(rest: bool = False) -> Any:
    """An a2a-sdk server with the same trivial agent: JSON-RPC at ``/``, or with ``rest``
    the SDK's HTTP+JSON routes (``create_rest_routes``: ``/message:send``,
    ``/tasks/{id}``, ...)."""
    from a2a.server.routes import (
        create_agent_card_routes,
        create_jsonrpc_routes,
        create_rest_routes,
    )
    from starlette.applications import Starlette

    card = sdk_card("HTTP+JSON" if rest else "JSONRPC", "http://127.0.0.1/")
    handler = sdk_handler(card)
    routes = create_rest_routes(handler) if rest else create_jsonrpc_routes(handler, "/")
    # The card first: the REST routes end with a catch-all ``/{tenant}`` mount.
    return Starlette(routes=[*create_agent_card_routes(card), *routes])


def agent_process(root: Path, confined: bool) -> Any:
    """An AgentProcess running ``bench_agent:run`` (a fresh interpreter, as a member's
    restart spawns), with a member's Landlock plan when ``confined``; not yet started."""
    from gateway.trace.bus import TraceBus
    from launcher.member.agent_process import AgentProcess
    from launcher.sandbox.landlock import host_support

    capsule = root / "capsule"
    capsule.mkdir()
    (capsule / "bench_agent.py").write_text(BENCH_AGENT)
    dirs = {name: root / name for name in ("home", "tmp", "out", "work")}
    for path in dirs.values():
        path.mkdir()
    confine = None
    if confined:
        from launcher.home.paths import murmur_home
        from launcher.member.confinement import agent_plan
        from launcher.sandbox.seccomp import seccomp_support

        plan = agent_plan(home=murmur_home(), capsule_dir=capsule,
                          session_dirs=(dirs["home"], dirs["tmp"], dirs["out"]),
                          workdir=dirs["work"], proxy_port=9,  # nothing listens: unused
                          seccomp=seccomp_support().available)
        confine = {**plan.wire(), "abi": host_support().abi}
    start: dict[str, Any] = {"agent": {"python": "bench_agent:run"}, "capsule_dir": str(capsule),
             "environment": {"env": {}, "max_turns": 8}, "process_env": {},
             "proxy_url": None, "peers": [], "workdir": str(dirs["work"]),
             "confine": confine}
    return AgentProcess(start, python=True, max_turns=8, calls_factory=None,
                        trace=TraceBus())


def serve(kind: str) -> None:
    import logging
    import socket
    import tempfile

    import uvicorn
    import uvloop

    logging.disable(logging.WARNING)  # the SDK logs every request at INFO/WARNING

    async def main() -> None:
        token: str | None = None
        process: Any = None
        info: dict[str, Any] = {}
        if kind in ("a2a-sdk", "a2a-sdk-rest"):
            app = sdk_app(rest=kind == "a2a-sdk-rest")
        elif kind in ("agent-process", "agent-process-landlock"):
            process = agent_process(Path(temp), confined=kind == "agent-process-landlock")
            info["confined"] = await process.start()
            info["agent_pid"] = process.pid
            app, token = door_app(with_auth=False, agent=process.agent_fn())
        else:
            app, token = door_app(with_auth=kind.startswith("door+auth"),
                                  metrics=kind != "door+auth-nometrics",
                                  bounds=kind == "door+auth-bounds",
                                  durable=kind == "door+auth-durable",
                                  trace={"door+auth-trace-before": "before",
                                         "door+auth-trace": "plain",
                                         "door+auth-chain": "chain"}.get(kind))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        print(f"TOKEN {token or ''}", flush=True)  # on our own pipe, read by the parent only
        print(f"INFO {json.dumps(info)}", flush=True)
        config = uvicorn.Config(app, log_level="error", access_log=False, loop="none",
                                http="httptools", lifespan="off")
        try:
            await uvicorn.Server(config).serve(sockets=[sock])
        finally:
            if process is not None:
                await process.close()

    with tempfile.TemporaryDirectory(prefix="bench-door-") as temp:
        uvloop.run(main())


# --- the load generator (runs in its own process) ------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; responses must carry Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
                break
        body = await self.reader.readexactly(length) if length else b""
        return status, body


def rpc_request(port: int, token: str | None, method: str, params: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                      separators=(",", ":")).encode()
    headers = ["POST / HTTP/1.1", f"Host: 127.0.0.1:{port}",
               "Content-Type: application/json", "A2A-Version: 1.0",
               f"Content-Length: {len(body)}"]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def rest_request(port: int, token: str | None, method: str, target: str,
                 params: dict[str, Any] | None = None) -> bytes:
    """An HTTP+JSON request: ``method`` (GET or POST) on ``target``, ``params`` as the
    JSON body of a POST."""
    body = json.dumps(params, separators=(",", ":")).encode() if params is not None else b""
    headers = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "A2A-Version: 1.0"]
    if params is not None:
        headers += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def send_request(binding: str, port: int, token: str | None) -> bytes:
    """One SendMessage (a new message id each) in ``binding``."""
    if binding == "rest":
        return rest_request(port, token, "POST", "/message:send", send_params())
    return rpc_request(port, token, "SendMessage", send_params())


def get_request(binding: str, port: int, token: str | None, task_id: str) -> bytes:
    """GetTask of ``task_id`` without its history, in ``binding``."""
    if binding == "rest":
        return rest_request(port, token, "GET", f"/tasks/{task_id}?historyLength=0")
    return rpc_request(port, token, "GetTask", {"id": task_id, "historyLength": 0})


def send_params() -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": "ping"}]}}


async def first_task(port: int, token: str | None,
                     binding: str) -> tuple[Connection, bytes]:
    """One SendMessage run to its end on a new connection (left open), and the GetTask of
    that task, which every GetTask of a phase reads."""
    first = Connection(*await asyncio.open_connection("127.0.0.1", port))
    status, body = await first.request(send_request(binding, port, token))
    assert status == 200, body[:300]
    answer = json.loads(body)  # HTTP+JSON: the result itself, without the envelope
    task = (answer if binding == "rest" else answer["result"])["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", body[:300]
    return first, get_request(binding, port, token, task["id"])


async def load(port: int, token: str | None, method: str, binding: str, duration: float,
               concurrency: int, max_requests: int) -> dict[str, Any]:
    first, get_raw = await first_task(port, token, binding)
    expect = b'"TASK_STATE_COMPLETED"'
    latencies: list[float] = []
    errors = 0
    total = 1  # the SendMessage above
    start = time.perf_counter()
    measure_from = start + WARMUP_SECONDS
    stop = measure_from + duration
    capped_at: float | None = None  # when max_requests was reached, if it was

    async def worker() -> None:
        nonlocal errors, total, capped_at
        connection = Connection(*await asyncio.open_connection("127.0.0.1", port))
        clock = time.perf_counter
        while True:
            raw = get_raw if method == "GetTask" else send_request(binding, port, token)
            began = clock()
            if began >= stop:
                break
            if total >= max_requests:
                capped_at = capped_at or began
                break
            status, body = await connection.request(raw)
            ended = clock()
            total += 1
            if status != 200 or expect not in body:
                errors += 1
            elif began >= measure_from:
                latencies.append(ended - began)
        connection.writer.close()

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))),
                           duration + WARMUP_SECONDS + 30)
    first.writer.close()
    latencies.sort()
    count = len(latencies)
    seconds = duration if capped_at is None else max(capped_at - measure_from, 1e-3)
    return {
        "requests": count, "errors": errors, "seconds": round(seconds, 3),
        "all_requests": total, "capped": capped_at is not None,
        "rps": round(count / seconds, 1),
        "p50_ms": round(latencies[count // 2] * 1000, 3) if count else None,
        "p99_ms": round(latencies[min(count - 1, int(count * 0.99))] * 1000, 3) if count else None,
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3) if count else None,
    }


# --- the paired measure: two rows taking turns ----------------------------------------

#: A ratio's two rows take turns from one load generator: PAIR_TURNS turns each of
#: PAIR_TURN_SECONDS, in the order A B B A A B ... A turn's server CPU runs from its start
#: to the start of that server's next turn (PAIR_TAIL_SECONDS after the last one), so
#: that what a turn left behind (a tasks.db writer's commits) is counted with it.
PAIR_TURNS = 12
PAIR_TURN_SECONDS = 0.5
PAIR_TAIL_SECONDS = 0.3


@dataclasses.dataclass
class PairTarget:
    """One row of a pair: where it listens, its token, its server's pid, its binding."""

    port: int
    token: str | None
    pid: int
    binding: str


def server_cpu_ns(pid: int) -> int:
    """CPU time of process ``pid`` so far, every thread of it and of its children (a
    tasks.db writer process), in nanoseconds: the scheduler's own count
    (``/proc/<pid>/task/*/schedstat``), exact where ``stat``'s 10 ms clock ticks are too
    coarse for a half-second turn. A thread's count is brought up to date when it is
    switched out, as a server under load is all the time."""
    total = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total + sum(server_cpu_ns(child) for child in children(pid))


async def _connections(target: PairTarget, method: str,
                       concurrency: int) -> tuple[list[Connection], Any]:
    """``concurrency`` keep-alive connections to ``target`` and what each request sends
    (GetTask of a task made here, or a new SendMessage each time)."""
    first, get_raw = await first_task(target.port, target.token, target.binding)
    first.writer.close()

    def next_request() -> bytes:
        if method == "GetTask":
            return get_raw
        return send_request(target.binding, target.port, target.token)

    connections = [Connection(*await asyncio.open_connection("127.0.0.1", target.port))
                   for _ in range(concurrency)]
    return connections, next_request


async def _burst(connections: list[Connection], next_request: Any,
                 seconds: float) -> tuple[int, int]:
    """Requests on every connection, one at a time each, until ``seconds`` have passed:
    how many completed and how many of them failed."""
    stop = time.perf_counter() + seconds
    done = errors = 0
    expect = b'"TASK_STATE_COMPLETED"'

    async def worker(connection: Connection) -> None:
        nonlocal done, errors
        while time.perf_counter() < stop:
            status, body = await connection.request(next_request())
            done += 1
            if status != 200 or expect not in body:
                errors += 1

    await asyncio.gather(*(worker(connection) for connection in connections))
    return done, errors


def _turn_costs(played: list[tuple[int, dict[str, float]]],
                pids: list[int]) -> list[list[dict[str, float]]]:
    """Each side's turns with their server CPU per request: from a turn's start to the
    start of the next turn on the same server (one server may serve both rows: two
    bindings), or to now after the last."""
    now = {pid: server_cpu_ns(pid) for pid in set(pids)}
    measured: list[list[dict[str, float]]] = [[], []]
    for index, (side, turn) in enumerate(played):
        pid = pids[side]
        later = (other["cpu_at_start"] for other_side, other in played[index + 1:]
                 if pids[other_side] == pid)
        cpu_at_end = next(later, now[pid])
        measured[side].append({**turn, "cpu_us": (cpu_at_end - turn["cpu_at_start"])
                               / 1e3 / max(turn["done"], 1)})
    return measured


async def load_pair(targets: tuple[PairTarget, PairTarget], method: str,
                    concurrency: int, turns: int = PAIR_TURNS,
                    turn_seconds: float = PAIR_TURN_SECONDS) -> dict[str, Any]:
    """Two rows taking turns (see PAIR_TURNS): each turn's requests/s and server CPU per
    request, and each ratio (first row / second) as the median over the turns of the
    ratio of two turns side by side in time, which a burst of load from elsewhere on the
    machine, or a server whose heap grows, meets alike."""
    prepared = [await _connections(target, method, concurrency) for target in targets]
    for connections, next_request in prepared:            # warm-up, not counted
        await _burst(connections, next_request, WARMUP_SECONDS)
    played: list[tuple[int, dict[str, float]]] = []       # (side, turn), in time order
    for turn in range(2 * turns):
        side = (turn + 1) // 2 % 2                           # 0 1 1 0 0 1 1 0 ...
        connections, next_request = prepared[side]
        cpu_at_start = server_cpu_ns(targets[side].pid)
        began = time.perf_counter()
        done, errors = await _burst(connections, next_request, turn_seconds)
        played.append((side, {"rps": done / (time.perf_counter() - began), "done": done,
                              "errors": errors, "cpu_at_start": cpu_at_start}))
    await asyncio.sleep(PAIR_TAIL_SECONDS)
    measured = _turn_costs(played, [target.pid for target in targets])
    for connections, _ in prepared:
        for connection in connections:
            connection.writer.close()
    turns_side_by_side = list(zip(*measured, strict=True))
    return {
        "turns": turns, "turn_seconds": turn_seconds,
        "rps": [round(statistics.median(turn["rps"] for turn in side), 1)
                for side in measured],
        "cpu_us_per_request": [round(statistics.median(turn["cpu_us"] for turn in side), 1)
                               for side in measured],
        "errors": sum(turn["errors"] for side in measured for turn in side),
        "ratio": round(statistics.median(a["rps"] / b["rps"]
                                         for a, b in turns_side_by_side), 3),
        "ratio_cpu": round(statistics.median(b["cpu_us"] / a["cpu_us"]
                                             for a, b in turns_side_by_side), 3),
        "ratio_each_turn": [round(a["rps"] / b["rps"], 3) for a, b in turns_side_by_side],
    }


def run_load_pair(args: argparse.Namespace) -> None:
    import uvloop

    tokens = [sys.stdin.readline().strip() or None for _ in range(2)]
    targets = tuple(PairTarget(port, token, pid, binding) for port, token, pid, binding in
                    zip(args.pair_ports, tokens, args.pair_pids, args.pair_bindings,
                        strict=True))
    assert len(targets) == 2
    result = uvloop.run(load_pair((targets[0], targets[1]), args.method, args.concurrency,
                                  args.pair_turns))
    print(json.dumps(result), flush=True)


def run_load(args: argparse.Namespace) -> None:
    import uvloop

    token = sys.stdin.readline().strip() or None
    result = uvloop.run(load(args.port, token, args.method, args.binding, args.duration,
                             args.concurrency, args.max_requests))
    print(json.dumps(result), flush=True)


# --- the orchestrator ----------------------------------------------------------------


def start_server(kind: str, info: dict[str, Any] | None = None
                 ) -> tuple[subprocess.Popen[str], int, str]:
    """A server process; ``info`` receives what it reported besides its port and token
    (an agent process's pid and confinement)."""
    process = subprocess.Popen([sys.executable, __file__, "--serve", kind], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port_line = process.stdout.readline().split()
    token_line = process.stdout.readline().rstrip("\n").split(" ", 1)
    info_line = process.stdout.readline().rstrip("\n").split(" ", 1)
    if len(port_line) != 2 or port_line[0] != "PORT":
        process.kill()
        raise SystemExit(f"server {kind} did not report its port")
    token = token_line[1] if len(token_line) == 2 else ""
    if info is not None and len(info_line) == 2 and info_line[0] == "INFO":
        info.update(json.loads(info_line[1]))
    return process, int(port_line[1]), token


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far, its children's (an agent
    process) included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(child) for child in children(pid))


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (those of every one of its threads)."""
    found: set[int] = set()
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for thread in threads:
        try:
            found.update(int(child) for child in
                         Path(f"/proc/{pid}/task/{thread}/children").read_text().split())
        except (OSError, ValueError):
            continue
    return sorted(found)


def measure(kind: str, pid: int, port: int, token: str, method: str, binding: str,
            args: argparse.Namespace, concurrency: int | None = None) -> dict[str, Any]:
    """One phase. Besides wall-clock rates, the server's own CPU time per request: on a
    machine that other work shares, it moves far less than requests/s do."""
    concurrency = concurrency if concurrency is not None else args.concurrency
    cpu_before = cpu_seconds(pid)
    completed = subprocess.run(
        [sys.executable, __file__, "--load", "--port", str(port), "--method", method,
         "--binding", binding, "--duration", str(args.duration),
         "--concurrency", str(concurrency), "--max-requests", str(args.max_requests)],
        cwd=ROOT, input=token + "\n", capture_output=True, text=True,
        timeout=args.duration + WARMUP_SECONDS + 60, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"load against {kind} {method} failed:\n{completed.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    cpu_us = (cpu_seconds(pid) - cpu_before) / result["all_requests"] * 1e6
    result["server_cpu_us_per_request"] = round(cpu_us, 1)
    result["cpu_bound_rps_per_core"] = round(1e6 / cpu_us, 1) if cpu_us else None
    result["binding"] = "HTTP+JSON" if binding == "rest" else "JSON-RPC"
    result["concurrency"] = concurrency
    return result


#: Every ratio of the door's own costs, (name, top row, bottom row): measured by the rows
#: taking turns (load_pair); the rounds give each row's figures and, for the record, the
#: same ratios round by round (``ratios_from_rounds``).
PAIRED_RATIOS = (("metrics_on_vs_off", "door+auth", "door+auth no metrics"),
                 ("bounds_vs_no_bounds", "door+auth bounds", "door+auth"),
                 ("durable_vs_memory", "door+auth durable", "door+auth"),
                 ("chain_vs_no_chain", "door+auth chained trace", "door+auth trace"),
                 ("chain_vs_before", "door+auth chained trace", "door+auth trace before"),
                 ("auth_vs_no_auth", "door+auth no metrics", "door"),
                 ("door_rest_vs_door_jsonrpc", "door+auth REST", "door+auth"))


def measure_pair(rows: tuple[str, str], servers: dict[str, tuple[subprocess.Popen[str], int,
                                                                   str]],
                 method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Two rows taking turns under one load generator (``--load-pair``, load_pair)."""
    targets = [(servers[ROWS[row][0]], ROWS[row][1]) for row in rows]
    command = [sys.executable, __file__, "--load-pair", "--method", method,
               "--concurrency", str(args.concurrency), "--pair-turns", str(args.pair_turns)]
    for (process, port, _), binding in targets:
        command += ["--pair-port", str(port), "--pair-pid", str(process.pid),
                    "--pair-binding", binding]
    tokens = "".join(f"{token}\n" for (_, _, token), _ in targets)
    completed = subprocess.run(
        command, cwd=ROOT, input=tokens, capture_output=True, text=True, check=False,
        timeout=2 * (WARMUP_SECONDS + args.pair_turns * (PAIR_TURN_SECONDS + 0.2)) + 60)
    if completed.returncode != 0:
        raise SystemExit(f"paired load {rows} {method} failed:\n{completed.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def wait_ready(port: int) -> None:
    import socket

    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"no server on port {port}")


# --- the cost of counting, in process (no server, no load generator) ------------------

#: Interleaved rounds of the in-process pair, and GetTask calls a round per app.
IN_PROCESS_ROUNDS = 41
IN_PROCESS_REQUESTS = 2000


def in_process_metrics_cost(rounds: int = IN_PROCESS_ROUNDS,
                            requests: int = IN_PROCESS_REQUESTS) -> dict[str, float]:
    """The door app with and without its request counting, called straight as ASGI apps
    (the same two apps as ``door+auth`` and ``door+auth no metrics``): this process's CPU
    per GetTask, alternated round by round (order swapped every other round). Without
    uvicorn and sockets in the way the difference is the counting alone, and the ratio is
    against the door's own code only: a served request (which adds the HTTP server's
    cost) pays a smaller share. The ratio is the median of the rounds' ratios."""
    sys.path.insert(0, str(ROOT))
    return asyncio.run(_in_process(rounds, requests))


async def _in_process(rounds: int, requests: int) -> dict[str, float]:
    apps = {"on": door_app(with_auth=True, metrics=True),
            "off": door_app(with_auth=True, metrics=False)}
    bodies = {name: await _task_to_get(app, token or "") for name, (app, token) in apps.items()}
    spent: dict[str, list[float]] = {"on": [], "off": []}
    for number in range(rounds):
        for name in ("on", "off") if number % 2 else ("off", "on"):
            app, token = apps[name]
            started = time.process_time()
            for _ in range(requests):
                await _asgi_call(app, token or "", bodies[name])
            spent[name].append((time.process_time() - started) / requests * 1e6)
    pairs = list(zip(spent["on"], spent["off"], strict=True))
    return {"cpu_us_per_request_on": round(statistics.median(spent["on"]), 2),
            "cpu_us_per_request_off": round(statistics.median(spent["off"]), 2),
            "counting_us_per_request": round(statistics.median(on - off for on, off in pairs), 2),
            "ratio": round(statistics.median(off / on for on, off in pairs), 3)}


async def _task_to_get(app: Any, token: str) -> bytes:
    """A GetTask body for a task ``app`` ran to its end (every GetTask reads the same)."""
    answer: list[dict[str, Any]] = []
    await _asgi_call(app, token, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                             "params": send_params()}).encode(), answer)
    task_id = json.loads(answer[-1]["body"])["result"]["task"]["id"]
    await asyncio.sleep(0.05)
    return json.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                       "params": {"id": task_id, "historyLength": 0}}).encode()


async def _asgi_call(app: Any, token: str, body: bytes,
                     answer: list[dict[str, Any]] | None = None) -> None:
    """One ``POST /`` as uvicorn would hand it over; the answer's messages into
    ``answer``."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/", "raw_path": b"/",
             "root_path": "", "query_string": b"", "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8000),
             "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                         (b"a2a-version", b"1.0"), (b"authorization", b"Bearer " + token.encode()),
                         (b"content-length", str(len(body)).encode())]}
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:                      # never asked for twice by a GetTask
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if answer is not None:
            answer.append(message)

    await app(scope, receive, send)


def table(results: dict[str, dict[str, dict[str, Any]]], ratios: dict[str, float],
          cores: int) -> str:
    lines = [f"# Door benchmark ({cores} cores, one run, median of the rounds)", "",
             "Server CPU per request is the server process's user+system time over the",
             "requests of a phase; `_cpu` ratios compare those costs. Rows without",
             "`REST` speak JSON-RPC; `REST` rows the HTTP+JSON binding (`GET /tasks/{id}`,",
             "`POST /message:send`). `door+auth REST` is the door with DoorAuth and the",
             "same token as `door+auth`; `a2a-sdk REST` is a2a-sdk's `create_rest_routes`.",
             "",
             "| server | method | req/s | p50 ms | p99 ms | server CPU us/req | errors |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for server, by_method in results.items():
        for method, row in by_method.items():
            lines.append(f"| {server} | {method} | {row['rps']} | {row['p50_ms']} | "
                         f"{row['p99_ms']} | {row['server_cpu_us_per_request']} | "
                         f"{row['errors']} |")
    lines += ["", "| ratio | value | goal |", "|---|---:|---|"]
    goals = {"metrics_on_vs_off_GetTask_cpu_in_process": "(the door's code alone, no server)",
             "metrics_on_vs_off": ">= 0.95", "bounds_vs_no_bounds": ">= 0.95",
             "durable_vs_memory": ">= 0.9",
             "chain_vs_before": ">= 0.95", "chain_vs_no_chain": "(what the chain costs)",
             "auth_vs_no_auth": ">= 0.95", "door_vs_sdk": ">= 3",
             "door_rest_vs_door_jsonrpc": ">= 0.95", "door_rest_vs_sdk_rest": ">= 3"}
    for name, value in ratios.items():
        goal = next((g for prefix, g in goals.items() if name.startswith(prefix)), "")
        lines.append(f"| {name} | {value} | {goal} |")
    return "\n".join(lines) + "\n"


def paired_table(paired: dict[str, dict[str, Any]]) -> str:
    """The ratios measured with their two rows taking turns, each with its rows' figures
    and every turn's ratio."""
    if not paired:
        return ""
    lines = ["", "## The door's own costs, rows taking turns", "",
             f"Each ratio above whose name is here comes from this table: its two rows "
             f"took turns of {PAIR_TURN_SECONDS} s under one load generator (A B B A ...); "
             "the ratio is the median over the turns of two turns side by side in time; "
             "server CPU from the scheduler's count, a writer process's included.", "",
             "| ratio | req/s | CPU | rows' req/s | rows' CPU us/req | errors | "
             "req/s ratio, turn by turn |", "|---|---:|---:|---|---|---:|---|"]
    for name, pair in paired.items():
        rps = " / ".join(str(value) for value in pair["rps"])
        cpu = " / ".join(str(value) for value in pair["cpu_us_per_request"])
        each = " ".join(str(value) for value in pair["ratio_each_turn"])
        lines.append(f"| {name} | {pair['ratio']} | {pair['ratio_cpu']} | {rps} | {cpu} | "
                     f"{pair['errors']} | {each} |")
    return "\n".join(lines) + "\n"


def agent_section(args: argparse.Namespace) -> dict[str, Any]:
    """The agent process rows: their own servers (the first section's are gone by now),
    interleaved as the first section's are, SendMessage over JSON-RPC at concurrency 1
    then ``--concurrency`` each round; each row the round with the median rate, each
    comparison the median over the rounds of its value within a round."""
    servers: dict[str, tuple[subprocess.Popen[str], int, str]] = {}
    infos: dict[str, dict[str, Any]] = {kind: {} for kind in AGENT_SERVERS}
    levels = (LATENCY_CONCURRENCY, args.concurrency)
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {
        row: {level: [] for level in levels} for row in AGENT_ROWS}
    try:
        for kind in AGENT_SERVERS:
            servers[kind] = start_server(kind, infos[kind])
            wait_ready(servers[kind][1])
        order = list(AGENT_ROWS.items())
        for number in range(args.rounds):
            for level in levels:
                for name, kind in order[::-1] if number % 2 else order:
                    process, port, token = servers[kind]
                    row = measure(kind, process.pid, port, token, "SendMessage", "jsonrpc",
                                  args, concurrency=level)
                    rounds[name][level].append(row)
                    print(f"round {number + 1}: {name:22} c{level:<3} {row['rps']:>9} req/s  "
                          f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                          f"CPU {row['server_cpu_us_per_request']} us/req  "
                          f"errors {row['errors']}", flush=True)
    finally:
        stop_servers(servers)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for name in AGENT_ROWS:
        rows[name] = {}
        for level in levels:
            rows[name][f"c{level}"] = median_round(rounds[name][level])
    base = "in-process agent"
    comparison: dict[str, float | None] = {}

    def within_rounds(values: list[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    for name in AGENT_ROWS:
        if name == base:
            continue
        slow = list(zip(rounds[name][LATENCY_CONCURRENCY], rounds[base][LATENCY_CONCURRENCY],
                        strict=True))
        for quantile in ("p50", "p99"):
            comparison[f"{name}: {quantile} - in-process, c{LATENCY_CONCURRENCY} (ms)"] = (
                within_rounds([a[f"{quantile}_ms"] - b[f"{quantile}_ms"] for a, b in slow
                               if a[f"{quantile}_ms"] is not None
                               and b[f"{quantile}_ms"] is not None]))
        fast = list(zip(rounds[name][args.concurrency], rounds[base][args.concurrency],
                        strict=True))
        comparison[f"{name} / in-process req/s, c{args.concurrency}"] = within_rounds(
            [a["rps"] / b["rps"] for a, b in fast if b["rps"]])
        comparison[f"{name} / in-process req/s, c{args.concurrency}, by CPU"] = (
            within_rounds([b["server_cpu_us_per_request"] / a["server_cpu_us_per_request"]
                           for a, b in fast if a["server_cpu_us_per_request"]]))
    return {"agent": BENCH_AGENT, "method": "SendMessage", "binding": "JSON-RPC",
            "auth": False, "levels": list(levels), "started": infos, "results": rows,
            "comparison": comparison, "goal_latency_difference_ms": 1.0}


def agent_table(section: dict[str, Any]) -> str:
    lines = ["", "## Agent process", "",
             "A trivial python agent (`async def run(task): return \"ok\"`) behind the door "
             "(no DoorAuth), SendMessage over JSON-RPC (blocking): `in-process agent` is an "
             "AgentFn in the server, `agent process` runs it in an `AgentProcess` (a fresh "
             "interpreter on a socketpair), `agent process+landlock` the same confined with "
             "a member's Landlock plan and the seccomp socket filter. Server CPU counts the "
             "agent process's too.", "",
             "| agent | concurrency | req/s | p50 ms | p99 ms | server CPU us/req | "
             "errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, by_level in section["results"].items():
        for level, row in by_level.items():
            lines.append(f"| {name} | {level[1:]} | {row['rps']} | {row['p50_ms']} | "
                         f"{row['p99_ms']} | {row['server_cpu_us_per_request']} | "
                         f"{row['errors']} |")
    goal = section["goal_latency_difference_ms"]
    lines += ["", "| comparison (median over the rounds) | value | goal |", "|---|---:|---|"]
    for name, value in section["comparison"].items():
        verdict = ""
        if name.endswith("(ms)") and value is not None:
            verdict = f"<= {goal:g} ms ({'met' if value <= goal else 'missed'})"
        lines.append(f"| {name} | {value} | {verdict} |")
    started = "; ".join(f"`{kind}`: {json.dumps(info.get('confined'))}"
                        for kind, info in section["started"].items() if info)
    if started:
        lines += ["", f"What the agent processes reported at start: {started}."]
    return "\n".join(lines) + "\n"


def orchestrate(args: argparse.Namespace) -> None:
    """All the servers stay up; the phases are interleaved round by round (row after row
    for each method, the order reversed every other round), and each row reports the
    round with the median rate, so a burst of load from elsewhere on the machine hits
    every server alike."""
    began = time.monotonic()
    load_before = os.getloadavg()
    only = args.metrics_only or args.bounds_only or args.trace_only or args.durable_only
    kinds = (METRICS_SERVERS if args.metrics_only else BOUNDS_SERVERS if args.bounds_only
             else TRACE_SERVERS if args.trace_only
             else DURABLE_SERVERS if args.durable_only else SERVERS)
    rows = {name: row for name, row in ROWS.items()
            if row[0] in kinds and not (only and row[1] == "rest")}
    servers: dict[str, tuple[subprocess.Popen[str], int, str]] = {}
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
        row: {method: [] for method in METHODS} for row in rows}
    paired: dict[str, dict[str, Any]] = {}
    try:
        for kind in kinds:
            servers[kind] = start_server(kind)
            wait_ready(servers[kind][1])
        order = list(rows.items())
        for number in range(args.rounds):
            for method in METHODS:
                for name, (kind, binding) in order[::-1] if number % 2 else order:
                    process, port, token = servers[kind]
                    row = measure(kind, process.pid, port, token, method, binding, args)
                    rounds[name][method].append(row)
                    print(f"round {number + 1}: {name:14} {method:12} {row['rps']:>9} req/s  "
                          f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                          f"server CPU {row['server_cpu_us_per_request']} us/req  "
                          f"errors {row['errors']}", flush=True)
        paired.update({f"{name}_{method}": measure_pair((top, bottom), servers, method, args)
                       for method in METHODS for name, top, bottom in PAIRED_RATIOS
                       if top in rows and bottom in rows})
        for name, pair in paired.items():
            print(f"turns: {name:40} {pair['ratio']:>6} req/s  {pair['ratio_cpu']:>6} CPU  "
                  f"errors {pair['errors']}", flush=True)
    finally:
        stop_servers(servers)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name in (name for name in SHOWN if name in rows):
        results[name] = {}
        for method in METHODS:
            results[name][method] = median_round(rounds[name][method])
    # A ratio is taken within each round (its two servers measured back to back), then
    # the median over the rounds.
    # Two views of every ratio: wall-clock requests/s, and the server's CPU cost per
    # request (the same ratio when the server has a core to itself; much steadier when it
    # does not).
    ratios: dict[str, float] = {}
    for method in METHODS:
        for name, top, bottom in (("metrics_on_vs_off", "door+auth", "door+auth no metrics"),
                                  ("bounds_vs_no_bounds", "door+auth bounds", "door+auth"),
                                  ("durable_vs_memory", "door+auth durable", "door+auth"),
                                  ("chain_vs_no_chain", "door+auth chained trace",
                                   "door+auth trace"),
                                  ("chain_vs_before", "door+auth chained trace",
                                   "door+auth trace before"),
                                  ("auth_vs_no_auth", "door+auth no metrics", "door"),
                                  ("door_vs_sdk", "door", "a2a-sdk"),
                                  ("door_with_auth_vs_sdk", "door+auth", "a2a-sdk"),
                                  ("door_rest_vs_door_jsonrpc", "door+auth REST", "door+auth"),
                                  ("door_rest_vs_sdk_rest", "door+auth REST", "a2a-sdk REST")):
            if top not in rounds or bottom not in rounds:
                continue
            pairs = list(zip(rounds[top][method], rounds[bottom][method], strict=True))
            wall = [a["rps"] / b["rps"] for a, b in pairs if b["rps"]]
            cpu = [b["server_cpu_us_per_request"] / a["server_cpu_us_per_request"]
                   for a, b in pairs if a["server_cpu_us_per_request"]]
            ratios[f"{name}_{method}"] = round(statistics.median(wall), 3) if wall else 0.0
            ratios[f"{name}_{method}_cpu"] = round(statistics.median(cpu), 3) if cpu else 0.0
    # The door's own costs: from the rows taking turns, the steadier measure.
    from_rounds = dict(ratios)
    for name, pair in paired.items():
        ratios[name] = pair["ratio"]
        ratios[f"{name}_cpu"] = pair["ratio_cpu"]
    in_process = in_process_metrics_cost()
    ratios["metrics_on_vs_off_GetTask_cpu_in_process"] = in_process["ratio"]
    # What the counting (measured in process, where the noise of a shared machine is
    # smallest) is of a served GetTask's CPU (measured through uvicorn): the served ratio
    # the pair above would show were it not for that noise.
    served = results.get("door+auth", {}).get("GetTask", {}).get("server_cpu_us_per_request")
    if served:
        ratios["metrics_on_vs_off_GetTask_cpu_served_estimate"] = round(
            (served - in_process["counting_us_per_request"]) / served, 3)
    agents = {} if only else agent_section(args)
    cores = os.cpu_count() or 1
    document = {"benchmark": "bench_door", "cores": cores, "concurrency": args.concurrency,
                "load_average_before": load_before, "load_average_after": os.getloadavg(),
                "seconds_per_phase": args.duration, "rounds": args.rounds,
                "max_requests_per_phase": args.max_requests,
                "load_generator": "asyncio (uvloop), keep-alive HTTP/1.1, another process",
                "server": "uvicorn (httptools, uvloop), one process each",
                "results": results, "ratios": ratios, "ratios_from_rounds": from_rounds,
                "paired": paired, "metrics_in_process": in_process,
                "agent_process": agents,
                "wall_seconds": round(time.monotonic() - began, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = ("bench_door_metrics" if args.metrics_only else
            "bench_door_bounds" if args.bounds_only else
            "bench_door_durable" if args.durable_only else
            "bench_door_trace" if args.trace_only else "bench_door")
    (RESULTS / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")
    markdown = table(results, ratios, cores) + paired_table(paired) + (
        f"\nIn process, GetTask: {in_process['cpu_us_per_request_on']} us CPU a request "
        f"with the counting, {in_process['cpu_us_per_request_off']} us without; the "
        f"counting {in_process['counting_us_per_request']} us (median of the rounds' "
        "differences).\n") + ("" if only else agent_table(agents))
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown, end="")


def stop_servers(servers: dict[str, tuple[subprocess.Popen[str], int, str]]) -> None:
    """End every server process (SIGTERM, then SIGKILL after 10 s)."""
    for process, _, _ in servers.values():
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def median_round(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate, and every round's rate beside it."""
    ranked = sorted(measured, key=lambda row: row["rps"])
    median = dict(ranked[len(ranked) // 2])
    median["rps_each_round"] = [row["rps"] for row in measured]
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=SERVERS + TRACE_SERVERS + AGENT_SERVERS)
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--load-pair", action="store_true")
    parser.add_argument("--pair-port", dest="pair_ports", type=int, action="append")
    parser.add_argument("--pair-pid", dest="pair_pids", type=int, action="append")
    parser.add_argument("--pair-binding", dest="pair_bindings", choices=BINDINGS,
                        action="append")
    parser.add_argument("--pair-turns", type=int, default=PAIR_TURNS,
                        help="turns each row of a ratio takes (of "
                             f"{PAIR_TURN_SECONDS} s each; default {PAIR_TURNS})")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--method", choices=METHODS, default="GetTask")
    parser.add_argument("--binding", choices=BINDINGS, default="jsonrpc")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--metrics-only", action="store_true",
                        help="only the door with and without its request metrics "
                             "(results: bench_door_metrics.json and .md)")
    parser.add_argument("--trace-only", action="store_true",
                        help="only the door writing its trace, without and with the hash "
                             "chain (results: bench_door_trace.json and .md)")
    parser.add_argument("--durable-only", action="store_true",
                        help="only the door with and without its tasks.db (results: "
                             "bench_door_durable.json and .md)")
    parser.add_argument("--bounds-only", action="store_true",
                        help="only the door with and without edge limits (roster version "
                             "2; results: bench_door_bounds.json and .md)")
    args = parser.parse_args()
    if args.serve:
        sys.path.insert(0, str(ROOT))
        serve(args.serve)
    elif args.load:
        asyncio.set_event_loop_policy(None)
        run_load(args)
    elif args.load_pair:
        asyncio.set_event_loop_policy(None)
        run_load_pair(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
