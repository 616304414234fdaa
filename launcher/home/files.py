"""Writing files under ``$MURMUR_HOME`` (docs/runtime-files.md, "Writing files"): a file that is
replaced is written whole or not at all (:func:`write_atomic`: a temporary file beside it,
then a rename); a file that is created once is removed again when its write fails. Either
way a failure leaves no debris, and the OSError raised names the file (a failed
``os.write`` names none); :func:`write_problem` says in words what went wrong ("no space
left on the device (disk full)").
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

#: The errors that mean the disk (or this user's share of it) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` whole or not at all: written to a temporary file in
    the same folder (never through a symlink), then renamed over ``path``. Not fsynced: a
    crash of the machine may lose the newest write, never leave half of it. On any
    failure the temporary file is removed and the OSError names ``path``."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW
                     | os.O_CLOEXEC, mode)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise _naming(exc, path) from None


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist, never through a symlink) at mode 0600 and
    write ``data``; a failed write removes the file again."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask left
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise _naming(exc, path) from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` again, naming ``path`` (the file the caller meant, not its temporary)."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def write_problem(exc: OSError) -> str:
    """What went wrong writing a file, in words: disk full and quota said as such."""
    if exc.errno == errno.ENOSPC:
        return "no space left on the device (disk full)"
    if exc.errno == errno.EDQUOT:
        return "the disk quota is exceeded (disk full for this user)"
    return exc.strerror or type(exc).__name__
