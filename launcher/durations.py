"""Durations as ``murmur.yaml`` writes them: ``30s``, ``10m``, ``2h``, ``7d``, ``2w``."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"([0-9]{1,12})([smhdw]?)")
#: Longer than any session or retention anyone means (100 years): a typo, not a wish.
MAX_SECONDS = 100 * 365 * 86400

DURATION_FORMS = "a whole number followed by s, m, h, d or w, such as 30s, 10m, 2h or 7d"


def parse_duration(value: object) -> int:
    """Seconds in ``value``: a string such as ``10m``, or a whole number of seconds.

    Raises ``ValueError`` (its text a phrase such as ``must be longer than zero``, to follow
    the field's name) for anything else, zero included: every duration murmur reads bounds
    something that must last. :data:`DURATION_FORMS` says what to write instead.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be a duration")
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"is `{value}`, which is not a duration")
        seconds = int(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    if seconds > MAX_SECONDS:
        raise ValueError("must be at most 100 years")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest exact form of ``seconds``: 600 is ``10m``, 90 is ``90s``."""
    if seconds <= 0:
        return f"{seconds}s"
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
