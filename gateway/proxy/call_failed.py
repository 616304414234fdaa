"""How a call to a member fails: :class:`CallFailed` and the words for its states.

In order: the states a CallFailed has that are not A2A task states; :class:`CallFailed`
itself. Its own module because both halves of the call-member client raise it: the
JSON-RPC under a call (``member_rpc``) and the call itself (``call_member``).
"""

from __future__ import annotations

from typing import Final

from gateway.errors import GatewayError

#: States of a CallFailed that are not A2A task states.
REFUSED: Final = "refused"
DEADLINE: Final = "deadline"
TRANSPORT_ERROR: Final = "transport error"
CALLER_ENDED: Final = "canceled by the caller"
ERROR: Final = "error"


class CallFailed(GatewayError):
    """A call to a member did not produce an answer. ``state`` is the callee's task state
    (``TASK_STATE_FAILED``, ``..._CANCELED``, ``..._REJECTED``, ``..._INPUT_REQUIRED``...)
    or one of ``refused``, ``deadline``, ``transport error``, ``canceled by the caller``,
    ``error``; ``detail`` is the callee's own message or the reason."""

    def __init__(self, member: str, state: str, detail: str = "") -> None:
        self.member = member
        self.state = state
        self.detail = detail
        text = f"call to member {member!r} failed: {state}"
        super().__init__(f"{text}: {detail}" if detail else text)
