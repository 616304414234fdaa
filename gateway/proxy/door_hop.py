"""The forward proxy's hop to a member's door, in bytes.

A request the forward proxy takes for a callee whose door it knows goes to that door
without httpx: :meth:`FormationTransport.member_hop` stamps it (steps 2 to 4, one
implementation for both ways) and this module carries it. In order:

1. :class:`HopFailed`, what goes wrong on the way, named as httpx names it (the agent's
   answer says ``... cannot be reached (ConnectError)`` whichever way the request took);
2. the answer's head, read strictly (:func:`parse_answer_head`), once for each head a
   door repeats (:func:`read_answer_head`);
3. :class:`DoorConnections`, kept-alive connections to each door: a request goes out on
   an idle one when there is one, and once more on a new one when the door had closed
   the idle one before it answered a byte (a door ends an idle connection after a few
   seconds; it read nothing of the request then);
4. the answer's body as it arrives (:func:`body_chunks`): sized, chunked, or up to the
   close.

Only the member runtime holds door addresses: nothing here puts one into an error.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from gateway.errors import GatewayError
from gateway.proxy.http_head import MalformedHead, ReadOnce, head_lines

# --------------------------------------------------------------------------------------
# 1. Failures


class HopFailed(GatewayError):
    """The door could not be reached, or its answer could not be read. ``kind`` is the
    httpx exception's name for the same failure."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


# --------------------------------------------------------------------------------------
# 2. The answer's head

_STATUS_LINE: Final = re.compile(rb"HTTP/1\.([01]) ([2-5][0-9]{2})(?: ([\t\x20-\x7e\x80-\xff]*))?")
#: An answer head past this many bytes is no door's.
ANSWER_HEAD_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class AnswerHead:
    """A door's answer head: its status, reason phrase, headers as sent, and how its
    body is framed."""

    minor: int
    status: int
    reason: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    keys: tuple[bytes, ...]         # each header's name as compared
    length: int | None              # Content-Length, when the body is sized
    chunked: bool
    close: bool                     # the door ends the connection after this answer
    raw: bytes                      # the head as it came, its final empty line included


def parse_answer_head(data: bytes) -> AnswerHead:
    """The head ``data`` (without its final empty line); :class:`HopFailed` when it is
    not one a door writes (ambiguous framing included)."""
    try:
        first, headers, keys = head_lines(data)
    except MalformedHead:
        raise HopFailed("RemoteProtocolError") from None
    status_line = _STATUS_LINE.fullmatch(first)
    if status_line is None:
        raise HopFailed("RemoteProtocolError")
    lengths: list[bytes] = []
    codings: list[bytes] = []
    connection: list[bytes] = []
    for key, (_, value) in zip(keys, headers, strict=True):
        if key == b"content-length":
            lengths.append(value)
        elif key == b"transfer-encoding":
            codings.append(value.lower())
        elif key == b"connection":
            connection.append(value.lower())
    minor = int(status_line[1])
    chunked = bool(codings)
    if chunked and (lengths or codings != [b"chunked"]):
        raise HopFailed("RemoteProtocolError")
    if len(lengths) > 1 or (lengths and not (lengths[0].isdigit() and len(lengths[0]) < 19)):
        raise HopFailed("RemoteProtocolError")
    close = minor == 0 or any(b"close" in value for value in connection)
    return AnswerHead(minor, int(status_line[2]), status_line[3] or b"", tuple(headers),
                      tuple(keys), int(lengths[0]) if lengths else None, chunked, close,
                      data + b"\r\n\r\n")


#: :func:`parse_answer_head` of a whole answer head (its final empty line included), read
#: once for each head a door repeats (:class:`~gateway.proxy.http_head.ReadOnce`; an
#: AnswerHead's fields are immutable).
read_answer_head: Final = ReadOnce(lambda head: parse_answer_head(head[:-4]))


# --------------------------------------------------------------------------------------
# 3. Connections


@dataclass(slots=True)
class DoorConnection:
    """One connection to a door."""

    address: tuple[str, int]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = field(default=False)


class DoorConnections:
    """Kept-alive connections to the doors one member calls (see the module text).
    At most ``idle`` idle ones a door are kept; a connection that carried an answer
    whose body was not read to its end is closed, never kept."""

    def __init__(self, *, connect_seconds: float, idle: int = 64) -> None:
        self._connect_seconds = connect_seconds
        self._idle_limit = idle
        self._idle: dict[tuple[str, int], list[DoorConnection]] = {}
        self._closed = False

    def __repr__(self) -> str:  # never the addresses
        return f"DoorConnections({sum(len(idle) for idle in self._idle.values())} idle)"

    async def send(self, address: tuple[str, int], data: bytes
                   ) -> tuple[DoorConnection, AnswerHead]:
        """Write ``data`` (a request, whole) to the door at ``address``; the connection
        and the answer's head. Raises :class:`HopFailed`."""
        connection = self._take(address)
        if connection is not None:
            try:
                return connection, await self._exchange(connection, data)
            except _ClosedBeforeAnswer:
                self.discard(connection)    # the door closed it idle: it read nothing
        connection = await self._open(address)
        try:
            return connection, await self._exchange(connection, data)
        except _ClosedBeforeAnswer:
            self.discard(connection)
            raise HopFailed("RemoteProtocolError") from None

    def release(self, connection: DoorConnection) -> None:
        """``connection`` carried its answer to the end: kept for the next request."""
        idle = self._idle.setdefault(connection.address, [])
        if self._closed or len(idle) >= self._idle_limit or connection.writer.is_closing():
            self.discard(connection)
            return
        connection.reused = True
        idle.append(connection)

    @staticmethod
    def discard(connection: DoorConnection) -> None:
        connection.writer.close()

    def close(self) -> None:
        """Close every idle connection; a connection in use is closed when released."""
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                self.discard(connection)
        self._idle.clear()

    def _drop_closed(self) -> None:
        """Close the idle connections their doors ended, of every door: a member that
        was restarted has a new address, and nothing would take the old one's again."""
        for address, idle in list(self._idle.items()):
            alive = [connection for connection in idle
                     if not connection.reader.at_eof() and not connection.writer.is_closing()]
            for connection in idle:
                if connection not in alive:
                    self.discard(connection)
            if alive:
                self._idle[address] = alive
            else:
                del self._idle[address]

    def _take(self, address: tuple[str, int]) -> DoorConnection | None:
        idle = self._idle.get(address)
        while idle:
            connection = idle.pop()
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return connection
            self.discard(connection)
        return None

    async def _open(self, address: tuple[str, int]) -> DoorConnection:
        self._drop_closed()
        try:
            async with asyncio.timeout(self._connect_seconds):
                reader, writer = await asyncio.open_connection(
                    address[0], address[1], limit=ANSWER_HEAD_BYTES)
        except TimeoutError:
            raise HopFailed("ConnectTimeout") from None
        except OSError:
            raise HopFailed("ConnectError") from None
        return DoorConnection(address, reader, writer)

    @staticmethod
    async def _exchange(connection: DoorConnection, data: bytes) -> AnswerHead:
        connection.writer.write(data)
        try:
            head = await connection.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial and connection.reused:
                raise _ClosedBeforeAnswer from None
            DoorConnections.discard(connection)
            raise HopFailed("RemoteProtocolError") from None
        except asyncio.LimitOverrunError:
            DoorConnections.discard(connection)
            raise HopFailed("RemoteProtocolError") from None
        except OSError:
            if connection.reused:
                raise _ClosedBeforeAnswer from None
            DoorConnections.discard(connection)
            raise HopFailed("ReadError") from None
        try:
            return read_answer_head(head)
        except HopFailed:
            DoorConnections.discard(connection)
            raise


class _ClosedBeforeAnswer(GatewayError):
    """A kept-alive connection the door had closed: not one byte of an answer came."""


# --------------------------------------------------------------------------------------
# 4. The body

#: The most read at once of a sized body, so a large one goes on as it arrives.
_PIECE: Final = 64 * 1024
_CHUNK_SIZE: Final = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_TRAILER_LINES: Final = 64


async def body_chunks(reader: asyncio.StreamReader, head: AnswerHead) -> AsyncIterator[bytes]:
    """The body of the answer ``head`` as it arrives, without its framing; raises
    :class:`HopFailed` when it ends short or its chunking is malformed."""
    try:
        if head.chunked:
            async for chunk in _chunked(reader):
                yield chunk
        elif head.length is not None:
            left = head.length
            while left:
                piece = await reader.readexactly(min(left, _PIECE))
                left -= len(piece)
                yield piece
        else:
            while chunk := await reader.read(_PIECE):
                yield chunk
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise HopFailed("RemoteProtocolError") from None
    except OSError:
        raise HopFailed("ReadError") from None


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_text = (await reader.readuntil(b"\r\n"))[:-2].partition(b";")[0].strip()
        if _CHUNK_SIZE.fullmatch(size_text) is None:
            raise HopFailed("RemoteProtocolError")
        size = int(size_text, 16)
        if size == 0:
            break
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise HopFailed("RemoteProtocolError")
        yield chunk[:-2]
    for _ in range(_MAX_TRAILER_LINES):
        if await reader.readuntil(b"\r\n") == b"\r\n":
            return
    raise HopFailed("RemoteProtocolError")
