"""The command every generated page of ``docs/`` shares: ``python -m <module>
--write-docs`` writes the page, ``--check`` exits 1 (saying how to fix it) when the page
differs from what its source says. ``docs/diagnostics.md`` (``launcher.diagnostics``),
``docs/cli.md`` (``launcher.commands.reference``) and ``docs/manifest.md``
(``launcher.commands.manifest_reference``) use it; a test of each compares the page too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def page_command(module: str, page: Path, render: Callable[[], str],
                 argv: list[str] | None = None) -> int:
    """Parse ``argv`` and write or check ``page`` against ``render()``; the exit status."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=f"Generate or check docs/{page.name}.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write-docs", action="store_true", help="write the page")
    action.add_argument("--check", action="store_true",
                        help="exit 1 when the page differs from what its source says")
    parser.add_argument("--path", type=Path, default=page, help="the page (default: docs/)")
    args = parser.parse_args(argv)
    text = render()
    path: Path = args.path
    if args.write_docs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return 0
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if current != text:
        print(f"{path} is stale: run `python -m {module} --write-docs`", file=sys.stderr)
        return 1
    return 0
