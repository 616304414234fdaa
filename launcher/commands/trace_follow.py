"""``mur trace show <frm_…|ses_…> --follow``: a formation's records as they happen.

In this order:

1. what the traces hold already is printed (``launcher.commands.trace.trace_records``), and
   remembered, so a record is printed once;
2. every running member of the formation (or the one session) is watched with
   ``murmur.WatchSession`` at its door, with the operator token of its records folder,
   one thread each; the stream replays the door's recent records first, so nothing
   written between step 1 and the subscription is missed (duplicates are dropped);
3. the running records are read again every second, so a member that starts later
   (a formation still coming up) is watched too;
4. it ends when no member of the formation runs and every stream has ended, or on
   Ctrl-C. A member whose door cannot be reached is skipped: its records still reach
   its trace file, which ``mur trace show`` prints.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from launcher.home.records import OPERATOR_TOKEN_FILE, read_operator_token
from launcher.home.running_records import RunningRecord, list_live

__all__ = ["follow_trace"]

#: How often the running records are read for members that started since.
RESCAN_SECONDS = 1.0

Record = dict[str, Any]
Sessions = Callable[[], list[RunningRecord]]


def _key(member: str, record: Record) -> str:
    """A record's identity: its member and its content but the time, which the trace
    file stamps again as it writes (a millisecond may part them), and the file's hash
    chain (``prev``), which a door's stream does not carry."""
    fields = {key: value for key, value in record.items()
              if key not in ("member", "ts", "prev")}
    return member + "\0" + json.dumps(fields, sort_keys=True, ensure_ascii=False)


def watched_sessions(ident: str) -> list[RunningRecord]:
    """The live sessions of formation (or session) ``ident`` that have a door."""
    return [record for record in list_live()
            if record.kind == "session" and record.door_url and record.records_dir
            and ident in (record.formation_id, record.id)]


def _watch_requests(door_url: str, token: str) -> Iterator[Record]:
    """The records ``murmur.WatchSession`` streams from one door, until it ends."""
    import httpx

    from gateway.sse import event_data

    body = {"jsonrpc": "2.0", "id": 1, "method": "murmur.WatchSession", "params": {}}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
               "Accept": "text/event-stream"}
    timeout = httpx.Timeout(10.0, read=None)
    with httpx.Client(timeout=timeout) as client, client.stream(
            "POST", door_url, json=body, headers=headers) as response:
        if response.status_code != 200:
            return
        for payload in event_data(response.iter_lines()):
            try:
                envelope = json.loads(payload)
            except ValueError:
                continue
            result = envelope.get("result") if isinstance(envelope, dict) else None
            if isinstance(result, dict):
                yield result


class _Watcher(threading.Thread):
    """One member's stream, each record put on the shared queue; ``None`` at its end."""

    def __init__(self, session: RunningRecord, out: queue.Queue[tuple[str, Record] | None]
                 ) -> None:
        super().__init__(name=f"watch {session.id}", daemon=True)
        self.session = session
        self.member = session.member or session.id
        self._out = out

    def run(self) -> None:
        try:
            assert self.session.door_url and self.session.records_dir
            token = read_operator_token(Path(self.session.records_dir) / OPERATOR_TOKEN_FILE)
            for record in _watch_requests(self.session.door_url, token):
                self._out.put((self.member, record))
        except Exception:  # noqa: BLE001, S110 - a door gone or unreadable ends its watch
            pass
        finally:
            self._out.put(None)


def follow_trace(ident: str, printed: list[Record], write: Callable[[Record], None],
                 sessions: Sessions | None = None) -> int:
    """Print (through ``write``) every new record of ``ident`` until it ends; the
    records in ``printed`` were printed already. Returns the exit status."""
    list_sessions = sessions or (lambda: watched_sessions(ident))
    # A count per key, not a set: two records alike but for their time are two records.
    seen = Counter(_key(str(record.get("member") or "-"), record) for record in printed)
    records: queue.Queue[tuple[str, Record] | None] = queue.Queue()
    watchers: dict[str, _Watcher] = {}
    running = 0
    try:
        while True:
            current = list_sessions()
            for session in current:
                if session.id not in watchers:
                    watchers[session.id] = _Watcher(session, records)
                    watchers[session.id].start()
                    running += 1
            running -= _drain(records, seen, write)
            if running == 0 and not current:
                return 0
    except KeyboardInterrupt:
        return 130


def _drain(records: queue.Queue[tuple[str, Record] | None], seen: Counter[str],
           write: Callable[[Record], None]) -> int:
    """Print what arrives for up to ``RESCAN_SECONDS``; returns how many streams ended."""
    ended = 0
    try:
        item = records.get(timeout=RESCAN_SECONDS)
        while True:
            if item is None:
                ended += 1
            else:
                member, record = item
                key = _key(member, record)
                if seen[key] > 0:           # printed from the file already
                    seen[key] -= 1
                else:
                    write({"ts": record.get("ts"), "event": record.get("event"),
                           "member": member, **record})
            item = records.get_nowait()
    except queue.Empty:
        return ended
