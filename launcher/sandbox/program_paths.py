"""What a command's program needs to read and execute to run at all: the environment it
runs from, granted to a confined gateway upstream and ``command`` agent (docs/isolation.md,
"The program's environment"). A framework is often installed in a virtual environment of
its own, anywhere on the disk; without this, Landlock denied its ``pyvenv.cfg`` and the
upstream died before it served its card.

In this order, for one program (``argv[0]``):

1. :func:`resolve_program`: a bare name looked up on the PATH the command gets (else the
   runtime's) as ``execvp`` does (none when one it finds is granted already), a relative
   path taken in the capsule's directory;
2. :func:`program_environment`: the program itself and, resolved, what it runs:
   - the interpreter of a script's ``#!`` line (through ``/usr/bin/env NAME``: NAME on
     the PATH);
   - for a program in a Python virtual environment (``pyvenv.cfg`` beside its ``bin/``):
     the environment's own folder, and the installation its ``pyvenv.cfg`` names as
     ``home`` (the prefix above that ``bin/``: the standard library lives there);
   - for a Python interpreter outside a virtual environment, its installation (the prefix
     above its ``bin/`` when that prefix holds ``lib/pythonX.Y``);
   - the folders a virtual environment's ``.pth`` files name (editable installs).

Every path is read and execute only; nothing here is ever writable. The caller
(``launcher.member.confinement.agent_plan``) still withholds any path that holds
``MURMUR_HOME``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["program_environment", "resolve_program"]

#: How much of a script is read for its ``#!`` line.
_SHEBANG_BYTES = 256
#: ``.pth`` files read per environment, and lines per file (bounds on a hostile folder).
_MAX_PTH_FILES = 64
_MAX_PTH_LINES = 256


def resolve_program(program: str, *, cwd: Path, path: str | None,
                    granted: Callable[[str], bool] = lambda _: False) -> str | None:
    """``program`` as an absolute path, or None when it cannot be found or needs no grant.

    A bare name is looked up as ``execvp`` does: in each folder of ``path`` (else the
    runtime's) in turn, a candidate the sandbox denies skipped. So when some candidate is
    ``granted`` already, that one runs, and nothing is added (granting an earlier one,
    such as a pyenv shim that runs a program outside, would change which runs); else the
    first candidate is the one to grant."""
    if "/" in program:
        return os.path.abspath(cwd / program)
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    candidates = [os.path.join(folder, program)
                  for folder in search.split(os.pathsep) if folder]
    found = [candidate for candidate in candidates
             if os.path.isfile(candidate) and os.access(candidate, os.X_OK)]
    if not found or any(granted(os.path.realpath(candidate)) for candidate in found):
        return None
    return found[0]


def program_environment(program: str, *, path: str | None = None) -> tuple[str, ...]:
    """The paths ``program`` (absolute) reads and executes to run (module docstring), the
    program first; nothing when it does not exist."""
    if not os.path.exists(program):
        return ()
    found = [program, *_installation(program)]
    interpreter = _shebang_interpreter(program, path)
    if interpreter is not None:
        found += [interpreter, *_installation(interpreter)]
    return tuple(dict.fromkeys(os.path.realpath(item) for item in found))


def _installation(program: str) -> Iterator[str]:
    """The virtual environment and Python installation ``program`` belongs to."""
    venv = _venv_of(program)
    if venv is not None:
        yield str(venv)
        home = _venv_home(venv)
        if home is not None:
            yield from _python_prefix(home)
        yield from _pth_folders(venv)
    real = Path(os.path.realpath(program))
    yield from _python_prefix(real.parent)


def _venv_of(program: str) -> Path | None:
    """The virtual environment whose ``bin/`` holds ``program`` (not resolved: a venv's
    ``bin/python`` is a link to the installation it was made from)."""
    folder = Path(program).parent
    venv = folder.parent
    if folder.name in ("bin", "Scripts") and (venv / "pyvenv.cfg").is_file():
        return venv
    return None


def _venv_home(venv: Path) -> Path | None:
    """The ``home`` of a ``pyvenv.cfg``: the folder of the interpreter it was made with."""
    try:
        lines = (venv / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in lines.splitlines()[:64]:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(os.path.realpath(value.strip()))
    return None


def _python_prefix(bin_folder: Path) -> Iterator[str]:
    """The installation above ``bin_folder`` when it is a Python's (``lib/python3.*``);
    a system folder (``/usr/bin``) is granted already and is not widened."""
    if bin_folder.name != "bin":
        return
    prefix = bin_folder.parent
    if str(prefix) in ("/", "/usr", "/usr/local"):
        return
    lib = prefix / "lib"
    try:
        has_python = any(entry.name.startswith("python3") for entry in lib.iterdir())
    except OSError:
        return
    if has_python:
        yield str(prefix)


def _pth_folders(venv: Path) -> Iterator[str]:
    """Folders named by the ``.pth`` files of the environment's site-packages (editable
    installs put their source folders there); ``import`` lines are not paths."""
    files = sorted(venv.glob("lib/python3*/site-packages/*.pth"))[:_MAX_PTH_FILES]
    for pth in files:
        try:
            lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines[:_MAX_PTH_LINES]:
            entry = line.strip()
            if entry.startswith("/") and os.path.isdir(entry):
                yield entry


def _shebang_interpreter(program: str, path: str | None) -> str | None:
    """The interpreter a script's ``#!`` line names (``env NAME`` looked up on PATH)."""
    try:
        with open(program, "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-")]
        return resolve_program(names[0], cwd=Path("/"), path=path) if names else None
    return words[0]
