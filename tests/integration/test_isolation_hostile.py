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

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox.landlock import host_support
from tests.support.daemon import DAEMON_SOURCE
from tests.support.formation import (
    install_capsule,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    wait_gone,
    write_capsule,
    write_roster,
)
from tests.support.gateway_capsules import sdk_capsule
from tests.support.users import Owner, ordinary_user, scratch_folder

pytestmark = pytest.mark.integration

SUPPORT = host_support()

BOSS_AGENT = """
async def run(task):
    return await (await task.call_member("worker", task.text))
"""

BYSTANDER_AGENT = """
async def run(task):
    return f"bystander heard: {task.text}"
"""

#: The hostile worker: every attempt is recorded as "ok" or the error that stopped it.
HOSTILE_AGENT = DAEMON_SOURCE + r'''
import asyncio, ctypes, json, os, socket, subprocess, sys, time, urllib.request

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


IPPROTO_MPTCP = 262


def mptcp_exchange(host, port, payload=None):
    """Connect with MPTCP (which Landlock's TCP rules do not govern); with ``payload``,
    send it and return the first bytes of the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    sock.settimeout(5)
    try:
        sock.connect((host, port))
        if payload is None:
            return b""
        sock.sendall(payload)
        return sock.recv(200)
    finally:
        sock.close()


def mptcp_send_message(port):
    """A JSON-RPC SendMessage over MPTCP straight to a gateway's upstream (no auth)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": "m-1", "role": "ROLE_USER",
                    "parts": [{"text": "hello from no edge"}]}}}).encode()
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
            f"\r\nA2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    answer = mptcp_exchange("127.0.0.1", port, head + body)
    if not answer.startswith(b"HTTP/1.1 200"):
        raise PermissionError(f"the upstream answered {answer[:40]!r}")


def mptcp_listen():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    finally:
        sock.close()


def open_socket(family, kind, protocol):
    socket.socket(family, kind, protocol).close()


def io_uring():
    libc = ctypes.CDLL(None, use_errno=True)
    params = (ctypes.c_char * 120)()
    fd = libc.syscall(ctypes.c_long(425), ctypes.c_long(4), params)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    os.close(fd)


#: (family, type, protocol) of the other sockets the filter refuses
SOCKETS = {"sctp": (2, 1, 132), "smc": (43, 1, 0), "packet": (17, 3, 0), "vsock": (40, 1, 0),
           "netlink audit": (16, 3, 9)}


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
    for port in targets["ports"]:
        attempt(attacks, f"mptcp connect {port}",
                lambda p=port: mptcp_exchange("127.0.0.1", p))
    forbidden_host, forbidden_port = targets["forbidden_url"].split("/")[2].split(":")
    attempt(attacks, "mptcp forbidden host", lambda: mptcp_exchange(
        forbidden_host, int(forbidden_port), b"GET /mptcp HTTP/1.0\r\n\r\n"))
    for port in targets["upstream_ports"]:
        attempt(attacks, f"mptcp upstream SendMessage {port}",
                lambda p=port: mptcp_send_message(p))
    attempt(attacks, "mptcp listen", mptcp_listen)
    for name, triple in SOCKETS.items():
        attempt(attacks, f"socket {name}", lambda t=triple: open_socket(*t))
    attempt(attacks, "io_uring", io_uring)
    daemon_pid = daemon(os.path.join(task.tmp, "daemon.pid"))

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
    return json.dumps({"attacks": attacks, "work": work, "uid": os.getuid(),
                       "daemon": daemon_pid})
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
    #: The double-forked, setsid daemon the worker left, and whether it outlived the
    #: formation (looked at as soon as the launcher and every runtime had ended).
    daemon: int
    daemon_survived: bool


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
        daemon = int(report["daemon"])
        survived = outlives(daemon, seconds=1.0)
        return Outcome(report["attacks"], report["work"], report["uid"],
                       list(forbidden_hits), targets, daemon, survived)


def outlives(pid: int, seconds: float) -> bool:
    """Whether ``pid`` still runs ``seconds`` from now (it is killed if so)."""
    try:
        wait_gone([pid], seconds)
    except AssertionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return True
    return False


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


# --------------------------------------------------------------------- one formation per owner
#
# Each formation is run once per module and its outcome read by every test below, each
# named after the attack it looks at.


def mptcp_enabled() -> bool:
    try:
        return Path("/proc/sys/net/mptcp/enabled").read_text().strip() == "1"
    except OSError:
        return False


needs_mptcp = pytest.mark.skipif(not mptcp_enabled(), reason="this kernel has no MPTCP "
                                 "(net.mptcp.enabled is not 1): there is no hole to close")
EACCES = "PermissionError: [Errno 13] Permission denied"


@pytest.fixture(scope="module")
def as_root() -> Iterator[Outcome]:
    if SUPPORT.abi < 6:
        pytest.skip(f"the full sandbox needs Landlock ABI 6; {SUPPORT.describe()}")
    if os.getuid() != 0:
        pytest.skip("this variant runs as root; the ordinary-user variant runs here")
    with scratch_folder() as folder:
        yield run_hostile(folder, Owner(0, 0), "auto")


@pytest.fixture(scope="module")
def as_ordinary_user() -> Iterator[Outcome]:
    if SUPPORT.abi < 6:
        pytest.skip(f"the full sandbox needs Landlock ABI 6; {SUPPORT.describe()}")
    with scratch_folder() as folder, ordinary_user(folder) as owner:
        outcome = run_hostile(folder, owner, "auto")
        assert outcome.uid == owner.uid != 0
        yield outcome


@pytest.fixture(scope="module")
def isolation_off() -> Iterator[Outcome]:
    with scratch_folder() as folder:
        yield run_hostile(folder, Owner(os.getuid(), os.getgid()), "off")


@pytest.fixture(params=["root", "ordinary user"])
def confined(request: pytest.FixtureRequest) -> Outcome:
    """The outcome of the confined formation, as root and as an ordinary user."""
    name = "as_root" if request.param == "root" else "as_ordinary_user"
    outcome: Outcome = request.getfixturevalue(name)
    return outcome


def attacks_named(outcome: Outcome, prefix: str) -> dict[str, str]:
    found = {name: result for name, result in outcome.attacks.items()
             if name.startswith(prefix)}
    assert found, f"no attack named {prefix!r} was tried"
    return found


# --------------------------------------------------------------------- the tests


def test_a_hostile_agent_running_as_root_reaches_nothing_beyond_its_edges(
        as_root: Outcome) -> None:
    assert as_root.uid == 0
    assert_contained(as_root)


def test_a_hostile_agent_running_as_an_ordinary_user_reaches_nothing_beyond_its_edges(
        as_ordinary_user: Outcome) -> None:
    assert_contained(as_ordinary_user)


def test_with_isolation_off_the_same_attacks_succeed(isolation_off: Outcome) -> None:
    assert_sandbox_is_what_stops_them(isolation_off)


@needs_mptcp
def test_mptcp_connect_to_every_door_is_refused(confined: Outcome) -> None:
    doors = [f"mptcp connect {port}" for port in confined.targets["ports"]
             if port not in confined.targets["upstream_ports"]]
    assert len(doors) >= 3
    assert {name: confined.attacks[name] for name in doors} == dict.fromkeys(doors, EACCES)


@needs_mptcp
def test_mptcp_connect_to_a_host_outside_the_grant_is_refused(confined: Outcome) -> None:
    assert confined.attacks["mptcp forbidden host"] == EACCES
    assert confined.forbidden_hits == []


@needs_mptcp
def test_mptcp_send_message_to_a_gateway_upstream_is_refused(confined: Outcome) -> None:
    upstream = attacks_named(confined, "mptcp upstream SendMessage")
    assert upstream == dict.fromkeys(upstream, EACCES)
    ports = attacks_named(confined, "mptcp connect ")
    assert all(ports[f"mptcp connect {port}"] == EACCES
               for port in confined.targets["upstream_ports"])


@needs_mptcp
def test_mptcp_bind_and_listen_is_refused(confined: Outcome) -> None:
    assert confined.attacks["mptcp listen"] == EACCES


def test_sctp_smc_packet_vsock_and_netlink_sockets_are_refused(confined: Outcome) -> None:
    sockets = attacks_named(confined, "socket ")
    assert set(sockets) == {"socket sctp", "socket smc", "socket packet", "socket vsock",
                            "socket netlink audit"}
    assert sockets == dict.fromkeys(sockets, EACCES)


def test_io_uring_is_refused(confined: Outcome) -> None:
    assert confined.attacks["io_uring"] == EACCES


def test_a_double_forked_setsid_daemon_of_an_agent_is_gone_when_its_member_ends(
        confined: Outcome) -> None:
    assert confined.daemon > 0
    assert not confined.daemon_survived


def test_with_isolation_off_the_daemon_still_ends_with_its_member(
        isolation_off: Outcome) -> None:
    """Owning the process tree is not part of the sandbox: it holds with isolation off."""
    assert not isolation_off.daemon_survived


@needs_mptcp
def test_with_isolation_off_mptcp_reaches_doors_hosts_and_the_upstream(
        isolation_off: Outcome) -> None:
    """The refusals above are the filter's: unconfined, the same MPTCP attempts work."""
    mptcp = attacks_named(isolation_off, "mptcp ")
    assert mptcp == dict.fromkeys(mptcp, "ok")
    assert "/mptcp" in isolation_off.forbidden_hits
    assert isolation_off.attacks["io_uring"] in ("ok", "PermissionError: [Errno 1] "
                                                 "Operation not permitted")  # io_uring_disabled
    # the other families either open or fail with the kernel's own error, never EACCES
    assert EACCES not in attacks_named(isolation_off, "socket ").values()
