"""The socket filter: a seccomp program that refuses every socket an agent has no use for,
and the system calls that reach into another process.

Landlock's network rules govern ``IPPROTO_TCP`` sockets only: a confined process could
open an MPTCP stream (``socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)``) and connect to any
host and port, listen on any port, or open packet, vsock and netlink sockets Landlock
never sees. Landlock up to ABI 7 does not govern ``connect()`` to a pathname UNIX socket
either: confined code reached any named socket its user may write (where
``/var/run/docker.sock`` exists, that is the host). And Landlock lets a confined process
ptrace any process of its own sandbox: a model member's tool shares its agent process's,
and could read its memory. This filter closes all three, before any capsule code runs.

In this order: the constants (Linux UAPI ``linux/seccomp.h``, ``linux/filter.h``,
``linux/audit.h``), what this host offers (:func:`seccomp_support`), the program
(:func:`socket_filter`, an allow-list written out below), and :func:`install`, which
applies it to the calling process and every process it starts, for good.

What the program lets through (a refused socket fails with ``EACCES``, Landlock's own
refusal, so agent code sees one kind of "no"):

- ``socket()``: ``AF_INET`` and ``AF_INET6`` streams of protocol 0 or ``IPPROTO_TCP``
  (which Landlock governs) and datagrams of protocol 0 or ``IPPROTO_UDP``;
  ``AF_NETLINK`` of protocol ``NETLINK_ROUTE`` (what ``getaddrinfo`` and
  ``if_nameindex`` use). So ``AF_UNIX`` of every type (a socket that could connect to a
  named one), MPTCP, SCTP, raw and ICMP sockets, ``AF_PACKET``, ``AF_SMC``,
  ``AF_VSOCK``, ``AF_ALG``, ``AF_XDP``, every other netlink protocol and every family a
  later kernel adds are refused;
- ``socketpair()``: ``AF_UNIX`` streams and seqpackets only (asyncio's self-pipe and the
  agent process's own channel are stream pairs). Such a pair is connected to itself:
  ``connect()`` fails with ``EISCONN`` and an address given to ``sendto()`` is refused
  or ignored, so it reaches nothing else. A datagram pair is refused: either end of one
  can ``sendto()`` or ``connect()`` any named datagram socket (``/dev/log``, journald's);
- ``ptrace`` (``PTRACE_TRACEME`` included), ``process_vm_readv``,
  ``process_vm_writev``, ``pidfd_getfd``: refused with ``EPERM`` (the kernel's own
  answer when ptrace access is denied), whatever the target: no confined process traces
  another, reads or writes its memory or copies its descriptors, not even its own
  parent's or child's;
- ``io_uring_setup``, ``io_uring_enter``, ``io_uring_register``: refused (an io_uring's
  own socket operation would create sockets no filter sees);
- a system call of another architecture than the interpreter's own (``int 0x80`` on
  x86_64 reaches the i386 table, whose ``socketcall`` multiplexes ``socket``), and the
  x32 numbers on x86_64: refused;
- everything else: allowed (this is a filter for sockets and for reaching into other
  processes, not a general sandbox).

Why ctypes and not libseccomp: the program is some forty instructions of classic BPF
over a structure the kernel keeps stable; libseccomp's Python bindings are not
published as wheels (they build against the C library's headers), and the program would
be no shorter written through them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from launcher.sandbox.landlock import LandlockError, prctl
from launcher.spawn.env_names import SECCOMP_ENV

# --------------------------------------------------------------------------------------
# Constants

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_GET_SECCOMP: Final = 21
_SECCOMP_SET_MODE_FILTER: Final = 1
_SECCOMP_GET_ACTION_AVAIL: Final = 2
_SECCOMP_FILTER_FLAG_TSYNC: Final = 1
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_RET_REFUSE: Final = _RET_ERRNO | errno.EACCES
_RET_FORBID: Final = _RET_ERRNO | errno.EPERM

# BPF opcodes (classic BPF, as seccomp takes it)
_LD_W_ABS: Final = 0x20
_ALU_AND_K: Final = 0x54
_JEQ_K: Final = 0x15
_JGE_K: Final = 0x35
_RET_K: Final = 0x06

# struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments (the
# low 32 bits first: every architecture below is little-endian)
_NR: Final = 0
_ARCH: Final = 4
_ARG0: Final = 16
_ARG1: Final = 24
_ARG2: Final = 32

_AF_UNIX: Final = 1
_AF_INET: Final = 2
_AF_INET6: Final = 10
_AF_NETLINK: Final = 16
_SOCK_STREAM: Final = 1
_SOCK_DGRAM: Final = 2
_SOCK_SEQPACKET: Final = 5
_SOCK_TYPE_MASK: Final = 0xF     # SOCK_NONBLOCK and SOCK_CLOEXEC ride above it
_IPPROTO_TCP: Final = 6
_IPPROTO_UDP: Final = 17
_NETLINK_ROUTE: Final = 0


@dataclass(frozen=True, slots=True)
class _Architecture:
    audit: int              # AUDIT_ARCH_* of the native system call table
    socket: int
    socketpair: int
    seccomp: int
    #: ptrace, process_vm_readv, process_vm_writev (pidfd_getfd is the same on both)
    ptrace: tuple[int, int, int]
    x32_bit: int = 0        # x86_64: numbers at or above it are the x32 table


#: The architectures the program is written for, by ``uname -m`` (the numbers of
#: ``asm/unistd_64.h`` on x86_64, ``asm-generic/unistd.h`` on aarch64). io_uring's
#: three calls (425, 426, 427) and ``pidfd_getfd`` (438) have the same numbers on both.
_ARCHITECTURES: Final = {
    "x86_64": _Architecture(0xC000003E, socket=41, socketpair=53, seccomp=317,
                            ptrace=(101, 310, 311), x32_bit=0x40000000),
    "aarch64": _Architecture(0xC00000B7, socket=198, socketpair=199, seccomp=277,
                             ptrace=(117, 270, 271)),
}
_IO_URING: Final = (425, 426, 427)
_PIDFD_GETFD: Final = 438


class SeccompError(LandlockError):
    """The socket filter could not be installed; the text says which step and why. (A
    confinement error, so the isolation layer's one handler reports it.)"""


# --------------------------------------------------------------------------------------
# What this host offers


@dataclass(frozen=True, slots=True)
class SeccompSupport:
    """Whether the socket filter can be installed here, and why not."""

    available: bool
    reason: str = ""

    def describe(self) -> str:
        return "seccomp socket filter" if self.available else (
            f"no seccomp socket filter: {self.reason}")


def seccomp_support() -> SeccompSupport:
    """Ask the kernel (nothing is filtered by asking); tests may say ``MURMUR_TEST_SECCOMP=0``
    to see what a host without it is told."""
    if os.environ.get(SECCOMP_ENV) == "0":
        return SeccompSupport(False, "MURMUR_TEST_SECCOMP=0")
    if platform.system() != "Linux":
        return SeccompSupport(False, f"{platform.system()} is not Linux")
    machine = platform.machine()
    arch = _ARCHITECTURES.get(machine)
    if arch is None:
        return SeccompSupport(False, f"the filter is not written for {machine}")
    if prctl(_PR_GET_SECCOMP) < 0:
        return SeccompSupport(False, "the kernel is built without seccomp")
    action = ctypes.c_uint32(_RET_ERRNO)
    if _libc.syscall(ctypes.c_long(arch.seccomp), ctypes.c_long(_SECCOMP_GET_ACTION_AVAIL),
                     ctypes.c_long(0), ctypes.byref(action)) != 0:
        return SeccompSupport(False, "the kernel's seccomp has no filter mode "
                              f"({os.strerror(ctypes.get_errno())})")
    return SeccompSupport(True)


# --------------------------------------------------------------------------------------
# The program


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


#: One instruction: (opcode, k, label if true, label if false); a label is a name or
#: None (the next instruction). A name alone on a line (a str) labels what follows.
_Step = tuple[int, int, str | None, str | None] | str


def _program(arch: _Architecture) -> list[_Step]:
    """The filter of the module docstring, in the order the kernel runs it."""
    head: list[_Step] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, arch.audit, None, "refuse"),
        (_LD_W_ABS, _NR, None, None),
    ]
    if arch.x32_bit:
        head.append((_JGE_K, arch.x32_bit, "refuse", None))
    head += [(_JEQ_K, arch.socket, "socket", None),
             (_JEQ_K, arch.socketpair, "socketpair", None)]
    head += [(_JEQ_K, number, "refuse", None) for number in _IO_URING]
    head += [(_JEQ_K, number, "forbid", None) for number in (*arch.ptrace, _PIDFD_GETFD)]
    return head + [
        (_RET_K, _RET_ALLOW, None, None),
        "socket",  # AF_UNIX matches none of these: refused
        (_LD_W_ABS, _ARG0, None, None),
        (_JEQ_K, _AF_INET, "inet", None),
        (_JEQ_K, _AF_INET6, "inet", None),
        (_JEQ_K, _AF_NETLINK, "netlink", "refuse"),
        "inet",
        (_LD_W_ABS, _ARG1, None, None),
        (_ALU_AND_K, _SOCK_TYPE_MASK, None, None),
        (_JEQ_K, _SOCK_STREAM, "stream", None),
        (_JEQ_K, _SOCK_DGRAM, "datagram", "refuse"),
        "stream",
        (_LD_W_ABS, _ARG2, None, None),
        (_JEQ_K, 0, "allow", None),
        (_JEQ_K, _IPPROTO_TCP, "allow", "refuse"),
        "datagram",
        (_LD_W_ABS, _ARG2, None, None),
        (_JEQ_K, 0, "allow", None),
        (_JEQ_K, _IPPROTO_UDP, "allow", "refuse"),
        "netlink",
        (_LD_W_ABS, _ARG2, None, None),
        (_JEQ_K, _NETLINK_ROUTE, "allow", "refuse"),
        "socketpair",
        (_LD_W_ABS, _ARG0, None, None),
        (_JEQ_K, _AF_UNIX, None, "refuse"),
        (_LD_W_ABS, _ARG1, None, None),
        (_ALU_AND_K, _SOCK_TYPE_MASK, None, None),
        (_JEQ_K, _SOCK_STREAM, "allow", None),
        (_JEQ_K, _SOCK_SEQPACKET, "allow", "refuse"),
        "allow",
        (_RET_K, _RET_ALLOW, None, None),
        "refuse",
        (_RET_K, _RET_REFUSE, None, None),
        "forbid",
        (_RET_K, _RET_FORBID, None, None),
    ]


def _assemble(steps: Sequence[_Step]) -> list[tuple[int, int, int, int]]:
    """Resolve labels to the relative jumps classic BPF takes (forward only)."""
    labels: dict[str, int] = {}
    code: list[tuple[int, int, str | None, str | None]] = []
    for step in steps:
        if isinstance(step, str):
            labels[step] = len(code)
        else:
            code.append(step)

    def offset(at: int, label: str | None) -> int:
        if label is None:
            return 0
        jump = labels[label] - at - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"jump to {label} out of range")
        return jump

    return [(op, offset(at, jt), offset(at, jf), k)
            for at, (op, k, jt, jf) in enumerate(code)]


@dataclass(frozen=True)
class SocketFilter:
    """A built program, ready to install (also between fork and exec: installing
    allocates nothing but the call's own arguments)."""

    arch: _Architecture
    instructions: ctypes.Array[_SockFilter]
    fprog: _SockFprog

    def __len__(self) -> int:
        return len(self.instructions)


def socket_filter(machine: str | None = None) -> SocketFilter:
    """The program for this machine (or ``machine``); ``SeccompError`` where it has none."""
    machine = machine or platform.machine()
    arch = _ARCHITECTURES.get(machine)
    if arch is None:
        raise SeccompError(f"the socket filter is not written for {machine}")
    code = _assemble(_program(arch))
    instructions = (_SockFilter * len(code))(
        *(_SockFilter(op, jt, jf, k) for op, jt, jf, k in code))
    fprog = _SockFprog(len(code), ctypes.cast(instructions, ctypes.POINTER(_SockFilter)))
    return SocketFilter(arch, instructions, fprog)


# --------------------------------------------------------------------------------------
# Installing it


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def install(program: SocketFilter | None = None) -> None:
    """Filter the calling process, every thread of it and every process it starts, for
    good: ``no_new_privs`` (a filter needs it, or ``CAP_SYS_ADMIN``), then
    ``seccomp(SET_MODE_FILTER, TSYNC)``. Raises :class:`SeccompError`."""
    program = program if program is not None else socket_filter()
    if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise SeccompError("prctl(PR_SET_NO_NEW_PRIVS) failed: "
                           f"{os.strerror(ctypes.get_errno())}")
    result = _libc.syscall(ctypes.c_long(program.arch.seccomp),
                           ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                           ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC),
                           ctypes.byref(program.fprog))
    if result < 0:
        raise SeccompError(f"seccomp(SET_MODE_FILTER) failed: "
                           f"{os.strerror(ctypes.get_errno())}")
    if result > 0:  # TSYNC: the id of a thread that could not take the filter
        raise SeccompError(f"seccomp could not filter thread {result}")
