"""How the door speaks to a gateway member's upstream that serves only A2A 0.3 over
JSON-RPC (strands-agents, crewai, google-adk on a2a-sdk 0.3): the
:class:`gateway.relay.client.UpstreamFraming` for 0.3. The relay forwards the same 1.0
methods as to any upstream; this writes each in 0.3 and reads each answer back in 1.0
(the mapping: :mod:`gateway.a2a.v03`, docs/a2a-0.3.md):

* a request: ``POST`` to the card's ``url`` with the 0.3 method name and params, the
  door's own request ids and ``A2A-Version: 0.3``;
* an answer or each SSE event: a JSON-RPC response (as from a 1.0 upstream) whose
  ``result`` is converted to 1.0; the upstream's own JSON-RPC error passes through (the
  error codes are the same in both versions); a result the door cannot read as 0.3 is
  the door's ``-32603`` naming the member.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final

from gateway.a2a.jsonrpc import dumps
from gateway.a2a.v03 import V03_METHODS, V03AnswerError, params_to_v03, result_from_v03
from gateway.relay.client import jsonrpc_result, not_answered

#: The ``A2A-Version`` a 0.3 upstream is sent.
V03_VERSION: Final = "0.3"


class V03Framing:
    """A2A 0.3 over JSON-RPC to the interface URL ``url``."""

    version = V03_VERSION

    def __init__(self, url: str) -> None:
        self.url = url
        self._ids = itertools.count(1)

    def request(self, method: str, params: Mapping[str, Any]) -> tuple[str, str, bytes | None]:
        body = dumps({"jsonrpc": "2.0", "id": next(self._ids), "method": V03_METHODS[method],
                      "params": params_to_v03(method, params)})
        return "POST", self.url, body

    def answer(self, status: int, body: bytes, member: str, method: str) -> Any:
        if status != 200:
            raise not_answered(member, f"answered HTTP {status}")
        return self.event(body, member, method)

    def event(self, data: bytes, member: str, method: str) -> Any:
        result = jsonrpc_result(data, member)
        try:
            return result_from_v03(method, result)
        except V03AnswerError as exc:
            raise not_answered(member, f"{exc} (read as A2A 0.3)") from None
