"""Helpers for the member runtime's process tests (no tests here): capsules written,
packed and installed into a temporary project, ``mur run --capsule`` started as a real
process, its readiness line read, its door called with its operator token, and a
formation channel and lifeline handed to it the way the launcher does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.auth.tokens import FormationKey
from launcher.admission.store import install, pack
from launcher.home.trace import read_trace
from launcher.ids import new_formation_id
from launcher.spawn.channel import ChannelWriter
from launcher.spawn.process import make_channel_pipe, make_lifeline_pipe

ROOT = Path(__file__).resolve().parents[2]

#: An agent whose behaviour the task text chooses, so one capsule serves most tests.
AGENT = '''
import asyncio, os, pathlib

async def run(task):
    text = task.text
    if text.startswith("sleep "):
        await asyncio.sleep(float(text.split()[1]))
    elif text == "stubborn":
        # ignores being cancelled: the wind-down has to wait for it
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass
    elif text.startswith("linger "):
        # takes a while to stop once cancelled
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(float(text.split()[1]))
            raise
    elif text == "linger-say":
        # says something once cancelled, after its launcher is gone
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)
            print("late words after the launcher", flush=True)
            raise
    elif text.startswith("wait-for "):
        target = pathlib.Path(text.split(" ", 1)[1])
        while not target.exists():
            await asyncio.sleep(0.02)
    elif text == "fail":
        raise RuntimeError("the agent gave up")
    elif text == "who":
        return f"{task.origin}/{task.trust}/{task.member}/{task.formation_id}"
    elif text.startswith("call "):
        _, callee, rest = text.split(" ", 2)
        handle = await task.call_member(callee, rest)
        return f"{callee} said: {await handle}"
    elif text == "env":
        return " ".join(f"{k}={v}" for k, v in sorted(task.env.items()))
    elif text == "fds":
        return " ".join(sorted(os.listdir("/proc/self/fd"), key=int))
    print("noise from the agent on stdout")
    return f"echo: {text}"
'''

# /proc/self is closed to agent code (docs/isolation.md): each descriptor is tried.
FDS_COMMAND = """import os
def open_fd(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
print(' '.join(str(fd) for fd in range(1024) if open_fd(fd)))
"""


def write_capsule(directory: Path, name: str, *, authentication: str | None = "{}",
                  peer_tasks: bool = False, allow: Sequence[str] = ("localhost",),
                  env_allow: Sequence[str] = (), lifecycle: str = "",
                  command: Sequence[str] | None = None, agent: str = AGENT,
                  extra: str = "", spawn: str = "") -> Path:
    """A capsule source directory; returns it. ``extra``: more of ``murmur.yaml``, as is;
    ``spawn``: ``capabilities.spawn`` as a flow mapping (``{allow: [local/x]}``)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["manifest_version: 1", f"name: {name}", "version: 1.0.0",
             f"description: The {name} test capsule."]
    if command is None:
        module = f"{name.replace('-', '_')}_agent"
        (directory / f"{module}.py").write_text(agent)
        lines += ["agent:", f"  python: {module}:run"]
    else:
        lines += ["agent:", "  command: " + json.dumps(list(command))]
    lines += ["exports:", f"  peer_tasks: {{accept: {'true' if peer_tasks else 'false'}}}"]
    if authentication is not None:
        lines += ["network:", f"  authentication: {authentication}"]
    lines += ["capabilities:", f"  network: {{allow: {json.dumps(list(allow))}}}",
              f"  env: {{allow: {json.dumps(list(env_allow))}}}"]
    if spawn:
        lines.append(f"  spawn: {spawn}")
    if lifecycle:
        lines += ["lifecycle:", textwrap.indent(textwrap.dedent(lifecycle).strip(), "  ")]
    (directory / "murmur.yaml").write_text("\n".join(lines) + "\n" + extra)
    return directory


def install_capsule(project: Path, source: Path) -> str:
    """Pack ``source`` and install it into ``project``'s store; the artifact's sha256."""
    packed = pack(source, project.parent / f"{source.name}.mur.zip")
    installed, _ = install(packed.path, project)
    return installed.sha256


@dataclass
class Member:
    """A running ``mur run --capsule`` process and what its readiness line said."""

    process: subprocess.Popen[bytes]
    ready: dict[str, Any] = field(default_factory=dict)
    _stdout_rest: bytes = b""
    _stderr: bytes | None = None
    _stdout: bytes | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def door(self) -> str:
        return str(self.ready["door_url"])

    @property
    def records(self) -> Path:
        return Path(self.ready["records_dir"])

    @property
    def token(self) -> str:
        return (self.records / "operator.token").read_text()

    def trace(self) -> list[dict[str, Any]]:
        return read_trace(self.records / "trace.jsonl")

    def events(self) -> list[str]:
        return [record["event"] for record in self.trace()]

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        self._stdout, self._stderr = self.process.communicate(timeout=timeout)
        return self.process.returncode

    @property
    def stdout(self) -> str:
        assert self._stdout is not None, "wait() first"
        return (self._stdout_rest + self._stdout).decode()

    @property
    def stderr(self) -> str:
        assert self._stderr is not None, "wait() first"
        return self._stderr.decode()

    def rpc(self, method: str, params: Mapping[str, Any] | None = None, *,
            token: str | None = None) -> dict[str, Any]:
        """One JSON-RPC call on the door as the operator (or with ``token``)."""
        response = httpx.post(
            self.door + "/", timeout=10.0,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params or {})},
            headers={"Authorization": f"Bearer {token or self.token}", "A2A-Version": "1.0"})
        document: dict[str, Any] = response.json()
        return document

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def member_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a member process: no formation variables of the test's own."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("MURMUR_")}
    env.update({"MURMUR_HOME": str(home), "MURMUR_HOST_WARNINGS_REPORTED": "1",
                "PYTHONPATH": str(ROOT)})
    env.update(extra)
    return env


def start_member(project: Path, capsule: str, *args: str, env: Mapping[str, str],
                 pass_fds: Sequence[int] = (), cwd: Path | None = None,
                 version: str = "1.0.0") -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", capsule,
            "--capsule-version", version, "--project", str(project), *args]
    return subprocess.Popen(argv, cwd=cwd or project, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=tuple(pass_fds))


def read_ready(process: subprocess.Popen[bytes], timeout: float = 30.0) -> Member:
    """The member once its readiness line (``--json``) arrived."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stdout.fileno(), False)
    buffer = b""
    while b"\n" not in buffer:
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("no readiness line in time")
        try:
            chunk = os.read(process.stdout.fileno(), 65536)
        except BlockingIOError:
            if process.poll() is not None:
                _, err = process.communicate()
                raise AssertionError(f"the member exited {process.returncode} before it "
                                     f"was ready: {err.decode()}") from None
            time.sleep(0.01)
            continue
        if not chunk:
            _, err = process.communicate()
            raise AssertionError(f"stdout closed before a readiness line: {err.decode()}")
        buffer += chunk
    os.set_blocking(process.stdout.fileno(), True)
    line, rest = buffer.split(b"\n", 1)
    member = Member(process, json.loads(line))
    member._stdout_rest = rest
    return member


@dataclass
class Channel:
    """A formation channel and lifeline as the launcher hands them to one member."""

    formation_id: str
    key: FormationKey
    member: str
    callees: tuple[str, ...] = ()
    entry: bool = False
    with_lifeline: bool = True

    def __post_init__(self) -> None:
        self.channel = make_channel_pipe()
        self.lifeline = make_lifeline_pipe() if self.with_lifeline else None
        self.writer = ChannelWriter(self.channel.parent_fd)
        self.tokens = {callee: self.key.mint(formation=self.formation_id, caller=self.member,
                                             callee=callee) for callee in self.callees}

    def env(self) -> dict[str, str]:
        env = {"MURMUR_FORMATION_ID": self.formation_id,
               "MURMUR_FORMATION_CHANNEL": str(self.channel.child_fd)}
        if self.lifeline is not None:
            env["MURMUR_FORMATION_LIFELINE"] = str(self.lifeline.child_fd)
        return env

    @property
    def pass_fds(self) -> tuple[int, ...]:
        fds = [self.channel.child_fd]
        if self.lifeline is not None:
            fds.append(self.lifeline.child_fd)
        return tuple(fds)

    def send_credentials(self) -> None:
        self.writer.write_credentials(formation_id=self.formation_id, member=self.member,
                                      key=self.key.public_bytes, tokens=self.tokens,
                                      entry=self.entry)

    def started(self) -> None:
        """The child holds its ends now: the parent lets go of its copies."""
        self.channel.close_child_end()
        if self.lifeline is not None:
            self.lifeline.close_child_end()

    def close_lifeline(self) -> None:
        if self.lifeline is not None:
            self.lifeline.close_parent_end()

    def close(self) -> None:
        self.writer.close()
        self.channel.close()
        if self.lifeline is not None:
            self.lifeline.close()


def new_formation() -> tuple[str, FormationKey]:
    return new_formation_id(), FormationKey.generate()


@dataclass
class Project:
    """A temporary project with capsules installed, and the members started from it."""

    path: Path
    home: Path
    members: list[Member] = field(default_factory=list)
    channels: list[Channel] = field(default_factory=list)

    def capsule(self, name: str, **options: Any) -> str:
        source = write_capsule(self.path.parent / "src" / name, name, **options)
        return install_capsule(self.path, source)

    def start(self, capsule: str, *args: str, channel: Channel | None = None,
              env: Mapping[str, str] | None = None, cwd: Path | None = None,
              json_line: bool = True) -> subprocess.Popen[bytes]:
        environ = member_env(self.home, **(channel.env() if channel else {}))
        environ.update(env or {})
        flags = [*args, "--json"] if json_line else list(args)
        process = start_member(self.path, f"local/{capsule}", *flags, env=environ,
                               pass_fds=channel.pass_fds if channel else (), cwd=cwd)
        if channel is not None:
            channel.started()
            self.channels.append(channel)
        return process

    def run(self, capsule: str, *args: str, channel: Channel | None = None,
            env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Member:
        """Start a member and wait for its readiness line."""
        member = read_ready(self.start(capsule, *args, channel=channel, env=env, cwd=cwd))
        self.members.append(member)
        return member

    def mur(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``mur ARGS`` in this project's MURMUR_HOME, with no stdin (never a terminal)."""
        return subprocess.run([sys.executable, "-m", "launcher.cli", *args],
                              env=member_env(self.home), capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL)

    def cleanup(self) -> None:
        for member in self.members:
            member.kill()
        for channel in self.channels:
            channel.close()


def project_fixture(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    project = Project(path=tmp_path / "project", home=murmur_home)
    project.path.mkdir()
    try:
        yield project
    finally:
        project.cleanup()


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def running_task_ids(member: Member) -> list[str]:
    tasks = member.rpc("ListTasks", {})["result"]["tasks"]
    return [task["id"] for task in tasks if task["status"]["state"] == "TASK_STATE_WORKING"]




def codes(stderr: str) -> list[str]:
    """The diagnostic codes on stderr, rendered (``error E-RUN-040: ...``) or, with
    ``--json``, one JSON object a line."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if isinstance(document, dict) and isinstance(document.get("code"), str):
                found.append(document["code"])
        else:
            match = re.match(r"(?:error|warning) ([EW]-[A-Z]{3}-\d{3}):", line)
            if match:
                found.append(match.group(1))
    return found
