"""The hash chain of a session's ``trace.jsonl`` (docs/audit.md, "The sealed record").

Every record carries ``prev``: the unpadded base64url SHA-256 of the previous record's
line (its bytes, without the newline); the first record's ``prev`` is that of the
session id. A record changed, removed, inserted or moved breaks the chain at the next
record, whose ``prev`` no longer names the line before it.

In order: :func:`link` (one line's hash) and :func:`seed` (the first ``prev``); reading a
trace's raw lines (:class:`TraceLine`, :func:`trace_lines`); where a writer resumes a
chain (:func:`chain_tail`); and :func:`verify_chain`, which names the line of each break.
Lines that are not a JSON object (a line torn by a process killed mid-write) are no
records: they are skipped, never part of the chain.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["ChainBreak", "TraceLine", "chain_tail", "link", "seed", "trace_lines",
           "verify_chain"]

PREV = "prev"
#: How much of a trace's end is read at a time to find its last record.
_TAIL_CHUNK = 64 * 1024


def link(line: bytes | memoryview) -> str:
    """The ``prev`` of the record after ``line``: its SHA-256, unpadded base64url (43
    characters: a 32-byte digest pads with one ``=``)."""
    return base64.urlsafe_b64encode(hashlib.sha256(line).digest())[:-1].decode("ascii")


def seed(session_id: str) -> str:
    """The first record's ``prev``: the hash of the session id."""
    return link(session_id.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One record line of a trace: its number from 1, its bytes, the record."""

    number: int
    raw: bytes
    record: dict[str, Any]


def record_of(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def trace_lines(data: bytes) -> list[TraceLine]:
    """The record lines of a trace's bytes (its torn last line, and any other line that
    is not a JSON object, left out)."""
    lines = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        record = record_of(raw)
        if record is not None:
            lines.append(TraceLine(number, raw, record))
    return lines


def chain_tail(fd: int, session_id: str) -> tuple[str, bool]:
    """Where a writer appending to the open trace ``fd`` resumes: the ``prev`` of its
    next record (the seed when the trace has no record yet), and whether the file ends
    inside a line (a torn write: the writer starts a new line first)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return seed(session_id), False
    torn = os.pread(fd, 1, size - 1) != b"\n"
    end = size
    carried = b""
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        block = os.pread(fd, end - start, start) + carried
        lines = block.split(b"\n")
        # The first piece may be the end of a line that starts in an earlier block.
        complete, carried = (lines, b"") if start == 0 else (lines[1:], lines[0])
        for raw in reversed(complete):
            if record_of(raw) is not None:
                return link(raw), torn
        end = start
    return seed(session_id), torn


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """A record whose ``prev`` does not name the record line before it."""

    line: int
    problem: str


def verify_chain(lines: list[TraceLine], session_id: str | None) -> list[ChainBreak]:
    """Each place the chain of a trace's record lines breaks, at the line to blame.
    ``session_id`` (the first record's ``session_id`` when None) gives the first
    record's expected ``prev``.

    A record whose ``prev`` is wrong is read by what its ``prev`` names: a later line (it
    was moved before it), an earlier line than the one before it (the lines between were
    inserted, or this record was, when the chain does not go on from it), or no line at
    all (the line before it was changed, or a record after that one was removed). A
    break right after another is the same change seen again, and is not reported
    twice."""
    if not lines:
        return []
    if session_id is None:
        found = lines[0].record.get("session_id")
        session_id = found if isinstance(found, str) else ""
    named = {link(line.raw): index for index, line in enumerate(lines)}
    breaks: list[ChainBreak] = []
    expected = seed(session_id)
    broken_before = False
    for index, line in enumerate(lines):
        prev = line.record.get(PREV)
        broken = prev != expected
        if broken and not broken_before:
            breaks.append(_blame(lines, index, prev, named))
        broken_before = broken
        expected = link(line.raw)
    return breaks


def _blame(lines: list[TraceLine], index: int, prev: Any,
           named: dict[str, int]) -> ChainBreak:
    line = lines[index]
    if prev is None:
        return ChainBreak(line.number, "a record without `prev`: written outside the chain, "
                                       "or edited")
    target = named.get(prev) if isinstance(prev, str) else None
    if index == 0 and target is None:
        return ChainBreak(line.number, "the first record does not follow from the session "
                                       "id: the trace was replaced, or records before it "
                                       "were removed")
    if target is not None and target >= index:
        return ChainBreak(line.number, f"this record was moved: it follows line "
                                       f"{lines[target].number} in the chain")
    if target is not None:
        # Two records now claim to follow line ``target``: this one, and the one right
        # after that line. When the chain goes on from this record, the lines between
        # are the intruders; otherwise (a copy with a stale prev, at the end say) it is.
        after = lines[index + 1].record.get(PREV) if index + 1 < len(lines) else None
        if after != link(line.raw):
            return ChainBreak(line.number, f"this record was inserted: it claims to follow "
                                           f"line {lines[target].number}, which line "
                                           f"{lines[target + 1].number} follows")
        first = lines[target + 1].number
        last = lines[index - 1].number
        where = f"line {first}" if first == last else f"lines {first}-{last}"
        return ChainBreak(first, f"{where} inserted: line {line.number} follows line "
                                 f"{lines[target].number} in the chain")
    before = lines[index - 1].number
    return ChainBreak(before, f"this record was changed, or a record after it (before "
                              f"line {line.number}) was removed")
