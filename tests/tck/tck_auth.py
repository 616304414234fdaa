"""pytest plugin for the A2A TCK (``-p tck_auth``): every HTTP request (httpx) and gRPC
call the TCK makes carries ``Authorization: Bearer $TCK_TOKEN``.

The TCK (branch 1.0-dev) has no option for a credential; this lets it test a door that
authenticates (and so can serve an extended agent card). A request that already names an
Authorization header keeps its own.
"""

from __future__ import annotations

import collections
import os

import grpc
import httpx
import tck.transport.grpc_client as tck_grpc

_TOKEN = os.environ.get("TCK_TOKEN", "")
_AUTHORIZATION = f"Bearer {_TOKEN}"


class _Details(collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                     "compression")), grpc.ClientCallDetails):
    pass


class _BearerInterceptor(grpc.UnaryUnaryClientInterceptor,
                         grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization`` metadata to every call that has none."""

    @staticmethod
    def _details(details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = list(details.metadata or ())
        if not any(key.lower() == "authorization" for key, _ in metadata):
            metadata.append(("authorization", _AUTHORIZATION))
        return _Details(details.method, details.timeout, metadata, details.credentials,
                        getattr(details, "wait_for_ready", None),
                        getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)


class _GrpcModule:
    """``grpc`` as tck.transport.grpc_client sees it: its channels carry the token."""

    def __getattr__(self, name: str):
        return getattr(grpc, name)

    @staticmethod
    def insecure_channel(target, *args, **kwargs):
        return grpc.intercept_channel(grpc.insecure_channel(target, *args, **kwargs),
                                      _BearerInterceptor())


if _TOKEN:
    _original_init = httpx.Client.__init__

    def _init(self, *args, **kwargs):
        _original_init(self, *args, **kwargs)
        self.headers.setdefault("Authorization", _AUTHORIZATION)

    httpx.Client.__init__ = _init
    tck_grpc.grpc = _GrpcModule()
