"""What a process of murmur-door is called in ``ps`` and ``top``: its command line as
``ps`` shows it (``/proc/<pid>/cmdline``) and its short name (``comm``, 15 bytes).

A member forked from the launcher's warm template would otherwise show the template's
``python -m launcher.template 7``, and an operator could not find it. In this order:
:func:`member_title` (``mur run --capsule <name> --capsule-version <v>``, then
``--member <name> --formation <frm_...>`` in a formation), :func:`launcher_title`
(``mur run --roster <path> --formation <frm_...>``), :func:`name_process`, which sets
both through setproctitle (it rewrites the process's argv area in place, which Python
cannot do itself). A title never holds a token: it is built from names and ids only.
"""

from __future__ import annotations

import contextlib

import setproctitle

__all__ = ["launcher_title", "member_title", "name_process"]


def member_title(capsule: str, version: str, *, member: str | None = None,
                 formation_id: str | None = None) -> str:
    """A member runtime's title: what ``mur run`` would have been called with."""
    title = f"mur run --capsule {capsule} --capsule-version {version}"
    if member is not None:
        title += f" --member {member}"
    if formation_id is not None:
        title += f" --formation {formation_id}"
    return title


def launcher_title(roster: str, formation_id: str) -> str:
    """The launcher's title once its formation has an id."""
    return f"mur run --roster {roster} --formation {formation_id}"


def name_process(title: str, short: str) -> None:
    """Call this process ``title`` in ``ps`` and ``short`` in ``top`` (at most 15 bytes
    kept). A host that refuses either keeps the old name: a name is never worth failing."""
    with contextlib.suppress(Exception):
        setproctitle.setproctitle(title)
    with contextlib.suppress(Exception):
        setproctitle.setthreadtitle(short[:15])
