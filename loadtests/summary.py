"""``make bench``'s last step: one table of every ratio and measure that has a goal, from
every ``loadtests/results/*.md``, with whether it holds, so a reader sees at a glance.

In order: each results file's tables are read (a table is a header row, a separator and
rows); a table with a ``goal`` column and a ``value`` (or ``ratio``) column gives one row
per line whose goal is a comparison (``>= 0.9``, ``<= 1 ms``, ``< 1.5``, with a ``(met)``
or units after it allowed); the value is compared with it; rows whose goal is text for
information (``(what the chain costs)``) are left out. Then ``results/summary.md`` is
written and printed, ending with how many goals hold. Each benchmark keeps its own goals
beside its numbers: this file only reads them.

    .venv/bin/python loadtests/summary.py
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
_GOAL = re.compile(r"^\s*(>=|<=|<|>)\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")
_COMPARE = {">=": float.__ge__, "<=": float.__le__, "<": float.__lt__, ">": float.__gt__}


@dataclass(frozen=True)
class GoalRow:
    source: str
    measure: str
    value: float
    goal: str
    holds: bool


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in ``text``: its rows of cells, the header first."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            rows.append(_cells(line))
            continue
        if len(rows) > 2:
            tables.append([rows[0], *rows[2:]])
        rows = []
    return tables


#: The columns a value is read from, the first that holds a number in the row.
_VALUE_COLUMNS = ("value", "ratio", "per second")


def _value_columns(header: list[str]) -> list[int]:
    lowered = [cell.lower() for cell in header]
    return [lowered.index(name) for name in _VALUE_COLUMNS if name in lowered]


def _measure(row: list[str], value_at: int) -> str:
    """What a row measures: its first cell, and its second when that is a label too
    (``bench_auth``: the path, then the credential)."""
    return row[0] if value_at < 3 or not row[1] else f"{row[0]}, {row[1]}"


def goal_rows(source: str, text: str) -> list[GoalRow]:
    """The rows of ``text``'s tables whose goal is a comparison, each judged."""
    found = []
    for header, *rows in _tables(text):
        lowered = [cell.lower() for cell in header]
        columns = _value_columns(header)
        if "goal" not in lowered or not columns:
            continue
        goal_at = lowered.index("goal")
        for row in rows:
            goal = _GOAL.match(row[goal_at]) if len(row) > goal_at else None
            numbers = [(at, _NUMBER.search(row[at])) for at in columns if at < len(row)]
            numbers = [(at, number) for at, number in numbers if number is not None]
            if goal is None or not numbers:
                continue
            value_at, number = numbers[0]
            value = float(number.group().replace(",", ""))
            target = float(goal.group(2).replace(",", ""))
            found.append(GoalRow(source, _measure(row, value_at), value,
                                 goal.group(0).strip(), _COMPARE[goal.group(1)](value, target)))
    return found


def _shown(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:g}"


def render(rows: list[GoalRow]) -> str:
    held = sum(row.holds for row in rows)
    lines = ["# Every goal of `make bench`, from loadtests/results/ (one run each)", "",
             "| benchmark | measure | value | goal | holds |", "|---|---|---:|---|---|"]
    lines += [f"| {row.source} | {row.measure} | {_shown(row.value)} | {row.goal} | "
              f"{'yes' if row.holds else '**no**'} |" for row in rows]
    lines += ["", f"{held} of {len(rows)} goals hold."]
    return "\n".join(lines) + "\n"


def main() -> int:
    rows: list[GoalRow] = []
    for path in sorted(RESULTS.glob("*.md")):
        if path.name != "summary.md":
            rows += goal_rows(path.stem, path.read_text(encoding="utf-8"))
    text = render(rows)
    (RESULTS / "summary.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
