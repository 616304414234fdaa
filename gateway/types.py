"""The ASGI type aliases every pure-ASGI piece of the gateway uses (as starlette's
``types.py``): one definition, so ``DoorAuth``, the routes and the helpers agree."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: Raw ASGI headers: ``(name, value)`` byte pairs, names lower case.
Headers = list[tuple[bytes, bytes]]
