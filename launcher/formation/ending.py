"""Step 7 of ``mur run --roster``: how a formation ends, and the launcher's exit status
(docs/launcher.md).

In order: the ways a launch ends (:class:`FormationEnd`) and the exit status each gives;
ending the members (every lifeline closed, never a SIGTERM; each member waited for; the
group of any member still running :data:`KILL_AFTER` seconds after its lifeline closed
killed; their last output let trickle out for :data:`OUTPUT_GRACE`); then the retention
pass the entry member's capsule asks for. ``launch.py`` drops the key and removes the
running record around these.
"""

from __future__ import annotations

import asyncio
import enum
import signal
from collections.abc import Collection
from datetime import timedelta

from launcher.admission.roster import AdmittedRoster
from launcher.formation.members import LaunchedMember, close_quietly
from launcher.formation.printing import say
from launcher.home.retention import format_removal, retention_pass

#: A member still running this long after its lifeline closed is killed (its group).
KILL_AFTER = 25.0
#: How long output still trickling from an ended member is waited for.
OUTPUT_GRACE = 2.0


class FormationEnd(enum.Enum):
    REFUSED = "refused"                  # E-RUN-045 printed; nothing left running
    DEADLINE_BEFORE_ENTRY = "deadline"   # E-RUN-053 printed
    SIGNALLED = "signalled"
    ENTRY_ENDED = "entry_ended"
    ENTRY_NOT_READY = "entry_not_ready"  # E-RUN-045 printed for the entry member
    DEADLINE_RUNNING = "deadline_running"


def exit_status(code: int) -> int:
    """A child's ``returncode`` as a shell reports it (a signal ``n`` is ``128 + n``)."""
    return 128 - code if code < 0 else code


def exit_code(outcome: FormationEnd, entry: LaunchedMember | None, *,
              signalled: int | None, task: str | None) -> int:
    """The launcher's exit status: the entry member's, or what ended the launch."""
    code = entry.process.returncode if entry is not None else None
    status = None if code is None else exit_status(code)
    if outcome is FormationEnd.ENTRY_ENDED and status is not None:
        return status
    if outcome is FormationEnd.SIGNALLED:
        by_signal = 128 + (signalled or signal.SIGTERM)
        if status is None or (task is not None and status == 0):
            return by_signal  # a --task that was interrupted did not succeed
        return status
    if outcome in (FormationEnd.ENTRY_NOT_READY, FormationEnd.DEADLINE_RUNNING):
        return status if status else 1
    return 1


async def end_members(members: Collection[LaunchedMember], hurry: asyncio.Event) -> None:
    """Close every lifeline, wait for every member, kill what outlives the grace (at
    once when ``hurry`` is set: a second signal)."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    for member in members:
        member.close_lifeline(now)
        member.close_channel()
    await asyncio.gather(*(_reap(member, hurry) for member in members))
    helpers = [task for member in members for task in member.helpers
               if isinstance(task, asyncio.Task)]
    if helpers:
        _, late = await asyncio.wait(helpers, timeout=OUTPUT_GRACE)
        for task in late:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    for member in members:
        close_quietly(member)


async def _reap(member: LaunchedMember, hurry: asyncio.Event) -> None:
    if member.process.returncode is not None:
        return
    loop = asyncio.get_running_loop()
    closed_at = member.lifeline_closed_at or loop.time()
    ended = asyncio.create_task(member.process.wait_async())
    hurried = asyncio.create_task(hurry.wait())
    try:
        await asyncio.wait({ended, hurried}, timeout=max(0.0, closed_at + KILL_AFTER
                                                         - loop.time()),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        hurried.cancel()
    if not ended.done():
        member.process.kill_group()
        say(f"[mur run] member `{member.name}` was still running "
            f"{KILL_AFTER:g} seconds after its lifeline closed; killed it")
    await ended


def run_retention(admitted: AdmittedRoster, formation_id: str) -> None:
    """The entry member's ``trace.retain`` applied to the project's formation
    directories; each removal said on stderr."""
    retain = admitted.entry.manifest.trace.retain
    if retain.max_sessions is None and retain.max_age is None:
        return
    try:
        removals = retention_pass(
            project_dir=admitted.project_dir,
            current_formation_id=formation_id,
            max_sessions=retain.max_sessions,
            max_age=None if retain.max_age is None else timedelta(seconds=retain.max_age))
    except OSError as exc:
        say(f"[mur run] warning: the retention pass failed ({exc.strerror or exc})")
        return
    for removal in removals:
        say(format_removal(removal))
