"""The ``mur`` subcommands. Each module here has ``register(subparsers)``, which adds its
parsers with ``set_defaults(handler=...)``; a handler takes the parsed namespace and
returns the exit status. Handlers import their heavy modules lazily so that ``mur``
starts fast (a formation starts one ``mur`` per member)."""

from __future__ import annotations

import sys
from pathlib import Path


def missing_project(command: str, project: Path) -> bool:
    """True (after saying so on stderr) when ``--project`` names no directory: the
    caller then exits 2, a usage error."""
    if project.is_dir():
        return False
    print(f"mur {command}: --project {project} is not a directory", file=sys.stderr)
    return True
