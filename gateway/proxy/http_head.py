"""The header lines of an HTTP/1.1 head, read strictly and cheaply.

The forward proxy reads two kinds of head with it: its agent's requests
(``forward_request``) and the answers of the doors its hop reaches (``door_hop``). It is
on every call an agent makes, so it reads a head with a few scans of the whole head
instead of a regular expression per line. In order:

1. the whole head: CRLF line ends only (a lone CR or LF anywhere is refused), and no
   control character other than HTAB;
2. each header line: a token name right before its colon (no space, so no line folding
   either), then its value without the spaces and tabs around it;
3. the name as compared: lower case, ``_`` read as ``-`` (as the formation proxy
   compares names), remembered for the few names clients repeat;
4. :class:`ReadOnce`: a whole head read once for as long as the same bytes come back
   (what reads it, the request's or the answer's, is the caller's).

A head read two ways (by the proxy and by what is behind it) is how one request is
smuggled inside another; everything it does not take, it refuses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from gateway.errors import GatewayError

#: Control characters other than HTAB, CR and LF (those two are counted apart).
_CONTROLS: Final = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Names seen, by the key they compare as; bounded (clients repeat a few names).
_KEYS: dict[bytes, bytes] = {}
_KEYS_KEPT: Final = 512
_SPACES: Final = b" \t"


class MalformedHead(GatewayError, ValueError):
    """The head breaks one of the rules in the module text."""


def head_lines(data: bytes) -> tuple[bytes, list[tuple[bytes, bytes]], list[bytes]]:
    """``data`` (a head without its final empty line) as its first line, its headers
    ``(name, value)`` in order, and each header's key; raises :class:`MalformedHead`."""
    lines = data.split(b"\r\n")
    breaks = len(lines) - 1
    if data.count(b"\r") != breaks or data.count(b"\n") != breaks:
        raise MalformedHead("a line ends with a lone CR or LF")
    if len(data.translate(None, _CONTROLS)) != len(data):     # a scan in C, no regex
        raise MalformedHead("a control character")
    headers: list[tuple[bytes, bytes]] = []
    keys: list[bytes] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        key = _KEYS.get(name)
        if key is None:
            if not colon or _TOKEN.fullmatch(name) is None:
                raise MalformedHead("a header line is not 'name: value'")
            key = name.lower().replace(b"_", b"-")
            if len(_KEYS) < _KEYS_KEPT:
                _KEYS[name] = key
        elif not colon:
            raise MalformedHead("a header line is not 'name: value'")
        headers.append((name, value.strip(_SPACES)))
        keys.append(key)
    return lines[0], headers, keys


#: What a head reads as (a request's head, a door's answer head).
Read = TypeVar("Read")


class ReadOnce(Generic[Read]):
    """``read(head)`` for a whole head (its final empty line included), done once for as
    long as the same bytes come back. An agent repeats a few request heads and a door a
    few answer heads (its ``Date`` changes once a second, its ``Content-Length`` with the
    body), and reading one cost a tenth of the proxy's CPU on a call; the same bytes
    always read the same, so what ``read`` returns must never change. A head ``read``
    refuses is refused every time (nothing is kept of it). Bounded: heads of at most
    :attr:`KEPT_BYTES` only, :attr:`KEPT` of them, emptied when full (at most 1 MiB)."""

    KEPT: Final = 256
    KEPT_BYTES: Final = 4096

    __slots__ = ("_kept", "_read")

    def __init__(self, read: Callable[[bytes], Read]) -> None:
        self._read = read
        self._kept: dict[bytes, Read] = {}

    def __call__(self, head: bytes) -> Read:
        known = self._kept.get(head)
        if known is None:
            known = self._read(head)
            if len(head) <= self.KEPT_BYTES:
                if len(self._kept) >= self.KEPT:
                    self._kept.clear()
                self._kept[head] = known
        return known

    def __len__(self) -> int:
        """How many heads are kept."""
        return len(self._kept)
