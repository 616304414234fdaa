"""``docs/diagnostics.md``, generated from the one table: ``python -m launcher.diagnostics
--write-docs`` writes it and ``--check`` says when it is stale (the command of
``launcher/generated_pages.py``).

In order: the families as the page titles them, the page (an example, an index, then a
section a family, errors before warnings), the example diagnostic it shows, the command.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from launcher.diagnostics.entry import CodeEntry
from launcher.diagnostics.report import diagnostic, shown
from launcher.diagnostics.table import TABLE

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"

_FAMILIES = (
    ("ROS", "Rosters and admission"),
    ("REG", "Stores, artifacts and murmur.lock"),
    ("MAN", "murmur.yaml"),
    ("RUN", "Running members and formations"),
    ("SEC", "The host"),
)


def _family(code: str) -> str:
    return code.split("-")[1]


def _by_family(entries: Iterable[CodeEntry], family: str) -> list[CodeEntry]:
    chosen = [entry for entry in entries if _family(entry.code) == family]
    return sorted(chosen, key=lambda entry: (entry.code[0] != "E", entry.code))


def render_docs() -> str:
    """The whole of ``docs/diagnostics.md``, generated from :data:`TABLE`."""
    lines = [
        "# Diagnostics",
        "",
        "<!-- Generated from launcher/diagnostics/ by "
        "`python -m launcher.diagnostics --write-docs`. Do not edit by hand. -->",
        "",
        "Every refusal and warning `mur` prints is one of the codes below. On stderr a "
        "diagnostic is two lines:",
        "",
        "```text",
        _EXAMPLE.render(),
        "```",
        "",
        "With `--json` it is one object: `{\"code\", \"severity\", \"message\", \"hint\", "
        "\"path\"}`, where `path` is the field or file at fault (or null). `mur explain CODE` "
        "prints one entry of this page. Placeholders in braces are filled in when the "
        "diagnostic is given.",
        "",
        "## Index",
        "",
        "| Code | Severity | Summary |",
        "|---|---|---|",
    ]
    for family, _title in _FAMILIES:
        for entry in _by_family(TABLE, family):
            anchor = entry.code.lower()
            lines.append(f"| [{entry.code}](#{anchor}) | {entry.severity} | {entry.title} |")
    for family, title in _FAMILIES:
        lines += ["", f"## {title}"]
        for entry in _by_family(TABLE, family):
            origin = ("Part of the roster format (docs/roster.md)." if entry.named_by == "reference"
                      else "Added by murmur-door.")
            lines += [
                "",
                f"### {entry.code}",
                "",
                f"**{entry.severity}**: {entry.title}. {origin}",
                "",
                entry.meaning,
                "",
                f"- Message: `` {entry.severity} {entry.code}: {shown(entry.message)} ``",
                f"- Hint: `` {shown(entry.hint)} ``",
            ]
    return "\n".join(lines) + "\n"


_EXAMPLE = diagnostic("E-ROS-004", "reachability[0].to[1]", file="roster.yaml",
                      field="reachability[0].to[1]", name="revewer",
                      members="planner, coder, reviewer", suggestion="; did you mean `reviewer`?")


def main(argv: list[str] | None = None) -> int:
    from launcher.generated_pages import page_command  # only when the page is written

    return page_command("launcher.diagnostics", DOCS_PATH, render_docs, argv)

