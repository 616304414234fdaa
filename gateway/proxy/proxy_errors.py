"""The formation proxy's refusals and failures: the ``ProxyError`` branch of the tree.

In order: :class:`ProxyError`, their root (a ``GatewayError`` and an
``httpx.TransportError``, so an httpx caller sees a transport failure);
:class:`FormationRefused`, a virtual address this member may not use;
:class:`EgressRefused`, a real URL outside ``capabilities.network.allow``;
:class:`CallLimitReached`, a member call past the member's ``limits.calls``;
:class:`DoorUnavailable`, a callee's door address that did not arrive in time;
:class:`ModelBoundReached`, a request to a model member's endpoint that its egress
refuses (no key to attach, or a count past its bound: ``gateway.proxy.inference``).

They live apart from ``FormationTransport`` because the check of URL text
(``virtual_names``), the client components use (``formation_client``), the forward proxy
and call-member raise or catch them too. A refusal's text names a member, or a host the
component wrote itself, never a token or a door address the runtime holds.
"""

from __future__ import annotations

from typing import Final

import httpx

from gateway.errors import GatewayError


class ProxyError(GatewayError, httpx.TransportError):
    """The formation proxy refused a request or could not reach its callee."""


class FormationRefused(ProxyError):
    """A virtual address this member may not use. One class and one message for every
    case (not a callee, no such member, itself, a host trick), so a refusal tells a
    component nothing about which members exist."""

    MESSAGE: Final = (
        "refused by the formation proxy: the address is not "
        "http://<member>.formation.invalid for a member this member may call"
    )

    def __init__(self, request: httpx.Request | None = None) -> None:
        super().__init__(self.MESSAGE, request=request)


class EgressRefused(ProxyError):
    """The real URL is outside the sending component's ``capabilities.network.allow``.
    Its text says why, without a "refused" of its own: the class says it, and a failed
    member call already reads ``... failed: refused: <this text>``."""


class CallLimitReached(ProxyError):
    """This member has made every member call its ``limits.calls`` allows (a version 2
    roster, docs/bounds.md); no connection was opened for this one."""

    def __init__(self, limit: int, request: httpx.Request | None = None) -> None:
        super().__init__(f"this member has made its {limit} member calls (its limits.calls "
                         "in roster.yaml)", request=request)
        self.limit = limit


class DoorUnavailable(ProxyError):
    """A callee's door URL did not arrive on the channel in time."""


class ModelBoundReached(ProxyError):
    """A request to a model member's endpoint the egress refused before sending it:
    ``code`` is the ``E-RUN`` diagnostic the member's driver fails the task with,
    ``key`` the manifest or roster key it names, ``fields`` its values (counts, a
    variable's name: never the key)."""

    def __init__(self, code: str, key: str, message: str, **fields: object) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.key = key
        self.fields = fields
