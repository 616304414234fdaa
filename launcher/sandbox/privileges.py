"""Dropping every Linux capability of an agent process, for good.

Landlock governs files, TCP ports, signals and abstract sockets; it does not govern raw
sockets or anything else a capability grants. An agent process that runs as root would
keep ``CAP_NET_RAW`` (raw sockets reach any host), ``CAP_SYS_PTRACE`` and the rest. So,
in this order: every capability leaves the bounding set (an ``execve`` as root cannot
give them back), the ambient set is cleared, then ``capset`` empties the effective,
permitted and inheritable sets. For a process that holds no capability (an ordinary
user) each step is a no-op that succeeds.
"""

from __future__ import annotations

import ctypes
import os
from typing import Final

from launcher.sandbox.landlock import LandlockError, prctl

_PR_CAPBSET_DROP: Final = 24
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_X86_64: Final = os.uname().machine == "x86_64"
_CAPGET: Final = 125 if _X86_64 else 90   # aarch64 (the generic table)
_CAPSET: Final = 126 if _X86_64 else 91
_CAPABILITY_VERSION_3: Final = 0x20080522
#: Higher than any capability a kernel knows today (40 in 6.x); dropping an unknown one
#: fails with EINVAL, which ends the loop.
_LAST_POSSIBLE: Final = 63

_libc = ctypes.CDLL(None, use_errno=True)


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Leave the calling process no capability, now or after any ``execve``. Raises
    :class:`LandlockError` (the isolation layer's error) when a step fails."""
    for cap in range(_LAST_POSSIBLE + 1):
        if prctl(_PR_CAPBSET_DROP, cap) != 0:
            errno = ctypes.get_errno()
            if errno == 22:  # EINVAL: past the last capability this kernel knows
                break
            if errno == 1 and not _holds_any():  # EPERM without CAP_SETPCAP: none to drop
                break
            raise LandlockError(f"cannot drop capability {cap}: {os.strerror(errno)}")
    prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = _Header(_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if int(_libc.syscall(ctypes.c_long(_CAPSET), ctypes.byref(header), data)) != 0:
        raise LandlockError(f"capset failed: {os.strerror(ctypes.get_errno())}")


def _holds_any() -> bool:
    header = _Header(_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if int(_libc.syscall(ctypes.c_long(_CAPGET), ctypes.byref(header), data)) != 0:
        return True
    return any(item.effective or item.permitted for item in data)
