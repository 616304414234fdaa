"""Durations as ``murmur.yaml`` writes them (``30s``, ``10m``, ``2h``, ``7d``, ``2w``), and
the one ``--deadline`` parser of the launcher and the member runtime.

A ``--deadline`` is a duration counted from the start of the command that reads it, or an
ISO-8601 time (UTC when it names no zone). The launcher turns either into one absolute
moment (:func:`format_deadline`) and hands that to every member, which reads it back with
the same :func:`parse_deadline`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

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


_DEADLINE_FORMS = (f"write {DURATION_FORMS}, or an ISO-8601 UTC time such as "
                   "2026-01-02T03:04:05Z")
_SINCE_FORMS = (f"write {DURATION_FORMS} (that long ago), or an ISO-8601 time such as "
                "2026-01-02T03:04:05Z")


def parse_deadline(value: str, now: datetime) -> datetime:
    """The moment ``--deadline`` names, in UTC: a duration (``90s``, ``10m``, ``2h``, a
    whole number of seconds) from ``now``, else an ISO-8601 time, in UTC when it names no
    zone. ``ValueError`` with a sentence that starts ``--deadline`` for anything else."""
    return _moment(value, now, 1, "--deadline", _DEADLINE_FORMS)


def parse_since(value: str, now: datetime) -> datetime:
    """The moment a ``--since`` names, in UTC: a duration (``10m``, ``2h``) before
    ``now``, else an ISO-8601 time (UTC when it names no zone). ``ValueError`` with a
    sentence that starts ``--since`` for anything else."""
    return _moment(value, now, -1, "--since", _SINCE_FORMS)


def _moment(value: str, now: datetime, direction: int, flag: str, forms: str) -> datetime:
    text = value.strip()
    if text and text[0].isdigit() and "-" not in text and ":" not in text:
        try:
            return now + direction * timedelta(seconds=parse_duration(text))
        except ValueError as exc:
            raise ValueError(f"{flag} {exc}; {forms}") from None
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{flag} `{text[:40]}` is neither a duration nor an ISO-8601 "
                         f"time; {forms}") from None
    if moment.tzinfo is None:  # the flag takes a UTC time: one without a zone is UTC
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def format_deadline(moment: datetime) -> str:
    """An absolute deadline as the launcher hands it to every member: ISO-8601 UTC with
    microseconds and a ``Z``, which :func:`parse_deadline` reads back to the same moment."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_duration(seconds: int) -> str:
    """The shortest exact form of ``seconds``: 600 is ``10m``, 90 is ``90s``."""
    if seconds <= 0:
        return f"{seconds}s"
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
