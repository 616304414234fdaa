"""The launcher seals its formation's traces (docs/audit.md, "The sealed record").

:class:`FormationSeals` holds the formation's :class:`launcher.home.seals.Sealer`, signing
with the formation key: :meth:`FormationSeals.start` runs :meth:`every` as a task, which
seals every ready member's trace each :data:`SEAL_INTERVAL` seconds (when one grew);
:meth:`FormationSeals.final` seals once more after every member stopped, before the key
is dropped. A seal that cannot be written is said once and the formation goes on: its
record is then reported unsealed, never as tampered. A formation of one member has no
formation directory and so no seals.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from launcher.home.formations import formation_dir
from launcher.home.seals import SEAL_INTERVAL, SEALS_FILE, Sealer
from launcher.home.trace import timestamp

if TYPE_CHECKING:
    from gateway.auth.tokens import FormationKey
    from launcher.formation.members import LaunchedMember

__all__ = ["FormationSeals"]


class FormationSeals:
    def __init__(self, formation_id: str, key: FormationKey,
                 say: Callable[[str], None]) -> None:
        self._sealer = Sealer(formation_id, formation_dir(formation_id) / SEALS_FILE,
                              key.sign)
        self._say = say
        self._task: asyncio.Task[None] | None = None
        self._failed = False

    def start(self, members: Callable[[], Iterable[LaunchedMember]]) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self.every(members), name="murmur-seals")

    async def every(self, members: Callable[[], Iterable[LaunchedMember]]) -> None:
        while True:
            await asyncio.sleep(SEAL_INTERVAL)
            await asyncio.to_thread(self._seal, list(members()), False)

    async def final(self, members: Iterable[LaunchedMember]) -> None:
        """The last seal, after every member stopped (the periodic task ends first)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.to_thread(self._seal, list(members), True)

    def _seal(self, members: list[LaunchedMember], final: bool) -> None:
        for member in members:
            if member.ready is not None:
                self._sealer.watch(member.name, member.ready.records_dir / "trace.jsonl",
                                   member.ready.session_id)
        try:
            self._sealer.seal(final=final, at=timestamp())
        except OSError as exc:
            if not self._failed:
                self._failed = True
                self._say(f"[mur run] warning: the formation's record could not be sealed "
                          f"({exc.strerror or exc}); mur audit will report it unsealed")
