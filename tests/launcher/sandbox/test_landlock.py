"""launcher/sandbox/landlock.py against the real kernel: a child process confines itself,
then tries what a hostile agent would (read outside its paths, write outside its work
folders, connect to a port it was not given, signal its parent). Each attempt is
asserted to fail, and the same child's allowed work to succeed. Skips, saying so, on a
kernel without Landlock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox.landlock import HostSupport, host_support
from tests.support.formation import REPO

SUPPORT = host_support()
needs_landlock = pytest.mark.skipif(SUPPORT.abi < 1,
                                    reason=f"this kernel: {SUPPORT.describe()}")
ROOT = REPO  # the checkout, never a folder above it (on CI that would be /tmp)

CHILD = textwrap.dedent("""
    import json, os, signal, socket, sys
    from launcher.sandbox.landlock import Confinement, confine
    plan = json.loads(sys.argv[1])
    applied = confine(Confinement(read=tuple(plan["read"]), write=tuple(plan["write"]),
                                  connect_ports=tuple(plan["connect"])))
    out = {"abi": applied.abi}
    def attempt(name, action):
        try:
            out[name] = ["ok", action()]
        except OSError as exc:
            out[name] = ["denied", exc.errno]
    attempt("read_allowed", lambda: open(plan["allowed_file"]).read())
    attempt("read_secret", lambda: open(plan["secret"]).read())
    attempt("list_secret_dir", lambda: os.listdir(os.path.dirname(plan["secret"])))
    def write(path):
        with open(path, "w") as f:
            f.write("x")
        return path
    attempt("write_work", lambda: write(os.path.join(plan["write"][0], "made")))
    attempt("write_outside", lambda: write(plan["outside_write"]))
    def connect(port):
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return port
    attempt("connect_allowed", lambda: connect(plan["connect"][0]))
    attempt("connect_other", lambda: connect(plan["other_port"]))
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    print(json.dumps(out))
""")


@pytest.fixture
def listeners() -> Iterator[tuple[int, int]]:
    allowed, other = socket.socket(), socket.socket()
    for sock in (allowed, other):
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
    try:
        yield allowed.getsockname()[1], other.getsockname()[1]
    finally:
        allowed.close()
        other.close()


def run_child(tmp_path: Path, ports: tuple[int, int]) -> dict[str, Any]:
    work, secrets, outside = tmp_path / "work", tmp_path / "secrets", tmp_path / "outside"
    for folder in (work, secrets, outside):
        folder.mkdir()
    (secrets / "operator.token").write_text("not for the agent")
    allowed_file = tmp_path / "capsule.txt"
    allowed_file.write_text("capsule file")
    python_home = sorted({sys.prefix, sys.base_prefix, sys.exec_prefix})
    plan = {
        "read": [*python_home, str(ROOT), "/usr", "/lib", "/lib64", "/etc",
                 str(allowed_file)],
        "write": [str(work)], "connect": [ports[0]], "other_port": ports[1],
        "allowed_file": str(allowed_file), "secret": str(secrets / "operator.token"),
        "outside_write": str(outside / "escaped"),
    }
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert not (outside / "escaped").exists()
    return result


@needs_landlock
def test_a_confined_process_keeps_its_own_paths_and_loses_the_rest(
        tmp_path: Path, listeners: tuple[int, int]) -> None:
    out = run_child(tmp_path, listeners)
    assert out["read_allowed"] == ["ok", "capsule file"]
    assert out["read_secret"][0] == "denied"
    assert out["list_secret_dir"][0] == "denied"
    assert out["write_work"][0] == "ok"
    assert out["write_outside"][0] == "denied"


@pytest.mark.skipif(SUPPORT.abi < 4, reason=f"TCP rules need Landlock ABI 4; this kernel: "
                                            f"{SUPPORT.describe()}")
def test_a_confined_process_connects_only_to_its_given_port(
        tmp_path: Path, listeners: tuple[int, int]) -> None:
    out = run_child(tmp_path, listeners)
    assert out["connect_allowed"] == ["ok", listeners[0]]
    assert out["connect_other"][0] == "denied"


@pytest.mark.skipif(SUPPORT.abi < 6, reason=f"signal scoping needs Landlock ABI 6; this "
                                            f"kernel: {SUPPORT.describe()}")
def test_a_confined_process_cannot_signal_outside_its_sandbox(
        tmp_path: Path, listeners: tuple[int, int]) -> None:
    out = run_child(tmp_path, listeners)
    assert out["signal_parent"][0] == "denied"


def test_what_a_host_lacks_is_named() -> None:
    assert HostSupport(0, "no system calls").missing() == ("Landlock (no system calls)",)
    assert HostSupport(3).missing()[0].startswith("TCP rules (Landlock ABI 3")
    assert "signal" in HostSupport(5).missing()[0]
    assert HostSupport(7).missing() == ()
    assert HostSupport(7).describe() == (
        "Landlock ABI 7: files, TCP, signals and abstract sockets")
