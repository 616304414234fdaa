"""Every diagnostic ``mur`` can print, in one table, and the one way to print them.

A diagnostic is a code (``E-ROS-004``), a severity, a message naming the field or path at
fault, and a hint saying what would be accepted. Codes of the roster format
(``named_by="reference"``, shown as "part of the roster format") keep that meaning;
codes this project adds extend the same families:

- ``ROS`` the roster (``roster.yaml``) and its admission;
- ``REG`` the artifact stores, ``.mur.zip`` artifacts and ``murmur.lock``;
- ``MAN`` a capsule's ``murmur.yaml``;
- ``RUN`` running a member or a formation;
- ``SEC`` conditions of the host that weaken isolation.

The package, in order: ``entry.py`` (a row, :class:`CodeEntry`), the rows by family
(``admission_codes.py``: ``ROS``, ``REG``, ``MAN``; ``run_codes.py``: ``RUN``, ``SEC``),
``table.py`` (the one :data:`TABLE` they make, :data:`CODES` and :func:`lookup`),
``report.py`` (:class:`Diagnostic`, :func:`diagnostic`, :class:`DiagnosticError`,
:func:`emit`, :func:`explain`) and ``page.py`` (``docs/diagnostics.md``, generated from
the table by ``python -m launcher.diagnostics --write-docs``). Every name is imported from
here, ``launcher.diagnostics``. The package imports only the standard library and the
one redaction pattern: every ``mur`` process loads it.
"""

from __future__ import annotations

from gateway.redaction import redact
from launcher.diagnostics.entry import CodeEntry, Severity
from launcher.diagnostics.page import DOCS_PATH, main, render_docs
from launcher.diagnostics.report import (
    Diagnostic,
    DiagnosticError,
    diagnostic,
    emit,
    explain,
    failure_json,
)
from launcher.diagnostics.table import CODES, TABLE, lookup

__all__ = ["CODES", "DOCS_PATH", "TABLE", "CodeEntry", "Diagnostic", "DiagnosticError",
           "Severity", "failure_json", "diagnostic", "emit", "explain", "lookup", "main", "redact",
           "render_docs"]
