"""Benchmark: formation launch (issue 5 "Speed"; results in loadtests/results/).

For formations of 3, 10 and 30 members (one entry member and peers, no edges, a trivial
``--task``), each launched as a real ``mur run --roster --json --task ping``:
- time from the launcher's start to its formation line (every peer's door answered and
  the entry member reported ready);
- time from the entry member's result to the launcher's exit (every member gone);
- time from start to exit;
- peak RSS (VmHWM) per member, read while the formation runs.
The baseline is one standalone ``mur run --capsule --json`` to its readiness line: the
ratio "formation line / one member ready" says what a formation costs over one member.
Goal (issue 5): 10 members ready in under 3 s and gone within 1 s of the entry member's
end on a 2-core machine.

Bounded: every size is launched ``--runs`` times (default 2), each launch is killed after
180 s, and no new run starts after ``--budget`` seconds (default 240). Writes
loadtests/results/bench_launch.{json,md}.

Run: .venv/bin/python loadtests/bench_launch.py [--sizes 3,10,30] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launcher.store import install, pack  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LAUNCH_TIMEOUT = 180.0
GOALS = {"ready_10_s": 3.0, "gone_after_entry_s": 1.0}
AGENT = "async def run(task):\n    return f'{task.member}: {task.text}'\n"


def make_capsule(root: Path, name: str) -> Path:
    source = root / "src" / name
    source.mkdir(parents=True)
    (source / "murmur.yaml").write_text(
        f"manifest_version: 1\nname: {name}\nversion: 1.0.0\nagent: {{python: agent:run}}\n")
    (source / "agent.py").write_text(AGENT)
    return source


def make_project(root: Path, size: int) -> Path:
    project = root / f"project-{size}"
    project.mkdir()
    for name in ("entry", "worker"):
        packed = pack(make_capsule(root / f"caps-{size}", name), root / f"{name}-{size}.zip")
        install(packed.path, project)
    lines = ["roster_version: 1", "members:",
             "  - {name: entry, capsule: local/entry, version: 1.0.0, entry: true}"]
    lines += [f"  - {{name: m{i}, capsule: local/worker, version: 1.0.0}}"
              for i in range(1, size)]
    (project / "roster.yaml").write_text("\n".join(lines) + "\n")
    return project


def vm_hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time ``pid`` used so far."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
    env["MURMUR_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO)
    return env


def timed_lines(process: subprocess.Popen[bytes], start: float) -> list[tuple[float, bytes]]:
    """Every stdout line with the time it arrived; the launcher is killed past the bound."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    lines: list[tuple[float, bytes]] = []
    buffer = b""
    deadline = start + LAUNCH_TIMEOUT
    while time.monotonic() < deadline:
        if not selector.select(max(0.0, deadline - time.monotonic())):
            break
        chunk = os.read(process.stdout.fileno(), 65536)
        now = time.monotonic()
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            lines.append((now, line))
            if len(lines) == 1:
                yield_rss(process, line)
    selector.close()
    return lines


_RSS: dict[int, list[int]] = {}
_CPU: dict[int, list[float]] = {}


def yield_rss(process: subprocess.Popen[bytes], line: bytes) -> None:
    """At the formation line: the peak RSS and the CPU time of every member so far."""
    try:
        formation = json.loads(line)
    except ValueError:
        return
    pids = [member["pid"] for member in formation.get("members", [])]
    _RSS[process.pid] = [value for pid in pids if (value := vm_hwm_kib(pid)) is not None]
    _CPU[process.pid] = [value for pid in pids if (value := cpu_seconds(pid)) is not None]


def launch_once(project: Path, home: Path) -> dict[str, Any]:
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project", str(project),
         "--json", "--task", "ping"],
        cwd=project, env=env_for(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, process_group=0)
    try:
        lines = timed_lines(process, start)
        code = process.wait(max(1.0, start + LAUNCH_TIMEOUT - time.monotonic()))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    ended = time.monotonic()
    if code != 0 or len(lines) < 2:
        raise RuntimeError(f"launch failed with status {code}: {lines!r}")
    rss = _RSS.pop(process.pid, [])
    cpu = _CPU.pop(process.pid, [])
    return {"startup_cpu_s_mean": statistics.mean(cpu) if cpu else None,
            "startup_cpu_s_total": sum(cpu),
            "formation_line_s": lines[0][0] - start, "result_s": lines[1][0] - start,
            "exit_s": ended - start, "gone_after_entry_s": ended - lines[1][0],
            "peak_rss_kib_mean": statistics.mean(rss) if rss else None,
            "peak_rss_kib_max": max(rss) if rss else None, "members_measured": len(rss)}


def single_member_ready(project: Path, home: Path) -> float:
    """Seconds from start to one standalone member's readiness line."""
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--capsule", "local/worker",
         "--capsule-version", "1.0.0", "--project", str(project), "--json"],
        cwd=project, env=env_for(home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, process_group=0)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        elapsed = time.monotonic() - start
        if not line:
            raise RuntimeError("the standalone member did not report")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return elapsed


def best(runs: list[dict[str, Any]], key: str) -> float:
    return float(min(run[key] for run in runs))


def markdown(result: dict[str, Any]) -> str:
    lines = ["# bench_launch", "",
             f"Python {result['python']} on {result['machine']}, {result['cpus']} CPUs; best "
             f"of {result['runs']} launch(es) per size; one standalone member ready in "
             f"{result['single_member_ready_s']:.2f} s.", "",
             "| members | formation line (s) | x one member | result (s) | exit (s) | gone "
             "after entry's result (s) | peak RSS / member (MiB, mean / max) | startup CPU "
             "/ member (s) | CPU floor: all members' startup CPU / cores (s) |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for size in result["sizes"]:
        row = result["by_size"][str(size)]
        rss = (f"{row['peak_rss_mib_mean']:.1f} / {row['peak_rss_mib_max']:.1f}"
               if row["peak_rss_mib_mean"] is not None else "n/a")
        lines.append(f"| {size} | {row['formation_line_s']:.2f} | "
                     f"{row['ratio_to_one_member']:.2f} | {row['result_s']:.2f} | "
                     f"{row['exit_s']:.2f} | {row['gone_after_entry_s']:.2f} | {rss} | "
                     f"{row['startup_cpu_s_mean']:.2f} | {row['cpu_floor_s']:.2f} |")
    lines += ["", f"Goals: 10 members ready in under {GOALS['ready_10_s']:g} s "
                  f"({result['goals']['ready_10']}); gone within "
                  f"{GOALS['gone_after_entry_s']:g} s of the entry member's end "
                  f"({result['goals']['gone_10']})."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3,10,30")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--budget", type=float, default=240.0)
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    began = time.monotonic()
    by_size: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as temp:
        root = Path(temp)
        home = root / "home"
        home.mkdir(mode=0o700)
        os.environ["MURMUR_HOME"] = str(home)  # pack/install below use the same home
        projects = {size: make_project(root, size) for size in sizes}
        single = min(single_member_ready(projects[sizes[0]], home) for _ in range(2))
        print(f"one standalone member ready in {single:.2f}s")
        for size in sizes:
            runs = []
            for _ in range(max(1, options.runs)):
                if runs and time.monotonic() - began > options.budget:
                    break
                runs.append(launch_once(projects[size], home))
                print(f"{size:3d} members: formation line {runs[-1]['formation_line_s']:.2f}s, "
                      f"exit {runs[-1]['exit_s']:.2f}s, gone "
                      f"{runs[-1]['gone_after_entry_s']:.2f}s after the result", flush=True)
            rss_mean = [run["peak_rss_kib_mean"] for run in runs if run["peak_rss_kib_mean"]]
            rss_max = [run["peak_rss_kib_max"] for run in runs if run["peak_rss_kib_max"]]
            by_size[str(size)] = {
                "runs": runs,
                "formation_line_s": best(runs, "formation_line_s"),
                "ratio_to_one_member": best(runs, "formation_line_s") / single,
                "result_s": best(runs, "result_s"),
                "exit_s": best(runs, "exit_s"),
                "gone_after_entry_s": best(runs, "gone_after_entry_s"),
                "peak_rss_mib_mean": statistics.mean(rss_mean) / 1024 if rss_mean else None,
                "peak_rss_mib_max": max(rss_max) / 1024 if rss_max else None,
                "startup_cpu_s_mean": min(run["startup_cpu_s_mean"] or 0.0 for run in runs),
                "cpu_floor_s": min(run["startup_cpu_s_total"] for run in runs)
                / (os.cpu_count() or 1),
            }
    ten = by_size.get("10")
    result = {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "runs": options.runs, "sizes": sizes,
        "single_member_ready_s": single, "by_size": by_size,
        "goals": {
            "ready_10": "n/a" if ten is None else (
                "met" if ten["formation_line_s"] < GOALS["ready_10_s"] else "missed"),
            "gone_10": "n/a" if ten is None else (
                "met" if ten["gone_after_entry_s"] < GOALS["gone_after_entry_s"] else "missed"),
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_launch.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "bench_launch.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
