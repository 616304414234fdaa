"""What both ``mur run`` programs read alike from their flags: the text of ``--task`` and
the usage error that refuses a flag. The launcher reads ``--task`` before it starts
anything (so a task that is empty or unreadable starts no member), and the entry member
reads the same value again as its own task.
"""

from __future__ import annotations

from pathlib import Path

from launcher.errors import LauncherError

__all__ = ["MAX_TASK_BYTES", "UsageError", "read_task"]

#: The longest ``--task`` file read (the door itself reads 1 MiB requests).
MAX_TASK_BYTES = 16 * 1024 * 1024


class UsageError(LauncherError):
    """A flag ``mur run`` cannot use: printed as ``mur run: <text>``, exit status 2."""


def read_task(value: str) -> str:
    """The text of ``--task``: the content of the file it names when it names an existing
    regular file (relative to the current directory), else the value itself."""
    path = Path(value)
    try:
        is_file = len(value) < 4096 and "\x00" not in value and path.is_file()
    except OSError:
        is_file = False
    if not is_file:
        if not value.strip():
            raise UsageError("--task is empty; give the task's text, or a file holding it")
        return value
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TASK_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--task {value}: the file cannot be read ({exc.strerror})") from None
    if len(data) > MAX_TASK_BYTES:
        raise UsageError(f"--task {value}: the file is larger than "
                         f"{MAX_TASK_BYTES // 2**20} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"--task {value}: the file is not UTF-8 text") from None
    if not text.strip():
        raise UsageError(f"--task {value}: the file is empty; write the task in it")
    return text
