"""A gateway member's cost, as ratios measured in one run:

* **gateway**: GetTask and SendMessage to an a2a-sdk upstream directly, and through its
  gateway member's door (DoorAuth with a formation token, the relay, aiohttp to the
  upstream), the same upstream process for both;
* **forward proxy**: GetTask and SendMessage to a member's door directly (with the
  formation token, as call-member sends it), and through a forward proxy at the door's
  virtual address (``http://coder.formation.invalid/``), the proxy stamping the token;
* **a byte pipe**: the same requests to the door directly, and through a byte pipe (one
  connection to the door for each connection to it, bytes copied both ways by asyncio
  protocols on uvloop as they arrive, nothing read): a hop in a Python process that does
  no work of its own, for comparison (``byte_pipe``, no goal). It is not a bound: it
  writes each segment as it comes, where the proxy writes a request, and its answer, at
  once, so the proxy can come out ahead of it.

Every server runs in a process of its own on 127.0.0.1 (uvicorn with httptools and
uvloop for the upstream; the member runtime's own ``DoorServer`` for doors; the forward
proxy on asyncio with uvloop); the load comes from another process with keep-alive
HTTP/1.1 connections (``bench_door``'s generator). Phases are interleaved round by round
and each ratio is the median over the rounds of (through / direct) measured back to back.
The machine has 2 cores: with the load generator, the upstream and the gateway, three
processes share them, which is the realistic case (the gateway runs beside its agent).

    .venv/bin/python loadtests/bench_gateway.py [--duration 3] [--rounds 3] [--concurrency 16]

Results: ``loadtests/results/bench_gateway.json`` and ``.md``. Goals (issue 11): the
gateway >= 0.6 of direct (agentgateway, a Rust A2A proxy, keeps 0.33 at saturation), the
forward-proxy hop >= 0.8 of a direct call.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
sys.path.insert(0, str(ROOT))

from loadtests.bench_door import (  # noqa: E402 - after the path it is found on
    Connection,
    cpu_seconds,
    send_params,
    wait_ready,
)

RESULTS = ROOT / "loadtests" / "results"
METHODS = ("GetTask", "SendMessage")
WARMUP_SECONDS = 1.0
#: (name, through, direct): each ratio is through / direct.
PAIRS = (("gateway", "gateway", "upstream"), ("forward_proxy", "proxy", "door"),
         ("byte_pipe", "pipe", "door"))
#: Each pair's goal; a text in parentheses is information, not a goal (loadtests/summary.py).
GOALS = {"gateway": ">= 0.6", "forward_proxy": ">= 0.8",
         "byte_pipe": "(a hop that reads nothing, for comparison)"}

# --- the servers (each in its own process) ---------------------------------------------


def _socket() -> Any:
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def serve_upstream() -> None:
    import logging

    import uvicorn

    from loadtests.bench_door import sdk_app

    logging.disable(logging.WARNING)  # the SDK logs every request
    sock = _socket()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(sdk_app(), log_level="error", access_log=False, loop="uvloop",
                            http="httptools", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def _formation_policy() -> tuple[Any, str]:
    from gateway.auth.door_auth import AuthPolicy
    from gateway.auth.tokens import FormationKey, FormationVerifier

    formation = "frm_" + uuid.uuid4().hex
    key = FormationKey.generate()
    policy = AuthPolicy(authenticated=True, verifier=FormationVerifier(key.public_bytes, formation),
                        member="coder", accept_peer_tasks=True)
    return policy, key.mint(formation=formation, caller="planner", callee="coder")


def _settings() -> Any:
    from gateway.door.app import DoorSettings
    from gateway.door.card import CardInfo
    from gateway.door.tasks import GateConfig

    return DoorSettings(card=CardInfo(name="bench", description="benchmark", version="1",
                                      member="coder"),
                        gate=GateConfig(concurrency=64, queue_depth=1024),
                        max_finished_tasks=20_000)


def _run_door(app: Any, sock: Any) -> None:
    import uvloop

    from launcher.member.server import DoorServer

    server = DoorServer.for_app(app, stop_seconds=1.0)
    uvloop.run(server.serve(sockets=[sock]))


def serve_gateway(upstream_port: int) -> None:
    """The gateway member's door (DoorAuth, the relay) in front of the upstream."""
    import logging

    from gateway.relay.client import UpstreamClient
    from gateway.relay.tasks import build_gateway_door

    logging.disable(logging.WARNING)
    policy, token = _formation_policy()
    base = f"http://127.0.0.1:{upstream_port}"
    import httpx

    card = httpx.get(base + "/.well-known/agent-card.json", timeout=5).json()
    client = UpstreamClient(base + "/", member="coder", headers={})
    door = build_gateway_door(client, card, _settings(), policy=policy)
    sock = _socket()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    print(f"TOKEN {token}", flush=True)  # our own pipe, read by the orchestrator only
    _run_door(door.app, sock)


def serve_door() -> None:
    """A member's door with a trivial local agent and DoorAuth (formation tokens)."""
    import logging

    from gateway.door.app import build_door
    from gateway.door.tasks import TaskRun

    logging.disable(logging.WARNING)

    async def trivial(run: TaskRun) -> str:
        return "ok"

    policy, token = _formation_policy()
    door = build_door(trivial, _settings(), policy=policy)
    sock = _socket()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    print(f"TOKEN {token}", flush=True)
    _run_door(door.app, sock)


def serve_proxy(door_port: int) -> None:
    """A member's forward proxy whose only callee is ``coder`` at ``door_port``; the
    formation token arrives on stdin."""
    import uvloop

    from gateway.proxy.aiohttp_transport import default_inner_transport
    from gateway.proxy.formation import FormationTransport
    from gateway.proxy.forward import ForwardProxy

    token = sys.stdin.readline().strip()
    door_url = f"http://127.0.0.1:{door_port}"

    class Doors:
        async def wait_for(self, name: str, timeout: float) -> str:
            return door_url

    async def main() -> None:
        transport = FormationTransport(default_inner_transport(), tokens={"coder": token},
                                       doors=Doors(), allow=["localhost"])
        proxy = ForwardProxy(transport, trust=lambda: "untrusted")
        await proxy.start()
        secret = proxy.url.split("//", 1)[1].split("@", 1)[0]
        print(f"PORT {proxy.port}", flush=True)
        print(f"PROXYAUTH {base64.b64encode(secret.encode()).decode()}", flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


def serve_pipe(door_port: int) -> None:
    """The byte pipe: for each connection, one to the door, and bytes copied both ways as
    they arrive (asyncio protocols, no parsing, no checks)."""
    import uvloop

    class Pipe(asyncio.Protocol):
        def __init__(self, peer: Pipe | None = None) -> None:
            self.peer = peer
            self.transport: Any = None
            self.early: list[bytes] = []      # what came before the door's connection

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            if self.peer is not None:         # the door's side: the agent's is waiting
                self.peer.peer = self
                transport.write(b"".join(self.peer.early))

        def data_received(self, data: bytes) -> None:
            peer = self.peer
            if peer is not None and peer.transport is not None:
                peer.transport.write(data)
            else:
                self.early.append(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        opening: set[asyncio.Task[Any]] = set()

        def accepted() -> Pipe:
            agent_side = Pipe()
            task = loop.create_task(loop.create_connection(lambda: Pipe(agent_side),
                                                           "127.0.0.1", door_port))
            opening.add(task)
            task.add_done_callback(opening.discard)
            return agent_side

        server = await loop.create_server(accepted, sock=_socket())
        print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


# --- the load generator ----------------------------------------------------------------


def rpc_request(target: dict[str, str], method: str, params: dict[str, Any]) -> bytes:
    """One request: to a server (``host`` and a bearer ``token`` if any), or through the
    forward proxy (``proxy_auth``: an absolute-form URL and Proxy-Authorization)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                      separators=(",", ":")).encode()
    if target.get("proxy_auth"):
        lines = ["POST http://coder.formation.invalid/ HTTP/1.1",
                 "Host: coder.formation.invalid",
                 f"Proxy-Authorization: Basic {target['proxy_auth']}"]
    else:
        lines = ["POST / HTTP/1.1", f"Host: {target['host']}"]
        if target.get("token"):
            lines.append(f"Authorization: Bearer {target['token']}")
    lines += ["Content-Type: application/json", "A2A-Version: 1.0",
              f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def load(port: int, target: dict[str, str], method: str, duration: float,
               concurrency: int) -> dict[str, Any]:
    first = Connection(*await asyncio.open_connection("127.0.0.1", port))
    status, body = await first.request(rpc_request(target, "SendMessage", send_params()))
    if status != 200:
        raise SystemExit(f"the first SendMessage got HTTP {status}: {body[:300]!r}")
    task = json.loads(body)["result"]["task"]
    get_raw = rpc_request(target, "GetTask", {"id": task["id"], "historyLength": 0})
    expect = b'"TASK_STATE_COMPLETED"'
    latencies: list[float] = []
    errors = total = 0
    start = time.perf_counter()
    measure_from = start + WARMUP_SECONDS
    stop = measure_from + duration

    async def worker() -> None:
        nonlocal errors, total
        connection = Connection(*await asyncio.open_connection("127.0.0.1", port))
        clock = time.perf_counter
        while True:
            raw = get_raw if method == "GetTask" else rpc_request(
                target, "SendMessage", send_params())
            began = clock()
            if began >= stop:
                break
            status, body = await connection.request(raw)
            total += 1
            if status != 200 or expect not in body:
                errors += 1
            elif began >= measure_from:
                latencies.append(clock() - began)
        connection.writer.close()

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))),
                           duration + WARMUP_SECONDS + 30)
    first.writer.close()
    latencies.sort()
    count = len(latencies)
    return {"requests": count, "errors": errors, "all_requests": total + 1,
            "rps": round(count / duration, 1),
            "p50_ms": round(latencies[count // 2] * 1000, 3) if count else None,
            "p99_ms": round(latencies[min(count - 1, int(count * 0.99))] * 1000, 3)
            if count else None}


def run_load(args: argparse.Namespace) -> None:
    import uvloop

    target = json.loads(sys.stdin.readline())
    result = uvloop.run(load(args.port, target, args.method, args.duration, args.concurrency))
    print(json.dumps(result), flush=True)


# --- the orchestrator -------------------------------------------------------------------


class Server:
    """A server process and what its first lines said (``PORT``, and a secret)."""

    def __init__(self, name: str, argv: list[str], stdin_line: str = "") -> None:
        self.name = name
        self.process = subprocess.Popen([sys.executable, __file__, *argv], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        if stdin_line:
            self.process.stdin.write(stdin_line + "\n")
            self.process.stdin.flush()
        first = self.process.stdout.readline().split()
        if len(first) != 2 or first[0] != "PORT":
            self.process.kill()
            raise SystemExit(f"{name} did not report its port")
        self.port = int(first[1])
        self.lines: dict[str, str] = {}
        if argv[1] in ("gateway", "door", "proxy"):
            key, _, value = self.process.stdout.readline().rstrip("\n").partition(" ")
            self.lines[key] = value
        wait_ready(self.port)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def measure(server: Server, cpu_pids: list[int], target: dict[str, str], method: str,
            args: argparse.Namespace) -> dict[str, Any]:
    """One phase; besides the rate, the CPU the serving processes spent per request."""
    before = sum(cpu_seconds(pid) for pid in cpu_pids)
    completed = subprocess.run(
        [sys.executable, __file__, "--load", "--port", str(server.port), "--method", method,
         "--duration", str(args.duration), "--concurrency", str(args.concurrency)],
        cwd=ROOT, input=json.dumps(target) + "\n", capture_output=True, text=True,
        timeout=args.duration + WARMUP_SECONDS + 60, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"load against {server.name} {method} failed:\n"
                         f"{completed.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    spent = sum(cpu_seconds(pid) for pid in cpu_pids) - before
    result["serving_cpu_us_per_request"] = round(spent / result["all_requests"] * 1e6, 1)
    return result


def orchestrate(args: argparse.Namespace) -> None:
    began = time.monotonic()
    servers: list[Server] = []
    try:
        upstream = Server("upstream", ["--serve", "upstream"])
        servers.append(upstream)
        gateway = Server("gateway", ["--serve", "gateway", "--upstream-port", str(upstream.port)])
        servers.append(gateway)
        door = Server("door", ["--serve", "door"])
        servers.append(door)
        proxy = Server("proxy", ["--serve", "proxy", "--door-port", str(door.port)],
                       stdin_line=door.lines["TOKEN"])
        servers.append(proxy)
        pipe = Server("pipe", ["--serve", "pipe", "--door-port", str(door.port)])
        servers.append(pipe)
        # What each phase talks to, and whose CPU serves it.
        phases: dict[str, tuple[Server, list[int], dict[str, str]]] = {
            "upstream": (upstream, [upstream.process.pid],
                         {"host": f"127.0.0.1:{upstream.port}"}),
            "gateway": (gateway, [gateway.process.pid, upstream.process.pid],
                        {"host": f"127.0.0.1:{gateway.port}", "token": gateway.lines["TOKEN"]}),
            "door": (door, [door.process.pid],
                     {"host": f"127.0.0.1:{door.port}", "token": door.lines["TOKEN"]}),
            "proxy": (proxy, [proxy.process.pid, door.process.pid],
                      {"proxy_auth": proxy.lines["PROXYAUTH"]}),
            "pipe": (pipe, [pipe.process.pid, door.process.pid],
                     {"host": f"127.0.0.1:{door.port}", "token": door.lines["TOKEN"]}),
        }
        rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {method: [] for method in METHODS} for name in phases}
        for number in range(args.rounds):
            for method in METHODS:
                for name, (server, pids, target) in phases.items():
                    row = measure(server, pids, target, method, args)
                    rounds[name][method].append(row)
                    print(f"round {number + 1}: {name:9} {method:12} {row['rps']:>9} req/s  "
                          f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  serving CPU "
                          f"{row['serving_cpu_us_per_request']} us/req  errors {row['errors']}",
                          flush=True)
    finally:
        for server in reversed(servers):
            server.stop()
    ratios: dict[str, float] = {}
    for name, through, direct in PAIRS:
        for method in METHODS:
            pairs = list(zip(rounds[through][method], rounds[direct][method], strict=True))
            ratios[f"{name}_{method}"] = round(statistics.median(
                a["rps"] / b["rps"] for a, b in pairs if b["rps"]), 3)
    results = {name: {method: sorted(rows, key=lambda row: row["rps"])[len(rows) // 2]
                      for method, rows in by_method.items()}
               for name, by_method in rounds.items()}
    document = {"benchmark": "bench_gateway", "cores": os.cpu_count(),
                "concurrency": args.concurrency, "seconds_per_phase": args.duration,
                "rounds": args.rounds, "results": results, "ratios": ratios,
                "goals": GOALS,
                "wall_seconds": round(time.monotonic() - began, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_gateway.json").write_text(json.dumps(document, indent=2) + "\n")
    (RESULTS / "bench_gateway.md").write_text(_table(results, ratios))
    for name, value in ratios.items():
        print(f"{name:28} {value}")


def _table(results: dict[str, dict[str, dict[str, Any]]], ratios: dict[str, float]) -> str:
    lines = [f"# Gateway benchmark ({os.cpu_count()} cores, one run, median of the rounds)",
             "", "| path | method | req/s | p50 ms | p99 ms | serving CPU us/req | errors |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, by_method in results.items():
        for method, row in by_method.items():
            lines.append(f"| {name} | {method} | {row['rps']} | {row['p50_ms']} | "
                         f"{row['p99_ms']} | {row['serving_cpu_us_per_request']} | "
                         f"{row['errors']} |")
    lines += ["", "| ratio (through / direct) | value | goal |", "|---|---:|---|"]
    for name, value in ratios.items():
        lines.append(f"| {name} | {value} | {GOALS[name.rsplit('_', 1)[0]]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=("upstream", "gateway", "door", "proxy", "pipe"))
    parser.add_argument("--upstream-port", type=int)
    parser.add_argument("--door-port", type=int)
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--port", type=int)
    parser.add_argument("--method", choices=METHODS)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    if args.serve == "upstream":
        serve_upstream()
    elif args.serve == "gateway":
        serve_gateway(args.upstream_port)
    elif args.serve == "door":
        serve_door()
    elif args.serve == "proxy":
        serve_proxy(args.door_port)
    elif args.serve == "pipe":
        serve_pipe(args.door_port)
    elif args.load:
        run_load(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
