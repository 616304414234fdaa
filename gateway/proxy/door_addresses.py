"""A door's real address never reaches a component: failures on a call to a member.

Only the runtime holds door URLs; a component knows a callee by its virtual address. In
order: :class:`DoorAddresses`, the real door addresses one proxy has used and their
rewriting, in error text, into the callee's virtual address; :func:`scrubbed_failure`,
what a component sees of a failure below the proxy; :class:`SanitizedStream`, a
member's response body whose read failures are scrubbed the same way.
``FormationTransport.scrub`` (also used by call-member and the forward proxy) removes
the formation tokens and then calls :meth:`DoorAddresses.scrub`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Final

import httpx

from gateway.proxy.egress import default_port as _default_port
from gateway.proxy.egress import virtual_address

#: How error texts write a loopback door's host besides the door URL's own spelling.
_LOOPBACK_SPELLINGS: Final = ("127.0.0.1", "localhost", "[::1]", "::1")


class DoorAddresses:
    """The real door addresses this proxy has used, and their removal from error text.

    Each known door's port, written ``[scheme://]<host>:<port>`` with the door URL's own
    host or any loopback spelling (``127.0.0.1``, ``localhost``, ``[::1]``), or as the
    socket address an OSError quotes (``('127.0.0.1', <port>)``, ``('::1', <port>, 0,
    0)``), becomes the callee's virtual address. Only error paths call :meth:`scrub`;
    the pattern is rebuilt when a door is added (once per callee).
    """

    __slots__ = ("_hosts", "_members", "_pattern")

    def __init__(self) -> None:
        self._members: dict[str, str] = {}          # port (text) -> callee
        self._hosts: set[str] = set(_LOOPBACK_SPELLINGS)
        self._pattern: re.Pattern[str] | None = None

    def __repr__(self) -> str:  # never the addresses
        return f"DoorAddresses({len(self._members)} doors)"

    def add(self, member: str, url: httpx.URL) -> None:
        port = url.port if url.port is not None else _default_port(url.scheme)
        if port is None:
            return
        self._members[str(port)] = member
        host = url.host
        self._hosts.update((host, f"[{host}]") if ":" in host else (host,))
        self._pattern = None

    def scrub(self, text: str) -> str:
        """``text`` with every spelling of a known door address as the virtual address."""
        if not self._members:
            return text
        pattern = self._pattern
        if pattern is None:
            pattern = self._pattern = self._compile()
        return pattern.sub(self._virtual, text)

    def _compile(self) -> re.Pattern[str]:
        # Longest first, so "[::1]" is taken whole before "::1" could match inside it.
        hosts = sorted(self._hosts, key=len, reverse=True)
        written = "|".join(re.escape(host) for host in hosts)
        quoted = "|".join(re.escape(host) for host in hosts if not host.startswith("["))
        ports = "|".join(sorted(self._members, key=len, reverse=True))
        return re.compile(
            rf"(?i:(?:[a-z][a-z0-9+.-]*://)?(?:{written})):(?P<port>{ports})(?![0-9])"
            rf"|\(\s*'(?i:{quoted})',\s*(?P<quoted>{ports})(?:,\s*[0-9]+)*\s*\)")

    def _virtual(self, match: re.Match[str]) -> str:
        port = match["port"]
        if port is not None:
            return virtual_address(self._members[port])
        return f"({virtual_address(self._members[match['quoted']])})"


def scrubbed_failure(exc: Exception, request: httpx.Request,
                     scrub: Callable[[str], str]) -> httpx.TransportError:
    """What a component sees of ``exc``, raised below the proxy on a call to a member:
    the same httpx class (anything else: ``httpx.TransportError`` naming its class) with
    the text scrubbed, against the component's own request, and with no chain back."""
    text = scrub(str(exc))
    if isinstance(exc, httpx.TransportError):
        try:
            return type(exc)(text, request=request)
        except TypeError:       # a subclass with a constructor of its own
            pass
    return httpx.TransportError(f"{type(exc).__name__}: {text}", request=request)


class SanitizedStream(httpx.AsyncByteStream):
    """A member's response body: a failure while reading it is re-raised against the
    component's own request with the token and door address scrubbed, as for a failure
    to send."""

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream,
                 request: httpx.Request, scrub: Callable[[str], str]) -> None:
        assert isinstance(inner, httpx.AsyncByteStream)
        self._inner = inner
        self._request = request
        self._scrub = scrub

    async def __aiter__(self) -> AsyncIterator[bytes]:
        failure: httpx.TransportError | None = None
        try:
            async for chunk in self._inner:
                yield chunk
        except Exception as exc:  # noqa: BLE001 - whatever failed below, its text is scrubbed
            failure = scrubbed_failure(exc, self._request, self._scrub)
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()
