"""launcher.sandbox.seccomp: the socket filter, installed in a real child process (a filter is for
good), each socket an attacker would open tried behind it and without it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher.sandbox.seccomp import SeccompError, seccomp_support, socket_filter
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
    "udp": (2, 2, 0), "udp by number": (2, 2, 17), "unix": (1, 1, 0),
    "netlink route": (16, 3, 0),
}
REFUSED = {"mptcp", "mptcp6", "sctp stream", "sctp seqpacket", "raw", "icmp ping", "packet",
           "smc", "vsock", "netlink audit", "netlink generic", "alg"}

PROBE = r"""
import ctypes, errno, json, os, socket, sys
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
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out["socketpair unix"] = "ok"
except OSError as exc:
    out["socketpair unix"] = errno.errorcode[exc.errno]
libc = ctypes.CDLL(None, use_errno=True)
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
def test_the_filter_lets_tcp_udp_unix_and_netlink_route_through() -> None:
    outcome = probe("on")
    allowed = set(SOCKETS) - REFUSED
    assert {name: outcome[name] for name in allowed} == dict.fromkeys(allowed, "ok")
    assert outcome["socketpair unix"] == "ok"


def test_without_the_filter_the_kernel_answers_for_itself() -> None:
    """The refusals above are the filter's: unfiltered, MPTCP, packet and vsock open (as
    root) or fail with the kernel's own errors, never all EACCES."""
    outcome = probe("off")
    assert outcome["tcp"] == "ok"
    refused_the_same = [name for name in REFUSED if outcome[name] == "EACCES"]
    assert len(refused_the_same) < len(REFUSED) // 2, outcome
    assert outcome["mptcp in a child"] != 13


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
    assert returns == 3  # allow (two places) and refuse


def test_a_machine_without_a_program_is_refused_by_name() -> None:
    with pytest.raises(SeccompError, match="not written for riscv64"):
        socket_filter("riscv64")


def test_the_test_switch_reports_the_filter_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MURMUR_TEST_SECCOMP", "0")
    support = seccomp_support()
    assert not support.available
    assert support.describe() == "no seccomp socket filter: MURMUR_TEST_SECCOMP=0"
