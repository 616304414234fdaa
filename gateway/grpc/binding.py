"""The door's gRPC binding (A2A 1.0 section 10): the ``lf.a2a.v1.A2AService`` methods
over the door's A2A methods (:mod:`gateway.door.methods`), the same handlers the
JSON-RPC and HTTP+JSON bindings run.

A call is judged in this order, the first failure answering (docs/grpc.md):

1. DoorAuth's decision, made by :class:`gateway.grpc.interceptor.DoorAuthInterceptor`
   before the request message is read, and handed to the method as an
   :class:`Admitted` (a method reached without one refuses: never served undecided);
2. the A2A version, from the ``a2a-version`` metadata (``FAILED_PRECONDITION``, the
   ErrorInfo ``VERSION_NOT_SUPPORTED``), as :func:`gateway.door.jsonrpc_binding.check_version`
   judges a header;
3. the method, from the door's one table (:meth:`A2AMethods.handlers`: the push
   configuration methods and the extended card are refused as on the other bindings);
4. the request message, as the ProtoJSON params the other bindings read
   (:func:`gateway.grpc.messages.to_params`), validated by the method's handler.

A unary answer is the result as the method's response message; a stream sends each
event as a ``StreamResponse`` and ends when the task does or when the client cancels.
Both are handed to grpcio as wire bytes already (:func:`gateway.grpc.messages.from_result`),
so no method has a response serializer.
An A2A error is its gRPC status (:mod:`gateway.grpc.status`); any other exception is
``INTERNAL`` with no text of it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.a2a.jsonrpc import RpcError
from gateway.auth.edge_limits import EDGE_CALL, EdgeCall
from gateway.caller import Caller
from gateway.door.jsonrpc_binding import check_version
from gateway.door.methods import A2AMethods
from gateway.grpc.messages import METHODS, SERVICE, GrpcMethod, from_result, to_params
from gateway.grpc.status import GrpcStatus, rpc_error_status, undecided_status
from gateway.protocol import VERSION_HEADER
from gateway.trace.context import INCOMING_TRACEPARENT, TASK_STARTING_METHODS, incoming_traceparent
from gateway.types import Headers

__all__ = ["Admitted", "GrpcBinding"]

log = logging.getLogger("murmur.door")

_VERSION_KEY = VERSION_HEADER.encode("ascii")


@dataclass(frozen=True, slots=True)
class Admitted:
    """DoorAuth's decision on one call: the caller, the metadata its method may see,
    and the call along a bounded edge (released when the call ends), if any."""

    caller: Caller
    headers: Headers
    edge: EdgeCall | None = None


class GrpcBinding:
    """The A2A service's method handlers over ``methods``: what the gRPC server serves
    (:meth:`generic_handler`), each behaviour taking the interceptor's :class:`Admitted`."""

    def __init__(self, methods: A2AMethods) -> None:
        self._methods = methods

    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for name, method in METHODS.items():
            if method.streaming:
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    _stream_behaviour(self, method), request_deserializer=method.request.FromString)
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(
                    _unary_behaviour(self, method), request_deserializer=method.request.FromString)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    # --- one call -----------------------------------------------------------------------

    async def unary(self, method: GrpcMethod, request: Any, context: Any,
                    admitted: Admitted | None) -> Any:
        """Steps 2-4 for a unary method, then its answer."""
        admitted = await _decided(context, admitted)
        with _EdgeCallScope(admitted):
            try:
                params = self._open(method, request, admitted)
                unary, _ = self._methods.handlers(method.name)
                if unary is None:
                    raise RpcError("UNSUPPORTED_OPERATION", f"{method.name} streams")
                return from_result(await unary(params, admitted.caller), method.response)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a status
                await _failed(context, method, exc)
        return None  # not reached: _failed aborts

    async def stream(self, method: GrpcMethod, request: Any, context: Any,
                     admitted: Admitted | None) -> AsyncIterator[Any]:
        """Steps 2-4 for a streaming method, its place in the door's stream bounds, then
        each event as a ``StreamResponse``."""
        admitted = await _decided(context, admitted)
        with _EdgeCallScope(admitted):
            try:
                params = self._open(method, request, admitted)
                _, streaming = self._methods.handlers(method.name)
                if streaming is None:
                    raise RpcError("UNSUPPORTED_OPERATION", f"{method.name} does not stream")
                events, ticket = await self._methods.open_stream(
                    method.name, params, admitted.caller, streaming)
                try:
                    async for event in events:
                        yield from_result(event, method.response)
                finally:
                    ticket.release()
                    closing = getattr(events, "aclose", None)
                    if closing is not None:
                        await closing()
            except Exception as exc:  # noqa: BLE001 - every failure becomes a status
                await _failed(context, method, exc)

    def _open(self, method: GrpcMethod, request: Any, admitted: Admitted) -> dict[str, Any]:
        """Step 2 (the version), the trace context, then step 4's params."""
        version: bytes | None = None
        for name, value in admitted.headers:
            if name == _VERSION_KEY:
                version = value
                break
        check_version({"query_string": b""}, version)
        if method.name in TASK_STARTING_METHODS:     # the task's span is its child
            INCOMING_TRACEPARENT.set(incoming_traceparent({"headers": admitted.headers}))
        return to_params(request)


# grpcio awaits a behaviour it finds to be a coroutine function, and iterates one that is
# an async generator function (functools.partial of either still is): so functions.

def _unary_behaviour(binding: GrpcBinding, method: GrpcMethod) -> Any:
    async def behaviour(request: Any, context: Any, admitted: Admitted | None = None) -> Any:
        return await binding.unary(method, request, context, admitted)
    return behaviour


def _stream_behaviour(binding: GrpcBinding, method: GrpcMethod) -> Any:
    async def behaviour(request: Any, context: Any,
                        admitted: Admitted | None = None) -> AsyncIterator[Any]:
        async for message in binding.stream(method, request, context, admitted):
            yield message
    return behaviour


#: A method reached without the interceptor's decision (a server built without it).
_UNDECIDED = undecided_status()


async def _decided(context: Any, admitted: Admitted | None) -> Admitted:
    """The interceptor's decision; a call that has none is refused (fail closed)."""
    if admitted is None:
        await _abort(context, _UNDECIDED)
    assert admitted is not None
    return admitted


class _EdgeCallScope:
    """The call along a bounded edge, left in ``EDGE_CALL`` for the task store while the
    method runs, and released when it ends (as DoorAuth does on HTTP). A class, not a
    generator under ``contextmanager``: every call enters it (a third of the cost)."""

    __slots__ = ("_edge", "_token")

    def __init__(self, admitted: Admitted) -> None:
        self._edge = admitted.edge

    def __enter__(self) -> None:
        self._token = EDGE_CALL.set(self._edge)

    def __exit__(self, *_exc: object) -> None:
        EDGE_CALL.reset(self._token)
        if self._edge is not None:
            self._edge.released()


async def _failed(context: Any, method: GrpcMethod, exc: Exception) -> None:
    """An exception as the call's status: an A2A error as its own, an abort as it is,
    anything else ``INTERNAL`` with no text of it."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    if isinstance(exc, RpcError):
        await _abort(context, rpc_error_status(exc))
        return
    log.error("gRPC %s failed", method.name, exc_info=exc)
    await _abort(context, rpc_error_status(RpcError("INTERNAL_ERROR")))


async def _abort(context: Any, status: GrpcStatus) -> None:
    await context.abort(status.code, status.message, status.trailing_metadata)
