"""docs/cli.md is generated from the argument parser and never stale; every command and
flag ``mur`` takes is on it, each argument with a meaning."""

from __future__ import annotations

import argparse

from launcher.cli import build_parser
from launcher.commands.reference import DOCS_PATH, render


def test_the_cli_page_is_not_stale() -> None:
    assert DOCS_PATH.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run `python -m launcher.commands.reference --write-docs`")


def test_every_command_and_flag_is_on_the_page_with_a_meaning() -> None:
    page = render()
    parser = build_parser()
    [subparsers] = [action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction)]
    assert len(subparsers.choices) >= 10
    for command in subparsers.choices:
        assert f"## `mur {command}`" in page, command
    for flag in ("--roster", "--capsule-version", "--deadline", "--json", "--global",
                 "--template", "--force"):
        assert f"`{flag}`" in page, flag
    assert "|  |" not in page  # no argument without a meaning
    assert "## `mur trace show`" in page
