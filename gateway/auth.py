"""DoorAuth: STUB written by the lead so other modules can import the names.
The auth helper replaces this whole file, keeping ``AuthPolicy`` and ``DoorAuth``'s
signatures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Scope = dict[str, Any]


@dataclass(frozen=True)
class AuthPolicy:
    """What a door accepts. ``authenticated=False`` is a public door that checks nothing."""

    authenticated: bool = False
    operator: Any = None          # gateway.credentials.OperatorToken | None
    bearers: tuple[Any, ...] = ()      # gateway.credentials.DeclaredBearer
    jwt_issuers: tuple[Any, ...] = ()  # gateway.credentials.JwtIssuer
    verifier: Any = None          # gateway.tokens.FormationVerifier | None (None: no formation)
    member: str | None = None     # this door's roster name in its formation
    accept_peer_tasks: bool = False
    max_body: int = 1 << 20


class DoorAuth:
    def __init__(self, app: Any, policy: AuthPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
