"""The door's gRPC server: grpcio's asyncio server on a loopback port of its own, on the
member's event loop, serving :class:`gateway.grpc.binding.GrpcBinding` behind
:class:`gateway.grpc.interceptor.DoorAuthInterceptor`.

In this order: the server is built with its bounds (:class:`GrpcLimits`: the largest
message, as the door's ``max_body``; concurrent streams per connection; keepalive pings
and how often a client may send them), bound to ``127.0.0.1`` at a port the kernel picks
(never shared: ``SO_REUSEPORT`` off) and, for a published door, to its public address
too (:class:`PublicAddress`, TLS when the door's listener has it), started, and stopped
with a grace period in which calls in flight may end.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from gateway.auth.door_auth import DoorAuth
from gateway.door.methods import A2AMethods
from gateway.grpc.binding import GrpcBinding
from gateway.grpc.interceptor import DoorAuthInterceptor

__all__ = ["GrpcLimits", "GrpcServer", "PublicAddress"]


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """The gRPC server's bounds (docs/grpc.md)."""

    #: The largest request (and answer) message, in bytes: the door's ``max_body``.
    max_message: int = 1 << 20
    #: Calls one connection may have open at once (HTTP/2 streams).
    max_concurrent_streams: int = 100
    #: A keepalive ping every this many ms on an idle connection, closed when the
    #: answer takes longer than the timeout.
    keepalive_ms: int = 30_000
    keepalive_timeout_ms: int = 10_000
    #: The shortest interval between a client's pings the server tolerates.
    min_ping_interval_ms: int = 10_000

    def options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", self.max_message),
            ("grpc.max_send_message_length", max(self.max_message, 4 << 20)),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.keepalive_time_ms", self.keepalive_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.http2.min_ping_interval_without_data_ms", self.min_ping_interval_ms),
            ("grpc.keepalive_permit_without_calls", 1),
        ]


@dataclass(frozen=True, slots=True)
class PublicAddress:
    """Where a published door's gRPC binding listens beyond loopback (docs/grpc.md):
    ``host`` and ``port`` (0: the kernel picks), TLS when a certificate is given."""

    host: str
    port: int
    tls_cert: bytes | None = None
    tls_key: bytes | None = None

    @property
    def spelled(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _add_public(server: grpc.aio.Server, public: PublicAddress) -> int:
    if public.tls_cert is not None and public.tls_key is not None:
        credentials = grpc.ssl_server_credentials([(public.tls_key, public.tls_cert)])
        port = server.add_secure_port(public.spelled, credentials)
    else:
        port = server.add_insecure_port(public.spelled)
    if port == 0:
        raise OSError(f"{public.spelled} cannot be bound for the gRPC binding")
    return port


class GrpcServer:
    """One door's gRPC server (see the module text)."""

    def __init__(self, methods: A2AMethods, auth: DoorAuth,
                 limits: GrpcLimits | None = None) -> None:
        self._limits = limits if limits is not None else GrpcLimits(
            max_message=auth.policy.max_body)
        self._binding = GrpcBinding(methods)
        self._auth = auth
        self._server: grpc.aio.Server | None = None
        #: The bound port (0 until :meth:`start`), and the published one, if any.
        self.port = 0
        self.public_port = 0

    @property
    def url(self) -> str:
        """The address a gRPC client dials (``host:port``, as the card lists it)."""
        return f"127.0.0.1:{self.port}"

    async def start(self, host: str = "127.0.0.1",
                    public: PublicAddress | None = None) -> int:
        """Bind (loopback, and ``public`` when the door is published) and start; the
        loopback port. OSError when a port cannot be bound."""
        server = grpc.aio.server(interceptors=[DoorAuthInterceptor(self._auth)],
                                 options=self._limits.options())
        server.add_generic_rpc_handlers((self._binding.generic_handler(),))
        port = server.add_insecure_port(f"{host}:0")
        if port == 0:
            raise OSError(f"no port could be bound on {host} for the gRPC binding")
        if public is not None:
            self.public_port = _add_public(server, public)
        await server.start()
        self._server = server
        self.port = port
        return port

    async def stop(self, grace: float = 2.0) -> None:
        """Stop taking calls; those in flight have ``grace`` seconds to end."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
