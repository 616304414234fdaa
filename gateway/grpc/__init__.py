"""The door's gRPC binding (A2A 1.0 section 10), in the order a call meets it:

* :mod:`gateway.grpc.server`: grpcio's asyncio server on a loopback port of its own;
* :mod:`gateway.grpc.interceptor`: DoorAuth's one decision on the call's metadata;
* :mod:`gateway.grpc.binding`: the A2A service's methods over the door's A2A methods;
* :mod:`gateway.grpc.messages`: the specification's messages, in a descriptor pool of
  the door's own (:mod:`gateway.grpc.descriptors`, generated), and ProtoJSON both ways;
* :mod:`gateway.grpc.status`: errors and refusals as gRPC statuses with their ErrorInfo.

It needs the ``grpc`` extra (grpcio, protobuf): :func:`available` says whether it is
installed; without it a door serves the two HTTP bindings and its card lists no ``GRPC``.
"""

from __future__ import annotations

import importlib.util

__all__ = ["available"]


def available() -> bool:
    """Whether grpcio and protobuf are installed (the ``grpc`` extra)."""
    return (importlib.util.find_spec("grpc") is not None
            and importlib.util.find_spec("google.protobuf") is not None)
