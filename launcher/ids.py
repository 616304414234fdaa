"""Formation and session ids: UUIDv7 as 32 lowercase hex digits behind ``frm_`` / ``ses_``.

The time in an id is when it was minted, to the millisecond; retention's ``max_age``
reads it back with :func:`id_time`. Ids minted by one process are strictly increasing,
so sorting ids as strings sorts them by age (ids of different processes minted in the
same millisecond tie on time and order arbitrarily).

Layout (RFC 9562, section 5.7, with a 12-bit counter in ``rand_a`` as its method 1):

    48 bits unix time in ms | 4 bits version 7 | 12 bits counter |
    2 bits variant 0b10     | 62 bits random
"""

from __future__ import annotations

import os
import re
import threading
import time
from datetime import UTC, datetime, timedelta

FORMATION_PREFIX = "frm_"
SESSION_PREFIX = "ses_"

_HEX_V7 = r"[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}"
_FORMATION_RE = re.compile(FORMATION_PREFIX + _HEX_V7)
_SESSION_RE = re.compile(SESSION_PREFIX + _HEX_V7)

_COUNTER_MAX = 0xFFF
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Clock:
    """The (millisecond, counter) pair of the last id, so ids never go backwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._counter = 0

    def next(self) -> tuple[int, int]:
        with self._lock:
            now = time.time_ns() // 1_000_000
            if now > self._ms:
                # A random start leaves room for about 2,000 more ids in this ms while
                # making the counter of a fresh millisecond unguessable.
                self._ms = now
                self._counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
            elif self._counter < _COUNTER_MAX:
                self._counter += 1
            else:
                # Counter spent (or the wall clock stepped back): borrow the next ms.
                self._ms += 1
                self._counter = 0
            return self._ms, self._counter


_clock = _Clock()


def _uuid7_hex() -> str:
    ms, counter = _clock.next()
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand_b
    return f"{value:032x}"


def new_formation_id() -> str:
    """A fresh ``frm_`` id, newer than every id this process minted before."""
    return FORMATION_PREFIX + _uuid7_hex()


def new_session_id() -> str:
    """A fresh ``ses_`` id, newer than every id this process minted before."""
    return SESSION_PREFIX + _uuid7_hex()


def is_formation_id(value: object) -> bool:
    """True for ``frm_`` plus 32 lowercase hex digits of a UUIDv7, nothing else."""
    return isinstance(value, str) and _FORMATION_RE.fullmatch(value) is not None


def is_session_id(value: object) -> bool:
    """True for ``ses_`` plus 32 lowercase hex digits of a UUIDv7, nothing else."""
    return isinstance(value, str) and _SESSION_RE.fullmatch(value) is not None


def id_time(value: str) -> datetime:
    """When a formation or session id was minted (UTC, millisecond precision).

    Raises ValueError for anything that is neither kind of id.
    """
    if not (is_formation_id(value) or is_session_id(value)):
        raise ValueError(
            "not a formation or session id: expected frm_ or ses_ followed by the 32 "
            "lowercase hex digits of a UUIDv7"
        )
    ms = int(value[4:16], 16)
    return _EPOCH + timedelta(milliseconds=ms)
