"""A diagnostic made from its row of the table, and the one way to print it.

In order: filling a row's templates (a placeholder the caller did not give shows as
``<name>``, and every value is redacted), :class:`Diagnostic`, :func:`diagnostic`,
:class:`DiagnosticError`, :func:`emit`, :func:`failure_json` (the one shape of every
``--json`` command's failure), then :func:`explain` (what ``mur explain CODE`` prints)
with how a template reads to people (:func:`shown`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from gateway.redaction import redact
from launcher.diagnostics.entry import Severity
from launcher.diagnostics.table import lookup
from launcher.errors import LauncherError


class _Placeholders(dict[str, str]):
    """Formatting values; a placeholder the caller did not give renders as ``<name>``."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def _fill(template: str, values: Mapping[str, object]) -> str:
    return redact(template.format_map(_Placeholders({k: str(v) for k, v in values.items()})))


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One diagnostic as printed: ``path`` is the field (``members[1].capsule``) or file at
    fault, when there is one."""

    code: str
    severity: Severity
    message: str
    hint: str
    path: str | None = None

    def render(self) -> str:
        """``error E-ROS-004: <message>`` and, on the next line, ``  hint: <hint>``."""
        return f"{self.severity} {self.code}: {self.message}\n  hint: {self.hint}"

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "hint": self.hint, "path": self.path}


def diagnostic(code: str, path: str | None = None, **values: object) -> Diagnostic:
    """A :class:`Diagnostic` for ``code`` with its templates filled from ``values``."""
    entry = lookup(code)
    return Diagnostic(code=entry.code, severity=entry.severity,
                      message=_fill(entry.message, values), hint=_fill(entry.hint, values),
                      path=redact(path) if path is not None else None)


class DiagnosticError(LauncherError):
    """A refusal carrying its :class:`Diagnostic`; ``str()`` is the rendered diagnostic."""

    def __init__(self, code: str | Diagnostic, path: str | None = None,
                 **values: object) -> None:
        self.diagnostic = code if isinstance(code, Diagnostic) else diagnostic(
            code, path, **values)
        super().__init__(self.diagnostic.render())

    @property
    def code(self) -> str:
        return self.diagnostic.code

    @property
    def path(self) -> str | None:
        return self.diagnostic.path


def emit(diag: Diagnostic, stream: TextIO | None = None, json_mode: bool = False) -> None:
    """Print ``diag`` on ``stream`` (stderr by default): rendered, or one JSON object a line."""
    out = sys.stderr if stream is None else stream
    if json_mode:
        out.write(json.dumps(diag.to_json(), ensure_ascii=False) + "\n")
    else:
        out.write(diag.render() + "\n")
    out.flush()


def failure_json(command: str, exit_status: int, error: Diagnostic | str, *,
                 hint: str | None = None, path: str | None = None) -> dict[str, object]:
    """What every ``--json`` command prints, one object on stdout, when it fails:
    ``{"ok": false, "command": "mur <command>", "exit_status": N, "error": {"code",
    "severity", "message", "hint", "path"}}``, the error shaped as a diagnostic; a
    failure that is no diagnostic has ``code`` null."""
    shaped = error.to_json() if isinstance(error, Diagnostic) else {
        "code": None, "severity": "error", "message": error, "hint": hint, "path": path}
    return {"ok": False, "command": command, "exit_status": exit_status, "error": shaped}


def explain(code: str) -> str:
    """The text ``mur explain CODE`` prints for one table entry."""
    entry = lookup(code)
    origin = ("part of the roster format" if entry.named_by == "reference"
              else "added by murmur-door")
    return "\n".join((
        f"{entry.code} ({entry.severity}, {origin}): {entry.title}",
        "",
        entry.meaning,
        "",
        f"message: {entry.severity} {entry.code}: {_readable(entry.message)}",
        f"hint:    {_readable_hint(entry.hint)}",
    )) + "\n"


_PLACEHOLDER = re.compile(r"(?<!\{)\{([a-z_]+)\}(?!\})")


def _readable(template: str) -> str:
    """A template as ``mur explain`` shows it: each value to fill as ``<name>`` (the
    form the docs use), literal braces single."""
    return shown(_PLACEHOLDER.sub(lambda match: f"<{match.group(1).replace('_', ' ')}>",
                                  template))


def _readable_hint(template: str) -> str:
    """A hint that is only a value to fill says so in words: it depends on the case."""
    if _PLACEHOLDER.fullmatch(template.strip()):
        return "given with each case: the diagnostic names the fix for what went wrong"
    return _readable(template)


def shown(template: str) -> str:
    """A template as people read it: literal braces single, placeholders in braces."""
    return template.replace("{{", "{").replace("}}", "}")
