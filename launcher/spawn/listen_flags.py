"""A door beyond loopback: ``--listen HOST:PORT`` (``mur run --capsule``) and ``--publish
HOST:PORT`` (``mur run --roster``, the entry member's door), with ``--tls-cert FILE
--tls-key FILE`` and ``--public-host NAME`` (docs/door-beyond-loopback.md).

In order: the flags read into a :class:`Listener` (usage errors, exit 2, naming the flag
and what it takes); then :func:`check_listener`, before anything starts: the address, and
the next port for the gRPC binding (:func:`grpc_port`), can be bound on this host and the
certificate and key load (``E-RUN-056`` naming the flag and
the fix); :func:`bind_listener` binds it for good; :func:`listener_args` hands it on to
the entry member as ``--listen`` flags.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass, replace
from pathlib import Path

from launcher.diagnostics import DiagnosticError
from launcher.spawn.run_flags import UsageError

_NAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
                   r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


@dataclass(frozen=True)
class Listener:
    """Where a door listens beyond loopback, and how its clients name it."""

    flag: str                    # --listen or --publish, for messages
    host: str                    # an address or a host name, as given (IPv6 unbracketed)
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None
    public_hosts: tuple[str, ...] = ()

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert is not None else "http"

    @property
    def spelled(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def names(self) -> tuple[str, ...]:
        """The Host names its clients may send: ``--public-host``, else the address."""
        return self.public_hosts or (self.host,)

    def url(self, port: int) -> str:
        """The door's URL for its clients (``port``: the one bound, for ``:0``)."""
        name = self.names()[0]
        shown = f"[{name}]" if ":" in name else name
        default = 443 if self.scheme == "https" else 80
        return f"{self.scheme}://{shown}" + ("" if port == default else f":{port}")


def parse_address(value: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) -> (host, port)."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})|([^:\[\]]+):([0-9]{1,5})",
                         value.strip())
    if match is None:
        raise UsageError(f"{flag} {value!r} is not HOST:PORT; give an address or name and "
                         "a port, such as 0.0.0.0:8443 or [::]:8443")
    host = match[1] or match[3]
    port = int(match[2] or match[4])
    if port > 65535:
        raise UsageError(f"{flag} {value!r}: {port} is not a port (0-65535)")
    if not _is_host(host):
        raise UsageError(f"{flag} {value!r}: {host!r} is not a host name or an IP address")
    return host, port


def _is_host(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return _NAME.fullmatch(text) is not None


def listener_from(args: argparse.Namespace, flag: str) -> Listener | None:
    """The listener ``args`` ask for (``flag``: ``--listen`` or ``--publish``), or None."""
    value: str | None = getattr(args, flag[2:], None)
    cert: str | None = getattr(args, "tls_cert", None)
    key: str | None = getattr(args, "tls_key", None)
    names: list[str] = list(getattr(args, "public_host", None) or [])
    if value is None:
        for given, name in ((cert, "--tls-cert"), (key, "--tls-key"),
                            (names or None, "--public-host")):
            if given:
                raise UsageError(f"{name} is taken with {flag} HOST:PORT only: it is about "
                                 "the door's listener beyond loopback")
        return None
    host, port = parse_address(value, flag)
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together: the certificate chain and "
                         "its private key (PEM files)")
    for name in names:
        if not _is_host(name):
            raise UsageError(f"--public-host {name!r} is not a host name or an IP address")
    return Listener(flag=flag, host=host, port=port,
                    tls_cert=Path(cert) if cert else None, tls_key=Path(key) if key else None,
                    public_hosts=tuple(name.lower().rstrip(".") for name in names))


def _refusal(listener: Listener, flag: str, value: str, problem: str, fix: str
             ) -> DiagnosticError:
    return DiagnosticError("E-RUN-056", flag, flag=flag, value=value, problem=problem, fix=fix)


def bind_listener(listener: Listener) -> socket.socket:
    """A socket bound to the listener's address (not yet listening); E-RUN-056 when the
    address is in use or not this host's."""
    try:
        infos = socket.getaddrinfo(listener.host, listener.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise _refusal(listener, listener.flag, listener.spelled,
                       f"{listener.host} does not resolve ({exc.strerror})",
                       "give an address of this host, or a name that resolves to one"
                       ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        fix = ("choose another port, or stop what listens there" if exc.errno == 98 else
               "give an address of this host (0.0.0.0 for all of its IPv4 addresses)")
        raise _refusal(listener, listener.flag, listener.spelled,
                       f"it cannot be bound ({exc.strerror})", fix) from None
    return sock


def tls_context(listener: Listener) -> ssl.SSLContext | None:
    """The server TLS context of the listener (None: plain HTTP); E-RUN-056 naming the
    file when the certificate or key cannot be read or do not match."""
    if listener.tls_cert is None or listener.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(listener.tls_cert, listener.tls_key)
    except (OSError, ssl.SSLError) as exc:
        what = getattr(exc, "strerror", None) or str(exc)
        raise _refusal(listener, "--tls-cert", f"{listener.tls_cert} / {listener.tls_key}",
                       f"the certificate and key cannot be used ({what})",
                       "give a readable PEM certificate chain and its own private key"
                       ) from None
    return context


def grpc_port(port: int) -> int:
    """Where a published door serves gRPC: the port after its HTTP one (0 stays 0: the
    kernel picks both), so that a container publishes a fixed pair (docs/grpc.md)."""
    return port + 1 if port else 0


def check_listener(listener: Listener) -> None:
    """Everything that can be checked before anything starts (the binds are released):
    the certificate, the HTTP port and the gRPC port after it."""
    tls_context(listener)
    bind_listener(listener).close()
    if listener.port:
        if listener.port == 65535:
            raise _refusal(listener, listener.flag, listener.spelled,
                           "its gRPC binding would listen on the next port, and there is none",
                           "choose a port below 65535")
        try:
            bind_listener(replace(listener, port=grpc_port(listener.port))).close()
        except DiagnosticError:
            raise _refusal(listener, listener.flag, listener.spelled,
                           f"the next port, {grpc_port(listener.port)}, where the door "
                           "publishes its gRPC binding, cannot be bound (Address already in "
                           "use, or not this host's)",
                           "choose a port whose next port is free too") from None


def listener_args(listener: Listener) -> list[str]:
    """The entry member's flags for the launcher's ``--publish``."""
    args = ["--listen", listener.spelled]
    if listener.tls_cert is not None and listener.tls_key is not None:
        args += ["--tls-cert", str(listener.tls_cert.resolve()),
                 "--tls-key", str(listener.tls_key.resolve())]
    for name in listener.public_hosts:
        args += ["--public-host", name]
    return args
