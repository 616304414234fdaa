"""``trace.jsonl``: one JSON object a line, each with ``ts`` and ``event``.

:class:`TraceWriter` appends records with one unbuffered ``write`` each and takes no
lock, so a signal handler may write ``session_end`` while the main code was in the
middle of another record: the two lines land whole, one after the other. Readers
(:func:`read_trace`) skip a line that does not parse, such as the torn last line of a
process killed mid-write. :func:`merge_traces` and :func:`find_formation_traces` serve
``mur trace show <formation-id>``; :func:`find_session_trace` serves
``mur trace show <session-id>``; :func:`with_delegated` adds the traces of the children
a session delegated to (its ``delegation`` records name them), each under
``child:<capsule-name>`` (:func:`session_label`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from gateway.redaction import redact_value
from launcher.home.formations import formation_records
from launcher.home.paths import records_root
from launcher.home.records import TRACE_FILE
from launcher.home.running_records import read_running
from launcher.home.trace_chain import PREV, chain_tail, link
from launcher.ids import is_formation_id, is_session_id

Record = dict[str, Any]

_FAR_FUTURE = datetime.max.replace(tzinfo=UTC)


def timestamp(moment: datetime | None = None) -> str:
    """ISO-8601 UTC with microseconds and a ``Z``: ``2026-10-23T21:44:57.123456Z``."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: The fields the writer sets itself.
_WRITERS_OWN = frozenset({"ts", "event", PREV})
#: One encoder for every record: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), default=str)


def _encode(record: Record) -> bytes:
    try:
        return (_ENCODER.encode(record) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escape everything instead
        return (_ASCII_ENCODER.encode(record) + "\n").encode("ascii")


class TraceWriter:
    """Appends records to one ``trace.jsonl`` (created at mode 0600, never through a
    symlink). Every record reaches the file before :meth:`write` returns.

    With ``session_id``, each record carries ``prev``, chaining it to the line before
    (launcher/home/trace_chain.py); a trace that exists already (a resumed session)
    continues its chain, on a new line when its last was torn. A record written while
    another is being written (a signal handler's ``session_end``) waits for it, so the
    chain stays one line after another."""

    def __init__(self, path: str | os.PathLike[str], session_id: str | None = None) -> None:
        self.path = Path(path)
        self._fd = os.open(
            self.path,
            os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
        )
        self._prev: str | None = None
        self._writing = False
        self._waiting: list[Record] = []
        if session_id is not None:
            self._prev, torn = chain_tail(self._fd, session_id)
            if torn:
                self._append(b"\n")

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def write(self, event: str, /, **fields: Any) -> Record:
        """Append ``{"ts": now, "event": event, **fields}``; returns the record written.

        Values that are not JSON are written as their ``str``. Raises ValueError when
        the writer is closed or a field is named ``ts`` or ``event``.
        """
        if "ts" in fields or "event" in fields or PREV in fields:
            raise ValueError("trace fields may not be named ts, event or prev")
        # A token that slipped into a field is replaced before the line is written:
        # the trace is the one file most likely to be shared when something goes wrong.
        return self.write_redacted(event, redact_value(fields))

    def write_redacted(self, event: str, fields: Mapping[str, Any], /) -> Record:
        """:meth:`write` for ``fields`` the trace bus has redacted already (every string
        of a bus record went through the same redactor, gateway/trace/bus.py), which a
        session's records are: each passes the redactor once, not twice. Any ``ts``,
        ``event`` or ``prev`` among them is the writer's own."""
        record: Record = {"ts": timestamp(), "event": event}
        for key, value in fields.items():
            if key not in _WRITERS_OWN:
                record[key] = value
        if self._prev is None:
            self._append(_encode(record))
            return record
        if self._writing:                 # a signal handler inside another write
            self._waiting.append(record)
            return record
        self._writing = True
        try:
            record[PREV] = self._prev
            line = _encode(record)
            self._append(line)
            self._prev = link(memoryview(line)[:-1])
            while self._waiting:
                self._chain(self._waiting.pop(0))
        finally:
            self._writing = False
        return record

    def _chain(self, record: Record) -> None:
        record[PREV] = self._prev
        line = _encode(record)
        self._append(line)
        self._prev = link(memoryview(line)[:-1])

    def _append(self, line: bytes) -> None:
        fd = self._fd
        if fd < 0:
            raise ValueError(f"the trace {self.path} is closed")
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceWriter({str(self.path)!r}, closed={self.closed})"


def read_trace(path: str | os.PathLike[str]) -> list[Record]:
    """Every record of a trace, in file order. Lines that are not a JSON object (a torn
    last line, say) are skipped. Raises FileNotFoundError when there is no file."""
    return [record for _, record in numbered_records(path)]


def numbered_records(path: str | os.PathLike[str]) -> list[tuple[int, Record]]:
    """(line number from 1, record) of every JSON-object line of a trace, as
    :func:`read_trace` reads them (``mur audit`` names the line of each violation)."""
    with open(path, "rb") as handle:
        data = handle.read()
    records = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append((number, record))
    return records


def _moment(record: Record) -> datetime:
    value = record.get("ts")
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return _FAR_FUTURE
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return _FAR_FUTURE


def merge_traces(
    sources: Mapping[str, str | os.PathLike[str]]
    | Iterable[tuple[str, str | os.PathLike[str]]],
) -> list[Record]:
    """The records of several members' traces in time order, each with ``member`` set
    to the name it came under (placed after ``ts`` and ``event``).

    ``sources`` maps member names to trace paths (or is a sequence of pairs). A missing
    trace is skipped. Records at the same instant keep the order of ``sources`` and of
    their file; a record without a readable ``ts`` sorts last.
    """
    pairs = sources.items() if isinstance(sources, Mapping) else sources
    merged: list[Record] = []
    for member, path in pairs:
        try:
            records = read_trace(path)
        except FileNotFoundError:
            continue
        for record in records:
            tagged: Record = {"ts": record.get("ts"), "event": record.get("event"),
                              "member": member}
            tagged.update((key, value) for key, value in record.items()
                          if key not in tagged)
            merged.append(tagged)
    merged.sort(key=_moment)  # stable: ties keep source and file order
    return merged


def _first_record(path: Path) -> Record | None:
    try:
        with open(path, "rb") as handle:
            line = handle.readline(1 << 20)
        record = json.loads(line)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _session_dirs(root: Path) -> Iterator[Path]:
    """Every session records directory under ``root``, never descending into one (their
    ``home/`` and ``tmp/`` may hold anything) and never following a symlink."""
    for current, dirnames, _files in os.walk(root):
        sessions = [name for name in dirnames if is_session_id(name)]
        dirnames[:] = [name for name in dirnames if not is_session_id(name)]
        for name in sorted(sessions):
            yield Path(current) / name


def find_formation_traces(formation_id: str) -> list[tuple[str, Path]]:
    """(member, trace path) of every session that ran in ``formation_id``: the peers'
    from the formation's records folder, the entry member's found by its
    ``session_start`` anywhere under ``records/``. Sessions in time order of their ids.
    """
    if not is_formation_id(formation_id):
        raise ValueError("formation id must be frm_ followed by 32 lowercase hex digits")
    root = records_root()
    if not root.is_dir():
        return []
    found: list[tuple[str, Path]] = []
    for session in _session_dirs(root):
        trace = session / TRACE_FILE
        first = _first_record(trace)
        if first is None or first.get("event") != "session_start":
            continue
        if first.get("formation_id") != formation_id:
            continue
        found.append((session_label(first) or session.parent.name, trace))
    found.sort(key=lambda pair: pair[1].parent.name)
    return found


def session_label(first: Mapping[str, Any]) -> str | None:
    """The name a session's records are shown under, from its ``session_start``: its
    roster name, ``child:<capsule-name>`` for a delegated child, else None."""
    member = first.get("formation_member")
    if isinstance(member, str):
        return member
    capsule = first.get("capsule")
    if first.get("parent_session") and isinstance(capsule, str):
        return f"child:{capsule.rsplit('/', 1)[-1]}"
    return None


#: How deep :func:`with_delegated` follows children of children.
_DELEGATION_LEVELS = 16


def with_delegated(pairs: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """``pairs`` and, after them, the trace of every child session their ``delegation``
    records name (children of children too), each once."""
    found = list(pairs)
    seen = {path.resolve() for _, path in found}
    frontier = list(pairs)
    for _ in range(_DELEGATION_LEVELS):
        following: list[tuple[str, Path]] = []
        for _, path in frontier:
            for record in _readable(path):
                child = record.get("child_session")
                if record.get("event") != "delegation" or not is_session_id(child):
                    continue
                trace = find_session_trace(str(child))
                if trace is None or trace.resolve() in seen:
                    continue
                seen.add(trace.resolve())
                label = session_label(_first_record(trace) or {}) or "child"
                following.append((label, trace))
        found += following
        frontier = following
        if not frontier:
            break
    return found


def _readable(path: Path) -> list[Record]:
    try:
        return read_trace(path)
    except OSError:
        return []


def formation_peer_traces(formation_id: str) -> list[tuple[str, Path]]:
    """(member, trace path) of the peers' sessions alone, read from the folder layout
    (``records/<home>/formations/<id>/<member>/<session>/``) without opening a trace."""
    base = formation_records(formation_id)
    pairs = []
    for trace in sorted(base.glob(f"*/ses_*/{TRACE_FILE}")):
        if is_session_id(trace.parent.name):
            pairs.append((trace.parent.parent.name, trace))
    return pairs


def find_session_trace(session_id: str) -> Path | None:
    """The trace of ``session_id``: from its running record when it runs, else found
    under ``records/``. None when there is none."""
    if not is_session_id(session_id):
        raise ValueError("session id must be ses_ followed by 32 lowercase hex digits")
    record = read_running(session_id)
    if record is not None and record.records_dir:
        trace = Path(record.records_dir) / TRACE_FILE
        if trace.is_file():
            return trace
    root = records_root()
    if not root.is_dir():
        return None
    for session in _session_dirs(root):
        if session.name == session_id and (session / TRACE_FILE).is_file():
            return session / TRACE_FILE
    return None
