"""A row of the one table of diagnostics: :class:`CodeEntry`, and the two severities.

The rows are in ``admission_codes.py`` and ``run_codes.py``; ``table.py`` joins them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CodeEntry:
    """One row of the table.

    ``message`` and ``hint`` are ``str.format`` templates over the keyword arguments a
    diagnostic is made with (``{{`` and ``}}`` for literal braces). ``meaning`` says when the
    code is given; ``named_by`` says whether the code belongs to the roster format
    (``"reference"``) or this project added it.
    """

    code: str
    severity: Severity
    title: str
    message: str
    hint: str
    meaning: str
    named_by: Literal["reference", "murmur-door"] = "murmur-door"
