"""Errors on the gRPC binding: a gRPC status with a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer (A2A 1.0 section 10.6), as a2a-sdk's client reads it.

Two kinds, each from its one table:

* an A2A error (:class:`gateway.a2a.jsonrpc.RpcError`): the status named in its row of
  :data:`gateway.a2a.jsonrpc.ERROR_TABLE` (the same ``google.rpc.Code`` the HTTP+JSON
  binding sends), its message, and the same details as the JSON-RPC ``data``: the
  ErrorInfo (domain ``a2a-protocol.org``) first;
* a refusal of DoorAuth (:class:`gateway.auth.refusals.Refused`): ``401`` is
  ``UNAUTHENTICATED``, ``403`` ``PERMISSION_DENIED``, ``429`` ``RESOURCE_EXHAUSTED`` (with
  a RetryInfo), the message of its row of :data:`gateway.auth.refusals.REFUSALS`, and an
  ErrorInfo whose reason is the refusal's code in capitals (``INSUFFICIENT_SCOPE``), in
  the door's own domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from gateway.a2a.jsonrpc import ERROR_INFO_TYPE, MURMUR_DOMAIN, RETRY_INFO_TYPE, RpcError
from gateway.auth.refusals import REFUSALS, Refused
from gateway.grpc.messages import POOL, message_class

__all__ = ["GrpcStatus", "refusal_status", "rpc_error_status"]

STATUS_DETAILS_KEY = "grpc-status-details-bin"
_STATUS = message_class("google.rpc.Status")
#: DoorAuth's HTTP statuses as gRPC codes.
_REFUSAL_CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED,
                  429: grpc.StatusCode.RESOURCE_EXHAUSTED}


@dataclass(frozen=True, slots=True)
class GrpcStatus:
    """What ``context.abort`` takes: the code, the message and the trailer."""

    code: grpc.StatusCode
    message: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


def rpc_error_status(error: RpcError) -> GrpcStatus:
    """An A2A error as its gRPC status (see the module text)."""
    document = error.error_object()
    code = grpc.StatusCode[error.wire_spec(document).status]   # an upstream's by its code
    details = [detail for detail in document.get("data") or ()
               if isinstance(detail, dict) and "@type" in detail]
    return _status(code, str(document["message"]), details)


def refusal_status(refused: Refused) -> GrpcStatus:
    """A refusal of DoorAuth as its gRPC status (see the module text)."""
    refusal = REFUSALS[refused.code]
    message = refusal.message.format_map(refused.fields) if refused.fields else refusal.message
    details: list[dict[str, Any]] = [{
        "@type": ERROR_INFO_TYPE, "reason": refused.code.upper(), "domain": MURMUR_DOMAIN,
        "metadata": {key: str(value) for key, value in refused.fields.items()}}]
    if refused.retry_after is not None:
        details.append({"@type": RETRY_INFO_TYPE,
                        "retryDelay": f"{max(refused.retry_after, 0.0):.3f}s"})
    return _status(_REFUSAL_CODES.get(refusal.status, grpc.StatusCode.INVALID_ARGUMENT),
                   message, details)


def _status(code: grpc.StatusCode, message: str, details: list[dict[str, Any]]) -> GrpcStatus:
    status = _STATUS()
    number = code.value[0]
    try:
        json_format.ParseDict({"code": number, "message": message, "details": details},
                              status, descriptor_pool=POOL)
    except json_format.ParseError:
        # A detail of a type the pool does not hold: the ErrorInfo alone still says why.
        status = _STATUS()
        json_format.ParseDict({"code": number, "message": message, "details": details[:1]},
                              status, descriptor_pool=POOL)
    return GrpcStatus(code, message, ((STATUS_DETAILS_KEY, status.SerializeToString()),))

