"""The one table of diagnostics, joined from its families, and looking a code up.

In order: :data:`TABLE` (``ROS``, ``REG`` and ``MAN`` from ``admission_codes.py``, then
``RUN`` from ``run_codes.py`` with a model member's from ``model_codes.py``, and ``SEC``,
the order ``mur explain`` lists them),
:data:`CODES` (the table by code), :func:`lookup`, then the check every row passes when
the table is imported.
"""

from __future__ import annotations

import re

from launcher.diagnostics.admission_codes import MANIFEST_CODES, ROSTER_CODES, STORE_CODES
from launcher.diagnostics.entry import CodeEntry
from launcher.diagnostics.model_codes import MODEL_CODES
from launcher.diagnostics.run_codes import HOST_CODES, RUN_CODES

_CODE_PATTERN = re.compile(r"^(E|W)-(ROS|REG|MAN|RUN|SEC)-[0-9]{3}$")

TABLE: tuple[CodeEntry, ...] = (*ROSTER_CODES, *STORE_CODES, *MANIFEST_CODES, *RUN_CODES,
                                *MODEL_CODES, *HOST_CODES)

CODES: dict[str, CodeEntry] = {entry.code: entry for entry in TABLE}


def lookup(code: str) -> CodeEntry:
    """The table's entry for ``code`` (any case); ``KeyError`` for a code not in it."""
    return CODES[code.strip().upper()]


def _check_table() -> None:
    # A malformed row is a programming error; fail at import, not when it is first given.
    for entry in TABLE:
        if not _CODE_PATTERN.match(entry.code) or (entry.code[0] == "E") != (
                entry.severity == "error"):
            raise AssertionError(f"bad diagnostic table row {entry.code}")
    if len(CODES) != len(TABLE):
        raise AssertionError("a code appears twice in the diagnostic table")


_check_table()
