"""JSON-RPC 2.0 framing for the door, in this order: the one error table, request parsing,
response encoding and Server-Sent-Events framing.

Reading is strict JSON (RFC 8259): ``NaN``, ``Infinity`` and numbers too large for a float
are ``-32700``, as is a document nested deeper than the parser can follow, so nothing a
caller sends can come back out as something that is not JSON. Writing never fails on
what a caller sent: a string holding a lone UTF-16 surrogate (a valid ``\\ud800`` escape
in the request) is written with JSON escapes instead of raw UTF-8 (see :func:`dumps`),
and a Server-Sent Event never holds a character a client's line splitter breaks on.

Every A2A error the door answers comes from :data:`ERROR_TABLE` (code, standard message,
``google.rpc.ErrorInfo`` reason and domain, HTTP status), as A2A 1.0 section 9.5
describes: ``error.data`` is an array of ProtoJSON ``Any`` objects, the first an
``ErrorInfo``. JSON-RPC errors travel with HTTP 200; only the auth middleware answers
with 401/403. The HTTP+JSON binding (:mod:`gateway.door.rest_binding`) sends the same error as a
``google.rpc.Status`` with the table's HTTP status (:meth:`RpcError.status_object`), and
the gRPC binding (:mod:`gateway.grpc.status`) with the table's ``google.rpc.Code``; both
take the row, the message and the details from :meth:`RpcError.wire_error`, so an
upstream's error that carries only its code (A2A 0.3) gets its row's ErrorInfo on both.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from gateway.errors import GatewayError

A2A_DOMAIN = "a2a-protocol.org"
MURMUR_DOMAIN = "murmur.nexus"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"

RequestId = str | int | None


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """One row of the error table: the JSON-RPC ``code`` and standard ``message``, the
    ErrorInfo ``reason`` and ``domain``, and for the HTTP+JSON binding the HTTP status
    and the ``google.rpc.Code`` name it travels with (docs/bindings.md)."""

    code: int
    message: str
    reason: str
    http: int
    status: str
    domain: str = A2A_DOMAIN


#: The one table of every A2A error the door sends, on either binding: name -> JSON-RPC
#: code, message, ErrorInfo reason, HTTP status, google.rpc.Code. The HTTP statuses are
#: A2A v1.0.1's (section 5.4) wherever it names one: ``400`` for a task that cannot be
#: canceled and for a content type or version, ``500`` for an invalid agent response; a
#: busy member is ``503`` with ``Retry-After``, the transient refusal HTTP clients
#: already retry.
ERROR_TABLE: Mapping[str, ErrorSpec] = {
    "PARSE_ERROR": ErrorSpec(-32700, "Invalid JSON payload", "PARSE_ERROR",
                             400, "INVALID_ARGUMENT"),
    "INVALID_REQUEST": ErrorSpec(-32600, "Request payload validation error", "INVALID_REQUEST",
                                 400, "INVALID_ARGUMENT"),
    "METHOD_NOT_FOUND": ErrorSpec(-32601, "Method not found", "METHOD_NOT_FOUND",
                                  404, "NOT_FOUND"),
    "INVALID_PARAMS": ErrorSpec(-32602, "Invalid parameters", "INVALID_PARAMS",
                                400, "INVALID_ARGUMENT"),
    "INTERNAL_ERROR": ErrorSpec(-32603, "Internal error", "INTERNAL_ERROR", 500, "INTERNAL"),
    "TASK_NOT_FOUND": ErrorSpec(-32001, "Task not found", "TASK_NOT_FOUND", 404, "NOT_FOUND"),
    "TASK_NOT_CANCELABLE": ErrorSpec(-32002, "Task cannot be canceled", "TASK_NOT_CANCELABLE",
                                     400, "FAILED_PRECONDITION"),
    "PUSH_NOTIFICATION_NOT_SUPPORTED": ErrorSpec(
        -32003, "Push Notification is not supported", "PUSH_NOTIFICATION_NOT_SUPPORTED",
        400, "FAILED_PRECONDITION"),
    "UNSUPPORTED_OPERATION": ErrorSpec(
        -32004, "This operation is not supported", "UNSUPPORTED_OPERATION",
        400, "FAILED_PRECONDITION"),
    "CONTENT_TYPE_NOT_SUPPORTED": ErrorSpec(
        -32005, "Incompatible content types", "CONTENT_TYPE_NOT_SUPPORTED",
        400, "INVALID_ARGUMENT"),
    "INVALID_AGENT_RESPONSE": ErrorSpec(-32006, "Invalid agent response",
                                        "INVALID_AGENT_RESPONSE", 500, "INTERNAL"),
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED": ErrorSpec(
        -32007, "Extended agent card is not configured", "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        400, "FAILED_PRECONDITION"),
    "EXTENSION_SUPPORT_REQUIRED": ErrorSpec(
        -32008, "Extension support required", "EXTENSION_SUPPORT_REQUIRED",
        400, "FAILED_PRECONDITION"),
    "VERSION_NOT_SUPPORTED": ErrorSpec(-32009, "Version not supported", "VERSION_NOT_SUPPORTED",
                                       400, "FAILED_PRECONDITION"),
    "MEMBER_BUSY": ErrorSpec(-32050, "member busy", "MEMBER_BUSY", 503, "UNAVAILABLE",
                             MURMUR_DOMAIN),
    # The same code as a busy member (a caller waits and tries again), its own reason,
    # and 429: one caller holds too much (gateway/door/streams.py).
    "TOO_MANY_STREAMS": ErrorSpec(-32050, "too many streams", "TOO_MANY_STREAMS", 429,
                                  "RESOURCE_EXHAUSTED", MURMUR_DOMAIN),
}
#: The same rows by JSON-RPC code (an upstream's error carries only its code); where two
#: rows share a code, the first.
ERROR_BY_CODE: Mapping[int, ErrorSpec] = {
    spec.code: spec for spec in reversed(list(ERROR_TABLE.values()))}
#: The same rows by ErrorInfo reason (an HTTP+JSON upstream's error names its reason).
ERROR_BY_REASON: Mapping[str, ErrorSpec] = {spec.reason: spec for spec in ERROR_TABLE.values()}


class RpcError(GatewayError):
    """A JSON-RPC error answer, named by its row in :data:`ERROR_TABLE`.

    ``detail`` is appended to the table's message (``"Invalid parameters: <detail>"``);
    ``metadata`` becomes the ErrorInfo metadata (string values, as google.rpc.ErrorInfo
    defines it); ``extra`` are further typed detail objects.
    """

    def __init__(
        self,
        name: str,
        detail: str | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        extra: tuple[dict[str, Any], ...] = (),
    ) -> None:
        self.spec = ERROR_TABLE[name]
        self.name = name
        self.detail = detail
        self.metadata = dict(metadata or {})
        self.extra = extra
        super().__init__(self.message)

    @property
    def code(self) -> int:
        return self.spec.code

    @property
    def message(self) -> str:
        if self.detail:
            return f"{self.spec.message}: {self.detail}"
        return self.spec.message

    def error_object(self) -> dict[str, Any]:
        info = {
            "@type": ERROR_INFO_TYPE,
            "reason": self.spec.reason,
            "domain": self.spec.domain,
            "metadata": self.metadata,
        }
        return {"code": self.spec.code, "message": self.message, "data": [info, *self.extra]}

    def wire_spec(self, error: dict[str, Any] | None = None) -> ErrorSpec:
        """The row this error travels as: its own, or for an error passed on with
        another code (an upstream's), the row of that code. ``error``: the
        :meth:`error_object` already made, if any."""
        code = (error if error is not None else self.error_object())["code"]
        if code == self.spec.code:
            return self.spec
        return ERROR_BY_CODE.get(code, ERROR_TABLE["INTERNAL_ERROR"])

    def wire_error(self) -> tuple[ErrorSpec, str, list[dict[str, Any]]]:
        """This error as the HTTP+JSON and gRPC bindings send it: the row it travels as
        (:meth:`wire_spec`), its message, and its details (:func:`wire_details`: an
        ErrorInfo first, always). Both bindings read it here, so a caller gets the same
        reason and domain on either."""
        error = self.error_object()
        spec = self.wire_spec(error)
        return spec, str(error.get("message", "")), wire_details(error.get("data"), spec)

    def status_object(self) -> tuple[int, dict[str, Any]]:
        """This error in the HTTP+JSON binding: its HTTP status and the
        ``google.rpc.Status`` document (``code``, ``status``, ``message``, ``details``:
        :meth:`wire_error`'s)."""
        spec, message, details = self.wire_error()
        return spec.http, {"error": {"code": spec.http, "status": spec.status,
                                     "message": message, "details": details}}


def wire_details(data: Any, spec: ErrorSpec) -> list[dict[str, Any]]:
    """The ``details`` of an error whose JSON-RPC ``data`` is ``data`` and whose row is
    ``spec``, as the HTTP+JSON and gRPC bindings send them (a gRPC error MUST carry an
    ErrorInfo, A2A v1.0.1 section 10; the HTTP+JSON one gets the same).

    In this order: the typed objects of ``data`` (those with a ``@type``) are kept; the
    first ErrorInfo among them that names a reason and a domain goes first, its metadata
    as strings (what google.rpc.ErrorInfo holds); where there is none, the row's ErrorInfo
    does. The door's own errors already hold theirs first; an A2A 0.3 upstream's error
    has only its code (``data`` null), and its ErrorInfo is its code's row's."""
    typed = [detail for detail in data if isinstance(detail, dict)
             and isinstance(detail.get("@type"), str)] if isinstance(data, list) else []
    for index, detail in enumerate(typed):
        if detail["@type"] != ERROR_INFO_TYPE:
            continue
        reason, domain = detail.get("reason"), detail.get("domain")
        if not (isinstance(reason, str) and reason and isinstance(domain, str) and domain):
            continue
        metadata = detail.get("metadata")
        info = {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain,
                "metadata": {str(key): value if isinstance(value, str) else dumps(value).decode()
                             for key, value in metadata.items()}
                if isinstance(metadata, dict) else {}}
        return [info, *typed[:index], *typed[index + 1:]]
    return [{"@type": ERROR_INFO_TYPE, "reason": spec.reason, "domain": spec.domain,
             "metadata": {}},
            *(detail for detail in typed if detail["@type"] != ERROR_INFO_TYPE)]


def member_busy(retry_after_ms: int) -> RpcError:
    """The lifecycle gate's refusal: ``-32050`` with ``retryAfterMs`` (and a RetryInfo)."""
    seconds = f"{retry_after_ms / 1000:.3f}s"
    return RpcError(
        "MEMBER_BUSY",
        metadata={"retryAfterMs": str(retry_after_ms)},
        extra=({"@type": RETRY_INFO_TYPE, "retryDelay": seconds},),
    )


def invalid_params(exc: ValidationError, prefix: str = "") -> RpcError:
    """``-32602`` naming each field at fault, with a google.rpc.BadRequest detail."""
    violations = []
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in error["loc"])
        field = f"{prefix}.{path}" if prefix and path else (prefix or path)
        violations.append({"field": field, "description": error["msg"]})
    first = violations[0] if violations else {"field": prefix, "description": "invalid"}
    detail = f"{first['field']}: {first['description']}" if first["field"] else first["description"]
    return RpcError(
        "INVALID_PARAMS",
        detail,
        extra=({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations},),
    )


@dataclass(frozen=True, slots=True)
class RpcRequest:
    id: RequestId
    method: str
    params: dict[str, Any]


class RequestError(GatewayError):
    """A request that cannot be served, with the request id when it could be read."""

    def __init__(self, request_id: RequestId, error: RpcError) -> None:
        super().__init__(error.message)
        self.request_id = request_id
        self.error = error


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number too large for a float")
    return value


#: The door's JSON reader: ``json``'s own, minus what RFC 8259 does not allow (``NaN``,
#: ``Infinity``) and numbers that would overflow to them; an answer that echoes one
#: would be no JSON at all. ``parse_float`` is called only for numbers with a fraction or
#: an exponent, which A2A requests rarely hold.
STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def parse_body(body: bytes) -> Any:
    """The JSON value of a request body, or ``-32700``."""
    try:
        return STRICT_JSON.decode(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise RequestError(None, RpcError("PARSE_ERROR", "the body is not valid JSON")) from exc


def parse_request(value: Any) -> RpcRequest:
    """One JSON-RPC 2.0 request object; a batch or a malformed object is ``-32600``."""
    if isinstance(value, list):
        raise RequestError(None, RpcError(
            "INVALID_REQUEST", "batch requests are not served; send one request per call"))
    if not isinstance(value, dict):
        raise RequestError(None, RpcError("INVALID_REQUEST", "the body must be a JSON object"))
    raw_id = value.get("id")
    request_id: RequestId = raw_id if _valid_id(raw_id) else None
    if value.get("jsonrpc") != "2.0":
        raise RequestError(request_id, RpcError("INVALID_REQUEST", "'jsonrpc' must be \"2.0\""))
    if "id" not in value or not _valid_id(raw_id):
        raise RequestError(None, RpcError(
            "INVALID_REQUEST", "'id' is required and must be a string or an integer"))
    method = value.get("method")
    if not isinstance(method, str) or not method:
        raise RequestError(request_id, RpcError(
            "INVALID_REQUEST", "'method' must be a non-empty string"))
    params = value.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RequestError(request_id, RpcError("INVALID_PARAMS", "'params' must be an object"))
    return RpcRequest(request_id, method, params)


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return value is None or isinstance(value, str | int)


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dumps_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, whatever ``value`` holds: every answer a door writes.

    By orjson, in about a tenth of the json module's time (a task: 0.47 us against 5.8;
    the door's GetTask in process 19.7 -> 14.0 us). What orjson refuses goes to the json
    module: an integer past 64 bits, a key that is not a string, and a lone surrogate
    (``"\\ud800"`` in a request parses to one), which has no UTF-8 form: then the value
    is written with every non-ASCII character as a JSON escape. That is valid JSON and
    reads back as the same strings. A float that is not a number is written ``null``
    (JSON has no ``NaN``; the door's reader refuses one in a request).
    """
    try:
        return orjson.dumps(value)
    except TypeError:       # orjson.JSONEncodeError
        pass
    try:
        return _dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        return _dumps_ascii(value).encode("ascii")


def encode_result(request_id: RequestId, result: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: RequestId, error: RpcError) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, "error": error.error_object()})
