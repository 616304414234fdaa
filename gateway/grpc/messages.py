"""The A2A messages for the gRPC binding, from the specification's own ``a2a.proto``.

In this order: the descriptors (:mod:`gateway.grpc.descriptors`, generated) are added to a
descriptor pool of the door's own, once; the service's methods are read from it
(:data:`METHODS`: each method's request and response classes and whether it streams);
then the two conversions the binding makes: a request message to the ProtoJSON dict every
other binding reads (:func:`to_params`, by :mod:`gateway.grpc.protojson`), and a result,
the ProtoJSON dict every other binding writes, to its response's wire bytes
(:func:`from_result`, by :mod:`gateway.grpc.wire`, else through the message).

Why a pool of our own and not the default one: a2a-sdk registers the same
``lf.a2a.v1`` names in protobuf's default pool, and a process may hold both (a test
with a2a-sdk's client and a door, a member importing a2a-sdk); two definitions of one
name in one pool are refused. In a pool of its own the door needs no generated
``_pb2`` module and no a2a-sdk (docs/grpc.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from gateway.grpc.descriptors import A2A_PROTO_VERSION, FILES
from gateway.grpc.protojson import to_dict, to_message
from gateway.grpc.wire import to_wire

__all__ = ["A2A_PROTO_VERSION", "METHODS", "POOL", "SERVICE", "GrpcMethod", "from_result",
           "message_class", "to_params"]

#: The gRPC service every door serves.
SERVICE = "lf.a2a.v1.A2AService"


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for _name, data in FILES:
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(data))
    return pool


#: The door's descriptor pool: A2A, google.rpc.Status and ErrorInfo, and their imports.
POOL = _pool()


def message_class(full_name: str) -> type[Message]:
    """The class of the message ``full_name`` in the door's pool."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


@dataclass(frozen=True, slots=True)
class GrpcMethod:
    """One method of the A2A service: its name (the same as the JSON-RPC method's), its
    request and response classes, and whether the server streams its answer."""

    name: str
    request: type[Message]
    response: type[Message]
    streaming: bool


def _methods() -> dict[str, GrpcMethod]:
    service = POOL.FindServiceByName(SERVICE)
    return {
        method.name: GrpcMethod(
            method.name,
            message_factory.GetMessageClass(method.input_type),
            message_factory.GetMessageClass(method.output_type),
            method.server_streaming)
        for method in service.methods
    }


#: The service's methods by name, as ``a2a.proto`` declares them.
METHODS: dict[str, GrpcMethod] = _methods()


def to_params(request: Message) -> dict[str, Any]:
    """A request message as the ProtoJSON params the JSON-RPC binding would have read
    (camelCase names, enums by name, defaults left out)."""
    return to_dict(request, POOL)


def from_result(result: Any, response: type[Message]) -> bytes:
    """A method's ProtoJSON result as the response message's wire bytes: written
    straight (:func:`gateway.grpc.wire.to_wire`), or for what that does not cover built
    as the message and serialized. A field the proto does not know is dropped, not
    refused after the work was done: a gateway member passes on what its upstream said,
    which may hold fields of a later version."""
    data = to_wire(result, response.DESCRIPTOR)
    if data is None:
        data = bytes(to_message(result, response, POOL).SerializeToString())
    return data
