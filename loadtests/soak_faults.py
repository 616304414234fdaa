"""Soak under faults: calls to a callee that is killed with SIGKILL every few seconds.

A real ``mur run --roster`` formation on loopback:

    entry --> callee (restart: on-failure, restart_limit {count: 1000, within: 10m})

The entry member places ``--calls`` calls (10,000 by default) with
``task.call_member("callee", ...)``, ``--in-flight`` open at once, each bounded by
``--call-deadline`` seconds; meanwhile this script kills the callee's current process
with SIGKILL every ``--kill-every`` seconds (the launcher starts it again). Reported:
- calls answered, calls failed (each with its reason, counted by kind), calls lost:
  neither answered nor failed with a reason, or still open at their deadline (goal 0);
- the kills, and for each the time to recover: from the kill to the first call placed
  after it that was answered (median and max);
- the launcher's restart lines, one per kill.

Bounded in count (``--calls``) and time: the formation gets ``--deadline`` (default
600 s) and is killed 30 s past it. Writes loadtests/results/soak_faults.{json,md}.

Run: .venv/bin/python loadtests/soak_faults.py [--calls 10000] [--kill-every 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
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
from launcher.home.running_records import list_live  # noqa: E402
from loadtests.soak_formation import capsule  # noqa: E402 - its soak's capsule writer

RESULTS = Path(__file__).resolve().parent / "results"

ENTRY_AGENT = """
import asyncio, json, time


async def run(task):
    plan = json.loads(task.text)
    slots = asyncio.Semaphore(plan["in_flight"])
    calls, failures = [], {}

    async def one(number):
        async with slots:
            started = time.monotonic()
            try:
                handle = await task.call_member("callee", f"n{number}")
                answer = await asyncio.wait_for(handle, plan["call_deadline"])
            except asyncio.TimeoutError:
                failures["lost: open at its deadline"] = failures.get(
                    "lost: open at its deadline", 0) + 1
                return
            except Exception as exc:
                reason = str(exc).strip()
                kind = (getattr(exc, "state", None) or type(exc).__name__) if reason \\
                    else "lost: no reason"
                if "transport error" in reason:
                    kind = "transport error (door down)"
                failures[kind] = failures.get(kind, 0) + 1
                calls.append((round(started, 4), round(time.monotonic(), 4), False))
                return
            ok = answer == f"ok n{number}"
            if not ok:
                failures["lost: wrong answer"] = failures.get("lost: wrong answer", 0) + 1
            calls.append((round(started, 4), round(time.monotonic(), 4), ok))

    await asyncio.gather(*(one(number) for number in range(plan["calls"])))
    return json.dumps({"placed": plan["calls"], "calls": calls, "failures": failures})
"""

CALLEE_AGENT = """
async def run(task):
    return f"ok {task.text}"
"""


def make_project(root: Path) -> Path:
    project = root / "project"
    project.mkdir()
    for source in (
            capsule(root, "faults-entry", ENTRY_AGENT, accept=False, calls=True,
                    lifecycle="{concurrency: 1, queue_depth: 0}"),
            capsule(root, "faults-callee", CALLEE_AGENT, accept=True, calls=False,
                    lifecycle="{concurrency: 8, queue_depth: 32, restart: on-failure, "
                              "restart_limit: {count: 1000, within: 10m}}")):
        install(pack(source, root / f"{source.name}.mur.zip").path, project)
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: entry, capsule: local/faults-entry, version: 1.0.0, entry: true}\n"
        "  - {name: callee, capsule: local/faults-callee, version: 1.0.0}\n"
        "reachability:\n  - {from: entry, to: [callee]}\n")
    return project


class Killer(threading.Thread):
    """SIGKILL the callee's live session every ``every`` seconds until stopped."""

    def __init__(self, formation_id: str, every: float) -> None:
        super().__init__(daemon=True)
        self.formation_id = formation_id
        self.every = every
        self.kills: list[float] = []
        self.stopped = threading.Event()

    def callee_pid(self) -> int | None:
        for record in list_live():
            if record.formation_id == self.formation_id and record.member == "callee":
                return record.pid
        return None

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            pid = self.callee_pid()
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append(time.monotonic())


def recoveries(kills: list[float], calls: list[list[Any]]) -> list[float]:
    """For each kill, the seconds to the end of the first call placed after it that was
    answered (a kill with none before the run ended is left out)."""
    answered = sorted((end, start) for start, end, ok in calls if ok)
    found = []
    for kill in kills:
        ends = [end for end, start in answered if start >= kill]
        if ends:
            found.append(min(ends) - kill)
    return found


def soak(calls: int, in_flight: int, kill_every: float, call_deadline: float,
         deadline: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="soak-faults-") as temp:
        root = Path(temp)
        home = root / "home"
        home.mkdir(mode=0o700)
        os.environ["MURMUR_HOME"] = str(home)     # pack, install and list_live use it
        project = make_project(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
        env.update({"MURMUR_HOME": str(home), "PYTHONPATH": str(REPO)})
        task = json.dumps({"calls": calls, "in_flight": in_flight,
                           "call_deadline": call_deadline})
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project",
             str(project), "--json", "--task", task, "--deadline", f"{deadline}s"],
            cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, process_group=0)
        bound = threading.Timer(deadline + 30, os.killpg, (process.pid, signal.SIGKILL))
        bound.start()
        try:
            assert process.stdout is not None
            formation = json.loads(process.stdout.readline() or b"{}")
            killer = Killer(formation["formation_id"], kill_every)
            killer.start()
            result = process.stdout.read()
            killer.stopped.set()
            code = process.wait()
            stderr = (process.stderr.read() if process.stderr else b"").decode()
        finally:
            bound.cancel()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        elapsed = time.monotonic() - started
    try:
        report = json.loads(result)
    except ValueError:
        raise RuntimeError(f"the formation ended {code} without a report: "
                           f"{result[-400:]!r} {stderr[-2000:]!r}") from None
    done = report["calls"]
    answered = sum(1 for _, _, ok in done if ok)
    failures: dict[str, int] = report["failures"]
    lost = sum(count for kind, count in failures.items() if kind.startswith("lost"))
    lost += calls - len(done) - failures.get("lost: open at its deadline", 0)
    recovered = recoveries(killer.kills, done)
    return {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "calls": calls, "in_flight": in_flight,
        "kill_every_s": kill_every, "call_deadline_s": call_deadline,
        "exit_status": code, "seconds": round(elapsed, 2), "answered": answered,
        "failed_with_reason": len(done) - answered, "lost": lost, "failures": failures,
        "kills": len(killer.kills),
        "restart_lines": stderr.count("restarted it as session"),
        "stays_down_lines": stderr.count("it stays down"),
        "recover_s": {"median": round(statistics.median(recovered), 3),
                      "max": round(max(recovered), 3), "n": len(recovered)}
        if recovered else None,
    }


def markdown(result: dict[str, Any]) -> str:
    recover = result["recover_s"] or {"median": "-", "max": "-", "n": 0}
    return "\n".join([
        "# soak_faults", "",
        f"Python {result['python']} on {result['machine']}, {result['cpus']} CPUs. "
        f"entry -> callee (restart: on-failure); {result['calls']} calls, "
        f"{result['in_flight']} in flight, the callee killed with SIGKILL every "
        f"{result['kill_every_s']} s.", "",
        "| calls | answered | failed with a reason | lost (goal 0) | kills | restarts "
        "| recover median (s) | recover max (s) | s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result['calls']} | {result['answered']} | {result['failed_with_reason']} | "
        f"{result['lost']} | {result['kills']} | {result['restart_lines']} | "
        f"{recover['median']} | {recover['max']} | {result['seconds']} |", "",
        "Failures by kind: " + (json.dumps(result["failures"]) if result["failures"]
                                else "none") + ".", ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds")
    parser.add_argument("--call-deadline", type=float, default=60.0, help="seconds")
    parser.add_argument("--deadline", type=int, default=600, help="seconds (bound)")
    options = parser.parse_args()
    result = soak(options.calls, options.in_flight, options.kill_every,
                  options.call_deadline, options.deadline)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak_faults.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "soak_faults.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
