"""Unique id prefixes: ``mur stop frm_01a2`` for the one formation whose id starts so, as
git takes a commit's prefix (docs/cli.md, "Ids").

In order: :func:`known_ids`, every formation and session id this ``MURMUR_HOME`` knows
(the running records, ``formations/``, and each session's records directory under
``records/``); :func:`expand_id`, a prefix (``frm_`` or ``ses_`` and at least
:data:`MIN_DIGITS` hex digits) made the one id it starts, :class:`AmbiguousId` naming
the candidates when several do, the text itself when it is a whole id or none starts
with it (the command then says what it says of an id it does not know).
"""

from __future__ import annotations

import os
import re
from typing import Final

from launcher.errors import LauncherError
from launcher.home.paths import formations_root, records_root, running_dir
from launcher.ids import is_formation_id, is_session_id

__all__ = ["MIN_DIGITS", "AmbiguousId", "expand_id", "known_ids"]

#: The fewest hex digits after ``frm_``/``ses_`` a prefix may have.
MIN_DIGITS: Final = 4
_PREFIX = re.compile(r"^(frm|ses)_[0-9a-f]+$")


class AmbiguousId(LauncherError, ValueError):
    """Several ids start with the prefix given (the text lists them)."""

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        shown = ", ".join(candidates[:5]) + (", ..." if len(candidates) > 5 else "")
        super().__init__(f"`{prefix}` starts {len(candidates)} ids ({shown}); give more of "
                         "it")
        self.candidates = candidates


def known_ids(kind: str) -> set[str]:
    """Every ``frm`` or ``ses`` id this home knows (``kind``: ``frm`` or ``ses``)."""
    found: set[str] = set()
    is_id = is_formation_id if kind == "frm" else is_session_id
    try:
        found.update(name[:-5] for name in os.listdir(running_dir())
                     if name.endswith(".json") and is_id(name[:-5]))
    except OSError:
        pass
    if kind == "frm":
        try:
            found.update(name for name in os.listdir(formations_root()) if is_id(name))
        except OSError:
            pass
        return found
    for _, dirs, _ in os.walk(records_root()):
        sessions = [name for name in dirs if is_id(name)]
        found.update(sessions)
        dirs[:] = [name for name in dirs if name not in sessions]  # not into a session
    return found


def expand_id(text: str) -> str:
    """The one id ``text`` is a prefix of; ``text`` itself when it is a whole id, not a
    prefix, or the prefix of none."""
    if is_formation_id(text) or is_session_id(text) or not _PREFIX.match(text) \
            or len(text) < 4 + MIN_DIGITS:
        return text
    candidates = sorted(ident for ident in known_ids(text[:3]) if ident.startswith(text))
    if len(candidates) > 1:
        raise AmbiguousId(text, candidates)
    return candidates[0] if candidates else text
