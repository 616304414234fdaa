"""Which project a roster command reads when no ``--project`` names one: the current
folder, or else the nearest parent folder holding ``roster.yaml``, as git looks for
``.git`` (``mur doctor`` and ``mur run --roster`` from a member's source folder).

In order: :func:`project_for`, the project of a command given ``--project`` or not,
:func:`roster_project`, the search, and :func:`_owned`, what it trusts. A
``roster.yaml`` in a parent folder is taken only when that folder and the file belong to
the user ``mur`` runs as: one another user left higher up (``/tmp/roster.yaml``) would
otherwise launch that user's formation, with this user's rights.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.admission.roster_structure import ROSTER_FILE

__all__ = ["project_for", "roster_project"]


def project_for(given: str | Path | None) -> tuple[Path, Path | None]:
    """The project a roster command reads: ``--project`` when ``given``, else the current
    folder or the nearest parent holding roster.yaml; with the roster.yaml found in a
    parent folder, for the command to say which file it uses (else None)."""
    if given is not None:
        return Path(given), None
    try:
        here = Path.cwd()
    except OSError:  # a current folder that is gone: the command's own check says so
        return Path("."), None
    found = roster_project(here)
    if found is None or found == here:
        return Path("."), None
    return found, found / ROSTER_FILE


def roster_project(start: Path) -> Path | None:
    """The folder holding the ``roster.yaml`` nearest to ``start`` (``start`` itself or
    a parent), or None when there is none, or when the nearest one in a parent folder
    belongs to another user (the search stops there, as it would at a foreign ``.git``)."""
    start = Path(os.path.abspath(start))
    for folder in (start, *start.parents):
        roster = folder / ROSTER_FILE
        if not roster.is_file():
            continue
        return folder if folder == start or _owned(folder, roster) else None
    return None


def _owned(*paths: Path) -> bool:
    uid = os.geteuid()
    try:
        return all(os.stat(path).st_uid == uid for path in paths)
    except OSError:
        return False
