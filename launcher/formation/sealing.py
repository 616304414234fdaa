"""The launcher seals its formation's traces (docs/audit.md, "The sealed record").

:class:`FormationSeals` holds the formation's :class:`launcher.home.seals.Sealer`, signing
with the formation key: :meth:`FormationSeals.start` runs :meth:`every` as a task, which
seals every ready member's trace each :data:`SEAL_INTERVAL` seconds (when one grew);
:meth:`FormationSeals.final` seals once more after every member stopped, before the key
is dropped, and that seal is marked final. Each seal written hands its head to
``on_seal`` (the running record keeps it), on the event loop; the final seal's head is
kept for the launcher's last line (:func:`sealed_line`). A seal that cannot be written
is said once and the formation goes on: ``mur audit`` then reports the record
incomplete (no final seal), never as tampered. A formation of one member has no
formation directory and so no seals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from launcher.home.formations import formation_dir
from launcher.home.seals import SEAL_INTERVAL, SEALS_FILE, SHORT_HEAD, Sealer, seal_head
from launcher.home.trace import timestamp

if TYPE_CHECKING:
    from gateway.auth.tokens import FormationKey
    from launcher.formation.members import LaunchedMember

__all__ = ["FormationSeals", "sealed_line"]


class FormationSeals:
    def __init__(self, formation_id: str, key: FormationKey,
                 say: Callable[[str], None],
                 on_seal: Callable[[str], None] = lambda head: None) -> None:
        self.formation_id = formation_id
        self._sealer = Sealer(formation_id, formation_dir(formation_id) / SEALS_FILE,
                              key.sign)
        self._say = say
        self._on_seal = on_seal
        self._task: asyncio.Task[None] | None = None
        self._failed = False
        # Cancelling the periodic task does not stop a seal its thread is writing (or
        # about to write): the two take turns here, and once the final seal is written
        # no other follows, so the final one is always the last line.
        self._sealing = threading.Lock()
        self._closed = False
        #: The final seal, once written: its head and its number (how many seals).
        self.final_head: str | None = None
        self.final_seq = 0
        #: Whether the final seal names a member (one came up): only then is it said.
        self.final_named = False

    def start(self, members: Callable[[], Iterable[LaunchedMember]]) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self.every(members), name="murmur-seals")

    async def every(self, members: Callable[[], Iterable[LaunchedMember]]) -> None:
        while True:
            await asyncio.sleep(SEAL_INTERVAL)
            self._written(await asyncio.to_thread(self._seal, list(members()), False))

    async def final(self, members: Iterable[LaunchedMember]) -> None:
        """The last seal, after every member stopped (the periodic task ends first)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        seal = await asyncio.to_thread(self._seal, list(members), True)
        self._written(seal)
        if seal is not None:
            self.final_head = seal_head(seal)
            self.final_seq = int(seal["seq"])
            self.final_named = bool(seal["members"])

    def _written(self, seal: dict[str, Any] | None) -> None:
        # On the event loop, never in the sealing thread: the running record is
        # rewritten from here alone, so two writers never race over it.
        if seal is not None:
            self._on_seal(seal_head(seal))

    def _seal(self, members: list[LaunchedMember], final: bool) -> dict[str, Any] | None:
        with self._sealing:
            if self._closed:
                return None
            seal = self._seal_now(members, final)
            self._closed = final
            return seal

    def _seal_now(self, members: list[LaunchedMember],
                  final: bool) -> dict[str, Any] | None:
        for member in members:
            if member.ready is not None:
                self._sealer.watch(member.name, member.ready.records_dir / "trace.jsonl",
                                   member.ready.session_id)
        try:
            return self._sealer.seal(final=final, at=timestamp())
        except OSError as exc:
            if not self._failed:
                self._failed = True
                self._say(f"[mur run] warning: the formation's record could not be sealed "
                          f"({exc.strerror or exc}); mur audit will report it incomplete")
            return None


def sealed_line(seals: FormationSeals, *, json_mode: bool) -> str | None:
    """The launcher's last line on stderr, naming the final seal's head (docs/audit.md):
    ``[mur run] sealed: head <12 hex digits> …``, or with ``--json`` one object
    ``{"event": "sealed", "formation_id", "head", "seals"}`` shaped like the formation
    line, the same short head in it. None when no final seal was written, or it names no
    member (no member came up: the launch's refusal stays its last word)."""
    head = seals.final_head
    if head is None or not seals.final_named:
        return None
    short = head[:SHORT_HEAD]
    if json_mode:
        return json.dumps({"event": "sealed", "formation_id": seals.formation_id,
                           "head": short, "seals": seals.final_seq})
    return (f"[mur run] sealed: head {short} ({seals.final_seq} "
            f"seal{'s' * (seals.final_seq != 1)}); check the record with `mur audit "
            f"{seals.formation_id} --expect {short}`")
