"""The proxy hop: GetTask and SendMessage through FormationTransport vs the same client
straight to the door URL with the same token, in one run, at 32 concurrent calls.

The door is a real uvicorn server in another process on 127.0.0.1:
  --target stub   a minimal Starlette JSON-RPC app answering GetTask and SendMessage
  --target door   the project's door (gateway.door.app.build_door) behind DoorAuth, with a
                  real formation key: the token is minted here, the door gets only the
                  public key

Configurations (an inner transport and a client):
  baseline                  plain httpx.AsyncClient on httpx's own transport, as it ran
                            before sniffio was a dependency (``import sniffio`` fails, and
                            is retried, on every pool lock): the "plain httpx" of the goal
  httpx / task.http         FormationClient (the class of task.http) on httpx's transport
  aiohttp / task.http       FormationClient on gateway.proxy.aiohttp_transport.AiohttpTransport
  httpx / call-member       gateway.proxy.call_member.JsonRpcSender (what call-member sends
  aiohttp / call-member     with) on each inner transport

Each is measured ``direct`` (to http://127.0.0.1:<port>/, Authorization set by hand) and
``proxy`` (through FormationTransport to http://coder.formation.invalid/), back to back in
alternating order for --rounds rounds; proxy/direct is the median of the rounds' ratios.
Every loop is bounded by --calls and --seconds.

    .venv/bin/python loadtests/bench_proxy.py [--target stub|door] [--quick]

Writes loadtests/results/bench_proxy.json and bench_proxy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.proxy.call_member import JsonRpcSender  # noqa: E402
from gateway.proxy.formation import FormationClient, FormationTransport  # noqa: E402

RESULTS = ROOT / "loadtests" / "results"
FORMATION = "frm_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b"
STUB_TOKEN = "mft1.c3R1Yg.bm90LWEtcmVhbC1zaWduYXR1cmU"
METHODS = ("GetTask", "SendMessage")


# --------------------------------------------------------------------------------------
# The server process


def stub_app() -> Any:
    """A minimal Starlette JSON-RPC door: GetTask and SendMessage, bearer required."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    task = {"id": "task-1", "contextId": "ctx-1", "status": {"state": "TASK_STATE_WORKING"}}

    async def rpc(request: Request) -> JSONResponse:
        if not request.headers.get("authorization", "").startswith("Bearer mft1."):
            return JSONResponse({"error": "unauthenticated", "message": "no"}, 401)
        body = await request.json()
        method = body.get("method")
        if method == "GetTask":
            result: Any = task
        elif method == "SendMessage":
            result = {"task": {**task, "status": {"state": "TASK_STATE_SUBMITTED"}}}
        else:
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"),
                                 "error": {"code": -32601, "message": "Method not found"}})
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": result})

    return Starlette(routes=[Route("/", rpc, methods=["POST"])])


def door_app(public_key: bytes) -> Any:
    """The project's door for member ``coder``, accepting formation tokens."""
    from gateway.auth.door_auth import AuthPolicy
    from gateway.auth.tokens import FormationVerifier
    from gateway.door.app import DoorSettings, build_door
    from gateway.door.card import CardInfo
    from gateway.door.tasks import GateConfig

    async def agent(task: Any) -> str:
        return "ok"

    settings = DoorSettings(card=CardInfo(name="coder", description="bench",
                                          version="1.0.0", member="coder",
                                          formation_id=FORMATION),
                            gate=GateConfig(concurrency=64, queue_depth=100_000),
                            max_finished_tasks=200_000)
    policy = AuthPolicy(authenticated=True, verifier=FormationVerifier(public_key, FORMATION),
                        member="coder", accept_peer_tasks=True)
    return build_door(agent, settings, policy=policy).app


def serve(target: str) -> None:
    """Child process: serve ``target`` on 127.0.0.1:0, print the port, run until stdin
    closes."""
    import socket

    import uvicorn

    if target == "door":
        app = door_app(bytes.fromhex(sys.stdin.readline().strip()))
    else:
        app = stub_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False, loop="uvloop",
                            http="httptools", lifespan="off", backlog=2048)
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:                    # listening: announce the port
            if serving.done():
                await serving
                return
            await asyncio.sleep(0.01)
        print(f"PORT {sock.getsockname()[1]}", flush=True)
        await asyncio.to_thread(sys.stdin.read)      # the parent closes stdin to stop us
        server.should_exit = True
        await serving

    import uvloop
    uvloop.run(main())


@contextlib.contextmanager
def server_process(target: str, public_key: bytes | None) -> Iterator[int]:
    child = subprocess.Popen([sys.executable, __file__, "--serve", target],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    assert child.stdin is not None and child.stdout is not None
    try:
        if public_key is not None:
            child.stdin.write(public_key.hex() + "\n")
            child.stdin.flush()
        line = child.stdout.readline()
        if not line.startswith("PORT "):
            raise SystemExit(f"the {target} server did not start: {line!r}")
        yield int(line.split()[1])
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


# --------------------------------------------------------------------------------------
# The client side


class _MissingSniffio(importlib.abc.MetaPathFinder):
    """``import sniffio`` fails as it does when sniffio is not installed: after a search
    of every sys.path entry for a module that is not there."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == "sniffio":
            importlib.machinery.PathFinder.find_spec("sniffio_is_not_installed")
            raise ModuleNotFoundError("No module named 'sniffio'", name="sniffio")
        return None


@contextlib.contextmanager
def sniffio_hidden() -> Iterator[None]:
    saved = sys.modules.pop("sniffio", None)
    finder = _MissingSniffio()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        if saved is not None:
            sys.modules["sniffio"] = saved


def make_inner(kind: str) -> httpx.AsyncBaseTransport:
    if kind == "aiohttp":
        from gateway.proxy.aiohttp_transport import AiohttpTransport
        return AiohttpTransport(limit=100)
    return httpx.AsyncHTTPTransport()          # httpx's defaults, as a plain client has


class StaticDoors:
    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls

    async def wait_for(self, name: str, timeout: float) -> str:
        return self.urls[name]


@dataclass
class Run:
    transport: str
    mode: str
    method: str
    round: int
    calls: int
    errors: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_us_per_call: float


@dataclass(frozen=True)
class Config:
    name: str
    inner: str          # "httpx" | "aiohttp"
    client: str         # "plain" | "task.http" | "call-member"

    @property
    def modes(self) -> tuple[str, ...]:
        return ("plain",) if self.client == "plain" else ("direct", "proxy")


CONFIGS = {
    "baseline": Config("baseline", "httpx", "plain"),
    "httpx/task.http": Config("httpx / task.http", "httpx", "task.http"),
    "aiohttp/task.http": Config("aiohttp / task.http", "aiohttp", "task.http"),
    "httpx/call-member": Config("httpx / call-member", "httpx", "call-member"),
    "aiohttp/call-member": Config("aiohttp / call-member", "aiohttp", "call-member"),
}


class Caller:
    """One JSON-RPC call at a time through the configured client."""

    def __init__(self, config: Config, mode: str, port: int, token: str) -> None:
        inner = make_inner(config.inner)
        direct = mode in ("plain", "direct")
        self.url = f"http://127.0.0.1:{port}/" if direct else "http://coder.formation.invalid/"
        auth = {"Authorization": f"Bearer {token}"} if direct else {}
        transport: httpx.AsyncBaseTransport = inner if direct else FormationTransport(
            inner, tokens={"coder": token},
            doors=StaticDoors({"coder": f"http://127.0.0.1:{port}"}),
            allow=["localhost"], trust=lambda: "trusted")
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._sender: JsonRpcSender | None = None
        if config.client == "plain":
            self._client = httpx.AsyncClient(transport=transport, headers=auth)
        elif config.client == "task.http":
            self._client = FormationClient(transport=transport, headers=auth)
        else:
            self._sender = JsonRpcSender(transport, headers=auth)

    async def call(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self._sender is not None:
            status, content = await self._sender.send(self.url, body)
            return status, json.loads(content)
        assert self._client is not None
        response = await self._client.post(self.url, json=body,
                                           headers={"A2A-Version": "1.0"})
        return response.status_code, response.json()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        else:
            await self._transport.aclose()


def body_maker(method: str, task_id: str) -> Callable[[int], dict[str, Any]]:
    if method == "GetTask":
        return lambda n: {"jsonrpc": "2.0", "id": n, "method": "GetTask",
                          "params": {"id": task_id}}
    return lambda n: {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
        "message": {"messageId": f"m{n}-{time.monotonic_ns()}", "role": "ROLE_USER",
                    "parts": [{"text": "bench"}]},
        "configuration": {"returnImmediately": True}}}


async def seed_task(caller: Caller) -> str:
    """A task this caller started, for GetTask (a formation token sees only its own)."""
    _, document = await caller.call(body_maker("SendMessage", "")(0))
    result = document.get("result") or {}
    return str((result.get("task") or {}).get("id", "task-1"))


async def load(caller: Caller, make_body: Callable[[int], dict[str, Any]], *,
               concurrency: int, calls: int, seconds: float
               ) -> tuple[list[float], int, float]:
    latencies: list[float] = []
    errors = 0
    issued = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal issued, errors
        while issued < calls and time.perf_counter() < stop_at:
            issued += 1
            started = time.perf_counter()
            try:
                status, document = await caller.call(make_body(issued))
                if status != 200 or "result" not in document:
                    errors += 1
            except httpx.HTTPError:
                errors += 1
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - started


async def measure(config: Config, mode: str, method: str, round_no: int, port: int,
                  token: str, args: argparse.Namespace) -> Run:
    caller = Caller(config, mode, port, token)
    try:
        make_body = body_maker(method, await seed_task(caller))
        await load(caller, make_body, concurrency=args.concurrency, calls=args.warmup,
                   seconds=args.seconds)
        cpu = time.process_time()
        latencies, errors, elapsed = await load(caller, make_body,
                                                concurrency=args.concurrency,
                                                calls=args.calls, seconds=args.seconds)
        cpu = time.process_time() - cpu
    finally:
        await caller.aclose()
    ordered = sorted(latencies)
    count = len(ordered)
    return Run(config.name, mode, method, round_no, count, errors, round(elapsed, 3),
               round(count / elapsed, 1),
               round(ordered[count // 2] * 1000, 3),
               round(ordered[min(count - 1, int(count * 0.99))] * 1000, 3),
               round(cpu / max(count, 1) * 1e6, 1))


async def bench(port: int, token: str, configs: list[Config],
                args: argparse.Namespace) -> list[Run]:
    """Round-robin: each round measures every configuration, method and mode once, the
    two modes of a pair back to back in alternating order, so every figure is spread
    over the whole run and shares whatever else the machine was doing."""
    runs = []
    for round_no in range(args.rounds):
        for config in configs:
            for method in METHODS:
                modes = config.modes if round_no % 2 == 0 else config.modes[::-1]
                for mode in modes:
                    guard = sniffio_hidden() if config.client == "plain" \
                        else contextlib.nullcontext()
                    with guard:
                        run = await measure(config, mode, method, round_no, port, token,
                                            args)
                    runs.append(run)
                    print(f"  round {round_no} {config.name:21} {mode:6} {method:11}: "
                          f"{run.calls_per_s:8.1f} calls/s  p50 {run.p50_ms:6.2f} ms  "
                          f"p99 {run.p99_ms:6.2f} ms  cpu {run.client_cpu_us_per_call:6.1f} "
                          f"us/call  errors {run.errors}", flush=True)
    return runs


class _Canned(httpx.AsyncBaseTransport):
    """An inner transport that costs nothing: what is left is the client and the hop."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return httpx.Response(200, headers=[(b"content-type", b"application/json")],
                              content=b'{"jsonrpc":"2.0","id":1,"result":{}}')


async def hop_cost(rounds: int, calls: int) -> dict[str, float]:
    """CPU per call of the client alone, direct vs through the proxy, in-process on a
    canned inner transport: the hop's own cost, free of network and server noise. Many
    short alternating rounds, the fastest of each kind (noise only ever adds)."""
    samples: dict[str, list[float]] = {"direct": [], "proxy": []}
    body = body_maker("GetTask", "task-1")(1)
    for round_no in range(rounds):
        for mode in ("direct", "proxy") if round_no % 2 == 0 else ("proxy", "direct"):
            inner = _Canned()
            if mode == "direct":
                client = FormationClient(transport=inner,
                                         headers={"Authorization": f"Bearer {STUB_TOKEN}"})
                url = "http://127.0.0.1:4000/"
            else:
                client = FormationClient(transport=FormationTransport(
                    inner, tokens={"coder": STUB_TOKEN},
                    doors=StaticDoors({"coder": "http://127.0.0.1:4000"}),
                    allow=["localhost"], trust=lambda: "trusted"))
                url = "http://coder.formation.invalid/"
            async with client:
                for _ in range(200):
                    (await client.post(url, json=body)).json()
                started = time.process_time()
                for _ in range(calls):
                    (await client.post(url, json=body)).json()
                samples[mode].append((time.process_time() - started) / calls * 1e6)
    direct = min(samples["direct"])
    proxy = min(samples["proxy"])
    return {"direct_cpu_us_per_call": round(direct, 1), "proxy_cpu_us_per_call": round(proxy, 1),
            "hop_cpu_us_per_call": round(proxy - direct, 1)}


def summarize(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Per (configuration, method, mode): the best round's calls/s and the lowest client
    CPU per call (other load on the machine only ever lowers the one and raises the
    other), and medians. proxy/direct is best over best; the median of the rounds'
    back-to-back ratios is kept beside it."""
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.transport, run.method, run.mode), []).append(run)
    summary: dict[str, dict[str, Any]] = {}
    for (name, method, mode), group in groups.items():
        summary.setdefault(f"{name} | {method}", {})[mode] = {
            "best_calls_per_s": max(r.calls_per_s for r in group),
            "median_calls_per_s": round(statistics.median(r.calls_per_s for r in group), 1),
            "min_client_cpu_us_per_call": min(r.client_cpu_us_per_call for r in group),
            "median_p50_ms": round(statistics.median(r.p50_ms for r in group), 2),
            "median_p99_ms": round(statistics.median(r.p99_ms for r in group), 2),
            "errors": sum(r.errors for r in group)}
    for method in METHODS:
        baseline = summary.get(f"baseline | {method}", {}).get("plain")
        for key, entry in summary.items():
            name, entry_method = key.split(" | ")
            if entry_method != method or "proxy" not in entry or "direct" not in entry:
                continue
            pairs = {(r.round, r.mode): r.calls_per_s for r in runs
                     if r.transport == name and r.method == method}
            ratios = [pairs[(n, "proxy")] / pairs[(n, "direct")]
                      for n in sorted({n for n, _ in pairs})
                      if (n, "proxy") in pairs and (n, "direct") in pairs]
            entry["proxy_over_direct"] = round(entry["proxy"]["best_calls_per_s"]
                                               / entry["direct"]["best_calls_per_s"], 3)
            entry["proxy_over_direct_median_of_pairs"] = round(statistics.median(ratios), 3)
            if baseline:
                entry["proxy_over_baseline"] = round(
                    entry["proxy"]["best_calls_per_s"] / baseline["best_calls_per_s"], 2)
    return summary


def markdown(summary: dict[str, dict[str, Any]], hop: dict[str, float] | None,
             meta: dict[str, Any]) -> str:
    lines = [
        "# Proxy hop benchmark",
        "",
        f"Target `{meta['target']}` (uvicorn + httptools + uvloop, another process, "
        f"127.0.0.1), {meta['concurrency']} concurrent calls, {meta['rounds']} round-robin "
        f"rounds of at most {meta['calls']} calls / {meta['seconds']} s per figure, client "
        f"loop `{meta['loop']}`, {meta['cpus']} CPUs shared by client, server and whatever "
        "else runs. calls/s: the best round; CPU: the lowest; p99: the median. Generated "
        "by `loadtests/bench_proxy.py`.",
        "",
        "| inner transport / client | method | direct calls/s | proxy calls/s "
        "| proxy/direct (median of pairs) | proxy vs baseline "
        "| client CPU us/call direct / proxy | p99 ms direct / proxy |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, entry in summary.items():
        name, method = key.split(" | ")
        direct, proxy = entry.get("direct", entry.get("plain", {})), entry.get("proxy", {})
        if "plain" in entry:
            name = "baseline: plain httpx, no sniffio"
        ratio = "-"
        if "proxy_over_direct" in entry:
            ratio = (f"{entry['proxy_over_direct']} "
                     f"({entry['proxy_over_direct_median_of_pairs']})")
        lines.append(
            f"| {name} | {method} | {direct.get('best_calls_per_s', '-')} "
            f"| {proxy.get('best_calls_per_s', '-')} | {ratio} "
            f"| {entry.get('proxy_over_baseline', '-')} "
            f"| {direct.get('min_client_cpu_us_per_call', '-')} / "
            f"{proxy.get('min_client_cpu_us_per_call', '-')} "
            f"| {direct.get('median_p99_ms', '-')} / {proxy.get('median_p99_ms', '-')} |")
    if hop:
        lines += ["", "The hop alone (in-process, a canned inner transport, GetTask through "
                  f"task.http): client CPU {hop['direct_cpu_us_per_call']} us/call direct, "
                  f"{hop['proxy_cpu_us_per_call']} us/call through the proxy, so the hop "
                  f"costs {hop['hop_cpu_us_per_call']} us/call."]
    lines += ["", "Goals: proxy/direct >= 0.9; proxy calls/s >= 5x the baseline.", "",
              "| measure | value | goal |", "|---|---:|---|"]
    for key, entry in summary.items():
        if "proxy_over_direct_median_of_pairs" in entry:
            lines.append(f"| {key.replace(' | ', ' ')} proxy/direct (median of pairs) | "
                         f"{entry['proxy_over_direct_median_of_pairs']} | >= 0.9 |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="stub", choices=("stub", "door"))
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"a comma-separated subset of {', '.join(CONFIGS)}")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--loop", default="uvloop", choices=("uvloop", "asyncio"))
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--hop-only", action="store_true",
                        help="measure only the hop alone, in-process (no output files)")
    parser.add_argument("--no-hop", action="store_true",
                        help="skip the in-process measure of the hop alone")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    if args.quick:
        args.calls, args.warmup, args.seconds, args.rounds = 300, 50, 2.0, 2
    configs = [CONFIGS[name.strip()] for name in args.configs.split(",") if name.strip()]
    from gateway.proxy.aiohttp_transport import aiohttp_available
    if not aiohttp_available():
        print("aiohttp is not installed: its rows are skipped", file=sys.stderr)
        configs = [config for config in configs if config.inner != "aiohttp"]
    public_key, token = None, STUB_TOKEN
    if args.target == "door":
        from gateway.auth.tokens import FormationKey
        key = FormationKey.generate()
        public_key = key.public_bytes
        token = key.mint(formation=FORMATION, caller="planner", callee="coder")

    runner: Callable[[Coroutine[Any, Any, Any]], Any] = asyncio.run
    if args.loop == "uvloop":
        import uvloop
        runner = uvloop.run
    with server_process(args.target, public_key) as port:
        print(f"{args.target} on 127.0.0.1:{port}; {args.concurrency} concurrent calls")
        runs = runner(bench(port, token, configs, args)) if not args.hop_only else []
    hop = runner(hop_cost(4 * args.rounds, 1000)) if not args.no_hop else None
    if args.hop_only:
        print(json.dumps(hop))
        return 0
    summary = summarize(runs)
    meta = {"target": args.target, "concurrency": args.concurrency, "calls": args.calls,
            "seconds": args.seconds, "rounds": args.rounds, "loop": args.loop,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "httpx": httpx.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.target == "stub" else f"_{args.target}"
    (args.out / f"bench_proxy{suffix}.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "hop": hop,
         "runs": [asdict(run) for run in runs]},
        indent=2) + "\n")
    table = markdown(summary, hop, meta)
    (args.out / f"bench_proxy{suffix}.md").write_text(table)
    print()
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
