"""How the door speaks to a gateway member's upstream that serves only the HTTP+JSON
binding: the :class:`gateway.relay.client.UpstreamFraming` for REST. The relay forwards the
same methods either way; this writes each as its verb and path (A2A 1.0 section 11.3)
and reads the answers back into what the relay expects of a JSON-RPC upstream:

* a ``200`` body is the method's result; each SSE event's ``data`` is a StreamResponse;
* a ``google.rpc.Status`` answer (or an ``event: error``) whose ErrorInfo reason is one
  of the error table's rows is the upstream's own error, raised as
  :class:`gateway.relay.client.UpstreamError` with that row's JSON-RPC code, so it passes
  through to the caller on either binding (a forgotten task is ``-32001`` to the relay);
* anything else is the door's ``-32603`` naming the member, never its address.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from gateway.a2a.jsonrpc import ERROR_BY_REASON, ERROR_INFO_TYPE, dumps
from gateway.protocol import A2A_VERSION
from gateway.relay.client import UpstreamError, not_answered, read_json

#: The methods the relay forwards, by verb and path (``{id}``: the task id).
_PATHS: dict[str, tuple[str, str]] = {
    "SendMessage": ("POST", "/message:send"),
    "SendStreamingMessage": ("POST", "/message:stream"),
    "GetTask": ("GET", "/tasks/{id}"),
    "CancelTask": ("POST", "/tasks/{id}:cancel"),
    "SubscribeToTask": ("POST", "/tasks/{id}:subscribe"),
}
#: Parameters a GET sends in its query.
_QUERY_PARAMS = ("historyLength",)


class RestFraming:
    """A2A 1.0 over HTTP+JSON to the interface URL ``url``."""

    version = A2A_VERSION

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def request(self, method: str, params: Mapping[str, Any]) -> tuple[str, str, bytes | None]:
        verb, path = _PATHS[method]
        if "{id}" in path:
            path = path.replace("{id}", quote(str(params.get("id", "")), safe=""))
        tenant = params.get("tenant")
        if isinstance(tenant, str) and tenant:
            path = "/" + quote(tenant, safe="") + path
        if verb == "GET":
            query = {key: params[key] for key in _QUERY_PARAMS if params.get(key) is not None}
            return verb, self.url + path + ("?" + urlencode(query) if query else ""), None
        return verb, self.url + path, dumps(dict(params))

    def answer(self, status: int, body: bytes, member: str, method: str) -> Any:
        value = read_json(body)
        if status == 200:
            if value is None:
                raise not_answered(member, "sent something that is not JSON")
            return value
        raise _status_error(value) or not_answered(member, f"answered HTTP {status}")

    def event(self, data: bytes, member: str, method: str) -> Any:
        value = read_json(data)
        if not isinstance(value, dict):
            raise not_answered(member, "sent an event that is not JSON")
        if "error" in value:
            raise _status_error(value) or not_answered(member, "ended its stream with an error")
        return value


def _status_error(value: Any) -> UpstreamError | None:
    """The upstream's own error, when ``value`` is a ``google.rpc.Status`` document whose
    ErrorInfo names a reason of the error table; else None."""
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return None
    details = error.get("details")
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == ERROR_INFO_TYPE:
            spec = ERROR_BY_REASON.get(str(detail.get("reason")))
            if spec is None:
                return None
            message = error.get("message")
            return UpstreamError({"code": spec.code,
                                  "message": message if isinstance(message, str) else spec.message,
                                  "data": details})
    return None
