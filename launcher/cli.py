"""``mur``: argument parsing and dispatch only. Each command's work lives in its module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from launcher import __version__

#: Modules under launcher/commands, each registering its subcommands.
COMMAND_MODULES = (
    "launcher.commands.capsules",   # new, pack, install, lock
    "launcher.commands.admission",  # doctor, explain
    "launcher.commands.running",    # run, stop, ps, send, trace
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mur",
        description=(
            "Run formations of cooperating A2A agents. Who may call whom is set by a "
            "roster.yaml and enforced by per-edge Ed25519 credentials at each member's door."
        ),
    )
    parser.add_argument("--version", action="version", version=f"mur {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
