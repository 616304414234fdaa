"""What the launcher says while it waits for members to come up: nothing for the first
:data:`FIRST_NOTE` seconds (a formation usually starts well within them), then one line
naming the members not ready yet and how long it has waited, again every
:data:`EVERY` seconds, so a slow import or a large model is never silence.

:func:`waiting_note` is the line; :func:`note_while_waiting` is a task the caller cancels
once the wait ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: Seconds of waiting before the first line, and between lines.
FIRST_NOTE = 3.0
EVERY = 5.0


def waiting_note(names: list[str], waited: float) -> str:
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"mur run: waiting for {shown} to come up ({waited:.0f} s so far)"


async def note_while_waiting(pending: Callable[[], list[str]],
                             say: Callable[[str], None]) -> None:
    """Say :func:`waiting_note` after :data:`FIRST_NOTE` seconds, then every
    :data:`EVERY`, while ``pending()`` names members; until cancelled."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.sleep(FIRST_NOTE)
    while True:
        names = pending()
        if names:
            say(waiting_note(names, loop.time() - started))
        await asyncio.sleep(EVERY)
