"""Which of an upstream's interfaces a gateway door speaks to, and in what framing
(docs/gateway.md, docs/a2a-0.3.md). In this order:

1. the interfaces a card offers: its ``supportedInterfaces`` (A2A 1.0: ``url``,
   ``protocolBinding``, ``protocolVersion``), then the ones an A2A 0.3 card names the old
   way (a top-level ``url`` with ``preferredTransport``, default ``JSONRPC``, and each of
   ``additionalInterfaces``' ``url`` and ``transport``, all at the card's
   ``protocolVersion``, default 0.3.0, as a2a-sdk reads such a card);
2. the one the door prefers: JSON-RPC 1.0, then HTTP+JSON 1.0, then JSON-RPC 0.3; a card
   with none of them is refused with :class:`gateway.relay.client.UpstreamCardError`
   naming what it offers;
3. its URL taken on the origin the card was read from when the card names a loopback or
   wildcard host (``localhost``, ``127.0.0.1``, ``0.0.0.0``): such a card was written by
   a server that does not know the address it is reached at (a port picked by the
   runtime, a container's name);
4. :meth:`UpstreamInterface.framing`: how requests to it are written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from gateway.a2a.v03 import is_v03_version
from gateway.protocol import A2A_VERSION, HTTP_JSON_BINDING, JSONRPC_BINDING
from gateway.relay.client import JsonRpcFraming, UpstreamCardError, UpstreamFraming
from gateway.relay.rest_framing import RestFraming
from gateway.relay.v03_framing import V03_VERSION, V03Framing

__all__ = ["UpstreamInterface", "upstream_interface"]

#: The (binding, version) pairs a door speaks, the one it prefers first.
_PREFERRED: Final = ((JSONRPC_BINDING, A2A_VERSION), (HTTP_JSON_BINDING, A2A_VERSION),
                     (JSONRPC_BINDING, V03_VERSION))
_LOCAL_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})  # noqa: S104


@dataclass(frozen=True)
class UpstreamInterface:
    """One interface of an upstream's card the door speaks: ``binding`` (``JSONRPC`` or
    ``HTTP+JSON``), ``version`` (``1.0`` or ``0.3``) and ``url``."""

    binding: str
    version: str
    url: str

    def framing(self) -> UpstreamFraming:
        """How requests to this interface are written and its answers read."""
        if self.version == V03_VERSION:
            return V03Framing(self.url)
        if self.binding == HTTP_JSON_BINDING:
            return RestFraming(self.url)
        return JsonRpcFraming(self.url)


def upstream_interface(card: Mapping[str, Any], card_url: str) -> UpstreamInterface:
    """The interface of ``card`` (read at ``card_url``) the door speaks to."""
    offered: list[str] = []
    found: dict[tuple[str, str], str] = {}
    for binding, version, url in _offered(card):
        offered.append(f"{binding} {version}")
        speaks = A2A_VERSION if str(version) == A2A_VERSION else \
            V03_VERSION if is_v03_version(version) else None
        if speaks is not None and isinstance(url, str) and \
                url.startswith(("http://", "https://")):
            found.setdefault((str(binding), speaks), _on_card_origin(url, card_url))
    for binding, version in _PREFERRED:
        if (binding, version) in found:
            return UpstreamInterface(binding, version, found[binding, version])
    what = ", ".join(offered) if offered else "no supportedInterfaces and no url"
    raise UpstreamCardError(
        f"the agent card at {card_url} offers {what}; a gateway member needs an interface "
        f"with protocolBinding {JSONRPC_BINDING} or {HTTP_JSON_BINDING} at protocolVersion "
        f"{A2A_VERSION}, or {JSONRPC_BINDING} at protocolVersion 0.3 (as a2a-sdk 1.x and "
        "@a2a-js/sdk 1.x serve, or a2a-sdk 0.3)")


def _offered(card: Mapping[str, Any]) -> Iterator[tuple[Any, Any, Any]]:
    """Each (binding, version, url) the card names, 1.0's way first, then 0.3's."""
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list):
        for entry in interfaces:
            if isinstance(entry, dict):
                yield entry.get("protocolBinding"), entry.get("protocolVersion"), entry.get("url")
    url = card.get("url")
    if not isinstance(url, str):
        return
    version = card.get("protocolVersion") or "0.3.0"
    yield card.get("preferredTransport") or JSONRPC_BINDING, version, url
    additional = card.get("additionalInterfaces")
    for entry in additional if isinstance(additional, list) else ():
        if isinstance(entry, dict):
            yield entry.get("transport"), version, entry.get("url")


def _on_card_origin(url: str, card_url: str) -> str:
    parts = urlsplit(url)
    if (parts.hostname or "").lower() not in _LOCAL_NAMES:
        return url
    origin = urlsplit(card_url)
    return urlunsplit((origin.scheme, origin.netloc, parts.path or "/", parts.query, ""))
