"""Helpers for the tests of real gRPC clients at a door (no tests here): the token a2a-sdk's
AuthInterceptor adds for the card's ``bearer`` scheme, the ErrorInfo of a refused call,
and a2a-sdk's gRPC client made from a door's card."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from a2a.client import (
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types import a2a_pb2
from google.protobuf import json_format
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


def loopback_channel(target: str) -> grpc.aio.Channel:
    """An insecure channel that never goes through an HTTP proxy of the environment."""
    return grpc.aio.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)])


@asynccontextmanager
async def card_grpc_client(card: dict[str, Any], token: str, *,
                           streaming: bool = False) -> AsyncIterator[Client]:
    """a2a-sdk's gRPC client (``supported_protocol_bindings=["GRPC"]``) made from a
    door's ``card``, ``token`` added by its AuthInterceptor for the ``bearer`` scheme."""
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"],
                          grpc_channel_factory=loopback_channel)
    parsed = a2a_pb2.AgentCard()
    json_format.ParseDict(card, parsed, ignore_unknown_fields=True)
    client = ClientFactory(config).create(parsed,
                                          interceptors=[AuthInterceptor(BearerToken(token))])
    try:
        yield client
    finally:
        await client.close()
