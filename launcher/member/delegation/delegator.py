"""A session's children: who may be started, how many at once, how deep, and their end.

One :class:`Delegator` per session whose ``capabilities.spawn.allow`` names a capsule. In
order: :meth:`Delegator.delegate` checks the grant (the version to run), the depth and
``max_children``, in that order, then starts the child and returns it once the child's
door holds the task; its runner streams the child's status messages into the parent's
task, and writes the
parent's ``delegation`` record when the child ends (the child's own trace names its
parent on ``session_start``). :meth:`Delegator.end` closes every spawner lifeline when
the session ends, so no child outlives its parent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.door.tasks import TaskRun
from gateway.proxy.call_failed import CALLER_ENDED, ERROR, CallFailed
from gateway.trace.bus import TraceBus
from launcher.member.delegation.child import Child, task_file_path
from launcher.member.delegation.grant import SpawnGrant
from launcher.member.delegation.lineage import Lineage
from launcher.member.delegation.refused import DelegationRefused

#: How long the session's end waits for its children's records.
END_SECONDS: Final = 5.0


@dataclass(frozen=True)
class DelegatorPlace:
    """Where this session's children start from, and what they inherit."""

    session_id: str
    delegated_by: str          # this member's roster name, else its capsule
    project: Path
    workdir: Path
    records_dir: Path
    formation_id: str | None
    deadline: str | None       # the session's --deadline, handed down as is
    environ: Mapping[str, str]


class Delegator:
    """The children of one session."""

    def __init__(self, *, grant: SpawnGrant, max_children: int, max_depth: int,
                 lineage: Lineage, place: DelegatorPlace, trace: TraceBus) -> None:
        self.grant = grant
        self._max_children = max_children
        self._max_depth = max_depth
        self._lineage = lineage
        self._place = place
        self._trace = trace
        self._live: dict[Child, asyncio.Task[None]] = {}
        self._ending = False

    @property
    def capsules(self) -> tuple[str, ...]:
        return self.grant.capsules

    @property
    def live(self) -> int:
        return len(self._live)

    async def delegate(self, run: TaskRun, capsule: str, text: str,
                       version: str | None = None) -> Child:
        """Start a child of ``capsule`` on ``text``; the child once its door holds the
        task. Raises :class:`DelegationRefused` naming the case."""
        place = self._place
        if self._ending:
            raise DelegationRefused(capsule, "session_ending", "this session is ending")
        chosen = self.grant.version_for(place.project, capsule, version)
        bound = self._lineage.bound(self._max_depth)
        if self._lineage.depth + 1 > bound:
            raise DelegationRefused(capsule, "max_depth", f"this session is at depth "
                                    f"{self._lineage.depth}; a child would be at "
                                    f"{self._lineage.depth + 1}, past max_depth {bound}")
        if len(self._live) >= self._max_children:
            raise DelegationRefused(capsule, "max_children", f"{len(self._live)} children "
                                    f"are alive, capabilities.spawn.max_children is "
                                    f"{self._max_children}; await one first")
        child = Child(capsule, chosen, delegated_by=place.delegated_by)
        runner = asyncio.create_task(self._run(run, child, text),
                                     name=f"delegation {capsule}")
        self._live[child] = runner
        await _held_or_refused(child, runner)
        return child

    async def _run(self, run: TaskRun, child: Child, text: str) -> None:
        place = self._place
        try:
            child.start(project=place.project, workdir=place.workdir,
                        task_file=task_file_path(place.records_dir), text=text,
                        environ=place.environ, formation_id=place.formation_id,
                        deadline=place.deadline,
                        lineage=self._lineage.for_child(
                            session_id=place.session_id, delegated_by=place.delegated_by,
                            own_max_depth=self._max_depth))
            await child.ready()
            await child.run(_status_sink(run, child))
        except DelegationRefused as refused:
            child.refuse(refused)
        except asyncio.CancelledError:
            child.fail(CallFailed(child.member, CALLER_ENDED, "the session ended"))
            raise
        except Exception as exc:  # noqa: BLE001 - the child's answer says it
            child.fail(CallFailed(child.member, ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            child.release()
            self._live.pop(child, None)
            self._record(run, child)

    def _record(self, run: TaskRun, child: Child) -> None:
        fields: dict[str, Any] = {"task_id": run.id, "capsule": child.capsule,
                                  "version": child.version, "outcome": child.outcome_word}
        if child.session_id is not None:
            fields["child_session"] = child.session_id
        if child.task_id is not None:
            fields["child_task_id"] = child.task_id
        if child.exit_status is not None:
            fields["exit_status"] = child.exit_status
        self._trace.emit("delegation", **fields)

    async def end(self) -> None:
        """The session ends: every child's spawner lifeline closes (it winds down), and
        their records are waited for a little. Idempotent."""
        self._ending = True
        for child in list(self._live):
            child.release()
        runners = list(self._live.values())
        if runners:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*runners, return_exceptions=True),
                                       END_SECONDS)
        for runner in runners:
            runner.cancel()


async def _held_or_refused(child: Child, runner: asyncio.Task[None]) -> None:
    """Wait until the child's door holds the task, or raise why it never will."""
    held = asyncio.ensure_future(child.held.wait())
    try:
        await asyncio.wait({runner, held}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        held.cancel()
    if child.refusal is not None:
        raise child.refusal
    if child.state == "starting":
        raise DelegationRefused(child.capsule, "not_started", "the session is ending")


def _status_sink(run: TaskRun, child: Child) -> Any:
    async def status(text: str) -> None:
        with contextlib.suppress(Exception):   # the parent's task may have ended
            await run.status(f"{child.member}: {text}")
    return status
