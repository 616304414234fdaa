"""A formation whose worker is hostile code (docs/isolation.md): real ``mur run --roster``
processes, as root and as an ordinary user, with isolation on and off.

The formation: ``boss`` (entry) calls ``worker``; ``worker`` may call ``bystander`` and
reach ``127.0.0.1`` (any port) through its proxy; ``relay`` is a gateway member (an
a2a-sdk agent as its upstream) nobody may call. The test reads, from outside, every
target an attacker would want (each ``operator.token`` and running record under
``MURMUR_HOME``, the other members' records and work folders, the launcher's and every
runtime's pid, every door's port and the upstream's port), starts a server on
``127.0.0.2`` that no grant allows, and hands the list to the worker as its task. The
worker tries each attack and reports each outcome; its legitimate work (its own
``home/``, ``tmp/``, ``out/``, an allowed call, an allowed egress) must still work.

With isolation on, every attack fails; with ``--isolation off`` the attacks the sandbox
alone stops succeed, which proves the sandbox is what stops them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from launcher.landlock import host_support
from tests.integration.test_gateway_member import sdk_capsule
from tests.support.formation import (
    REPO,
    install_capsule,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    wait_gone,
    write_capsule,
    write_roster,
)

pytestmark = pytest.mark.integration

SUPPORT = host_support()
needs_landlock = pytest.mark.skipif(
    SUPPORT.abi < 6, reason=f"the full sandbox needs Landlock ABI 6; {SUPPORT.describe()}")

BOSS_AGENT = """
async def run(task):
    return await (await task.call_member("worker", task.text))
"""

BYSTANDER_AGENT = """
async def run(task):
    return f"bystander heard: {task.text}"
"""

#: The hostile worker: every attempt is recorded as "ok" or the error that stopped it.
HOSTILE_AGENT = r'''
import asyncio, ctypes, json, os, socket, subprocess, sys, urllib.request

PTRACE_SEIZE = 0x4206
SEIZE = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
         "r = libc.ptrace(ctypes.c_long(0x4206), ctypes.c_long(int(sys.argv[1])), None, None); "
         "sys.exit(0 if r == 0 else ctypes.get_errno())")


def attempt(report, name, action):
    try:
        action()
        report[name] = "ok"
    except BaseException as exc:  # every failure is an outcome
        report[name] = f"{type(exc).__name__}: {exc}"[:300]


def read(path):
    with open(path, "rb") as handle:
        if not path.endswith("/mem"):  # opening mem is the check; offset 0 is unmapped
            handle.read(64)


def seize(pid):
    done = subprocess.run([sys.executable, "-c", SEIZE, str(pid)], capture_output=True,
                          timeout=20)
    if done.returncode != 0:
        raise PermissionError(f"ptrace: errno {done.returncode} {done.stderr[-200:]!r}")


def connect(port):
    socket.create_connection(("127.0.0.1", port), timeout=3).close()


def direct(url, headers=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers=headers or {})
    opener.open(request, timeout=5).read()


def operator_call(token_path, door_url):
    token = open(token_path).read().strip()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                       "params": {}}).encode()
    request = urllib.request.Request(
        door_url, data=body, headers={"Authorization": f"Bearer {token}",
                                      "Content-Type": "application/json",
                                      "A2A-Version": "1.0"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    answer = json.loads(opener.open(request, timeout=5).read())
    if "result" not in answer:
        raise PermissionError(f"the door answered {answer}")


def raw_socket():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()


def curl(url):
    subprocess.run(["curl", "-sS", "--noproxy", "*", "-m", "5", url], check=True,
                   capture_output=True, timeout=20)


async def run(task):
    targets = json.loads(task.text)
    attacks, work = {}, {}
    for path in targets["files"]:
        attempt(attacks, f"read {path}", lambda p=path: read(p))
    for folder in targets["folders"]:
        attempt(attacks, f"list {folder}", lambda f=folder: os.listdir(f))
    for pid in targets["pids"]:
        for what in ("mem", "environ", "cmdline"):
            attempt(attacks, f"proc {pid} {what}", lambda p=pid, w=what: read(f"/proc/{p}/{w}"))
        attempt(attacks, f"ptrace {pid}", lambda p=pid: seize(p))
        attempt(attacks, f"signal {pid}", lambda p=pid: os.kill(p, 0))
    for port in targets["ports"]:
        attempt(attacks, f"connect {port}", lambda p=port: connect(p))
    attempt(attacks, "operator call", lambda: operator_call(targets["boss_token"],
                                                            targets["boss_door"]))
    attempt(attacks, "urllib", lambda: direct(targets["forbidden_url"]))
    attempt(attacks, "raw socket", raw_socket)
    if targets["curl"]:
        attempt(attacks, "curl", lambda: curl(targets["forbidden_url"]))
    attempt(attacks, "urllib through the proxy", lambda: urllib.request.urlopen(
        targets["forbidden_url"], timeout=5).read())

    def own_files():
        for folder in (task.home, task.tmp, task.workdir):
            (folder / "mine.txt").write_text("mine")
            assert (folder / "mine.txt").read_text() == "mine"
    attempt(work, "own files", own_files)
    attempt(work, "out", lambda: open(os.path.join(targets["own_out"], "note.txt"),
                                      "w").write("x"))
    try:
        answer = await (await task.call_member("bystander", "hello"))
        work["call"] = "ok" if answer == "bystander heard: hello" else answer
    except Exception as exc:
        work["call"] = f"{type(exc).__name__}: {exc}"
    try:
        response = await task.http.get(targets["allowed_url"])
        work["egress"] = "ok" if response.text == "allowed" else f"{response.status_code}"
    except Exception as exc:
        work["egress"] = f"{type(exc).__name__}: {exc}"
    return json.dumps({"attacks": attacks, "work": work, "uid": os.getuid()})
'''


# --------------------------------------------------------------------- servers the test runs


class _Hits(BaseHTTPRequestHandler):
    hits: list[str] = []
    body = b"allowed"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def http_server(host: str) -> Iterator[tuple[str, list[str]]]:
    handler = type("Hits", (_Hits,), {"hits": []})
    server = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/", handler.hits
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------- the formation


@dataclass
class Owner:
    """Who runs the formation: this test's own user, or an ordinary user made for the
    test, whose commands run in a mount namespace where this checkout's Python is
    reachable (``/root``, where pyenv keeps it, is root's alone: a tmpfs of mode 0755 is
    put over it there, holding only ``.pyenv``)."""

    uid: int
    gid: int
    holder: subprocess.Popen[bytes] | None = None

    def argv(self, argv: list[str]) -> list[str]:
        if self.holder is None:
            return argv
        return ["nsenter", f"--target={self.holder.pid}", "--mount", "--",
                "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--", *argv]

    def chown(self, root: Path) -> None:
        if self.holder is None:
            return
        for folder, dirs, files in os.walk(root):
            os.chown(folder, self.uid, self.gid)
            for name in (*dirs, *files):
                os.lchown(os.path.join(folder, name), self.uid, self.gid)


MOUNTS = """set -e
mkdir -p "$SAVE"
mount --bind /root "$SAVE"
mount -t tmpfs -o mode=755 tmpfs /root
if [ -d "$SAVE/.pyenv" ]; then mkdir /root/.pyenv; mount --bind "$SAVE/.pyenv" /root/.pyenv; fi
echo ready
exec sleep 900
"""


@contextmanager
def ordinary_user(scratch: Path) -> Iterator[Owner]:
    """An ordinary user (made when missing) and the namespace its commands run in."""
    if os.getuid() != 0:
        yield Owner(os.getuid(), os.getgid())
        return
    for tool in ("useradd", "unshare", "nsenter", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: the ordinary user cannot be set up")
    name = "murmurtest"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", name], capture_output=True, text=True,
                              check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot create an ordinary user: {made.stderr.strip()}")
        entry = pwd.getpwnam(name)
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", MOUNTS],
        env={"SAVE": str(scratch / "root-view"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        if holder.stdout.readline() != b"ready\n":
            holder.wait(timeout=10)
            pytest.skip("a mount namespace cannot be made here: "
                        f"{holder.stderr.read().decode().strip() if holder.stderr else ''}")
        owner = Owner(entry.pw_uid, entry.pw_gid, holder)
        problem = reachable_by(owner)
        if problem is not None:
            pytest.skip(f"the ordinary user cannot run this checkout: {problem}")
        yield owner
    finally:
        holder.kill()
        holder.wait(timeout=10)


def reachable_by(owner: Owner) -> str | None:
    """Why ``owner`` cannot run this checkout's Python, or None."""
    probe = subprocess.run(owner.argv([sys.executable, "-c", "import launcher, gateway, a2a"]),
                           cwd="/", capture_output=True, text=True, check=False,
                           env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                "PYTHONDONTWRITEBYTECODE": "1"})
    return None if probe.returncode == 0 else probe.stderr.strip()[-300:]


def build(root: Path, allowed_port: int) -> Path:
    project = root / "project"
    project.mkdir()
    boss = write_capsule(root, "boss", BOSS_AGENT, allow_localhost=True)
    worker = write_capsule(root, "worker", HOSTILE_AGENT, accept_peers=True)
    manifest = worker / "murmur.yaml"
    # 127.0.0.1 at any port: the doors (for its call) and the allowed server; nothing
    # on 127.0.0.2, where the forbidden server listens.
    manifest.write_text(manifest.read_text() + "capabilities:\n  network: {allow: ['127.0.0.1']}\n")
    bystander = write_capsule(root, "bystander", BYSTANDER_AGENT, accept_peers=True)
    relay = sdk_capsule(root, "relay")
    for source in (boss, worker, bystander, relay):
        install_capsule(project, source)
    write_roster(project, [("boss", True), ("worker", False), ("bystander", False),
                           ("relay", False)],
                 {"boss": ["worker"], "worker": ["bystander"]})
    return project


@dataclass
class Outcome:
    attacks: dict[str, str]
    work: dict[str, str]
    uid: int
    forbidden_hits: list[str]
    targets: dict[str, Any]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def run_hostile(tmp: Path, owner: Owner, isolation: str) -> Outcome:
    home = tmp / "home"
    home.mkdir(mode=0o700)
    user_home = tmp / "user"
    user_home.mkdir()
    with http_server("127.0.0.1") as (allowed_url, _), \
            http_server("127.0.0.2") as (forbidden_url, forbidden_hits):
        project = build(tmp, int(allowed_url.rsplit(":", 1)[1].strip("/")))
        owner.chown(tmp)
        env = launcher_env(MURMUR_HOME=str(home), HOME=str(user_home),
                           PYTHONDONTWRITEBYTECODE="1", MURMUR_ISOLATION=isolation,
                           PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
        launcher = subprocess.Popen(
            owner.argv([sys.executable, "-m", "launcher.cli", "run", "--roster", "--json",
                        "--project", str(project)]), cwd=project, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            process_group=0)
        try:
            try:
                line = read_formation_line(launcher, timeout=90)
            except AssertionError as failed:
                launcher.kill()
                _, err = launcher.communicate(timeout=30)
                raise AssertionError(f"{failed}: {err.decode(errors='replace')}") from None
            targets = gather_targets(home, launcher.pid, line, forbidden_url, allowed_url)
            sent = subprocess.run(
                owner.argv([sys.executable, "-m", "launcher.cli", "send",
                            line["formation_id"], json.dumps(targets), "--json"]),
                cwd=project, env=env, capture_output=True, text=True, timeout=120,
                check=False)
            assert sent.returncode == 0, sent.stderr
            task = json.loads(sent.stdout)
            answer = task["artifacts"][0]["parts"][0]["text"]
            report = json.loads(answer)
        finally:
            stop_formation(launcher, home)
        return Outcome(report["attacks"], report["work"], report["uid"],
                       list(forbidden_hits), targets)


def stop_formation(launcher: subprocess.Popen[bytes], home: Path) -> None:
    """SIGTERM the launcher (it winds every member down), SIGKILL its group if it hangs."""
    pids = [launcher.pid, *targets_pids(home)]
    if launcher.poll() is None:
        os.kill(launcher.pid, signal.SIGTERM)
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group_quietly(launcher)
            launcher.wait(timeout=10)
    wait_gone(pids, 30)


def targets_pids(home: Path) -> list[int]:
    pids = []
    for record in (home / "running").glob("*.json"):
        data = json.loads(record.read_text())
        if data.get("kind") == "session":
            pids.append(int(data["pid"]))
    return pids


def gather_targets(home: Path, launcher_pid: int, line: dict[str, Any], forbidden_url: str,
                   allowed_url: str) -> dict[str, Any]:
    """Everything the worker must not reach, read from outside."""
    sessions = {}
    for record in (home / "running").glob("*.json"):
        data = json.loads(record.read_text())
        if data.get("kind") == "session":
            sessions[data["member"]] = data
    worker = sessions["worker"]
    others = {name: data for name, data in sessions.items() if name != "worker"}
    tokens = sorted(str(path) for path in home.rglob("operator.token")
                    if not str(path).startswith(worker["records_dir"]))
    files = [*tokens, *(str(path) for path in (home / "running").glob("*.json")),
             *(str(Path(data["records_dir"]) / "trace.jsonl") for data in others.values())]
    folders = [str(home / "running"), str(home / "records"),
               *(data["records_dir"] for data in others.values()),
               *(str(home / "formations" / line["formation_id"] / name)
                 for name in others if name != "boss")]
    runtime_pids = [int(data["pid"]) for data in others.values()]
    # the member template that forked them (launcher/template.py), when there is one
    runtime_pids += sorted({parent for pid in runtime_pids
                            if (parent := parent_of(pid)) != launcher_pid})
    agent_pids = [child for pid in runtime_pids for child in children(pid)]
    upstream = [child for child in children(int(sessions["relay"]["pid"]))]
    ports = [int(data["door_url"].rsplit(":", 1)[1]) for data in others.values()]
    upstream_ports = []
    for pid in upstream:
        upstream_ports += listening_ports(pid)
    boss = sessions["boss"]
    return {
        "files": files, "folders": folders,
        "pids": [launcher_pid, int(worker["pid"]), *runtime_pids, *agent_pids, *upstream],
        "ports": ports + upstream_ports,
        "boss_token": str(Path(boss["records_dir"]) / "operator.token"),
        "boss_door": boss["door_url"], "forbidden_url": forbidden_url,
        "allowed_url": allowed_url, "curl": shutil.which("curl") is not None,
        "own_out": str(Path(worker["records_dir"]) / "out"),
        "upstream_ports": upstream_ports,
    }


def listening_ports(pid: int) -> list[int]:
    """The TCP ports ``pid`` listens on (from its sockets' inodes)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:
            ports.append(int(fields[1].split(":")[1], 16))
    return ports


# --------------------------------------------------------------------- what must hold


def assert_contained(outcome: Outcome) -> None:
    succeeded = {name: result for name, result in outcome.attacks.items() if result == "ok"}
    assert succeeded == {}, f"attacks that got through: {sorted(succeeded)}"
    # ...each stopped by a refusal, not by a target that was not there
    missing = {name: result for name, result in outcome.attacks.items()
               if "No such" in result or "FileNotFound" in result or "refused" in result
               and "Connection refused" in result}
    assert missing == {}, missing
    assert outcome.forbidden_hits == []
    assert outcome.work == {"own files": "ok", "out": "ok", "call": "ok", "egress": "ok"}
    # the targets really were there to attack
    assert outcome.targets["upstream_ports"], "the gateway upstream's port was not found"
    assert len(outcome.targets["pids"]) >= 6


def assert_sandbox_is_what_stops_them(outcome: Outcome) -> None:
    attacks = outcome.attacks
    got_through = [name for name, result in attacks.items() if result == "ok"]
    expected = ["operator call", "urllib", *(name for name in attacks
                                             if name.startswith(("read ", "list ", "connect ",
                                                                 "signal ")))]
    if outcome.targets["curl"]:
        expected.append("curl")
    if outcome.uid == 0:
        expected += ["raw socket", *(name for name in attacks
                                     if name.startswith(("ptrace ", "proc ")))]
    else:
        expected += [name for name in attacks if name.startswith("proc ")
                     and name.endswith("cmdline")]
    missing = sorted(set(expected) - set(got_through))
    assert missing == [], f"with isolation off these still failed: " \
                          f"{ {name: attacks[name] for name in missing} }"
    assert outcome.forbidden_hits, "the forbidden server was never reached"
    assert attacks["urllib through the proxy"] != "ok"  # the proxy refuses it either way
    assert outcome.work == {"own files": "ok", "out": "ok", "call": "ok", "egress": "ok"}


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder an ordinary user can enter (pytest's own are root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="murmur-hostile-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@needs_landlock
def test_a_hostile_agent_running_as_root_reaches_nothing_beyond_its_edges(
        scratch: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("this variant runs as root; the ordinary-user variant runs here")
    outcome = run_hostile(scratch, Owner(0, 0), "auto")
    assert outcome.uid == 0
    assert_contained(outcome)


@needs_landlock
def test_a_hostile_agent_running_as_an_ordinary_user_reaches_nothing_beyond_its_edges(
        scratch: Path) -> None:
    with ordinary_user(scratch) as owner:
        outcome = run_hostile(scratch, owner, "auto")
    assert outcome.uid == owner.uid != 0
    assert_contained(outcome)


def test_with_isolation_off_the_same_attacks_succeed(scratch: Path) -> None:
    owner = Owner(os.getuid(), os.getgid())
    outcome = run_hostile(scratch, owner, "off")
    assert_sandbox_is_what_stops_them(outcome)
