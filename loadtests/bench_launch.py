"""Benchmark: formation launch, with isolation on and off (issue 5 "Speed"; results in
loadtests/results/).

For formations of 3, 10 and 30 members (one entry member and peers, no edges, a trivial
``--task``), each launched as a real ``mur run --roster --json --task ping`` with
``MURMUR_ISOLATION=auto`` ("on": each member's agent process confined with Landlock, on
a host that has it) and with ``MURMUR_ISOLATION=off`` ("off": the agent process runs
without Landlock), the two launched alternately (the first of each pair alternating
too), so that both see the same machine:
- time from the launcher's start to its formation line (every peer's door answered and
  the entry member reported ready);
- time from the entry member's result to the launcher's exit (every member gone);
- time from start to exit;
- per member, read at the formation line: the peak RSS (VmHWM) of the member runtime
  plus that of its agent process (its child: found through
  ``/proc/<pid>/task/*/children``), the agent process's alone, and the CPU time both
  used so far (the agent process is a fork of the runtime: the pages they share count
  in both RSS).
The baseline is one standalone ``mur run --capsule --json`` to its readiness line, in
each isolation mode: the ratio "formation line / one member ready" says what a formation
costs over one member; its memory is read too, with the PSS of the runtime and its
agent process (``smaps_rollup``: shared pages split; too slow to read at a formation
line, where the result's line would wait for it).
Goals, with isolation on, on a 2-core machine: 10 members ready in under 1 s, 30 in
under 1.5 s (issue 35; they were 2 s and 6 s), and gone within 1 s of the entry
member's end.

Bounded: every size is launched ``--runs`` times (default 2) in each isolation mode,
each launch is killed after 180 s, and no new pair of runs starts after ``--budget``
seconds (default 240; every size and mode runs at least once). Writes
loadtests/results/bench_launch.{json,md}.

Run: .venv/bin/python loadtests/bench_launch.py [--sizes 3,10,30] [--runs 2]
         [--isolation on,off]
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

from launcher.admission.store import install, pack  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LAUNCH_TIMEOUT = 180.0
GOALS = {"ready_10_s": 1.0, "ready_30_s": 1.5, "gone_after_entry_s": 1.0}
#: ``--isolation`` names and the ``MURMUR_ISOLATION`` each launches with.
ISOLATION = {"on": "auto", "off": "off"}
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


def status_kib(pid: int, field: str = "VmHWM") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (VmHWM: the peak RSS)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def vm_hwm_kib(pid: int) -> int | None:
    return status_kib(pid, "VmHWM")


def confined(pid: int) -> bool | None:
    """Whether ``pid`` looks confined: no_new_privs set (Landlock asks it of a process
    without CAP_SYS_ADMIN) and no effective capability left (the agent process drops
    them all after Landlock); None if unreadable."""
    fields: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                fields[name] = value.strip()
    except OSError:
        return None
    if "CapEff" not in fields:
        return None
    return fields.get("NoNewPrivs") == "1" and int(fields["CapEff"], 16) == 0


def pss_kib(pid: int) -> int | None:
    """The proportional set size now (shared pages split between their sharers); None
    where ``smaps_rollup`` is unreadable (another user's non-dumpable process)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (those of every one of its threads)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(found))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time ``pid`` used so far."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def sample_members(pids: list[int]) -> list[dict[str, Any]]:
    """The member runtimes ``pids`` and their agent processes (each one's children: one
    for a python or command agent) at this moment, one member runtime still alive each.

    In passes, the quickest first: at the formation line the entry member has its task
    and ends its agent process, then itself, within tens of milliseconds of the result,
    and the launcher every other member soon after; a member whose agent process is
    already gone counts in no sum (``agents`` 0). No PSS here: ``smaps_rollup`` takes
    milliseconds a process, which would delay the reading of the result's line."""
    tree = {pid: children(pid) for pid in pids}
    hwm = {process: vm_hwm_kib(process) for pid, agents in tree.items()
           for process in (pid, *agents)}
    cpu = {process: cpu_seconds(process) for process in hwm}
    samples = []
    for pid, agents in tree.items():
        runtime = hwm[pid]
        if runtime is None:
            continue
        agent_hwm = [kib for child in agents if (kib := hwm[child]) is not None]
        samples.append({
            "runtime_hwm_kib": runtime, "agents": len(agent_hwm),
            "agent_hwm_kib": sum(agent_hwm) if agent_hwm else None,
            "total_hwm_kib": runtime + sum(agent_hwm) if agent_hwm else None,
            "agents_confined": sum(bool(confined(child)) for child in agents),
            "cpu_s": sum(seconds for process in (pid, *agents)
                         if (seconds := cpu[process]) is not None),
            "agent_cpu_s": sum(seconds for process in agents
                               if (seconds := cpu[process]) is not None)})
    return samples


def env_for(home: Path, isolation: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
    env["MURMUR_HOME"] = str(home)
    env["MURMUR_ISOLATION"] = ISOLATION[isolation]
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
                sample_formation(process, line)
    selector.close()
    return lines


_SAMPLES: dict[int, tuple[int, list[dict[str, Any]]]] = {}


def sample_formation(process: subprocess.Popen[bytes], line: bytes) -> None:
    """At the formation line: every member's memory and the CPU time it used so far."""
    try:
        formation = json.loads(line)
    except ValueError:
        return
    pids = [member["pid"] for member in formation.get("members", [])]
    _SAMPLES[process.pid] = len(pids), sample_members(pids)


def mean_of(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [sample[key] for sample in samples if sample[key] is not None]
    return statistics.mean(values) if values else None


def launch_once(project: Path, home: Path, isolation: str) -> dict[str, Any]:
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project", str(project),
         "--json", "--task", "ping"],
        cwd=project, env=env_for(home, isolation), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, process_group=0)
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
    members, samples = _SAMPLES.pop(process.pid, (0, []))
    totals = [sample["total_hwm_kib"] for sample in samples
              if sample["total_hwm_kib"] is not None]
    # CPU of the members measured with their agent process; the total, for the CPU floor,
    # as if every member of the formation had used their mean.
    cpu = [sample["cpu_s"] for sample in samples if sample["agents"]]
    return {"isolation": isolation,
            "startup_cpu_s_mean": statistics.mean(cpu) if cpu else None,
            "startup_cpu_s_total": statistics.mean(cpu) * members if cpu else 0.0,
            "agent_startup_cpu_s_mean": mean_of([sample for sample in samples
                                                 if sample["agents"]], "agent_cpu_s"),
            "formation_line_s": lines[0][0] - start, "result_s": lines[1][0] - start,
            "exit_s": ended - start, "gone_after_entry_s": ended - lines[1][0],
            "peak_rss_kib_mean": statistics.mean(totals) if totals else None,
            "peak_rss_kib_max": max(totals) if totals else None,
            "runtime_peak_rss_kib_mean": mean_of(samples, "runtime_hwm_kib"),
            "agent_peak_rss_kib_mean": mean_of(samples, "agent_hwm_kib"),
            "members": members, "members_measured": len(samples),
            "agent_processes_found": sum(sample["agents"] for sample in samples),
            "agent_processes_confined": sum(sample["agents_confined"] for sample in samples)}


def single_member_ready(project: Path, home: Path, isolation: str
                        ) -> tuple[float, dict[str, Any] | None]:
    """Seconds from start to one standalone member's readiness line, and its memory
    then (as in a formation, plus the PSS of the runtime and its agent process)."""
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--capsule", "local/worker",
         "--capsule-version", "1.0.0", "--project", str(project), "--json"],
        cwd=project, env=env_for(home, isolation), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, process_group=0)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        elapsed = time.monotonic() - start
        if not line:
            raise RuntimeError("the standalone member did not report")
        sampled = sample_members([process.pid])
        memory = sampled[0] if sampled else None
        if memory is not None:
            processes = [process.pid, *children(process.pid)]
            pss = [value for pid in processes if (value := pss_kib(pid)) is not None]
            memory["pss_kib"] = sum(pss) if len(pss) == len(processes) else None
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return elapsed, memory


def best(runs: list[dict[str, Any]], key: str) -> float:
    return float(min(run[key] for run in runs))


def mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024:.1f}"


def markdown(result: dict[str, Any]) -> str:
    single = ", ".join(f"{result['single_member_ready_s'][mode]:.2f} s isolation {mode}"
                       for mode in result["isolation"])
    standalone = []
    for mode in result["isolation"]:
        memory = result["single_member_memory"].get(mode) or {}
        standalone.append(
            f"isolation {mode}: peak RSS {mib(memory.get('total_hwm_kib'))} MiB (runtime "
            f"{mib(memory.get('runtime_hwm_kib'))} + agent process "
            f"{mib(memory.get('agent_hwm_kib'))}), PSS of the two "
            f"{mib(memory.get('pss_kib'))} MiB")
    lines = ["# bench_launch", "",
             f"Python {result['python']} on {result['machine']}, {result['cpus']} CPUs, "
             f"Landlock ABI {result['landlock_abi']}; best of {result['runs']} launch(es) "
             f"per size and isolation mode (on: `MURMUR_ISOLATION=auto`, off: `off`, "
             f"launched alternately); one standalone member ready in {single}.", "",
             "Memory per member, read at the formation line: peak RSS (VmHWM) of the member "
             "runtime plus that of its agent process (a fork of the runtime: the pages they "
             "share count in both), and the agent process's alone; members whose agent "
             "process had already ended (the entry member's, once its task is done) are "
             "left out. One standalone member, at its readiness line: "
             + "; ".join(standalone) + " (PSS splits the shared pages).", "",
             "| members | isolation | formation line (s) | x one member | result (s) | "
             "exit (s) | gone after entry's result (s) | peak RSS / member, runtime + agent "
             "(MiB, mean / max) | agent process peak RSS (MiB, mean) | startup CPU / "
             "member, runtime + agent (s) | of which the agent process (s) | CPU floor: "
             "all members' startup CPU / cores (s) |",
             "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for size in result["sizes"]:
        for mode in result["isolation"]:
            row = result["by_size"][str(size)][mode]
            rss = (f"{mib(row['peak_rss_kib_mean'])} / {mib(row['peak_rss_kib_max'])}"
                   if row["peak_rss_kib_mean"] is not None else "n/a")
            lines.append(
                f"| {size} | {mode} | {row['formation_line_s']:.2f} | "
                f"{row['ratio_to_one_member']:.2f} | {row['result_s']:.2f} | "
                f"{row['exit_s']:.2f} | {row['gone_after_entry_s']:.2f} | {rss} | "
                f"{mib(row['agent_peak_rss_kib_mean'])} | "
                f"{row['startup_cpu_s_mean']:.2f} | {row['agent_startup_cpu_s_mean']:.2f} | "
                f"{row['cpu_floor_s']:.2f} |")
    if result["on_vs_off"]:
        lines += ["", "| members | formation line on / off | exit on / off | peak RSS "
                  "on / off |", "|---:|---:|---:|---:|"]
        for size, ratio in result["on_vs_off"].items():
            rss = "n/a" if ratio["peak_rss"] is None else f"{ratio['peak_rss']:.2f}"
            lines.append(f"| {size} | {ratio['formation_line']:.2f} | {ratio['exit']:.2f} | "
                         f"{rss} |")
    lines += ["", "| goal, isolation on | value | goal |", "|---|---:|---|",
              _goal_row(result, 10, "formation_line_s", "10 members to the formation line (s)",
                        GOALS["ready_10_s"]),
              _goal_row(result, 30, "formation_line_s", "30 members to the formation line (s)",
                        GOALS["ready_30_s"]),
              _goal_row(result, 10, "gone_after_entry_s",
                        "10 members gone after the entry member's end (s)",
                        GOALS["gone_after_entry_s"])]
    return "\n".join(lines) + "\n"


def _goal_row(result: dict[str, Any], size: int, key: str, what: str, goal: float) -> str:
    """One row of the goals table (the best run with isolation on; ``make bench``'s
    summary reads it: loadtests/summary.py)."""
    row = result["by_size"].get(str(size), {}).get("on")
    value = "not measured" if not row else f"{row[key]:.2f}"
    return f"| {what} | {value} | < {goal:g} |"


def summary(runs: list[dict[str, Any]], single: float) -> dict[str, Any]:
    """One size in one isolation mode: the best of its runs (memory: their mean)."""
    def mean_key(key: str) -> float | None:
        values = [run[key] for run in runs if run[key] is not None]
        return statistics.mean(values) if values else None

    return {
        "runs": runs,
        "formation_line_s": best(runs, "formation_line_s"),
        "ratio_to_one_member": best(runs, "formation_line_s") / single,
        "result_s": best(runs, "result_s"),
        "exit_s": best(runs, "exit_s"),
        "gone_after_entry_s": best(runs, "gone_after_entry_s"),
        "peak_rss_kib_mean": mean_key("peak_rss_kib_mean"),
        "peak_rss_kib_max": max((run["peak_rss_kib_max"] for run in runs
                                 if run["peak_rss_kib_max"]), default=None),
        "runtime_peak_rss_kib_mean": mean_key("runtime_peak_rss_kib_mean"),
        "agent_peak_rss_kib_mean": mean_key("agent_peak_rss_kib_mean"),
        "startup_cpu_s_mean": min(run["startup_cpu_s_mean"] or 0.0 for run in runs),
        "agent_startup_cpu_s_mean": min(run["agent_startup_cpu_s_mean"] or 0.0
                                        for run in runs),
        "cpu_floor_s": min(run["startup_cpu_s_total"] for run in runs)
        / (os.cpu_count() or 1),
    }


def verdict(row: dict[str, Any] | None, key: str, goal: float) -> str:
    if row is None:
        return "n/a"
    return "met" if row[key] < goal else "missed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3,10,30")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--budget", type=float, default=240.0)
    parser.add_argument("--isolation", default="on,off",
                        help="the isolation modes to launch with, among on,off")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    modes = [mode.strip() for mode in options.isolation.split(",") if mode.strip()]
    if not modes or any(mode not in ISOLATION for mode in modes):
        parser.error("--isolation takes on, off or on,off")
    modes = list(dict.fromkeys(modes))
    began = time.monotonic()
    by_size: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as temp:
        root = Path(temp)
        home = root / "home"
        home.mkdir(mode=0o700)
        os.environ["MURMUR_HOME"] = str(home)  # pack/install below use the same home
        projects = {size: make_project(root, size) for size in sizes}
        single: dict[str, float] = {}
        single_memory: dict[str, dict[str, Any] | None] = {}
        for mode in modes:
            ready = [single_member_ready(projects[sizes[0]], home, mode) for _ in range(2)]
            single[mode] = min(elapsed for elapsed, _ in ready)
            single_memory[mode] = ready[-1][1]
            print(f"one standalone member ready in {single[mode]:.2f}s (isolation {mode})")
        for index, size in enumerate(sizes):
            runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
            for number in range(max(1, options.runs)):
                if number and time.monotonic() - began > options.budget:
                    break
                # Alternate which mode goes first, run after run and size after size.
                for mode in modes[::-1] if (index + number) % 2 else modes:
                    run = launch_once(projects[size], home, mode)
                    runs[mode].append(run)
                    print(f"{size:3d} members, isolation {mode:3}: formation line "
                          f"{run['formation_line_s']:.2f}s, exit {run['exit_s']:.2f}s, gone "
                          f"{run['gone_after_entry_s']:.2f}s after the result, peak RSS "
                          f"{mib(run['peak_rss_kib_mean'])} MiB/member (agent "
                          f"{mib(run['agent_peak_rss_kib_mean'])}), "
                          f"{run['agent_processes_found']}/{run['members_measured']} agent "
                          f"processes found, {run['agent_processes_confined']} confined",
                          flush=True)
            by_size[str(size)] = {mode: summary(runs[mode], single[mode]) for mode in modes}
    on_vs_off: dict[str, dict[str, float | None]] = {}
    if "on" in modes and "off" in modes:
        for key, rows in by_size.items():
            on, off = rows["on"], rows["off"]
            on_vs_off[key] = {
                "formation_line": on["formation_line_s"] / off["formation_line_s"],
                "exit": on["exit_s"] / off["exit_s"],
                "peak_rss": (on["peak_rss_kib_mean"] / off["peak_rss_kib_mean"]
                             if on["peak_rss_kib_mean"] and off["peak_rss_kib_mean"]
                             else None)}
    from launcher.sandbox.landlock import host_support

    ten = by_size.get("10", {}).get("on")
    thirty = by_size.get("30", {}).get("on")
    result = {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "landlock_abi": host_support().abi, "runs": options.runs,
        "sizes": sizes, "isolation": modes,
        "isolation_env": {mode: ISOLATION[mode] for mode in modes},
        "single_member_ready_s": single, "single_member_memory": single_memory,
        "by_size": by_size, "on_vs_off": on_vs_off,
        "goals": {
            "ready_10": verdict(ten, "formation_line_s", GOALS["ready_10_s"]),
            "ready_30": verdict(thirty, "formation_line_s", GOALS["ready_30_s"]),
            "gone_10": verdict(ten, "gone_after_entry_s", GOALS["gone_after_entry_s"]),
        },
        "wall_seconds": round(time.monotonic() - began, 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_launch.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "bench_launch.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
