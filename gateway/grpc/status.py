"""Errors on the gRPC binding: a gRPC status with a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer (A2A 1.0 section 10.6), as a2a-sdk's client reads it.

Two kinds, each from its one table:

* an A2A error (:class:`gateway.a2a.jsonrpc.RpcError`), the door's own or an upstream's
  passed through: the status named in its row of :data:`gateway.a2a.jsonrpc.ERROR_TABLE`
  (the same ``google.rpc.Code`` the HTTP+JSON binding sends), its message, and the
  details the HTTP+JSON binding sends (:meth:`gateway.a2a.jsonrpc.RpcError.wire_error`):
  always an ErrorInfo first (domain ``a2a-protocol.org`` for A2A's rows), the row's
  where the error carries none (an A2A 0.3 upstream's), so a client maps every error
  to its type by the ErrorInfo's reason;
* a refusal of DoorAuth (:class:`gateway.auth.refusals.Refused`): ``401`` is
  ``UNAUTHENTICATED``, ``403`` ``PERMISSION_DENIED``, ``429`` ``RESOURCE_EXHAUSTED`` (with
  a RetryInfo), the message of its row of :data:`gateway.auth.refusals.REFUSALS`, and an
  ErrorInfo whose reason is the refusal's code in capitals (``INSUFFICIENT_SCOPE``), in
  the door's own domain (and a call that reached a method undecided, which a server
  built without the interceptor would let through, :func:`undecided_status`, the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from gateway.a2a.jsonrpc import ERROR_INFO_TYPE, MURMUR_DOMAIN, RETRY_INFO_TYPE, RpcError
from gateway.auth.refusals import REFUSALS, Refused
from gateway.grpc.messages import POOL, message_class

__all__ = ["GrpcStatus", "refusal_status", "rpc_error_status", "undecided_status"]

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
    """An A2A error as its gRPC status (see the module text): the row, message and
    details the HTTP+JSON binding sends (:meth:`RpcError.wire_error`; an upstream's
    error by its code, its ErrorInfo its own or its row's)."""
    spec, message, details = error.wire_error()
    return _status(grpc.StatusCode[spec.status], message, details)


def undecided_status() -> GrpcStatus:
    """The status of a call that reached a method without DoorAuth's decision (a server
    built without the interceptor): ``UNAUTHENTICATED`` with the ErrorInfo
    ``UNAUTHENTICATED`` of the door's domain, as every gRPC error carries one."""
    return _status(grpc.StatusCode.UNAUTHENTICATED,
                   "This door decides every call before it serves it.",
                   [{"@type": ERROR_INFO_TYPE, "reason": "UNAUTHENTICATED",
                     "domain": MURMUR_DOMAIN, "metadata": {}}])


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
        # A detail of a type the pool does not hold (or an upstream's malformed one): the
        # ErrorInfo alone, first and well formed (gateway.a2a.jsonrpc.wire_details),
        # still says why.
        status = _STATUS()
        json_format.ParseDict({"code": number, "message": message, "details": details[:1]},
                              status, descriptor_pool=POOL)
    return GrpcStatus(code, message, ((STATUS_DETAILS_KEY, status.SerializeToString()),))

