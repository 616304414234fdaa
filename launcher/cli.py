"""``mur``: argument parsing and dispatch only. Each command's work lives in its module."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from launcher import __version__

#: Modules under launcher/commands, each registering its subcommands.
COMMAND_MODULES = (
    "launcher.commands.capsules",   # new, pack, install, lock
    "launcher.commands.adding",     # add
    "launcher.commands.admission",  # doctor, explain
    "launcher.commands.running",    # run, stop, ps, send, cancel, logs, trace
    "launcher.commands.observing",  # graph
    "launcher.commands.approvals",  # approve, deny, approvals
)

Handler = Callable[[argparse.Namespace], int]
#: What ``mur`` exits with when the reader of its output went away (128 + SIGPIPE).
BROKEN_PIPE_STATUS = 141


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error with ``--json`` among the arguments is the one
    JSON failure object on stdout (every command's, launcher/diagnostics/report.py)
    instead of a usage text on stderr; the status is argparse's 2 either way."""

    #: Whether the command line being parsed asks for ``--json``.
    json_wanted = False

    def error(self, message: str) -> NoReturn:
        if not _Parser.json_wanted:
            super().error(message)
        from launcher.diagnostics import failure_json

        print(json.dumps(failure_json(self.prog, 2, message, hint=f"{self.prog} --help")))
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    """Run ``mur`` with ``argv`` (the process's own arguments when None: ``mur`` as a
    program, which then ends with :func:`_leave_to_the_os`)."""
    if argv is None:  # mur as a program (in-process callers keep their own sys.path)
        forget_working_directory()
    return _run(argv, program=argv is None)


def run_program(argv: Sequence[str]) -> int:
    """``mur argv`` as a program: a member runtime the member template forked."""
    return _run(argv, program=True)


def _run(argv: Sequence[str] | None, *, program: bool) -> int:
    parser = build_parser()
    _Parser.json_wanted = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # --detach runs it again
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    problem = _expand_ids(args)
    if problem is not None:
        if getattr(args, "json", False):
            from launcher.diagnostics import failure_json

            print(json.dumps(failure_json(f"mur {args.command}", 2, problem)))
        else:
            print(f"mur {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        status = handler(args)
        sys.stdout.flush()  # a reader gone away shows here, not in the flush at exit
        return status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `mur ps --json | head`: the reader has what it wanted. No traceback, nothing
        # more written; the status a program killed by SIGPIPE has (128 + 13).
        _discard_stdout()
        return BROKEN_PIPE_STATUS
    finally:
        if program:
            _leave_to_the_os()


#: The arguments that name a formation or a session: a unique prefix stands for the id.
_ID_ARGUMENTS = ("id", "target", "formation", "resume")


def _expand_ids(args: argparse.Namespace) -> str | None:
    """Each id argument given as a unique prefix made whole (launcher/home/id_prefixes.py);
    the problem when a prefix starts several ids."""
    for name in _ID_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value[:4] in ("frm_", "ses_"):
            from launcher.home.id_prefixes import AmbiguousId, expand_id

            try:
                setattr(args, name, expand_id(value))
            except AmbiguousId as ambiguous:
                return str(ambiguous)
    return None


def forget_working_directory() -> None:
    """Take the current directory off ``sys.path`` (``python -m`` puts it first).

    mur imports much of what it uses when first needed (httpx when a member first sends
    a request, aiohttp when it first calls a member), and its current directory is
    usually a project folder, which an entry member's agent may write: a module planted
    there (``httpx.py``) would otherwise run in the launcher or a member runtime, beside
    the signing key and the tokens. Both of mur's packages are imported first, so a
    source checkout run as ``python -m launcher.cli`` from its own folder keeps working.
    """
    import gateway  # noqa: F401 - found while the directory is still on the path

    try:
        here = os.getcwd()
    except OSError:  # a directory that is gone: nothing can be imported from it either
        here = ""
    sys.path[:] = [entry for entry in sys.path
                   if entry not in ("", ".") and os.path.realpath(entry) != here]


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _leave_to_the_os() -> None:
    """The process ends next: what is alive now is not searched for reference cycles
    at exit, the OS takes the memory back. A member's interpreter holds pydantic's,
    httpx's and uvicorn's objects, whose cycle search at exit cost ~70 ms of CPU at the
    end of every member (measured). atexit handlers, the flushing of streams and
    objects freed by reference counting are untouched; a formation's members end
    sooner."""
    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
