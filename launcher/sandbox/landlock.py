"""Landlock, the kernel's unprivileged sandbox, through its three system calls.

In this order: the system calls and their constants (Linux UAPI ``linux/landlock.h``),
what this kernel offers (:func:`host_support`: the ABI and what each ABI adds), what a
confined process may do (:class:`Confinement`), and :func:`confine`, which applies it to
the calling process for good: one ruleset handling every access the ABI knows, a rule
per allowed path and port, ``no_new_privs``, then ``landlock_restrict_self``.

Why ctypes and not a library: the interface is three system calls and four structures,
stable since Linux 5.13 and versioned by its ABI number; the Python packages that wrap
it are a few months old or pre-releases. What is not confined here, and why, is in
docs/isolation.md (UDP, raw sockets, already open descriptors).
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from launcher.errors import LauncherError
from launcher.spawn.env_names import LANDLOCK_ABI_ENV

# --------------------------------------------------------------------------------------
# The system calls (the same numbers on every architecture Linux builds them for,
# since they came after the syscall tables were unified).

_CREATE_RULESET: Final = 444
_ADD_RULE: Final = 445
_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1 << 0
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2
_PR_SET_NO_NEW_PRIVS: Final = 38

# Filesystem accesses, each with the ABI that brought it.
FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_REMOVE_DIR: Final = 1 << 4
FS_REMOVE_FILE: Final = 1 << 5
FS_MAKE_CHAR: Final = 1 << 6
FS_MAKE_DIR: Final = 1 << 7
FS_MAKE_REG: Final = 1 << 8
FS_MAKE_SOCK: Final = 1 << 9
FS_MAKE_FIFO: Final = 1 << 10
FS_MAKE_BLOCK: Final = 1 << 11
FS_MAKE_SYM: Final = 1 << 12
FS_REFER: Final = 1 << 13       # ABI 2
FS_TRUNCATE: Final = 1 << 14    # ABI 3
FS_IOCTL_DEV: Final = 1 << 15   # ABI 5
NET_BIND_TCP: Final = 1 << 0    # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1                # ABI 6

_FS_ABI_1: Final = (1 << 13) - 1
_FS_BY_ABI: Final = {1: _FS_ABI_1, 2: _FS_ABI_1 | FS_REFER,
                     3: _FS_ABI_1 | FS_REFER | FS_TRUNCATE}
#: What a read-only path grants: read files and directories, run programs.
READ_ACCESS: Final = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.restype = ctypes.c_long


class LandlockError(LauncherError, OSError):
    """Landlock could not be applied; the text says which step and why."""


def prctl(option: int, arg2: int = 0) -> int:
    """``prctl(option, arg2, 0, 0, 0)``, every argument a full long (it is variadic)."""
    zero = ctypes.c_ulong(0)
    return int(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), zero, zero, zero))


def _call(number: int, *args: object) -> int:
    # syscall(2) is variadic: every integer must be passed as a full long, or its upper
    # half is whatever the register held (EFAULT, ENOMSG, at random).
    wide = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    result = int(_syscall(ctypes.c_long(number), *wide))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


# --------------------------------------------------------------------------------------
# What this kernel offers


@dataclass(frozen=True, slots=True)
class HostSupport:
    """The Landlock ABI of this kernel (0: none) and what it confines."""

    abi: int
    reason: str = ""

    @property
    def files(self) -> bool:
        return self.abi >= 1

    @property
    def tcp(self) -> bool:
        """TCP connect and bind rules (ABI 4)."""
        return self.abi >= 4

    @property
    def scopes(self) -> bool:
        """Signals and abstract UNIX sockets scoped to the sandbox (ABI 6)."""
        return self.abi >= 6

    def missing(self) -> tuple[str, ...]:
        """What a confinement on this host lacks, in words for a warning."""
        if self.abi < 1:
            return (f"Landlock ({self.reason or 'not offered by this kernel'})",)
        gaps = []
        if not self.tcp:
            gaps.append(f"TCP rules (Landlock ABI {self.abi}; they need ABI 4)")
        if not self.scopes:
            gaps.append(f"signal and abstract-socket scoping (Landlock ABI {self.abi}; "
                        "they need ABI 6)")
        return tuple(gaps)

    def describe(self) -> str:
        if self.abi < 1:
            return f"no Landlock: {self.reason or 'not offered by this kernel'}"
        offered = ["files"] + (["TCP"] if self.tcp else []) + (
            ["signals and abstract sockets"] if self.scopes else [])
        return f"Landlock ABI {self.abi}: {', '.join(offered)}"


def host_support() -> HostSupport:
    """Ask the kernel for its Landlock ABI (nothing is confined by asking); tests may
    lower it with ``MURMUR_TEST_LANDLOCK_ABI``."""
    support = _kernel_support()
    capped = os.environ.get(LANDLOCK_ABI_ENV, "")
    if capped.isdigit() and int(capped) < support.abi:
        reason = "MURMUR_TEST_LANDLOCK_ABI=0" if int(capped) == 0 else ""
        return HostSupport(int(capped), reason)
    return support


def _kernel_support() -> HostSupport:
    if platform.system() != "Linux":
        return HostSupport(0, f"{platform.system()} is not Linux")
    try:
        abi = _call(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    except OSError as exc:
        reason = {38: "the kernel has no Landlock system calls (older than 5.13)",
                  95: "Landlock is built but not enabled (boot with lsm=...,landlock)"}
        return HostSupport(0, reason.get(exc.errno or 0, exc.strerror or str(exc)))
    return HostSupport(abi)


# --------------------------------------------------------------------------------------
# What a confined process may do


@dataclass(frozen=True, slots=True)
class Confinement:
    """The files and ports a confined process keeps; everything else handled by the ABI
    is denied. Paths that do not exist are skipped (a system without ``/lib64``)."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    connect_ports: tuple[int, ...] = ()
    bind_ports: tuple[int, ...] = ()
    #: Deny signals to, and abstract UNIX sockets of, processes outside the sandbox.
    scoped: bool = True


def _handled(abi: int) -> tuple[int, int, int]:
    fs = _FS_BY_ABI.get(abi, _FS_BY_ABI[3] | (FS_IOCTL_DEV if abi >= 5 else 0))
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


def confine(confinement: Confinement, support: HostSupport | None = None) -> HostSupport:
    """Confine the calling process (and every process it starts) for good. Returns what
    was applied; raises :class:`LandlockError` when the kernel offers no Landlock or a
    step fails. Call it in the process to confine, before any untrusted code runs."""
    support = support if support is not None else host_support()
    ruleset = build_ruleset(confinement, support)
    try:
        restrict_self(ruleset)
    finally:
        os.close(ruleset)
    return support


def build_ruleset(confinement: Confinement, support: HostSupport) -> int:
    """A ruleset descriptor (close-on-exec) holding ``confinement``; nothing is confined
    yet. :func:`restrict_self` applies it, here or in a child between fork and exec."""
    if support.abi < 1:
        raise LandlockError(f"cannot confine: {support.describe()}")
    fs, net, scoped = _handled(support.abi)
    attr = _RulesetAttr(fs, net, scoped if confinement.scoped else 0)
    size = ctypes.sizeof(attr) if support.abi >= 6 else (16 if support.abi >= 4 else 8)
    try:
        ruleset = _call(_CREATE_RULESET, ctypes.byref(attr), size, 0)
    except OSError as exc:
        raise LandlockError(f"landlock_create_ruleset failed: {exc.strerror}") from None
    try:
        _add_paths(ruleset, confinement.read, READ_ACCESS & fs)
        _add_paths(ruleset, confinement.write, fs)
        if net:
            _add_ports(ruleset, confinement.connect_ports, NET_CONNECT_TCP)
            _add_ports(ruleset, confinement.bind_ports, NET_BIND_TCP)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def restrict_self(ruleset: int) -> None:
    """``no_new_privs``, then ``landlock_restrict_self``: two system calls and no
    allocation, so it is safe between fork and exec (a ``preexec_fn``)."""
    if prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise LandlockError("prctl(PR_SET_NO_NEW_PRIVS) failed: "
                            f"{os.strerror(ctypes.get_errno())}")
    try:
        _call(_RESTRICT_SELF, ruleset, 0)
    except OSError as exc:
        raise LandlockError(f"landlock_restrict_self failed: {exc.strerror}") from None


def _add_paths(ruleset: int, paths: Iterable[str], access: int) -> None:
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            # A rule on a file (not a directory) may hold file accesses only.
            allowed = access if os.path.isdir(path) else access & _FILE_ONLY
            rule = _PathBeneathAttr(allowed, fd)
            try:
                _call(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            except OSError as exc:
                raise LandlockError(f"cannot allow {path}: {exc.strerror}") from None
        finally:
            os.close(fd)


def _add_ports(ruleset: int, ports: Iterable[int], access: int) -> None:
    for port in ports:
        rule = _NetPortAttr(access, port)
        try:
            _call(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0)
        except OSError as exc:
            raise LandlockError(f"cannot allow TCP port {port}: {exc.strerror}") from None


_FILE_ONLY: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
