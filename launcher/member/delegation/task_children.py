"""One task's calls and children together: what ``task.delegate`` and ``task.answers()``
read, so the turn rule waits for children as it waits for calls.

:class:`TaskChildren` stands where a task's calls object stands (``MemberCallsLike``):
``call_member`` and ``http`` are its calls' (None: a member that may call nobody);
``delegate`` starts a child through the session's :class:`Delegator`; ``calls`` and
``unanswered`` hold both kinds in the order made; ``answers`` fences each answer under
``member:<name>`` or ``child:<capsule-name>``. When the task ends, every child that has
not answered is canceled (``CancelTask`` on its door): nobody else can read a child's
answer (docs/delegation.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from gateway.door.tasks import TaskRun
from gateway.proxy.call_member import fence
from launcher.member.delegation.child import Child
from launcher.member.delegation.delegator import Delegator


class TaskChildren:
    """The calls object of a task whose member may delegate."""

    def __init__(self, run: TaskRun, delegator: Delegator, calls: Any | None) -> None:
        self._run = run
        self._delegator = delegator
        self._calls = calls
        self._made: list[Any] = []
        self.peers: tuple[str, ...] = calls.peers if calls is not None else ()
        self.spawn: tuple[str, ...] = delegator.capsules

    def __repr__(self) -> str:
        return f"TaskChildren(spawn={self.spawn!r}, made={len(self._made)})"

    @property
    def http(self) -> Any:
        if self._calls is None:
            raise AttributeError("http")
        return self._calls.http

    @property
    def calls(self) -> tuple[Any, ...]:
        """Every call and child so far, in the order made."""
        return tuple(self._made)

    def unanswered(self) -> list[Any]:
        return [handle for handle in self._made if not handle.done()]

    async def call_member(self, name: str, text: str) -> Any:
        if self._calls is None:
            raise RuntimeError("this member may call no other member")
        handle = await self._calls.call_member(name, text)
        self._made.append(handle)
        return handle

    async def delegate(self, capsule: str, text: str, version: str | None = None) -> Child:
        child = await self._delegator.delegate(self._run, str(capsule), str(text),
                                               None if version is None else str(version))
        self._made.append(child)
        return child

    async def answers(self, handles: Iterable[Any] | None = None) -> str:
        chosen = list(self._made if handles is None else handles)
        outcomes = await asyncio.gather(*(handle.outcome() for handle in chosen))
        return "\n\n".join(fence(_label(handle), text)
                           for handle, text in zip(chosen, outcomes, strict=True))

    async def cancel_outstanding(self) -> None:
        children = [made for made in self._made if isinstance(made, Child) and not made.done()]
        await asyncio.gather(*(child.cancel() for child in children))
        if self._calls is not None:
            await self._calls.cancel_outstanding()

    async def aclose(self) -> None:
        await self.cancel_outstanding()
        if self._calls is not None:
            await self._calls.aclose()


def _label(handle: Any) -> str:
    return handle.member if isinstance(handle, Child) else f"member:{handle.member}"
