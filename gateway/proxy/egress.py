"""What the formation proxy and call-member decide without sending anything.

In this order: the virtual addresses members reach each other at,
``MURMUR_FORMATION_PEERS`` and the check of a member's callees and their tokens; the text
of a task's answer, the one rule every reader of an answer follows (``call_member``,
``mur send``, ``mur run --task``, ``result.txt``); the egress allow-list
(``capabilities.network.allow``). None of it needs httpx, so a member imports this at
start and leaves httpx (tens of milliseconds of CPU) to the first request:
``gateway.proxy.formation`` and ``gateway.proxy.call_member`` re-export every name here.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gateway.protocol import MEMBER_NAME_RE, PEERS_ENV

if TYPE_CHECKING:
    import httpx

__all__ = [
    "VIRTUAL_DOMAIN", "VIRTUAL_SUFFIX", "AllowList",
    "egress_reaches_loopback", "check_callees", "virtual_address", "peers_environ",
    "answer_text",
]

VIRTUAL_DOMAIN: Final = "formation.invalid"
VIRTUAL_SUFFIX: Final = "." + VIRTUAL_DOMAIN
_TOKEN_TEXT = re.compile(r"[A-Za-z0-9._~+/=-]{1,4096}")


# --------------------------------------------------------------------------------------
# Members and their addresses


def virtual_address(name: str) -> str:
    """``http://<name>.formation.invalid``: where a component reaches member ``name``."""
    return f"http://{name}{VIRTUAL_SUFFIX}"


def peers_environ(peers: Sequence[str]) -> dict[str, str]:
    """``MURMUR_FORMATION_PEERS`` for the components' environment, peers in roster order;
    an empty dict when the member may call nobody (the variable is never set empty)."""
    if not peers:
        return {}
    return {PEERS_ENV: " ".join(f"{name}={virtual_address(name)}" for name in peers)}


def check_callees(tokens: Mapping[str, str]) -> None:
    """Raise ``ValueError`` when a callee name is not a member name or its formation
    token is not header-safe text; the message never echoes a token."""
    for name, token in tokens.items():
        if not MEMBER_NAME_RE.fullmatch(name):
            raise ValueError(f"callee name {name!r} is not a member name "
                             f"({MEMBER_NAME_RE.pattern})")
        if not _TOKEN_TEXT.fullmatch(token):      # never echo the token itself
            raise ValueError(f"the formation token for member {name!r} is not "
                             "header-safe text (mft1.<base64url>.<base64url>)")


# --------------------------------------------------------------------------------------
# A task's answer


#: The roles of a message the agent wrote: A2A 1.0's enum name, and A2A 0.3's word.
AGENT_ROLES: Final = frozenset({"ROLE_AGENT", "agent"})


def answer_text(task: Mapping[str, Any]) -> str:
    """A task's answer (docs/gateway.md, "The answer of a task"), the first of these
    that has text: its artifacts' text parts (parts of one artifact concatenated,
    artifacts one per line); its final status message's text; the text of the last
    message the agent wrote in its history (``ROLE_AGENT``, ``agent`` in A2A 0.3)."""
    return artifacts_text(task) or status_text(task) or history_text(task)


def failure_text(task: Mapping[str, Any]) -> str:
    """Why a task did not complete: its final status message's text, else (no message)
    its artifacts' text. A text the task streamed before it failed (its history) is not
    the reason."""
    return status_text(task) or artifacts_text(task)


def artifacts_text(task: Mapping[str, Any]) -> str:
    """The text parts of a task's artifacts: one artifact's concatenated, one per line."""
    texts = []
    for artifact in _listed(task.get("artifacts")):
        if isinstance(artifact, Mapping):
            text = parts_text(artifact.get("parts"))
            if text:
                texts.append(text)
    return "\n".join(texts)


def status_text(task: Mapping[str, Any]) -> str:
    """The text of a task's final status message."""
    status = task.get("status")
    message = status.get("message") if isinstance(status, Mapping) else None
    return parts_text(message.get("parts")) if isinstance(message, Mapping) else ""


def history_text(task: Mapping[str, Any]) -> str:
    """The text of the last message in a task's history the agent wrote and gave text:
    where an agent that says its reply as a WORKING status message, and then completes
    with none, leaves it (agent-framework-a2a's default)."""
    for message in reversed(_listed(task.get("history"))):
        if isinstance(message, Mapping) and message.get("role") in AGENT_ROLES:
            text = parts_text(message.get("parts"))
            if text:
                return text
    return ""


def _listed(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def parts_text(parts: Any) -> str:
    """The text parts of a message or an artifact, concatenated."""
    if not isinstance(parts, list):
        return ""
    return "".join(part["text"] for part in parts
                   if isinstance(part, Mapping) and isinstance(part.get("text"), str))


# --------------------------------------------------------------------------------------
# The egress allow-list


@dataclass(frozen=True, slots=True)
class _AllowEntry:
    kind: str                      # "any" | "loopback" | "ip" | "name" | "suffix"
    value: str                     # normalized host, IP text, or ".suffix"
    port: int | None


_ALLOW_PORT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:\[\]]*)(?::(?P<port>[0-9]{1,5}))?$")


def _normal_host(host: str) -> str:
    """Lower-case ASCII (punycode) form of a host name, without a trailing dot."""
    host = host.strip().rstrip(".").lower()
    if host.isascii():
        return host
    import httpx  # only for a non-ASCII name: httpx's IDNA encoding, as its URLs use

    try:
        return httpx.URL(f"http://{host}/").raw_host.decode("ascii")
    except httpx.InvalidURL as exc:
        raise ValueError(f"capabilities.network.allow entry {host!r} is not a host name") from exc


def _parse_allow_entry(entry: str) -> _AllowEntry:
    text = entry.strip()
    hint = ("write a bare host such as `localhost`, `api.example.com`, `*.example.com`, "
            "`127.0.0.1` or `[::1]`, optionally with `:port`")
    if not text or "/" in text or "@" in text:
        raise ValueError(f"capabilities.network.allow entry {entry!r} is not a host: {hint}")
    if text == "*":
        return _AllowEntry("any", "*", None)
    try:
        return _AllowEntry("ip", str(ipaddress.ip_address(text)), None)  # bare IPv6
    except ValueError:
        pass
    match = _ALLOW_PORT.match(text)
    if match is None:
        raise ValueError(f"capabilities.network.allow entry {entry!r} is not a host: {hint}")
    host, port_text = match["host"], match["port"]
    port = int(port_text) if port_text else None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"capabilities.network.allow entry {entry!r} has no valid port")
    host = host.strip("[]")
    try:
        return _AllowEntry("ip", str(ipaddress.ip_address(host)), port)
    except ValueError:
        pass
    host = _normal_host(host)
    if host == "localhost":
        return _AllowEntry("loopback", host, port)
    if host.startswith("*.") and "*" not in host[2:] and len(host) > 2:
        return _AllowEntry("suffix", host[1:], port)
    if "*" in host or not host:
        raise ValueError(f"capabilities.network.allow entry {entry!r}: a wildcard is only "
                         f"`*` or a leading `*.`; {hint}")
    return _AllowEntry("name", host, port)


def _ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    address = _ip_of(host)
    return address is not None and address.is_loopback


class AllowList:
    """``capabilities.network.allow``: which hosts a component's HTTP client may reach.

    Entries: ``localhost`` (the name ``localhost``, every address in 127.0.0.0/8 and
    ``::1``), an exact host name, an IP address, ``*.example.com`` (every name under
    example.com, not example.com itself), or ``*`` (any host); each may end in
    ``:port`` to allow that port only. An empty list allows nothing.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[str]) -> None:
        self._entries = tuple(_parse_allow_entry(entry) for entry in entries)

    def __repr__(self) -> str:
        return f"AllowList({len(self._entries)} entries)"

    def allows(self, url: httpx.URL) -> bool:
        port = url.port if url.port is not None else default_port(url.scheme)
        return self.allows_host(url.raw_host.decode("ascii"), port)

    def allows_host(self, host: str, port: int | None) -> bool:
        """The same rule for a host and port read from URL text (admission reads a
        model member's ``base_url`` with it, without httpx)."""
        host = host.rstrip(".").lower()
        return any(self._matches(entry, host, port) for entry in self._entries)

    @staticmethod
    def _matches(entry: _AllowEntry, host: str, port: int | None) -> bool:
        if entry.port is not None and entry.port != port:
            return False
        if entry.kind == "any":
            return True
        if entry.kind == "loopback":
            return _is_loopback(host)
        if entry.kind == "ip":
            address = _ip_of(host)
            return address is not None and str(address) == entry.value
        if entry.kind == "suffix":
            return host.endswith(entry.value)
        return host == entry.value

    def reaches_loopback_door(self) -> bool:
        """Whether a door on ``http://127.0.0.1:<any port>`` is allowed."""
        return any(entry.port is None and self._matches(entry, "127.0.0.1", None)
                   for entry in self._entries)


def default_port(scheme: str) -> int | None:
    """The port a URL without one uses: 80 for ``http``, 443 for ``https``."""
    return {"http": 80, "https": 443}.get(scheme)


def egress_reaches_loopback(allow: Iterable[str]) -> bool:
    """For the launcher's ``W-RUN-008``: can this grant reach a member's loopback door?

    Doors listen on ``127.0.0.1`` at a port chosen at launch, so an entry limited to one
    port does not count. Entries that are not hosts raise ``ValueError``.
    """
    return AllowList(allow).reaches_loopback_door()
