"""DoorAuth on the gRPC binding: a server interceptor that makes the door's one decision
(:meth:`gateway.auth.door_auth.DoorAuth.decide`, then :meth:`DoorAuth.bound`) on a
call's metadata before its request message is read.

In this order: the method's name from the call's path (a path outside the A2A service
is left to the server, which answers ``UNIMPLEMENTED``); the metadata as the header
list DoorAuth reads (names in lower case, as gRPC sends them; a ``-bin`` value is never
a credential); checks 1-3 and 5-6; checks 9-10 where the formation bounds the edge;
then the method's handler with the :class:`gateway.grpc.binding.Admitted` bound to it. A
refusal answers with a handler that reads nothing and aborts with the refusal's status
(:func:`gateway.grpc.status.refusal_status`): ``UNAUTHENTICATED`` for 401,
``PERMISSION_DENIED`` for 403, ``RESOURCE_EXHAUSTED`` for 429.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from gateway.auth.door_auth import DoorAuth
from gateway.auth.refusals import Refused
from gateway.grpc.binding import Admitted
from gateway.grpc.messages import SERVICE
from gateway.grpc.status import GrpcStatus, refusal_status
from gateway.types import Headers

__all__ = ["DoorAuthInterceptor"]

_PREFIX = f"/{SERVICE}/"
if TYPE_CHECKING:
    #: A method handler of the A2A service (messages of the door's pool: Any to mypy).
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]


class DoorAuthInterceptor(grpc.aio.ServerInterceptor):
    """Every call through DoorAuth's decision (see the module text)."""

    def __init__(self, auth: DoorAuth) -> None:
        self._auth = auth

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails],
                                         Awaitable[Handler | None]],
            handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(handler_call_details)
        path = handler_call_details.method
        if handler is None or not path.startswith(_PREFIX):
            return handler
        method = path[len(_PREFIX):]
        headers = _headers(handler_call_details.invocation_metadata)
        try:
            caller, kept = self._auth.decide(headers, method)
            edge = self._auth.bound(caller, method, kept)
        except Refused as refused:
            self._auth.refused(refused, "gRPC", method)
            return _refusing(handler, refusal_status(refused))
        return _admitted(handler, Admitted(caller, kept, edge))


def _headers(metadata: Any) -> Headers:
    """gRPC metadata as the header list DoorAuth reads: ``(name, value)`` bytes."""
    headers: Headers = []
    for key, value in metadata or ():
        if isinstance(value, str):
            headers.append((key.lower().encode("latin-1"), value.encode("latin-1", "replace")))
    return headers


def _admitted(handler: Handler, admitted: Admitted) -> Handler:
    behaviour: Any
    if handler.unary_stream is not None:
        behaviour = handler.unary_stream
        return grpc.unary_stream_rpc_method_handler(
            functools.partial(behaviour, admitted=admitted),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
    behaviour = handler.unary_unary
    return grpc.unary_unary_rpc_method_handler(
        functools.partial(behaviour, admitted=admitted),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


def _refusing(handler: Handler, status: GrpcStatus) -> Handler:
    """A handler that reads nothing of the request and answers ``status``."""

    async def refuse(_request: Any, context: Any) -> None:
        await context.abort(status.code, status.message, status.trailing_metadata)

    async def refuse_stream(_request: Any, context: Any) -> Any:
        await context.abort(status.code, status.message, status.trailing_metadata)
        yield None  # pragma: no cover - abort raises

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            refuse_stream, request_deserializer=_unread, response_serializer=_nothing)
    return grpc.unary_unary_rpc_method_handler(
        refuse, request_deserializer=_unread, response_serializer=_nothing)


def _unread(_data: bytes) -> None:
    return None


def _nothing(_message: Any) -> bytes:
    return b""
