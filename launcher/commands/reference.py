"""``docs/cli.md``: every ``mur`` command and flag, generated from the argument parser
itself (``python -m launcher.commands.reference --write-docs``; ``--check`` fails when the
page is stale, and a test runs it), so the page cannot drift from what ``mur`` accepts.

In this order: walk the parser (commands, then their subcommands), render each as a
heading, its one-line use, its description and a table of its arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from launcher.cli import build_parser
from launcher.generated_pages import page_command

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str,
                                                                   argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order ``mur --help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _flag_text(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    names = ", ".join(f"`{name}`" for name in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (
        "{" + ",".join(str(choice) for choice in action.choices) + "}"
        if action.choices else action.dest.upper())
    return f"{names} `{metavar}`"


def _help_text(action: argparse.Action) -> str:
    text = (action.help or "").replace("|", "\\|")
    if action.choices and action.option_strings:
        text += f" (one of {', '.join(f'`{choice}`' for choice in action.choices)})"
    if action.required and action.option_strings:
        text += " (required)"
    return text


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        rows.append(f"| {_flag_text(action)} | {_help_text(action)} |")
    if not rows:
        return []
    return ["| Argument | Meaning |", "|---|---|", *rows, ""]


def _command(path: str, help_text: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{path}`", ""]
    if help_text:
        lines += [help_text[0].upper() + help_text[1:] + ".", ""]
    usage = parser.format_usage().strip().removeprefix("usage: ")
    lines += ["```", " ".join(usage.split()), "```", ""]
    if parser.description:
        lines += [parser.description, ""]
    lines += _arguments(parser)
    for name, sub_help, sub in _subcommands(parser):
        lines += _command(f"{path} {name}", sub_help, sub)
    return lines


def render() -> str:
    """The whole of ``docs/cli.md``."""
    parser = build_parser()
    parser.prog = "mur"
    lines = [
        "# The command line",
        "",
        "<!-- Generated from the argument parser by "
        "`python -m launcher.commands.reference --write-docs`. Do not edit by hand. -->",
        "",
        parser.description or "",
        "",
        "`mur --help` and `mur COMMAND --help` print the same. Exit status: 0 done, 1 a "
        "failure with a message or a diagnostic code (`mur explain CODE`), 2 a usage "
        "error, 141 when the reader of the output went away.",
        "",
        "**Ids.** Wherever a command takes a formation id (`frm_...`) or a session id "
        "(`ses_...`), a unique prefix of one will do (`frm_01a2`: `frm_` or `ses_` and at "
        "least 4 hex digits), as git takes a commit's prefix; a prefix that starts several "
        "ids is refused naming them (status 2). Every such command (`send`, `cancel`, "
        "`stop`, `logs`, `trace show`, `audit`, `graph`, `approvals`, `approve`, `deny`) "
        "answers a bad id alike: an argument that is not a well-formed id (nor a door URL, "
        "where one is taken) is a usage error, status 2; a well-formed id that names no "
        "formation or session (none running, or no records of it) is status 1, except for "
        "`mur audit`, whose 1 means violations: a formation it cannot audit is 2. `mur "
        "stop` with no id stops the one formation running in the project.",
        "",
    ]
    for name, help_text, sub in _subcommands(parser):
        lines += _command(f"mur {name}", help_text, sub)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    return page_command("launcher.commands.reference", DOCS_PATH, render, argv)


if __name__ == "__main__":
    sys.exit(main())
