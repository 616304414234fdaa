"""An answer that comes later: what a call handle and a delegated child share.

``await`` it for the answer text, or the :class:`CallFailed` that ended it; ``outcome()``
gives the failure as text instead (what ``answers()`` fences). The future is shielded, so
a caller that stops waiting does not cancel the work behind it, and a failure nobody
awaits is never reported as unretrieved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from gateway.proxy.call_failed import CallFailed


class PendingAnswer:
    """The answer of one call or child, settled once by its owner (``_answer``)."""

    def __init__(self) -> None:
        self._answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._answer.add_done_callback(_retrieve)

    def done(self) -> bool:
        return self._answer.done()

    def __await__(self) -> Generator[Any, None, str]:
        # Shielded: a caller that stops waiting does not cancel the call itself.
        return asyncio.shield(self._answer).__await__()

    async def outcome(self) -> str:
        """The answer, or the failure as text: what ``answers()`` fences."""
        try:
            return await self
        except CallFailed as failure:
            return str(failure)


def _retrieve(future: asyncio.Future[str]) -> None:
    if not future.cancelled():
        future.exception()
