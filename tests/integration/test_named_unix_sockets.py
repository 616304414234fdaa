"""Confined code connects to a named UNIX socket outside every grant (docs/isolation.md,
"The socket filter"): real ``mur run --capsule`` processes, with ``--isolation required``
and with ``--isolation off``.

Landlock up to ABI 7 does not govern ``connect()`` to a pathname UNIX socket, so before
the socket filter refused ``socket(AF_UNIX, ...)`` confined code reached any named socket
its user may write (where ``/var/run/docker.sock`` exists, that is the host). The test
binds a listener, owned by the test's user (root where the suite runs as root), in a
folder of its temporary folder that no grant names, and lets any user connect to it (as
``docker.sock``'s group may). Then each kind of confined code tries to connect to it and
says what happened: a ``python`` agent, a ``command`` agent, a model member's ``command``
tool (against the loopback fake OpenAI server) and a gateway member's upstream
(``agent.a2a.command``, before it serves); the ``python`` agent also as an ordinary user,
and also sends a datagram to a named datagram socket beside it (as to ``/dev/log``) from
one end of a datagram socketpair, the one kind of pair that can address another socket.
With isolation required each is refused with ``EACCES`` and the listener sees nothing;
with ``--isolation off`` the same connect reaches it, so the filter is what stops it.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox.isolation import missing
from launcher.sandbox.landlock import host_support
from launcher.sandbox.seccomp import seccomp_support
from tests.support import member as support
from tests.support import third_party
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, text, tools
from tests.support.gateway_capsules import gateway_capsule
from tests.support.model_members import FAKE_KEY, KEY_ENV, write_model_capsule
from tests.support.users import Owner, ordinary_user, scratch_folder

pytestmark = pytest.mark.integration

GAPS = missing(host_support(), seccomp_support())
needs_isolation = pytest.mark.skipif(
    bool(GAPS), reason="--isolation required cannot run here: " + "; ".join(GAPS))

GREETING = "the host's socket"

#: What every kind of confined code runs: connect to the named socket at ``path``, and
#: say what it answered or the error that stopped it.
PROBE = r'''
import errno, socket


def probe(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(path)
            return "connected: " + sock.recv(64).decode().strip()
    except OSError as exc:
        return "refused: " + errno.errorcode.get(exc.errno, str(exc.errno))
'''

#: A python agent: the socket named by the task; a datagram to the datagram socket beside
#: it; and a name lookup, which must still work (glibc asks nscd over an AF_UNIX socket
#: first, and falls back when refused).
PYTHON_AGENT = PROBE + r'''
import json, os


def datagram(path):
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        with ours, theirs:
            ours.sendto(b"<13>sshd: a forged log line", path)
        return "sent"
    except OSError as exc:
        return "refused: " + errno.errorcode.get(exc.errno, str(exc.errno))


async def run(task):
    try:
        localhost = sorted({entry[4][0] for entry in socket.getaddrinfo("localhost", 80)})
    except OSError as exc:
        localhost = str(exc)
    log = os.path.join(os.path.dirname(task.text), "log.sock")
    return json.dumps({"unix": probe(task.text), "datagram": datagram(log),
                       "localhost": localhost})
'''

#: A command agent's (and a command tool's) program: the path on stdin.
PROGRAM = PROBE + r'''
import sys

print(probe(sys.stdin.read().strip()))
'''

#: A gateway upstream: tries before it serves, says so on stderr, then serves.
UPSTREAM = PROBE + r'''
import os, sys

print("named socket:", probe(sys.argv.pop(1)), file=sys.stderr, flush=True)
os.execv(sys.executable, [sys.executable, "sdk_agent.py", *sys.argv[1:]])
'''

REFUSED = f"refused: {errno.errorcode[errno.EACCES]}"
CONNECTED = f"connected: {GREETING}"


@dataclass
class Listener:
    """A named socket that answers every connection with :data:`GREETING`, and a named
    datagram socket beside it (``log.sock``)."""

    path: Path
    log: socket.socket
    accepted: list[int] = field(default_factory=list)

    def datagrams(self) -> list[bytes]:
        received = []
        while True:
            try:
                received.append(self.log.recv(512, socket.MSG_DONTWAIT))
            except BlockingIOError:
                return received


@contextmanager
def host_socket(folder: Path) -> Iterator[Listener]:
    folder.mkdir(mode=0o755, parents=True)
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(folder / "log.sock"))
    listener = Listener(folder / "host.sock", log)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(listener.path))
    for path in (listener.path, folder / "log.sock"):
        os.chmod(path, 0o777)  # noqa: S103 - any user may: the filter must be what stops it
    server.listen()
    server.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                listener.accepted.append(1)
                connection.sendall(GREETING.encode() + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
        log.close()


def run_member(folder: Path, owner: Owner, capsule: str, task: str, mode: str,
               **env: str) -> subprocess.CompletedProcess[str]:
    """``mur run --capsule local/CAPSULE --task TASK --isolation MODE`` as ``owner``."""
    project, home = folder / "project", folder / "home"
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", f"local/{capsule}",
            "--capsule-version", "1.0.0", "--project", str(project), "--task", task,
            "--isolation", mode]
    return subprocess.run(owner.argv(argv), cwd=project, capture_output=True, text=True,
                          timeout=180, check=False, stdin=subprocess.DEVNULL,
                          env=support.member_env(home, PYTHONDONTWRITEBYTECODE="1", **env))


def prepared(folder: Path, owner: Owner, source: Path) -> None:
    """The project and MURMUR_HOME under ``folder``, ``source`` installed, all ``owner``'s."""
    (folder / "project").mkdir()
    (folder / "home").mkdir(mode=0o700)
    support.install_capsule(folder / "project", source)
    owner.chown(folder)


# ------------------------------------------------------------------ each kind of confined code


def python_agent(folder: Path, owner: Owner, mode: str) -> str:
    prepared(folder, owner, support.write_capsule(folder / "src" / "prober", "prober",
                                                  agent=PYTHON_AGENT))
    with host_socket(folder / "outside") as listener:
        done = run_member(folder, owner, "prober", str(listener.path), mode)
        datagrams = listener.datagrams()
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert "127.0.0.1" in answer["localhost"], answer  # a lookup still works
    # the datagram pair: refused like the stream socket, or the line arrived
    sent = answer["datagram"] == "sent"
    assert datagrams == ([b"<13>sshd: a forged log line"] if sent else []), answer
    assert answer["datagram"] == ("sent" if answer["unix"] == CONNECTED else REFUSED)
    return seen_by(listener, answer["unix"])


def command_agent(folder: Path, owner: Owner, mode: str) -> str:
    source = support.write_capsule(folder / "src" / "prober", "prober",
                                   command=[sys.executable, "probe.py"])
    (source / "probe.py").write_text(PROGRAM)
    prepared(folder, owner, source)
    with host_socket(folder / "outside") as listener:
        done = run_member(folder, owner, "prober", str(listener.path), mode)
    assert done.returncode == 0, done.stderr
    return seen_by(listener, done.stdout.strip().splitlines()[-1])


def model_tool(folder: Path, owner: Owner, mode: str) -> str:
    with host_socket(folder / "outside") as listener:
        def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
            last = body["messages"][-1]
            if last["role"] == "tool":
                return text(f"the tool said {last['content'].strip()}")
            return tools(("probe", {"input": str(listener.path)}))

        with FakeOpenAI(script) as fake:
            prepared(folder, owner, write_model_capsule(
                folder / "src", "solo", fake.base_url, authenticated=False,
                tools=f"tools:\n  - command: {{name: probe, argv: [{sys.executable}, "
                      "probe.py], description: Tries a socket.}",
                files={"probe.py": PROGRAM}))
            done = run_member(folder, owner, "solo", "go", mode, **{KEY_ENV: FAKE_KEY})
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip().splitlines()[-1]
    assert said.startswith("the tool said "), said
    return seen_by(listener, said.removeprefix("the tool said "))


def gateway_upstream(folder: Path, owner: Owner, mode: str) -> str:
    source = folder / "src" / "relay"
    source.mkdir(parents=True)
    (source / "sdk_agent.py").write_text(third_party.SDK_AGENT.read_text())
    (source / "start.py").write_text(UPSTREAM)
    with host_socket(folder / "outside") as listener:
        gateway_capsule(source, "relay", [sys.executable, "start.py", str(listener.path),
                                          "--port", "{port}", "--name", "relay"])
        prepared(folder, owner, source)
        done = run_member(folder, owner, "relay", "hello", mode)
    assert done.returncode == 0, done.stderr
    assert "relay heard: hello" in done.stdout
    (line,) = [line for line in done.stderr.splitlines() if "named socket: " in line]
    return seen_by(listener, line.split("named socket: ", 1)[1].strip())


def seen_by(listener: Listener, outcome: str) -> str:
    """``outcome``, checked against what the listener saw."""
    assert len(listener.accepted) == (1 if outcome == CONNECTED else 0), outcome
    return outcome


KINDS = {"python agent": python_agent, "command agent": command_agent,
         "model member's command tool": model_tool, "gateway upstream": gateway_upstream}


# ------------------------------------------------------------------ the tests


@needs_isolation
@pytest.mark.parametrize("kind", list(KINDS))
def test_confined_code_cannot_connect_to_a_named_unix_socket_outside_every_grant(
        kind: str) -> None:
    """Refused with isolation required; the same code connects with it off."""
    this_user = Owner(os.getuid(), os.getgid())
    with scratch_folder() as folder:
        assert KINDS[kind](folder / "required", this_user, "required") == REFUSED
        assert KINDS[kind](folder / "off", this_user, "off") == CONNECTED


@needs_isolation
def test_an_ordinary_users_agent_cannot_connect_to_a_named_socket_its_user_may_write(
        ) -> None:
    with scratch_folder() as folder, ordinary_user(folder) as owner:
        for mode, expected in (("required", REFUSED), ("off", CONNECTED)):
            (folder / mode).mkdir()
            assert python_agent(folder / mode, owner, mode) == expected, mode
