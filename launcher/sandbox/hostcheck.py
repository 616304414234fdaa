"""``W-SEC-013``: conditions of the host that weaken what separates sessions and formations.

Checked once per launch: a standalone ``mur run`` checks for itself; ``mur run --roster``
checks once and starts every member with ``MURMUR_HOST_WARNINGS_REPORTED=1``
(:func:`mark_reported`), so no member repeats it.

The conditions:

- the process runs as root;
- ``MURMUR_HOME`` can be written by other users: its mode lets group or others write,
  or another user (not root) owns it. When it does not exist yet, the first folder of
  its parent chain that exists is checked instead, since whoever can write there can
  make ``MURMUR_HOME`` before murmur does. A folder with the sticky bit (``/tmp``) still
  counts: others cannot replace what is in it, but they can make the home first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from launcher.diagnostics import Diagnostic, diagnostic
from launcher.spawn.env_names import HOME_ENV, HOST_WARNINGS_REPORTED_ENV


@dataclass(frozen=True)
class HostWarning:
    """One condition: ``problem`` says what is wrong, ``fix`` what to do."""

    problem: str
    fix: str

    def diagnostic(self) -> Diagnostic:
        return diagnostic("W-SEC-013", problem=self.problem, fix=self.fix)


def _home_from(environ: Mapping[str, str]) -> Path:
    configured = environ.get(HOME_ENV, "")
    if configured:
        return Path(os.path.abspath(os.path.expanduser(configured)))
    user_home = environ.get("HOME") or os.path.expanduser("~")
    return Path(os.path.abspath(user_home)) / ".murmur"


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _writable_by_others(path: Path, euid: int) -> str | None:
    """Why others can write ``path``, or None."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_mode & 0o022:
        return f"mode {info.st_mode & 0o7777:04o} lets group or others write it"
    if info.st_uid not in (euid, 0):
        return f"it is owned by another user (uid {info.st_uid})"
    return None


def host_warnings(environ: Mapping[str, str], *, euid: int | None = None) -> list[HostWarning]:
    """The W-SEC-013 conditions of this host; none when ``environ`` carries
    ``MURMUR_HOST_WARNINGS_REPORTED=1`` (the launcher already printed them)."""
    if environ.get(HOST_WARNINGS_REPORTED_ENV) == "1":
        return []
    euid = os.geteuid() if euid is None else euid
    warnings = []
    if euid == 0:
        warnings.append(HostWarning(
            problem="mur runs as root, so every capsule's code runs as root too",
            fix="run mur as an unprivileged user",
        ))
    home = _home_from(environ)
    checked = _first_existing(home)
    why = _writable_by_others(checked, euid)
    if why is not None:
        subject = (f"MURMUR_HOME {home}" if checked == home
                   else f"{checked}, where MURMUR_HOME {home} would be made,")
        warnings.append(HostWarning(
            problem=f"{subject} can be written by other users: {why}",
            fix=f"use a MURMUR_HOME only you can write, e.g. `chmod 700 {checked}` or a "
                "folder under your own home",
        ))
    return warnings


def host_diagnostics(environ: Mapping[str, str], *,
                     euid: int | None = None) -> list[Diagnostic]:
    """:func:`host_warnings` as W-SEC-013 diagnostics, ready for ``diagnostics.emit``."""
    return [warning.diagnostic() for warning in host_warnings(environ, euid=euid)]


def mark_reported(member_environ: MutableMapping[str, str]) -> None:
    """Tell a member the launcher already reported the host's warnings."""
    member_environ[HOST_WARNINGS_REPORTED_ENV] = "1"
