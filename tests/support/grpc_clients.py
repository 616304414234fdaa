"""Helpers for the tests of real gRPC clients at a door (no tests here): the token a2a-sdk's
AuthInterceptor adds for the card's ``bearer`` scheme, and the ErrorInfo of a refused call."""

from __future__ import annotations

import grpc
from a2a.client import ClientCallContext, CredentialService
from google.rpc import error_details_pb2, status_pb2


class BearerToken(CredentialService):
    """``token`` for the card's ``bearer`` scheme, nothing for any other."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self._token if security_scheme_name == "bearer" else None


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo in the call's ``grpc-status-details-bin`` trailer."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info)
            return info
    raise AssertionError(f"no status details: {error.code()}")
