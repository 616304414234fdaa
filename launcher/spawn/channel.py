"""The formation channel: how the launcher hands a member its credentials and addresses.

One JSON object a line, on a pipe only that member inherits (docs/runtime-files.md)::

    {"formation":"frm_…","member":"planner","key":"<base64url>",
     "tokens":{"coder":"mft1…"},"entry":false}            first line, before it starts
    {"doors":{"coder":"http://127.0.0.1:41234"}}          later lines (again with a
                                                          new URL: a restarted member)
    {"card_signature":{"protected":"…","signature":"…"}}  the member's card, signed

A member of a version 2 roster that something bounds also finds ``bounds`` on its first
line (docs/bounds.md): ``{"depth":4,"incoming":{"planner":{"calls":50}},"calls":200}``,
the formation's depth, the limits of the edges into it by caller, and its own ``calls``
and ``tokens`` (:class:`MemberBounds`). Every other first line is exactly the above.

``key`` is the raw 32-byte Ed25519 public key in unpadded base64url. The launcher writes
with :class:`ChannelWriter`; the member reads the first line with
:func:`read_credentials`, which refuses with ``E-RUN-046`` in every case docs/runtime-files.md
"The formation channel" lists, then follows later lines with a :class:`DoorDirectory`.

No token or key is ever put in an exception's text or an object's repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import select
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from gateway.auth.tokens import (
    FormationVerifier,
    InvalidToken,
    b64url_decode_canonical,
    b64url_encode,
)
from gateway.protocol import MEMBER_NAME_RE
from launcher.diagnostics import DiagnosticError
from launcher.errors import LauncherError
from launcher.ids import is_formation_id
from launcher.spawn.env_names import CHANNEL_ENV, FORMATION_ENV, PEERS_ENV
from launcher.spawn.member_bounds import MemberBounds
from launcher.spawn.process import read_ready

#: How long a member waits for its first line, and a proxy for a callee's door.
DEFAULT_TIMEOUT = 10.0
#: The longest first line accepted (tokens are at most 512 bytes each).
MAX_FIRST_LINE = 4 * 1024 * 1024
#: The longest later line kept; a longer one is dropped.
MAX_DOORS_LINE = 1024 * 1024

_CREDENTIAL_KEYS = frozenset({"formation", "member", "key", "tokens", "entry"})
_BOUNDS_KEY = "bounds"
_CARD_SIGNATURE_KEY = "card_signature"

RefusalCase = Literal[
    "roster_inside_formation",
    "peers_in_environment",
    "channel_without_id",
    "not_a_number",
    "not_open",
    "not_pipe_or_file",
    "no_first_line",
    "not_credentials",
    "token_not_issued",
    "other_formation",
    "spawner_beside_formation",
]


class ChannelRefused(DiagnosticError):
    """``E-RUN-046``. ``case`` names which of the channel's refused cases it is."""

    def __init__(self, case: RefusalCase, problem: str, path: str = CHANNEL_ENV) -> None:
        super().__init__("E-RUN-046", path, problem=problem)
        self.case = case


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True, repr=False, eq=False)
class ChannelCredentials:
    """A member's first channel line, checked.

    ``tokens`` maps each callee to its ``mft1`` token, in the order the launcher wrote
    them (roster order). ``fd`` is the channel, ``pending`` the bytes already read past
    the first line: hand both on with :meth:`DoorDirectory.for_channel`.
    """

    formation_id: str
    member: str
    key: bytes
    tokens: Mapping[str, str]
    entry: bool
    fd: int
    pending: bytes = b""
    #: What a version 2 roster bounds for this member (none: nothing).
    bounds: MemberBounds | None = None

    @property
    def callees(self) -> tuple[str, ...]:
        """The members this one may call."""
        return tuple(self.tokens)

    def __repr__(self) -> str:
        return (f"ChannelCredentials(formation_id={self.formation_id!r}, "
                f"member={self.member!r}, callees={list(self.tokens)!r}, entry={self.entry})")

    __str__ = __repr__


def _not_credentials(problem: str) -> ChannelRefused:
    return ChannelRefused(
        "not_credentials",
        f"the first line on the formation channel is not a member's credentials: {problem}",
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice")
    return dict(pairs)


def _parse_first_line(line: bytes) -> dict[str, Any]:
    try:
        data = json.loads(line.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _not_credentials("it is not one JSON object with unique keys") from None
    if not isinstance(data, dict):
        raise _not_credentials("it is not a JSON object")
    if set(data) - {_BOUNDS_KEY} != _CREDENTIAL_KEYS:
        raise _not_credentials("it must hold exactly formation, member, key, tokens, entry "
                               "(and bounds, for a member a version 2 roster bounds)")
    if not is_formation_id(data["formation"]):
        raise _not_credentials("`formation` must be a formation id (frm_ and 32 hex digits)")
    member = data["member"]
    if not isinstance(member, str) or MEMBER_NAME_RE.fullmatch(member) is None:
        raise _not_credentials(f"`member` must be a member name matching {MEMBER_NAME_RE.pattern}")
    if not isinstance(data["entry"], bool):
        raise _not_credentials("`entry` must be true or false")
    tokens = data["tokens"]
    if not isinstance(tokens, dict):
        raise _not_credentials("`tokens` must be an object of member names to tokens")
    for callee, token in tokens.items():
        if MEMBER_NAME_RE.fullmatch(callee) is None or callee == member:
            raise _not_credentials("every key of `tokens` must name another member")
        if not isinstance(token, str):
            raise _not_credentials(f"the token for `{callee}` must be a string")
    if _BOUNDS_KEY in data:
        try:
            data[_BOUNDS_KEY] = MemberBounds.from_wire(data[_BOUNDS_KEY])
        except ValueError as problem:
            raise _not_credentials(f"`bounds`: {problem}") from None
    return data


def _verifier(text: object, formation: str) -> FormationVerifier:
    """The verifier of the line's key: the door's own (gateway.auth.tokens), so the channel
    accepts exactly the tokens a door would."""
    problem = "`key` must be the 32-byte Ed25519 public key in unpadded base64url"
    if not isinstance(text, str):
        raise _not_credentials(problem)
    try:
        raw = b64url_decode_canonical(text)
        if len(raw) != 32:
            raise ValueError(problem)
        return FormationVerifier(raw, formation)
    except ValueError:
        raise _not_credentials(problem) from None


def token_issued_to(token: str, verifier: FormationVerifier, *, caller: str,
                    callee: str) -> bool:
    """True when ``token`` verifies (signature, canonical form, the verifier's formation)
    and lets ``caller`` call ``callee``."""
    try:
        claims = verifier.verify(token)
    except InvalidToken:
        return False
    return claims.caller == caller and claims.callee == callee


# --------------------------------------------------------------------------- reading


def _channel_fd(environ: Mapping[str, str]) -> int:
    """The channel's descriptor after the environment and descriptor checks."""
    if not environ.get(FORMATION_ENV):
        raise ChannelRefused("channel_without_id",
                             f"{CHANNEL_ENV} is set without {FORMATION_ENV}")
    value = environ[CHANNEL_ENV]
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise ChannelRefused("not_a_number",
                             f"{CHANNEL_ENV} must be a file descriptor number")
    fd = int(value)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise ChannelRefused("not_open", f"{CHANNEL_ENV} names descriptor {fd}, which is "
                             "not open") from None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        raise ChannelRefused("not_pipe_or_file", f"{CHANNEL_ENV} names descriptor {fd}, "
                             "which is neither a pipe nor a file")
    return fd


def _read_first_line(fd: int, timeout: float) -> tuple[bytes, bytes]:
    """(first line, bytes after it) read from ``fd`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    buffer = bytearray()
    while (newline := buffer.find(b"\n")) < 0:
        if len(buffer) > MAX_FIRST_LINE:
            raise _not_credentials(f"it is longer than {MAX_FIRST_LINE} bytes")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ChannelRefused("no_first_line", "no first line arrived on the formation "
                                 f"channel within {timeout:g} seconds")
        if not poller.poll(math.ceil(remaining * 1000)):
            continue
        chunk = read_ready(fd)
        if chunk is None:
            continue
        if not chunk:
            if buffer:  # the writer ended without a newline: the line is complete
                return bytes(buffer), b""
            raise ChannelRefused("no_first_line", "the formation channel closed before its "
                                 "first line arrived")
        buffer += chunk
    return bytes(buffer[:newline]), bytes(buffer[newline + 1:])


def read_credentials(environ: Mapping[str, str],
                     timeout: float = DEFAULT_TIMEOUT) -> ChannelCredentials | None:
    """Read and check the member's first channel line, before the session is staged.

    None when ``MURMUR_FORMATION_CHANNEL`` is unset (no formation channel). Otherwise
    the checked credentials, or :class:`ChannelRefused` (``E-RUN-046``) when:
    ``MURMUR_FORMATION_PEERS`` is set in ``environ`` (checked first, channel or not);
    the channel is set without ``MURMUR_FORMATION_ID``; it is not a descriptor number,
    not open, or neither a pipe nor a regular file; no first line arrives within
    ``timeout`` seconds; the line is not credentials; a token in it was not issued to
    this member for that callee in that formation under that key; or it names another
    formation than ``MURMUR_FORMATION_ID``.

    The channel descriptor is made non-inheritable, so the member's own children never
    receive it.
    """
    if PEERS_ENV in environ:
        raise ChannelRefused("peers_in_environment", f"{PEERS_ENV} is set in mur run's own "
                             "environment; the runtime sets it for components only",
                             path=PEERS_ENV)
    if CHANNEL_ENV not in environ:
        return None
    fd = _channel_fd(environ)
    with contextlib.suppress(OSError):
        os.set_inheritable(fd, False)
    line, rest = _read_first_line(fd, timeout)
    data = _parse_first_line(line)
    formation, member = data["formation"], data["member"]
    verifier = _verifier(data["key"], formation)
    for callee, token in data["tokens"].items():
        if not token_issued_to(token, verifier, caller=member, callee=callee):
            raise ChannelRefused(
                "token_not_issued",
                f"the token for `{callee}` on the formation channel was not issued to "
                f"member `{member}` of formation {formation}",
            )
    if formation != environ[FORMATION_ENV]:
        raise ChannelRefused(
            "other_formation",
            f"the formation channel names formation {formation}, not {FORMATION_ENV} "
            f"({environ[FORMATION_ENV][:40]})",
        )
    return ChannelCredentials(
        formation_id=formation, member=member, key=b64url_decode_canonical(data["key"]),
        tokens=MappingProxyType(dict(data["tokens"])), entry=data["entry"], fd=fd,
        pending=rest, bounds=data.get(_BOUNDS_KEY),
    )


def refuse_roster_inside_formation(environ: Mapping[str, str]) -> None:
    """``mur run --roster`` in a process that carries ``MURMUR_FORMATION_ID``: it is a
    formation member, and refuses with :class:`ChannelRefused` (``E-RUN-046``)."""
    if FORMATION_ENV in environ:
        raise ChannelRefused(
            "roster_inside_formation",
            f"this process carries {FORMATION_ENV}, so it is a formation member, and a "
            "member cannot launch a formation",
            path=FORMATION_ENV,
        )


# --------------------------------------------------------------------------- writing


def encode_credentials(*, formation_id: str, member: str, key: bytes,
                       tokens: Mapping[str, str], entry: bool,
                       bounds: Mapping[str, Any] | None = None) -> bytes:
    """The first channel line, newline included."""
    if not is_formation_id(formation_id):
        raise ValueError("formation_id must be frm_ followed by 32 lowercase hex digits")
    if MEMBER_NAME_RE.fullmatch(member) is None:
        raise ValueError(f"member must match {MEMBER_NAME_RE.pattern}")
    if not isinstance(key, bytes) or len(key) != 32:
        raise ValueError("key must be the raw 32-byte Ed25519 public key")
    line = {"formation": formation_id, "member": member, "key": b64url_encode(key),
            "tokens": dict(tokens), "entry": bool(entry)}
    if bounds:
        line[_BOUNDS_KEY] = MemberBounds.from_wire(bounds).wire()   # checked as read
    return json.dumps(line, separators=(",", ":")).encode("ascii") + b"\n"


def encode_card_signature(signature: Mapping[str, str]) -> bytes:
    """A later channel line: the member's card signature, made by the launcher."""
    return json.dumps({_CARD_SIGNATURE_KEY: dict(signature)},
                      separators=(",", ":")).encode("ascii") + b"\n"


def encode_doors(doors: Mapping[str, str]) -> bytes:
    """A later channel line, newline included."""
    for name, url in doors.items():
        if MEMBER_NAME_RE.fullmatch(name) is None or not _is_door_url(url):
            raise ValueError(f"door of `{name}` must be an http URL with a host")
    return json.dumps({"doors": dict(doors)}, separators=(",", ":")).encode("ascii") + b"\n"


class ChannelWriter:
    """The launcher's end of one member's channel (a pipe's write end it owns).

    Write the credentials once, first; then any number of door lines; then close.
    A write to a member that already exited raises BrokenPipeError.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._credentials_written = False

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            raise ValueError("the formation channel is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def write_credentials(self, *, formation_id: str, member: str, key: bytes,
                          tokens: Mapping[str, str], entry: bool,
                          bounds: Mapping[str, Any] | None = None) -> None:
        if self._credentials_written:
            raise RuntimeError("the credentials line is written once")
        self._write(encode_credentials(formation_id=formation_id, member=member, key=key,
                                       tokens=tokens, entry=entry, bounds=bounds))
        self._credentials_written = True

    def write_card_signature(self, signature: Mapping[str, str]) -> None:
        if not self._credentials_written:
            raise RuntimeError("the credentials line must be written first")
        self._write(encode_card_signature(signature))

    def write_doors(self, doors: Mapping[str, str]) -> None:
        if not self._credentials_written:
            raise RuntimeError("the credentials line must be written before any doors")
        self._write(encode_doors(doors))

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __repr__(self) -> str:
        return f"ChannelWriter(fd={self._fd})"


# --------------------------------------------------------------------------- doors


def _is_door_url(url: object) -> bool:
    if not isinstance(url, str) or len(url) > 2048:
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class DoorAddressMissing(LauncherError, TimeoutError):
    """No door URL is known for a callee, and none is coming in time. A TimeoutError,
    as ``gateway.proxy.formation.DoorDirectory``'s protocol expects of ``wait_for``."""


class DoorDirectory:
    """Callee name to door URL, fed by the channel's later lines in the background.

    Build it with :meth:`for_channel`; call :meth:`start` inside the running loop; then
    :meth:`wait_for` a callee's URL. It takes over the channel descriptor and closes it
    at end of file or :meth:`close`. Lines that are not ``{"doors": {...}}``, names
    that are not callees, and URLs that are not http URLs are ignored and described in
    :attr:`problems`.
    """

    def __init__(self, fd: int | None = None, *, pending: bytes = b"",
                 callees: Iterable[str] | None = None) -> None:
        self._fd = -1 if fd is None else fd
        self._buffer = bytearray(pending)
        self._callees = None if callees is None else frozenset(callees)
        self._doors: dict[str, str] = {}
        self._ended = fd is None
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.problems: list[str] = []
        #: The member's card signature, from the launcher (docs/audit.md).
        self.card_signature: dict[str, Any] | None = None
        self._on_card_signature: Callable[[dict[str, Any]], None] | None = None
        self._on_doors: list[Callable[[Iterable[str]], None]] = []

    @classmethod
    def for_channel(cls, credentials: ChannelCredentials) -> DoorDirectory:
        return cls(credentials.fd, pending=credentials.pending,
                   callees=credentials.callees)

    @property
    def doors(self) -> dict[str, str]:
        return dict(self._doors)

    @property
    def ended(self) -> bool:
        """True once the channel reached end of file: no more doors will arrive."""
        return self._ended

    def get(self, name: str) -> str | None:
        return self._doors.get(name)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Take in the lines already read, then follow the channel on ``loop`` (the
        running loop by default). A regular-file channel is read to its end at once."""
        self._loop = loop or asyncio.get_running_loop()
        self._take_lines()
        if self._fd < 0:
            return
        if stat.S_ISREG(os.fstat(self._fd).st_mode):
            while self._read_once():
                pass
            return
        self._loop.add_reader(self._fd, self._read_once)

    def _read_once(self) -> bool:
        chunk = read_ready(self._fd)
        if chunk is None:
            return True
        if not chunk:
            if self._buffer:
                self._take_line(bytes(self._buffer))
                self._buffer.clear()
            self._end()
            return False
        self._buffer += chunk
        self._take_lines()
        return True

    def _take_lines(self) -> None:
        while (newline := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:newline])
            del self._buffer[:newline + 1]
            self._take_line(line)
        if len(self._buffer) > MAX_DOORS_LINE:
            self._buffer.clear()
            self.problems.append(f"a channel line longer than {MAX_DOORS_LINE} bytes")

    def _take_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, dict) and set(data) == {_CARD_SIGNATURE_KEY} and isinstance(
                data[_CARD_SIGNATURE_KEY], dict):
            self._card_signature(data[_CARD_SIGNATURE_KEY])
            return
        if not isinstance(data, dict) or set(data) != {"doors"} or not isinstance(
                data["doors"], dict):
            self.problems.append('a channel line that is not {"doors": {...}}')
            return
        updates = {}
        for name, url in data["doors"].items():
            if self._callees is not None and name not in self._callees:
                self.problems.append(f"a door for `{name[:40]}`, which is not a callee")
            elif not _is_door_url(url):
                self.problems.append(f"a door for `{name}` that is not an http URL")
            else:
                updates[name] = url
        if updates:
            self.set(updates)

    def _card_signature(self, signature: dict[str, Any]) -> None:
        self.card_signature = {str(key): value for key, value in signature.items()}
        if self._on_card_signature is not None:
            self._on_card_signature(self.card_signature)

    def on_card_signature(self, hook: Callable[[dict[str, Any]], None]) -> None:
        """Hand the card signature the launcher sends (``{"card_signature": {...}}``)
        to ``hook``: at once when it came already, else when it comes."""
        self._on_card_signature = hook
        if self.card_signature is not None:
            hook(self.card_signature)

    def on_doors(self, hook: Callable[[Iterable[str]], None]) -> None:
        """Call ``hook(names)`` each time door URLs arrive for ``names`` (a restarted
        member's new door, after the first)."""
        self._on_doors.append(hook)

    def set(self, doors: Mapping[str, str]) -> None:
        """Record door URLs (as a channel line would) and wake their waiters."""
        moved = [name for name, url in doors.items() if self._doors.get(name, url) != url]
        self._doors.update(doors)
        self._notify()
        if moved:
            for hook in self._on_doors:
                hook(moved)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _end(self) -> None:
        if self._fd >= 0:
            if self._loop is not None:
                self._loop.remove_reader(self._fd)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        self._ended = True
        self._notify()

    async def wait_for(self, name: str, timeout: float = DEFAULT_TIMEOUT) -> str:
        """The door URL of ``name``, waiting up to ``timeout`` seconds for it to arrive.

        Raises :class:`DoorAddressMissing` when ``name`` is not a callee, when the channel
        ended without it, or when the time runs out.
        """
        if self._callees is not None and name not in self._callees:
            raise DoorAddressMissing(f"`{name[:40]}` is not a member this one may call")
        deadline = asyncio.get_running_loop().time() + timeout
        while (url := self._doors.get(name)) is None:
            if self._ended:
                raise DoorAddressMissing(f"the formation channel closed without a door "
                                      f"address for member `{name}`")
            try:
                async with asyncio.timeout_at(deadline):
                    await self._changed.wait()
            except TimeoutError:
                raise DoorAddressMissing(f"no door address for member `{name}` arrived on the "
                                      f"formation channel within {timeout:g} seconds") from None
        return url

    def close(self) -> None:
        """Stop following the channel and close it."""
        self._end()

    def __repr__(self) -> str:
        return f"DoorDirectory(doors={sorted(self._doors)!r}, ended={self._ended})"
