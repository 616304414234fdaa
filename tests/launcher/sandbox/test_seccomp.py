"""launcher.sandbox.seccomp: the socket filter, installed in a real child process (a filter is for
good), each socket an attacker would open and each way into another process (ptrace,
``process_vm_readv``/``writev``, ``pidfd_getfd``) tried behind it and without it; then the
program of both architectures run in a small BPF interpreter, its system call numbers
checked against the kernel's headers where they are installed."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.sandbox.seccomp import SeccompError, SocketFilter, seccomp_support, socket_filter
from tests.support.formation import REPO

SUPPORT = seccomp_support()
needs_seccomp = pytest.mark.skipif(not SUPPORT.available, reason=SUPPORT.describe())

#: (name, family, type, protocol) of every socket the probe opens.
SOCKETS = {
    "mptcp": (2, 1, 262), "mptcp6": (10, 1, 262), "sctp stream": (2, 1, 132),
    "sctp seqpacket": (2, 5, 132), "raw": (2, 3, 1), "icmp ping": (2, 2, 1),
    "packet": (17, 3, 0), "smc": (43, 1, 0), "vsock": (40, 1, 0),
    "netlink audit": (16, 3, 9), "netlink generic": (16, 3, 16), "alg": (38, 5, 0),
    "tcp": (2, 1, 0), "tcp by number": (2, 1 | 0o2000000, 6), "tcp6": (10, 1, 0),
    "udp": (2, 2, 0), "udp by number": (2, 2, 17), "netlink route": (16, 3, 0),
    # a socket of its own could connect to any named socket (Landlock does not govern it)
    "unix stream": (1, 1, 0), "unix dgram": (1, 2, 0), "unix seqpacket": (1, 5, 0),
    "unix stream nonblocking": (1, 1 | 0o4000 | 0o2000000, 0),
}
REFUSED = {"mptcp", "mptcp6", "sctp stream", "sctp seqpacket", "raw", "icmp ping", "packet",
           "smc", "vsock", "netlink audit", "netlink generic", "alg", "unix stream",
           "unix dgram", "unix seqpacket", "unix stream nonblocking"}
#: The ways into another process, each tried on a child of the probe (or, for
#: PTRACE_TRACEME, by a child on its parent).
INTO_PROCESSES = ("ptrace attach", "ptrace traceme", "process_vm_readv",
                  "process_vm_writev", "pidfd_getfd")

PROBE = r"""
import ctypes, errno, json, os, socket, sys, time
from launcher.sandbox.seccomp import install
sockets = json.loads(sys.argv[1])
if sys.argv[2] == "on":
    install()
out = {}
for name, (family, kind, proto) in sockets.items():
    try:
        socket.socket(family, kind, proto).close()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
for kind in ("SOCK_STREAM", "SOCK_DGRAM", "SOCK_SEQPACKET"):
    try:
        socket.socketpair(socket.AF_UNIX, getattr(socket, kind))
        out[f"socketpair unix {kind}"] = "ok"
    except OSError as exc:
        out[f"socketpair unix {kind}"] = errno.errorcode[exc.errno]
# glibc asks nscd over an AF_UNIX socket first: refused, it must fall back to /etc/hosts
try:
    out["getaddrinfo localhost"] = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80)})
except OSError as exc:
    out["getaddrinfo localhost"] = str(exc)
libc = ctypes.CDLL(None, use_errno=True)


def outcome(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


secret = ctypes.create_string_buffer(b"the agent's secret")
target = os.fork()
if target == 0:
    time.sleep(60)
    os._exit(0)
here = ctypes.create_string_buffer(32)
local, remote = IoVec(ctypes.addressof(here), 16), IoVec(ctypes.addressof(secret), 16)
out["process_vm_readv"] = outcome(libc.process_vm_readv(
    target, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
out["process_vm_writev"] = outcome(libc.process_vm_writev(
    target, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
pidfd = os.pidfd_open(target)
out["pidfd_getfd"] = outcome(libc.syscall(ctypes.c_long(438), pidfd, 0, 0))
out["ptrace attach"] = outcome(libc.ptrace(ctypes.c_long(16), ctypes.c_long(target), None, None))
os.kill(target, 9)
os.waitpid(target, 0)
tracee = os.fork()
if tracee == 0:  # asks its parent, the probe, to trace it
    os._exit(0 if libc.ptrace(ctypes.c_long(0), 0, None, None) == 0 else ctypes.get_errno())
code = os.waitstatus_to_exitcode(os.waitpid(tracee, 0)[1])
out["ptrace traceme"] = "ok" if code == 0 else errno.errorcode[code]
params = (ctypes.c_char * 120)()
fd = libc.syscall(ctypes.c_long(425), ctypes.c_long(4), params)
out["io_uring_setup"] = "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
# a child process inherits the filter
child = os.fork()
if child == 0:
    try:
        socket.socket(2, 1, 262)
        os._exit(0)
    except OSError as exc:
        os._exit(exc.errno)
out["mptcp in a child"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
print(json.dumps(out))
"""


def probe(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(SOCKETS), mode],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


@needs_seccomp
def test_the_filter_refuses_every_socket_an_agent_has_no_use_for_with_eacces() -> None:
    outcome = probe("on")
    assert {name: outcome[name] for name in REFUSED} == dict.fromkeys(REFUSED, "EACCES")
    assert outcome["io_uring_setup"] == "EACCES"
    assert outcome["mptcp in a child"] == 13


@needs_seccomp
def test_the_filter_refuses_ptrace_process_vm_and_pidfd_getfd_with_eperm() -> None:
    outcome = probe("on")
    assert {name: outcome[name] for name in INTO_PROCESSES} == dict.fromkeys(
        INTO_PROCESSES, "EPERM")


@needs_seccomp
def test_the_filter_lets_tcp_udp_netlink_route_and_unix_stream_pairs_through() -> None:
    outcome = probe("on")
    allowed = set(SOCKETS) - REFUSED
    assert {name: outcome[name] for name in allowed} == dict.fromkeys(allowed, "ok")
    assert outcome["socketpair unix SOCK_STREAM"] == "ok"  # asyncio's self-pipe
    assert outcome["socketpair unix SOCK_SEQPACKET"] == "ok"
    # either end of a datagram pair could sendto() any named datagram socket
    assert outcome["socketpair unix SOCK_DGRAM"] == "EACCES"
    # glibc's nscd socket refused, the lookup falls back to the files
    looked_up = outcome["getaddrinfo localhost"]
    assert isinstance(looked_up, list) and "127.0.0.1" in looked_up, looked_up


def test_without_the_filter_the_kernel_answers_for_itself() -> None:
    """The refusals above are the filter's: unfiltered, MPTCP, packet and vsock open (as
    root) or fail with the kernel's own errors, never all EACCES."""
    outcome = probe("off")
    assert outcome["tcp"] == "ok"
    refused_the_same = [name for name in REFUSED if outcome[name] == "EACCES"]
    assert len(refused_the_same) < len(REFUSED) // 2, outcome
    assert outcome["mptcp in a child"] != 13
    assert outcome["unix stream"] == "ok"
    assert outcome["socketpair unix SOCK_DGRAM"] == "ok"
    # a process may trace and read its own child (as root, or Yama permitting)
    assert [name for name in INTO_PROCESSES if outcome[name] == "ok"], outcome


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_is_written_for_both_architectures(machine: str) -> None:
    program = socket_filter(machine)
    assert 25 <= len(program) <= 40
    # every jump lands inside the program (a wrong label would be caught by the kernel
    # only on the machine that runs it)
    returns = 0
    for at, instruction in enumerate(program.instructions):
        if instruction.code == 0x06:  # BPF_RET: ends the program here
            returns += 1
            continue
        assert at + 1 + max(instruction.jt, instruction.jf) < len(program)
    assert program.instructions[len(program) - 1].code == 0x06  # never runs off the end
    assert returns == 4  # allow (two places), refuse and forbid


# ------------------------------------------------------------------ both tables, run in BPF

#: Where the kernel's own table for each machine may be installed (Debian's multiarch
#: folder, or the native one; aarch64 uses the generic table).
HEADERS = {"x86_64": (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
                      Path("/usr/include/asm/unistd_64.h")),
           "aarch64": (Path("/usr/include/asm-generic/unistd.h"),)}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
ALLOW, EACCES, EPERM = 0x7FFF0000, 0x00050000 | errno.EACCES, 0x00050000 | errno.EPERM


def run_bpf(program: SocketFilter, nr: int, arch: int, *args: int) -> int:
    """What the kernel would answer for ``struct seccomp_data`` (nr, arch, ip, args):
    the five opcodes the program uses, nothing else."""
    data = [nr, arch, 0, 0] + [word for arg in (*args, 0, 0, 0, 0, 0, 0)[:6]
                               for word in (arg & 0xFFFFFFFF, arg >> 32)]
    accumulator, at = 0, 0
    while True:
        instruction = program.instructions[at]
        code, k = instruction.code, instruction.k
        if code == 0x06:  # BPF_RET | BPF_K
            return int(k)
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = data[k // 4]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            accumulator &= k
        elif code in (0x15, 0x35):  # BPF_JMP | BPF_JEQ / BPF_JGE | BPF_K
            taken = accumulator == k if code == 0x15 else accumulator >= k
            at += instruction.jt if taken else instruction.jf
        else:
            raise AssertionError(f"opcode {code:#x} at {at}")
        at += 1


def numbers(machine: str) -> dict[str, int]:
    """The system call numbers the tests need, from the kernel's header for ``machine``."""
    header = next((path for path in HEADERS[machine] if path.exists()), None)
    if header is None:
        pytest.skip(f"none of {[str(path) for path in HEADERS[machine]]} is installed: "
                    "the kernel's table cannot be read")
    found = dict(re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text()))
    names = ("socket", "socketpair", "ptrace", "process_vm_readv", "process_vm_writev",
             "pidfd_getfd", "io_uring_setup", "read", "connect")
    return {name: int(found[name]) for name in names}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_each_architectures_program_answers_by_its_own_table(machine: str) -> None:
    program, nr, arch = socket_filter(machine), numbers(machine), AUDIT_ARCH[machine]
    for call in ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd"):
        assert run_bpf(program, nr[call], arch) == EPERM, call
    flags = 0o4000 | 0o2000000  # SOCK_NONBLOCK, SOCK_CLOEXEC
    for kind in (1, 2, 5, 1 | flags, 2 | flags):  # stream, dgram, seqpacket
        assert run_bpf(program, nr["socket"], arch, 1, kind, 0) == EACCES
    for kind in (1, 5, 1 | flags, 5 | flags):
        assert run_bpf(program, nr["socketpair"], arch, 1, kind, 0) == ALLOW
    for kind in (2, 2 | flags):
        assert run_bpf(program, nr["socketpair"], arch, 1, kind, 0) == EACCES
    assert run_bpf(program, nr["socketpair"], arch, 2, 1, 0) == EACCES  # AF_INET
    assert run_bpf(program, nr["socket"], arch, 2, 1, 0) == ALLOW  # TCP
    assert run_bpf(program, nr["socket"], arch, 2, 1, 262) == EACCES  # MPTCP
    assert run_bpf(program, nr["io_uring_setup"], arch) == EACCES
    assert run_bpf(program, nr["read"], arch) == ALLOW
    assert run_bpf(program, nr["connect"], arch) == ALLOW  # connect() a TCP socket
    # the other architecture's numbers are never taken as this one's
    assert run_bpf(program, nr["ptrace"], AUDIT_ARCH["aarch64" if machine == "x86_64"
                                                     else "x86_64"]) == EACCES


def test_a_machine_without_a_program_is_refused_by_name() -> None:
    with pytest.raises(SeccompError, match="not written for riscv64"):
        socket_filter("riscv64")


def test_the_test_switch_reports_the_filter_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MURMUR_TEST_SECCOMP", "0")
    support = seccomp_support()
    assert not support.available
    assert support.describe() == "no seccomp socket filter: MURMUR_TEST_SECCOMP=0"
