"""Confined code reads the memory of a process in its own sandbox (docs/isolation.md, "The
socket filter"): real ``mur run --capsule`` processes, with ``--isolation required`` and
with ``--isolation off``.

Landlock lets a confined process ptrace any process of its own sandbox, so a model
member's tool could read what another process of it holds: a key in the memory of a
process it started, an MCP server beside it, an agent process started afresh. The
seccomp filter refuses ``ptrace``, ``process_vm_readv``/``writev`` and ``pidfd_getfd`` to
all confined code. Here a ``command`` agent and a model member's ``command`` tool start a
child holding a secret, then try to read its memory, copy its descriptor 0, and attach
to it; and the same against their parent, the agent process that started them. With
isolation required every attempt fails with ``EPERM``; with it off the child's secret is
read, so the filter is what stops it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.sandbox.isolation import missing
from launcher.sandbox.landlock import host_support
from launcher.sandbox.seccomp import seccomp_support
from tests.support import member as support
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, text, tools
from tests.support.model_members import FAKE_KEY, KEY_ENV, write_model_capsule

pytestmark = pytest.mark.integration

GAPS = missing(host_support(), seccomp_support())
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")
SCOPE = int(YAMA.read_text()) if YAMA.exists() else 0

SECRET = "sk-held-in-memory"

#: The attacker: a child holding SECRET, then every way into it and into its parent.
ATTACKER = r'''
import ctypes, errno, json, os, sys, time

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE = 0x4206
PIDFD_GETFD = 438  # the same number on x86_64 and aarch64


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def outcome(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]


def into(pid, address):
    here = ctypes.create_string_buffer(32)
    local, remote = IoVec(ctypes.addressof(here), 17), IoVec(address, 17)
    found = {"process_vm_readv": outcome(libc.process_vm_readv(
        pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))}
    found["read"] = here.value.decode(errors="replace")
    pidfd = os.pidfd_open(pid)
    found["pidfd_getfd"] = outcome(libc.syscall(ctypes.c_long(PIDFD_GETFD), pidfd, 0, 0))
    found["ptrace"] = outcome(libc.ptrace(ctypes.c_long(PTRACE_SEIZE), ctypes.c_long(pid),
                                          None, None))
    return found


secret = ctypes.create_string_buffer(b"SECRET")
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
try:
    report = {"child": into(child, ctypes.addressof(secret)),
              "parent": into(os.getppid(), ctypes.addressof(secret))}
finally:
    os.kill(child, 9)
    os.waitpid(child, 0)
print(json.dumps(report))
'''.replace("SECRET", SECRET)

REFUSED = {"process_vm_readv": "EPERM", "read": "", "pidfd_getfd": "EPERM", "ptrace": "EPERM"}
READ = {"process_vm_readv": "ok", "read": SECRET, "pidfd_getfd": "ok", "ptrace": "ok"}


def run_member(folder: Path, capsule: str, task: str, mode: str,
               **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", f"local/{capsule}",
            "--capsule-version", "1.0.0", "--project", str(folder / "project"), "--task",
            task, "--isolation", mode]
    return subprocess.run(argv, cwd=folder / "project", capture_output=True, text=True,
                          timeout=180, check=False, stdin=subprocess.DEVNULL,
                          env=support.member_env(folder / "home", **env))


def project(folder: Path, source: Path) -> None:
    (folder / "project").mkdir()
    (folder / "home").mkdir(mode=0o700)
    support.install_capsule(folder / "project", source)


def command_agent(folder: Path, mode: str) -> dict[str, Any]:
    source = support.write_capsule(folder / "src" / "attacker", "attacker",
                                   command=[sys.executable, "attack.py"])
    (source / "attack.py").write_text(ATTACKER)
    project(folder, source)
    done = run_member(folder, "attacker", "go", mode)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def model_tool(folder: Path, mode: str) -> dict[str, Any]:
    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text(last["content"].strip())
        return tools(("attack", {"input": ""}))

    with FakeOpenAI(script) as fake:
        project(folder, write_model_capsule(
            folder / "src", "solo", fake.base_url, authenticated=False,
            tools=f"tools:\n  - command: {{name: attack, argv: [{sys.executable}, "
                  "attack.py], description: Reads memory.}",
            files={"attack.py": ATTACKER}))
        done = run_member(folder, "solo", "go", mode, **{KEY_ENV: FAKE_KEY})
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


KINDS = {"command agent": command_agent, "model member's command tool": model_tool}


@pytest.mark.skipif(bool(GAPS), reason="--isolation required cannot run here: "
                    + "; ".join(GAPS))
@pytest.mark.skipif(SCOPE >= 2, reason=f"Yama's ptrace_scope is {SCOPE}: not even an "
                    "unconfined process may trace its own child, so nothing shows the "
                    "filter is what stops it")
@pytest.mark.parametrize("kind", list(KINDS))
def test_confined_code_cannot_read_trace_or_rob_a_process_of_its_own_sandbox(
        tmp_path: Path, kind: str) -> None:
    """Refused with isolation required; the same code reads its child with it off."""
    confined = KINDS[kind](tmp_path / "required", "required")
    assert confined == {"child": REFUSED, "parent": REFUSED}
    unconfined = KINDS[kind](tmp_path / "off", "off")
    assert unconfined["child"] == READ
