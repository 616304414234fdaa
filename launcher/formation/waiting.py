"""Step 4 of ``mur run --roster``: waiting for every peer's door (docs/launcher.md,
"Readiness"; the readiness line and the door probe are ``ready.py``'s).

In order: how long a member may take (:class:`ReadyBounds`: the readiness bound from
its own start, never past ``--deadline``), one peer's readiness (its readiness line,
then its door answering), then every peer at once, until all are ready, one of them
fails, the deadline falls or a signal stops the launch (saying which are not ready yet
while it takes long: launcher/formation/progress.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass

from launcher.formation.ending import FormationEnd
from launcher.formation.members import LaunchedMember
from launcher.formation.printing import say
from launcher.formation.progress import note_while_waiting
from launcher.formation.ready import (
    DeadlineFell,
    DoorProbe,
    NotReady,
    new_probe_client,
    read_ready_line,
    wait_for_door,
)
from launcher.spawn.process import drain


@dataclass(slots=True)
class ReadyBounds:
    """How long a member has to become ready: ``ready_seconds`` from its start, and never
    past ``deadline_at`` (the deadline on the event loop's clock, once the launch runs)."""

    ready_seconds: float
    deadline_at: float | None = None

    def limit(self, started_at: float) -> tuple[float, bool]:
        """(until, bound by the deadline) for a member started at ``started_at``."""
        until = started_at + self.ready_seconds
        if self.deadline_at is not None and self.deadline_at <= until:
            return self.deadline_at, True
        return until, False

    def deadline_passed(self) -> bool:
        return (self.deadline_at is not None
                and asyncio.get_running_loop().time() >= self.deadline_at)


async def peer_ready(member: LaunchedMember, client: DoorProbe, *,
                     formation_id: str, bounds: ReadyBounds) -> None:
    """Wait for ``member``'s readiness line, then for its door; :class:`NotReady` (or
    :class:`DeadlineFell`) when it does not come up."""
    until, by_deadline = bounds.limit(member.started_at)
    reader = await member.process.stdout_reader()
    try:
        ready = await read_ready_line(
            member.process, reader, member=member.name, formation_id=formation_id,
            until=until, deadline_bound=by_deadline, limit_seconds=bounds.ready_seconds)
        member.ready = ready
        member.helpers.append(asyncio.create_task(drain(reader)))
        # The card it answered with is kept: the launcher signs it (docs/audit.md).
        member.card = await wait_for_door(client, member.process, ready, until=until,
                                          deadline_bound=by_deadline)
    except (NotReady, DeadlineFell, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 - any other fault is this member's failure
        raise NotReady(member.name, f"its readiness could not be checked "
                                    f"({type(exc).__name__})") from None


async def await_peers(peers: Collection[LaunchedMember], stop: asyncio.Event,
                      failures: list[NotReady], *, formation_id: str,
                      bounds: ReadyBounds) -> FormationEnd | None:
    """Wait for every peer's door; None when all are ready. Failures are appended.

    ``SIGNALLED`` when ``stop`` is set first; ``DEADLINE_BEFORE_ENTRY`` when the deadline
    fell and no peer failed (the caller says so: ``E-RUN-053``)."""
    client = new_probe_client()
    waits = {asyncio.create_task(peer_ready(member, client, formation_id=formation_id,
                                            bounds=bounds)): member
             for member in peers}
    stopper = asyncio.create_task(stop.wait())
    deadline_fell = False
    pending = set(waits)
    noting = asyncio.create_task(note_while_waiting(
        lambda: [waits[task].name for task in waits if task in pending], say))
    try:
        while pending:
            done, _ = await asyncio.wait(pending | {stopper},
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopper in done:
                return FormationEnd.SIGNALLED
            pending -= done
            for task in done:
                error = task.exception()
                if isinstance(error, DeadlineFell):
                    deadline_fell = True
                elif isinstance(error, NotReady):
                    failures.append(error)
            if failures or deadline_fell:
                break
    finally:
        stopper.cancel()
        noting.cancel()
        for task in waits:
            task.cancel()
        await asyncio.gather(stopper, noting, *waits, return_exceptions=True)
        await client.aclose()
    if deadline_fell and not failures:
        return FormationEnd.DEADLINE_BEFORE_ENTRY
    return None
