"""Benchmark: what DoorAuth costs on the request path (issue 2 "Speed").

1. In-process: the same Starlette JSON-RPC app, called through the ASGI interface with and
   without DoorAuth in front, for a GetTask-sized request carrying a formation token that
   the verifier has cached (and, for comparison, the operator token). Prints requests/s,
   p50/p99 latency and the ratio with/without (goal >= 0.9).
2. Over a real socket: the same two apps served by uvicorn on 127.0.0.1, loaded by wrk in
   another process, when ``wrk`` is installed; otherwise a note says it was skipped.

The app without DoorAuth parses the body with json.loads as a plain Starlette handler
would; behind DoorAuth it takes the request DoorAuth already parsed from the scope
(``gateway.caller.RPC_SCOPE_KEY``), as the door's A2A layer does. A third row shows the
worst case, an app that parses the body again behind DoorAuth.

The machine is shared and noisy, so both apps take turns on small batches of requests
and every figure compares batches run side by side. Bounded: fixed request counts, and
no new round starts after ``--budget`` seconds (default 25); wrk runs ``--wrk-seconds``.
No token is put in an argument list, the environment or a file: wrk reads its Lua script
(which carries the header) from an anonymous in-memory file it inherits.

Run: .venv/bin/python loadtests/bench_auth.py [--budget S] [--wrk-seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from gateway.auth.credentials import OperatorToken  # noqa: E402
from gateway.auth.door_auth import AuthPolicy, DoorAuth  # noqa: E402
from gateway.auth.tokens import FormationKey, FormationVerifier, ed25519_backend  # noqa: E402
from gateway.caller import RPC_SCOPE_KEY  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FORMATION = "frm_0190c0de00007000800000000000beef"
GOAL_RATIO = 0.9
TASK_ID = "0190c0de-0000-7000-8000-000000000001"
#: A GetTask answer of realistic size: one completed task with a short text artifact.
TASK = {
    "id": TASK_ID, "contextId": "0190c0de-0000-7000-8000-0000000000c1",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
    "artifacts": [{"artifactId": "result", "name": "result",
                   "parts": [{"text": "The patch is ready: 3 files changed, tests pass."}]}],
    "history": [],
}
BODY = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "GetTask",
                   "params": {"id": TASK_ID, "historyLength": 0}}).encode()


async def get_task(request: Request) -> Response:
    """A JSON-RPC GetTask handler; uses the request DoorAuth parsed when there is one."""
    document = request.scope.get(RPC_SCOPE_KEY)
    if document is None:
        document = json.loads(await request.body())
    return task_answer(document)


async def get_task_parsing_again(request: Request) -> Response:
    """The same handler for an app that ignores what DoorAuth parsed (the worst case)."""
    return task_answer(json.loads(await request.body()))


def task_answer(document: dict[str, Any]) -> Response:
    answer = {"jsonrpc": "2.0", "id": document.get("id"), "result": TASK}
    return Response(json.dumps(answer, separators=(",", ":")), media_type="application/json")


def build_scenarios() -> list[tuple[str, Any, Any, bytes]]:
    """(label, the bare app, the same app behind DoorAuth, the Authorization to send)."""
    key = FormationKey.generate()
    operator = OperatorToken.generate()
    policy = AuthPolicy(authenticated=True, operator=operator,
                        verifier=FormationVerifier(key.public_bytes, FORMATION),
                        member="coder", accept_peer_tasks=True)
    token = b"Bearer " + key.mint(formation=FORMATION, caller="planner",
                                  callee="coder").encode()
    reusing = Starlette(routes=[Route("/", get_task, methods=["POST"])])
    parsing = Starlette(routes=[Route("/", get_task_parsing_again, methods=["POST"])])
    return [
        ("formation token (cached)", reusing, DoorAuth(reusing, policy), token),
        ("operator token", reusing, DoorAuth(reusing, policy),
         b"Bearer " + operator.value.encode()),
        ("formation token (cached), app parses the body again", parsing,
         DoorAuth(parsing, policy), token),
    ]


# -- in-process --------------------------------------------------------------------------


def headers_with(authorization: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench_auth"),
            (b"accept", b"application/json"), (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()), (b"a2a-version", b"1.0"),
            (b"authorization", authorization), (b"x-murmur-task-trust", b"untrusted")]


async def one_request(app: Any, headers: list[tuple[bytes, bytes]]) -> None:
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": "POST", "scheme": "http", "path": "/",
             "raw_path": b"/", "query_string": b"", "root_path": "", "headers": list(headers),
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 51000)}
    delivered = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    if status != 200:
        raise SystemExit(f"the benchmark request was answered {status}, not 200")


async def in_process(bare: Any, door: Any, authorization: bytes, budget: float,
                     batch: int = 200, rounds: int = 300) -> dict[str, Any]:
    headers = headers_with(authorization)
    for app in (bare, door):  # warm up: caches, imports, the verifier's first sight
        for _ in range(200):
            await one_request(app, headers)
    latencies: dict[str, list[int]] = {"without": [], "with": []}
    ratios: list[float] = []
    deadline = time.perf_counter() + budget
    clock = time.perf_counter_ns
    for turn in range(rounds):
        if turn >= 5 and time.perf_counter() > deadline:
            break
        spent = {}
        order = [("without", bare), ("with", door)]
        for name, app in order if turn % 2 == 0 else order[::-1]:
            samples = latencies[name]
            began = clock()
            for _ in range(batch):
                start = clock()
                await one_request(app, headers)
                samples.append(clock() - start)
            spent[name] = clock() - began
        ratios.append(spent["without"] / spent["with"])
    return summarize(latencies, ratios)


def summarize(latencies: dict[str, list[int]], ratios: list[float]) -> dict[str, Any]:
    def stats(samples: list[int]) -> dict[str, float]:
        ordered = sorted(samples)
        return {"per_s": round(len(ordered) / (sum(ordered) / 1e9)),
                "p50_us": round(ordered[len(ordered) // 2] / 1000, 2),
                "p99_us": round(ordered[int(len(ordered) * 0.99)] / 1000, 2)}

    return {"without": stats(latencies["without"]), "with": stats(latencies["with"]),
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_overall": round(sum(latencies["without"]) / sum(latencies["with"]), 3),
            "batches": len(ratios)}


# -- over a socket, with wrk -------------------------------------------------------------


class Served:
    """An app served by uvicorn on 127.0.0.1 (an OS-chosen port) in a thread of its own."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise SystemExit("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ScriptInMemory:
    """wrk's Lua script (it carries the token) in an anonymous memory file, handed to wrk
    as an inherited descriptor: each time wrk opens ``/dev/fd/N`` (once to start, once
    per thread) it reads the whole script, and the token never rests in a file."""

    def __init__(self, script: str) -> None:
        self.fd = os.memfd_create("bench-auth-request.lua")
        os.write(self.fd, script.encode())

    def __enter__(self) -> tuple[str, int]:
        return f"/dev/fd/{self.fd}", self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def lua_script(authorization: bytes) -> str:
    headers = {"Content-Type": "application/json", "Authorization": authorization.decode(),
               "x-murmur-task-trust": "untrusted"}
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(BODY.decode())}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    return "\n".join(lines) + "\n"


def parse_wrk(output: str) -> dict[str, float]:
    """Requests/s and the 50%/99% latencies (in microseconds) from ``wrk --latency``."""
    units = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}

    def latency(percent: str) -> float:
        match = re.search(rf"^\s*{percent}%\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
        if match is None:
            raise ValueError(f"no {percent}% line in wrk's output")
        return round(float(match.group(1)) * units[match.group(2)], 1)

    rate = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    if rate is None:
        raise ValueError("no Requests/sec line in wrk's output")
    return {"per_s": round(float(rate.group(1))), "p50_us": latency("50"),
            "p99_us": latency("99"), "non_2xx": int(non_2xx.group(1)) if non_2xx else 0}


def over_socket(wrk: str, bare: Any, door: Any, authorization: bytes,
                seconds: int) -> dict[str, Any]:
    measured: dict[str, Any] = {}
    with ScriptInMemory(lua_script(authorization)) as (script, fd):
        for name, app in (("without", bare), ("with", door)):
            with Served(app) as url:
                command = [wrk, "-t1", "-c16", f"-d{seconds}s", "--latency", "-s", script, url]
                done = subprocess.run(command, capture_output=True, text=True, pass_fds=(fd,),
                                      timeout=seconds + 30, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"wrk failed: {done.stderr.strip()[:300]}")
                measured[name] = parse_wrk(done.stdout)
    measured["ratio"] = round(measured["with"]["per_s"] / measured["without"]["per_s"], 3)
    return measured


# -- results -----------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# bench_auth",
        "",
        f"Python {result['python']}; Ed25519 backend `{result['backend']}`. A GetTask JSON-RPC "
        "request to a Starlette app, with and without DoorAuth in front; batches of the two "
        "interleaved.",
        "",
        "| path | credential | without DoorAuth (req/s, p50, p99) | with DoorAuth (req/s, p50, "
        "p99) | ratio | goal |",
        "|---|---|---|---|---:|---|",
    ]
    for credential, figures in result["in_process"].items():
        without, with_ = figures["without"], figures["with"]
        goal = "worst case, for information" if "again" in credential else f">= {GOAL_RATIO}"
        lines.append(
            f"| in-process ASGI | {credential} | {without['per_s']:,}/s, {without['p50_us']} us, "
            f"{without['p99_us']} us | {with_['per_s']:,}/s, {with_['p50_us']} us, "
            f"{with_['p99_us']} us | {figures['ratio_median']} (overall "
            f"{figures['ratio_overall']}) | {goal} |")
    socket = result["socket"]
    if "skipped" in socket:
        lines.append(f"| uvicorn socket + wrk | | skipped: {socket['skipped']} | | | |")
    else:
        without, with_ = socket["without"], socket["with"]
        lines.append(
            f"| uvicorn socket + wrk | formation token (cached) | {without['per_s']:,}/s, "
            f"{without['p50_us']} us, {without['p99_us']} us | {with_['per_s']:,}/s, "
            f"{with_['p50_us']} us, {with_['p99_us']} us | {socket['ratio']} | >= {GOAL_RATIO} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=25.0,
                        help="seconds after which no new in-process round starts")
    parser.add_argument("--wrk-seconds", type=int, default=5, help="duration of each wrk run")
    args = parser.parse_args()

    scenarios = build_scenarios()
    result: dict[str, Any] = {"benchmark": "bench_auth", "python": platform.python_version(),
                              "backend": ed25519_backend(), "goal_ratio": GOAL_RATIO,
                              "in_process": {}}
    share = args.budget / len(scenarios)
    for name, bare, door, authorization in scenarios:
        result["in_process"][name] = asyncio.run(in_process(bare, door, authorization, share))
    wrk = shutil.which("wrk")
    if wrk is None or not hasattr(os, "memfd_create"):
        note = ("wrk is not installed (install it, e.g. apt-get install wrk, to measure this)"
                if wrk is None else "needs Linux (memfd_create) to hand wrk its script")
        print(f"note: socket benchmark skipped: {note}")
        result["socket"] = {"skipped": note}
    else:
        _, bare, door, authorization = scenarios[0]
        result["socket"] = over_socket(wrk, bare, door, authorization, args.wrk_seconds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_auth.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "bench_auth.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
