"""``make loadtest``: locust, headless, against a real formation, for a bounded time
(docs/loadtests.md).

In this order:

1. a project is written in a temporary folder (its own ``MURMUR_HOME``): an entry member
   ``front`` that answers at once (``lifecycle: concurrency 32, queue_depth 1024``) and a
   member ``back`` it may call, packed and installed as ``mur`` does;
2. ``mur run --roster --json`` launches it; the entry door and its ``operator.token``
   file come from ``mur ps --json`` (the token is read by locust from the file);
3. for each sweep (``door``: :class:`DoorUser`; ``tokens``: :class:`TokenUser`) and each
   number of users in ``--users``, locust runs headless for ``--seconds`` and writes its
   CSV under ``loadtests/results/loadtest/``;
4. ``mur stop`` ends the formation;
5. the CSVs become ``loadtests/results/loadtest.json`` and ``.md`` (requests/s, p50,
   p95 and failures by request and users) and, with matplotlib, the PNG plots
   (:mod:`loadtests.plots`).

Every locust run is bounded by ``--run-time`` and a timeout; the whole run by the sum.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "loadtests" / "results"
SWEEPS = {"door": "DoorUser", "tokens": "TokenUser"}
FRONT_AGENT = "async def run(task):\n    return 'ok: ' + task.text[:32]\n"
BACK_AGENT = "async def run(task):\n    return 'done'\n"


def manifest(name: str, lifecycle: str, *, calls: bool, called: bool) -> str:
    lines = ["manifest_version: 1", f"name: {name}", "version: 1.0.0",
             f"description: load test member {name}", "agent:", "  python: agent:run",
             "network:", "  authentication: {}", f"lifecycle: {lifecycle}"]
    if called:
        lines += ["exports:", "  peer_tasks: {accept: true}"]
    if calls:
        lines += ["capabilities:", "  network: {allow: [localhost]}"]
    return "\n".join(lines) + "\n"


def write_project(root: Path) -> Path:
    """The load test's formation: ``front`` (entry) may call ``back``."""
    sys.path.insert(0, str(ROOT))
    from launcher.admission.store import install, pack

    project = root / "project"
    project.mkdir()
    members = {"front": (FRONT_AGENT, "{concurrency: 32, queue_depth: 1024}", True, False),
               "back": (BACK_AGENT, "{concurrency: 4, queue_depth: 16}", False, True)}
    for name, (agent, lifecycle, calls, called) in members.items():
        source = root / "src" / name
        source.mkdir(parents=True)
        (source / "murmur.yaml").write_text(manifest(name, lifecycle, calls=calls,
                                                     called=called))
        (source / "agent.py").write_text(agent)
        install(pack(source, root / f"{name}.mur.zip").path, project)
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: front, capsule: local/front, version: 1.0.0, entry: true}\n"
        "  - {name: back, capsule: local/back, version: 1.0.0}\n"
        "reachability:\n  - {from: front, to: [back]}\n")
    return project


def mur(args: list[str], env: dict[str, str], timeout: float = 60) -> str:
    done = subprocess.run([sys.executable, "-m", "launcher.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return done.stdout


def entry_door(formation_id: str, env: dict[str, str]) -> tuple[str, Path]:
    """The entry member's door URL and operator.token path, once it serves."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for formation in json.loads(mur(["ps", "--json"], env) or "{}").get("formations", []):
            if formation["formation_id"] != formation_id:
                continue
            for row in formation["members"]:
                if row["entry"] and row["door_url"] and row["records_dir"]:
                    return row["door_url"], Path(row["records_dir"]) / "operator.token"
        time.sleep(0.3)
    raise SystemExit("the formation's entry door never came up")


def run_locust(user_class: str, users: int, seconds: float, host: str | None, prefix: Path,
               env: dict[str, str]) -> None:
    """One headless locust run; ``host`` None: the user class names its own (the token
    door's, known only once the run starts)."""
    argv = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile.py"),
            "--headless", "--users", str(users), "--spawn-rate", str(users),
            "--run-time", f"{int(seconds)}s", "--stop-timeout", "5",
            "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING", user_class]
    if host is not None:
        argv[-1:-1] = ["--host", host]
    print(f"loadtest: {user_class} with {users} user(s) for {int(seconds)} s", flush=True)
    subprocess.run(argv, env=env, timeout=seconds + 60, check=False,
                   stdout=subprocess.DEVNULL)


def read_stats(prefix: Path) -> dict[str, dict[str, float]]:
    """``{request name: {rps, p50_ms, p95_ms, requests, failures}}`` of one run."""
    rows: dict[str, dict[str, float]] = {}
    path = Path(f"{prefix}_stats.csv")
    if not path.exists():
        return rows
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if row["Name"] == "Aggregated" or row["Name"].endswith("(setup)"):
                continue
            rows[row["Name"]] = {
                "rps": round(float(row["Requests/s"]), 1),
                "p50_ms": float(row["50%"] or 0), "p95_ms": float(row["95%"] or 0),
                "requests": int(row["Request Count"]), "failures": int(row["Failure Count"])}
    return rows


def summarize(runs: dict[str, dict[int, dict[str, dict[str, float]]]]) -> dict[str, Any]:
    """By sweep, by request name: one list per figure, in the order of the users."""
    summary: dict[str, Any] = {}
    for sweep, by_users in runs.items():
        names = sorted({name for stats in by_users.values() for name in stats})
        summary[sweep] = {"users": sorted(by_users), "requests": {}}
        for name in names:
            series = [by_users[users].get(name, {}) for users in sorted(by_users)]
            summary[sweep]["requests"][name] = {
                key: [point.get(key, 0) for point in series]
                for key in ("rps", "p50_ms", "p95_ms", "requests", "failures")}
    return summary


def markdown(summary: dict[str, Any], seconds: float) -> str:
    lines = [f"# Load test (locust, headless, {int(seconds)} s per point, "
             f"{os.cpu_count()} cores)", "",
             "`door`: a real formation's entry door with its operator token (JSON-RPC). "
             "`tokens`: a door of a minted formation whose callers present formation "
             "tokens it has mostly never seen, some it has, and forged ones (expected "
             "401, so not failures). Load generator and servers share the machine.", "",
             "| sweep | request | users | req/s | p50 ms | p95 ms | requests | failures |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for sweep, data in summary.items():
        for name, series in data["requests"].items():
            for index, users in enumerate(data["users"]):
                lines.append(f"| {sweep} | {name} | {users} | {series['rps'][index]} | "
                             f"{series['p50_ms'][index]} | {series['p95_ms'][index]} | "
                             f"{series['requests'][index]} | {series['failures'][index]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="1,4,16,32",
                        help="the numbers of users, one locust run each (default 1,4,16,32)")
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="how long each run lasts (default 12)")
    parser.add_argument("--sweeps", default="door,tokens", help="door, tokens or both")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="where the results go (default loadtests/results)")
    args = parser.parse_args()
    levels = [int(value) for value in args.users.split(",")]
    sweeps = [name for name in args.sweeps.split(",") if name in SWEEPS]
    root = Path(tempfile.mkdtemp(prefix="murmur-loadtest-"))
    home = root / "home"
    home.mkdir(mode=0o700)
    env = {**os.environ, "MURMUR_HOME": str(home), "PYTHONPATH": str(ROOT)}
    csv_dir = args.out / "loadtest"
    csv_dir.mkdir(parents=True, exist_ok=True)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project",
         str(write_project(root)), "--json"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    runs: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    try:
        assert launcher.stdout is not None
        formation_id = json.loads(launcher.stdout.readline())["formation_id"]
        door_url, token_file = entry_door(formation_id, env)
        load_env = {**env, "MURMUR_LOADTEST_TOKEN_FILE": str(token_file)}
        for sweep in sweeps:
            runs[sweep] = {}
            for users in levels:
                prefix = csv_dir / f"{sweep}-u{users}"
                host = door_url if sweep == "door" else None
                run_locust(SWEEPS[sweep], users, args.seconds, host, prefix, load_env)
                runs[sweep][users] = read_stats(prefix)
        mur(["stop", formation_id], env, timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.terminate()
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            launcher.kill()
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(runs)
    (args.out / "loadtest.json").write_text(json.dumps(
        {"seconds_per_run": args.seconds, "cores": os.cpu_count(), "sweeps": summary},
        indent=2) + "\n")
    text = markdown(summary, args.seconds)
    (args.out / "loadtest.md").write_text(text)
    sys.path.insert(0, str(ROOT / "loadtests"))
    from plots import plot_loadtest

    for path in plot_loadtest(summary, args.out):
        text += f"\nplot: {path}"
    print(text)


if __name__ == "__main__":
    main()
