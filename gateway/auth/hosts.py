"""Check 7 of DoorAuth: the ``Host`` a request names (DNS rebinding).

A door answers only to exactly one ``Host`` that is a loopback name (127.0.0.0/8,
``localhost``, ``[::1]``) with the door's own port, or, on a listener beyond loopback
(``--listen``), one of that listener's public names with any port that is a number. In
this order: :class:`HostCheck` (what a door built once from its policy, and the check per
request: a set lookup of the usual values first), then the helpers that build and judge
``Host`` values.
"""

from __future__ import annotations

import ipaddress

from gateway.types import Scope

__all__ = ["HostCheck"]


class HostCheck:
    """Whether a request's ``Host`` is one this door answers to. ``public_port`` and
    ``public_hosts``: the listener beyond loopback and its names (none: loopback only)."""

    def __init__(self, public_port: int | None, public_hosts: tuple[str, ...]) -> None:
        self._public_port = public_port
        self._public_hosts = public_hosts
        self._hosts_by_port: dict[int | None, frozenset[bytes]] = {}
        #: The listener beyond loopback's public names, without a port.
        self._public_names = frozenset(
            _without_port(name) for name in _public_hosts(public_hosts, 0))

    def ok(self, scope: Scope, host: bytes | None, hosts: int) -> bool:
        """Exactly one ``Host``, a loopback name with the door's own port (or a public
        name of the listener the request came in on)."""
        server = scope.get("server")
        port: int | None = server[1] if server else None
        usual = self._hosts_by_port.get(port)
        return hosts == 1 and host is not None and (
            (usual is not None and host in usual) or self._allowed(host, port))

    def _allowed(self, host: bytes, port: int | None) -> bool:
        """Whether ``host`` is a loopback name with ``port``, or on the listener beyond
        loopback one of its public names (the first request on a port notes its usual
        Host values, which later requests find at once)."""
        usual = self._hosts_by_port.get(port)
        if usual is None:
            usual = _usual_hosts(port)
            if port is not None and port == self._public_port:
                usual = usual | _public_hosts(self._public_hosts, port)
            if len(self._hosts_by_port) < 64:
                self._hosts_by_port[port] = usual
        if host in usual or _loopback_host(host, port):
            return True
        # On the listener beyond loopback, a public name with any port: a published port
        # (docker run -p 9443:8080, a Service) is not the one listened on, and the port
        # is no defence against DNS rebinding, the name is. Any port, but a number.
        return (port is not None and port == self._public_port
                and _without_port(host) in self._public_names and _port_is_number(host))


def _usual_hosts(port: int | None) -> frozenset[bytes]:
    """The Host values clients send to a loopback door, for a set lookup per request."""
    if port is None:
        return frozenset()
    names = [b"127.0.0.1", b"localhost", b"[::1]"]
    hosts = {name + b":" + str(port).encode("ascii") for name in names}
    if port == 80:
        hosts.update(names)
    return frozenset(hosts)


def _without_port(host: bytes) -> bytes:
    """``name`` of ``name:port`` (``[v6]`` of ``[v6]:port``), in lower case."""
    if host.startswith(b"["):
        return host[:host.find(b"]") + 1].lower()
    return host.rsplit(b":", 1)[0].lower() if b":" in host else host.lower()


def _port_is_number(host: bytes) -> bool:
    """Whether ``host``'s port, when it has one, is a port number (1 to 5 digits)."""
    rest = host[host.find(b"]") + 1:] if host.startswith(b"[") else host
    if b":" not in rest:
        return True
    digits = rest.rsplit(b":", 1)[1]
    return digits.isdigit() and 0 < len(digits) <= 5


def _public_hosts(names: tuple[str, ...], port: int) -> frozenset[bytes]:
    """The Host values a listener beyond loopback answers: each name, alone or with the
    port (IPv6 addresses in brackets), in lower case."""
    hosts: set[bytes] = set()
    for name in names:
        text = name.lower().rstrip(".")
        if ":" in text and not text.startswith("["):
            text = f"[{text}]"
        if text.isascii():  # the launcher checked them; anything else matches nothing
            hosts.update({text.encode("ascii"), f"{text}:{port}".encode("ascii")})
    return frozenset(hosts)


def _loopback_host(host: bytes, port: int | None) -> bool:
    """Whether a Host value is a loopback name (127.0.0.0/8, localhost, [::1]) with
    ``port`` (absent: 80). ``port=None`` (a door on a UNIX socket): any port."""
    try:
        text = host.decode("ascii").lower()
    except UnicodeDecodeError:
        return False
    if text.startswith("["):
        name, bracket, port_part = text[1:].partition("]")
        if not bracket:
            return False
    else:
        name, colon, digits = text.partition(":")
        port_part = colon + digits
    if port_part:
        digits = port_part[1:]
        if port_part[0] != ":" or not digits.isdigit() or len(digits) > 5:
            return False
        given = int(digits)
    else:
        given = 80
    if port is not None and given != port:
        return False
    if name == "localhost":
        return not text.startswith("[")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback and (address.version == 6) == text.startswith("[")
