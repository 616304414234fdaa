"""Helpers for the launcher's integration tests (no tests here): capsules built and
installed into a temporary project, a roster, the launcher as a real ``mur`` process,
and a fake member that speaks the member contract of docs/member-runtime.md (the
readiness line, the door, the lifeline's ending) and can misbehave on request.

The fake is put in front of ``run ...`` with the launcher's test-only hook
``MURMUR_TEST_MEMBER_ARGV_PREFIX``. ``FAKE_MEMBER_MODES`` (JSON, capsule -> mode) picks
what each member does; a capsule it does not name runs the real ``mur run``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.admission.store import install, pack

REPO = Path(__file__).resolve().parents[2]

FAKE_MEMBER = r'''
import json, os, secrets, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

argv = sys.argv[1:]
capsule = argv[argv.index("--capsule") + 1]
mode = json.loads(os.environ.get("FAKE_MEMBER_MODES", "{}")).get(capsule, "real")
if mode == "real":
    os.execv(sys.executable, [sys.executable, "-m", "launcher.cli", *argv])

from launcher.home import records, trace
from launcher.ids import new_session_id

formation = os.environ["MURMUR_FORMATION_ID"]
lifeline = int(os.environ["MURMUR_FORMATION_LIFELINE"])
channel = int(os.environ["MURMUR_FORMATION_CHANNEL"])


def first_line():
    data = b""
    while b"\n" not in data:
        chunk = os.read(channel, 65536)
        if not chunk:
            break
        data += chunk
    return json.loads(data.split(b"\n")[0])


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def say(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


def wind_down(writer=None):
    while os.read(lifeline, 4096):
        pass
    if writer is not None:
        writer.write("formation_ended", formation_id=formation)
        writer.write("session_end", exit_status="ok", code=None)
    sys.exit(0)


if mode == "exit_at_start":
    sys.exit(3)
if mode == "garbage_first":
    say("starting up, please wait")
    wind_down()
if mode == "silent":
    wind_down()

creds = first_line()
session = new_session_id()
staged = records.stage_session(os.environ.get("MURMUR_WORKDIR") or os.getcwd(), session)
records.write_operator_token(staged.operator_token, secrets.token_urlsafe(24))
writer = trace.TraceWriter(staged.trace)
writer.write("session_start", session_id=session, formation_id=formation,
             formation_member=creds["member"], formation_callees=list(creds["tokens"]))
ready = {"event": "ready", "session_id": session, "pid": os.getpid(),
         "door_url": f"http://127.0.0.1:{closed_port()}", "capsule": capsule,
         "version": "1.0.0", "records_dir": str(staged.dir), "formation_id": formation,
         "member": creds["member"]}

if mode == "no_door":
    del ready["door_url"]
    say(ready)
    wind_down(writer)
if mode == "other_formation":
    ready["formation_id"] = "frm_0190000000007000a000000000000000"
    say(ready)
    wind_down(writer)
if mode == "exit_after_report":
    say(ready)
    sys.exit(0)
if mode == "dead_door":
    say(ready)
    wind_down(writer)

# "good": a door serving the agent card, then the contract's ending.
card = {"name": capsule, "capabilities": {"extensions": [{
    "uri": "urn:murmur:session:v1",
    "params": {"member": creds["member"], "sessionId": session, "formationId": formation}}]}}


class Door(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(card).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Door)
threading.Thread(target=server.serve_forever, daemon=True).start()
ready["door_url"] = f"http://127.0.0.1:{server.server_address[1]}"
say(ready)
print(f"fake member {creds['member']} is up", file=sys.stderr, flush=True)
if "--task" in argv:
    task = argv[argv.index("--task") + 1]
    time.sleep(float(os.environ.get("FAKE_TASK_SECONDS", "0")))
    say(f"fake result: {task}")
    writer.write("session_end", exit_status="ok", code=None)
    sys.exit(0)
wind_down(writer)
'''


def write_fake_member(folder: Path) -> str:
    """Write the fake member script; the value for MURMUR_TEST_MEMBER_ARGV_PREFIX."""
    script = folder / "fake_member.py"
    script.write_text(FAKE_MEMBER)
    return shlex.join([sys.executable, str(script)])


def write_capsule(root: Path, name: str, agent: str, *, accept_peers: bool = False,
                  authenticated: bool = True, allow_localhost: bool = False,
                  retain: str | None = None, lifecycle: str | None = None,
                  version: str = "1.0.0") -> Path:
    """A capsule source folder with ``murmur.yaml`` and ``agent.py`` (``agent`` is the
    body of the module)."""
    source = root / "src" / name
    source.mkdir(parents=True)
    lines = ["manifest_version: 1", f"name: {name}", f"version: {version}",
             f"description: test member {name}", "agent:", "  python: agent:run"]
    if accept_peers:
        lines += ["exports:", "  peer_tasks: {accept: true}"]
    if authenticated:
        lines += ["network:", "  authentication: {}"]
    if allow_localhost:
        lines += ["capabilities:", "  network: {allow: [localhost]}"]
    lines += ["lifecycle: " + (lifecycle or "{concurrency: 1, queue_depth: 4}")]
    if retain:
        lines += ["trace:", f"  retain: {retain}"]
    (source / "murmur.yaml").write_text("\n".join(lines) + "\n")
    (source / "agent.py").write_text(textwrap.dedent(agent).lstrip())
    return source


def install_capsule(project: Path, source: Path) -> None:
    dist = project.parent / "dist"
    dist.mkdir(exist_ok=True)
    packed = pack(source, dist / f"{source.name}.mur.zip")
    install(packed.path, project)


def write_roster(project: Path, members: Sequence[tuple[str, bool]],
                 reachability: Mapping[str, Sequence[str]] | str | None = None) -> None:
    """``members``: (name, entry) pairs, each running ``local/<name>`` at 1.0.0."""
    lines = ["roster_version: 1", "members:"]
    for name, entry in members:
        lines += [f"  - name: {name}", f"    capsule: local/{name}", "    version: 1.0.0"]
        if entry:
            lines.append("    entry: true")
    if isinstance(reachability, str):
        lines.append(f"reachability: {reachability}")
    elif reachability:
        lines.append("reachability:")
        for caller, callees in reachability.items():
            lines += [f"  - from: {caller}", f"    to: [{', '.join(callees)}]"]
    (project / "roster.yaml").write_text("\n".join(lines) + "\n")


ECHO_AGENT = """
async def run(task):
    return f"{task.member}: {task.text}"
"""

PLANNER_AGENT = """
async def run(task):
    code = await (await task.call_member("coder", f"write {task.text}"))
    review = await (await task.call_member("reviewer", f"review {code}"))
    return f"plan done | {code} | {review}"
"""

CODER_AGENT = """
async def run(task):
    return f"code for <{task.text}>"
"""

REVIEWER_AGENT = """
async def run(task):
    return f"looks good: <{task.text}>"
"""


def simple_project(tmp_path: Path, names: Iterable[str], *, entry: str,
                   reachability: Mapping[str, Sequence[str]] | str | None = None,
                   agents: Mapping[str, str] | None = None,
                   retain: str | None = None, project_name: str = "project") -> Path:
    """A project with one capsule per member (echo agents unless ``agents`` says
    otherwise), installed, and its roster."""
    project = tmp_path / project_name
    project.mkdir()
    names = list(names)
    callees = {} if not isinstance(reachability, Mapping) else reachability
    called = {name for targets in callees.values() for name in targets}
    for name in names:
        source = write_capsule(
            tmp_path / f"{project_name}-src", name, (agents or {}).get(name, ECHO_AGENT),
            accept_peers=name in called or reachability == "all",
            authenticated=bool(reachability),
            allow_localhost=name in callees or reachability == "all",
            retain=retain if name == entry else None)
        install_capsule(project, source)
    write_roster(project, [(name, name == entry) for name in names], reachability)
    return project


def launcher_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("MURMUR_FORMATION", "MURMUR_TEST", "FAKE_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def start_launcher(project: Path, *args: str, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """``mur run --roster --project <project> ARGS`` in a process group of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--roster", "--project", str(project),
         *args],
        cwd=cwd or project, env=dict(env or launcher_env()), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)


def mur(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher.cli", *args], cwd=cwd,
                          env=dict(env or launcher_env()), capture_output=True, text=True,
                          timeout=timeout, check=False)


def formation_members(formation_id: str, env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``mur ps --json``'s rows of a running formation's members, by member name."""
    for formation in json.loads(mur("ps", "--json", env=env).stdout)["formations"]:
        if formation["formation_id"] == formation_id:
            return {row["member"]: row for row in formation["members"]}
    return {}


def read_formation_line(process: subprocess.Popen[bytes], timeout: float = 60) -> dict[str, Any]:
    """The launcher's ``--json`` formation line (its first stdout line)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stdout.fileno(), True)
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    line = b""
    while not line.endswith(b"\n"):
        if not selector.select(max(0.0, deadline - time.monotonic())):
            raise AssertionError("no formation line in time")
        chunk = os.read(process.stdout.fileno(), 1)
        if not chunk:
            raise AssertionError(f"the launcher ended without a formation line: {line!r}")
        line += chunk
    selector.close()
    data: dict[str, Any] = json.loads(line)
    assert data["event"] == "formation"
    return data


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def descendants_of(root: int) -> list[int]:
    """Every process below ``root`` now, from each process's parent in ``/proc``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue    # gone meanwhile
    found: list[int] = []
    frontier = [root]
    while frontier:
        above = frontier.pop()
        below = [pid for pid, parent in parents.items() if parent == above]
        found += below
        frontier += below
    return found


def wait_gone(pids: Iterable[int], timeout: float) -> float:
    """Seconds until every pid is gone; AssertionError naming the survivors."""
    start = time.monotonic()
    pids = list(pids)
    while time.monotonic() - start < timeout:
        if not any(alive(pid) for pid in pids):
            return time.monotonic() - start
        time.sleep(0.05)
    survivors = [pid for pid in pids if alive(pid)]
    raise AssertionError(f"members still running after {timeout}s: {survivors}")


def kill_group_quietly(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def member_traces(records_root: Path) -> dict[str, list[dict[str, Any]]]:
    """member name -> its trace records, for every trace under ``records_root``."""
    found: dict[str, list[dict[str, Any]]] = {}
    for trace in records_root.rglob("trace.jsonl"):
        records = [json.loads(line) for line in trace.read_text().splitlines() if line]
        if records and records[0].get("event") == "session_start":
            found[str(records[0].get("formation_member"))] = records
    return found
