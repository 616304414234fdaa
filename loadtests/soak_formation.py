"""Soak: a busy callee under three callers, through real doors, tokens and proxies.

A real ``mur run --roster`` formation on loopback:

    entry --> c1, c2, c3 --> callee (concurrency 1, queue_depth 2)

The entry member hands each caller its share of ``--calls`` (10,000 in all by default);
each caller keeps ``--in-flight`` calls open with ``task.call_member("callee", ...)``
and awaits every answer, so the callee is refused with -32050 much of the time and the
call-member client waits out its ``retryAfterMs``. Reported:
- calls lost: placed calls that did not end with the callee's answer (goal 0);
- latency of one call (placed to answered), p50 / p99 / max, over all callers;
- the callee's memory (VmRSS) at the formation line, its peak, and at the last look
  before the formation ended.

Bounded: the formation gets ``--deadline`` (default 600 s) and is killed 30 s past it;
every call is answered or fails by then. Writes loadtests/results/soak_formation.{json,md}.

Run: .venv/bin/python loadtests/soak_formation.py [--calls 10000] [--in-flight 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launcher.admission.store import install, pack  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CALLERS = ("c1", "c2", "c3")

ENTRY_AGENT = """
import asyncio, json


async def run(task):
    plan = json.loads(task.text)
    share, extra = divmod(plan["calls"], len(task.peers))
    handles = []
    for index, caller in enumerate(task.peers):
        work = {"calls": share + (1 if index < extra else 0), "in_flight": plan["in_flight"]}
        handles.append(await task.call_member(caller, json.dumps(work)))
    reports = []
    for caller, handle in zip(task.peers, handles):
        try:
            reports.append(json.loads(await handle))
        except Exception as exc:
            reports.append({"caller": caller, "error": f"{type(exc).__name__}: {exc}"})
    return json.dumps(reports)
"""

CALLER_AGENT = """
import asyncio, json, time


async def run(task):
    plan = json.loads(task.text)
    slots = asyncio.Semaphore(plan["in_flight"])
    latencies, failures = [], {}

    async def one(number):
        async with slots:
            started = time.monotonic()
            try:
                handle = await task.call_member("callee", f"{task.member}-{number}")
                answer = await handle
            except Exception as exc:
                kind = getattr(exc, "state", None) or type(exc).__name__
                failures[kind] = failures.get(kind, 0) + 1
                return
            if answer != f"ok {task.member}-{number}":
                failures["wrong answer"] = failures.get("wrong answer", 0) + 1
                return
            latencies.append(time.monotonic() - started)

    await asyncio.gather(*(one(number) for number in range(plan["calls"])))
    return json.dumps({"caller": task.member, "placed": plan["calls"],
                       "answered": len(latencies), "failures": failures,
                       "latencies": [round(value, 5) for value in latencies]})
"""

CALLEE_AGENT = """
async def run(task):
    return f"ok {task.text}"
"""


def capsule(root: Path, name: str, agent: str, *, accept: bool, calls: bool,
            lifecycle: str) -> Path:
    source = root / "src" / name
    source.mkdir(parents=True)
    lines = ["manifest_version: 1", f"name: {name}", "version: 1.0.0",
             f"description: soak member {name}", "agent: {python: agent:run}",
             "network: {authentication: {}}", f"lifecycle: {lifecycle}"]
    if accept:
        lines.append("exports: {peer_tasks: {accept: true}}")
    if calls:
        lines.append("capabilities: {network: {allow: [localhost]}}")
    (source / "murmur.yaml").write_text("\n".join(lines) + "\n")
    (source / "agent.py").write_text(agent.lstrip())
    return source


def make_project(root: Path) -> Path:
    project = root / "project"
    project.mkdir()
    capsules = [
        capsule(root, "soak-entry", ENTRY_AGENT, accept=False, calls=True,
                lifecycle="{concurrency: 1, queue_depth: 0}"),
        capsule(root, "soak-caller", CALLER_AGENT, accept=True, calls=True,
                lifecycle="{concurrency: 1, queue_depth: 0}"),
        capsule(root, "soak-callee", CALLEE_AGENT, accept=True, calls=False,
                lifecycle="{concurrency: 1, queue_depth: 2}"),
    ]
    for source in capsules:
        install(pack(source, root / f"{source.name}.mur.zip").path, project)
    members = ["  - {name: entry, capsule: local/soak-entry, version: 1.0.0, entry: true}"]
    members += [f"  - {{name: {name}, capsule: local/soak-caller, version: 1.0.0}}"
                for name in CALLERS]
    members.append("  - {name: callee, capsule: local/soak-callee, version: 1.0.0}")
    rules = [f"  - {{from: entry, to: [{', '.join(CALLERS)}]}}"]
    rules += [f"  - {{from: {name}, to: [callee]}}" for name in CALLERS]
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n" + "\n".join(members) + "\nreachability:\n"
        + "\n".join(rules) + "\n")
    return project


def vm_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class MemoryWatch(threading.Thread):
    """The callee's VmRSS every half second until it is gone or told to stop."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[int] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            value = vm_rss_kib(self.pid)
            if value is None:
                return
            self.samples.append(value)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def soak(calls: int, in_flight: int, deadline: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="soak-") as temp:
        root = Path(temp)
        home = root / "home"
        home.mkdir(mode=0o700)
        os.environ["MURMUR_HOME"] = str(home)     # pack and install use the same home
        project = make_project(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
        env.update({"MURMUR_HOME": str(home), "PYTHONPATH": str(REPO)})
        task = json.dumps({"calls": calls, "in_flight": in_flight})
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project",
             str(project), "--json", "--task", task, "--deadline", f"{deadline}s"],
            cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, process_group=0)
        killer = threading.Timer(deadline + 30, os.killpg, (process.pid, signal.SIGKILL))
        killer.start()
        try:
            assert process.stdout is not None
            formation = json.loads(process.stdout.readline() or b"{}")
            callee = next(m for m in formation.get("members", []) if m["name"] == "callee")
            watch = MemoryWatch(callee["pid"])
            at_start = vm_rss_kib(callee["pid"])
            watch.start()
            result = process.stdout.read()
            watch.stopped.set()
            code = process.wait()
            stderr = process.stderr.read() if process.stderr else b""
        finally:
            killer.cancel()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        elapsed = time.monotonic() - started
    try:
        reports = json.loads(result)
    except ValueError:
        raise RuntimeError(f"the formation ended {code} without a report: "
                           f"{result[-400:]!r} {stderr[-2000:]!r}") from None
    latencies = [value for report in reports for value in report.get("latencies", [])]
    failures: dict[str, int] = {}
    for report in reports:
        for kind, count in report.get("failures", {}).items():
            failures[kind] = failures.get(kind, 0) + count
    placed = sum(report.get("placed", 0) for report in reports)
    return {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "calls": calls, "in_flight_per_caller": in_flight,
        "exit_status": code, "seconds": round(elapsed, 2), "placed": placed,
        "answered": len(latencies), "lost": calls - len(latencies), "failures": failures,
        "calls_per_s": round(len(latencies) / elapsed, 1) if elapsed else None,
        "latency_s": {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
                      "max": max(latencies)} if latencies else None,
        "callee_rss_mib": {
            "at_start": round((at_start or 0) / 1024, 1),
            "peak": round(max(watch.samples, default=0) / 1024, 1),
            "at_end": round((watch.samples[-1] if watch.samples else 0) / 1024, 1)},
        "caller_errors": [r["error"] for r in reports if "error" in r],
    }


def markdown(result: dict[str, Any]) -> str:
    latency = result["latency_s"] or {"p50": 0, "p99": 0, "max": 0}
    memory = result["callee_rss_mib"]
    return "\n".join([
        "# soak_formation", "",
        f"Python {result['python']} on {result['machine']}, {result['cpus']} CPUs. "
        f"entry -> c1, c2, c3 -> callee (concurrency 1, queue_depth 2); "
        f"{result['calls']} calls, {result['in_flight_per_caller']} in flight per caller.", "",
        "| calls | answered | lost (goal 0) | failures | s | calls/s | p50 (ms) | p99 (ms) "
        "| max (ms) | callee RSS start / peak / end (MiB) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
        f"| {result['calls']} | {result['answered']} | {result['lost']} | "
        f"{json.dumps(result['failures']) if result['failures'] else 'none'} | "
        f"{result['seconds']} | {result['calls_per_s']} | {latency['p50'] * 1000:.1f} | "
        f"{latency['p99'] * 1000:.1f} | {latency['max'] * 1000:.1f} | "
        f"{memory['at_start']} / {memory['peak']} / {memory['at_end']} |", ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--deadline", type=int, default=600, help="seconds (bound)")
    options = parser.parse_args()
    result = soak(options.calls, options.in_flight, options.deadline)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak_formation.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "soak_formation.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
