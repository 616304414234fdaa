"""What a call to a member does not carry of the component's headers.

Step 4 of the formation proxy (docs/proxy.md) strips before it stamps; this is the
stripping. In order: the headers that belong to the runtime or to one hop (the forward
proxy drops the hop-by-hop set too); :func:`header_key`, a header name as compared here;
:func:`forwarded_headers`, a component's headers as a call to a member carries them;
:func:`without_runtime_headers`, a request to any other host minus the runtime's
``x-murmur-`` namespace. The stamping (token, origin, trust, trace context, ``Host``,
framing) is inline in ``FormationTransport._send_to_member``, on the request path.
"""

from __future__ import annotations

from typing import Final

import httpx

from gateway.protocol import RUNTIME_HEADER_PREFIX

#: Headers that belong to the runtime on a call to a member. The whole ``x-murmur-``
#: namespace is the runtime's, so it goes too; names compare in lower case with ``_``
#: read as ``-``.
_AUTHORIZATION: Final = "authorization"
#: RFC 9110 section 7.6.1 plus the names proxies have historically treated the same way.
HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
#: Framing is recomputed from the body the transport forwards, never copied.
_RECOMPUTED: Final = frozenset({"host", "content-length"})


def header_key(name: bytes) -> bytes:
    """A header name as compared here: trimmed, lower case, ``_`` read as ``-``."""
    key = _HEADER_KEYS.get(name)
    if key is None:
        key = name.strip().lower().replace(b"_", b"-")
        if len(_HEADER_KEYS) < 512:           # clients repeat the same few names
            _HEADER_KEYS[name] = key
    return key


_HEADER_KEYS: dict[bytes, bytes] = {}

_DROPPED: Final = frozenset(
    name.encode("ascii") for name in HOP_BY_HOP | _RECOMPUTED | {_AUTHORIZATION})
_RUNTIME_PREFIX_BYTES: Final = RUNTIME_HEADER_PREFIX.encode("ascii")
_CONNECTION_NAMES: Final = (b"connection", b"proxy-connection")


def forwarded_headers(raw: list[tuple[bytes, bytes]], keys: list[bytes] | None = None
                      ) -> list[tuple[bytes, bytes]]:
    """The component's headers minus ``Authorization``, the ``x-murmur-`` namespace,
    hop-by-hop headers, every header a ``Connection`` header names, and the framing and
    ``Host`` headers the transport sets itself. ``keys``: each header's name as
    :func:`header_key` reads it, when the caller has them."""
    if keys is None:
        keys = [header_key(name) for name, _ in raw]
    named: set[bytes] = set()
    for key, (_, value) in zip(keys, raw, strict=True):
        if key in _CONNECTION_NAMES:
            named.update(header_key(token) for token in value.split(b","))
    return [header for key, header in zip(keys, raw, strict=True)
            if key not in _DROPPED and key not in named
            and not key.startswith(_RUNTIME_PREFIX_BYTES)]


def without_runtime_headers(request: httpx.Request) -> httpx.Request:
    """A real-host request minus the ``x-murmur-`` headers (the same request when it has
    none). Its own ``Authorization`` (an API key of the component's) and all its other
    headers stay."""
    raw = request.headers.raw
    kept = [(name, value) for name, value in raw
            if not header_key(name).startswith(_RUNTIME_PREFIX_BYTES)]
    if len(kept) == len(raw):
        return request
    return httpx.Request(request.method, request.url, headers=kept, stream=request.stream,
                         extensions=request.extensions)

