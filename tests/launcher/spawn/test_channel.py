"""The formation channel: the member's first line and every E-RUN-046 case."""

from __future__ import annotations

import inspect
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.auth.tokens import FormationKey, b64url_encode
from launcher.diagnostics import DiagnosticError
from launcher.ids import new_formation_id
from launcher.spawn.channel import (
    DEFAULT_TIMEOUT,
    ChannelCredentials,
    ChannelRefused,
    ChannelWriter,
    encode_credentials,
    read_credentials,
    refuse_roster_inside_formation,
)


@dataclass
class Formation:
    """A minted formation: its id, its key, and planner's line with tokens to two callees."""

    key: FormationKey = field(default_factory=FormationKey.generate)
    id: str = field(default_factory=new_formation_id)

    def tokens(self, member: str = "planner",
               callees: tuple[str, ...] = ("coder", "reviewer")) -> dict[str, str]:
        return {c: self.key.mint(formation=self.id, caller=member, callee=c) for c in callees}

    def line(self, **changes: object) -> dict[str, object]:
        data: dict[str, object] = {"formation": self.id, "member": "planner",
                                   "key": b64url_encode(self.key.public_bytes),
                                   "tokens": self.tokens(), "entry": False}
        data.update(changes)
        return data

    def env(self, fd: int, **extra: str) -> dict[str, str]:
        return {"MURMUR_FORMATION_ID": self.id, "MURMUR_FORMATION_CHANNEL": str(fd), **extra}


@pytest.fixture
def formation() -> Formation:
    return Formation()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        try:
            os.close(fd)
        except OSError:
            pass


def send(write_end: int, data: bytes | dict[str, object] | str) -> None:
    if isinstance(data, dict):
        data = json.dumps(data) + "\n"
    if isinstance(data, str):
        data = data.encode()
    os.write(write_end, data)


def refused(environ: dict[str, str], timeout: float = 1.0) -> ChannelRefused:
    with pytest.raises(ChannelRefused) as caught:
        read_credentials(environ, timeout=timeout)
    error = caught.value
    assert isinstance(error, DiagnosticError)
    assert error.code == "E-RUN-046"
    assert str(error).startswith("error E-RUN-046: formation refused: ")
    return error


def assert_no_secret(error: Exception, formation: Formation) -> None:
    text = f"{error} {error!r} {error.args}"
    assert "mft1." not in text
    assert b64url_encode(formation.key.public_bytes) not in text


# --------------------------------------------------------------------------- accepted


def test_no_channel_means_no_formation_credentials() -> None:
    assert read_credentials({}) is None
    assert read_credentials({"MURMUR_FORMATION_ID": new_formation_id()}) is None


def test_a_members_credentials_are_read_and_checked(formation: Formation,
                                                    pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.set_inheritable(read_end, True)
    tokens = formation.tokens()
    send(write_end, formation.line(tokens=tokens))
    send(write_end, '{"doors":{"coder":"http://127.0.0.1:1"}}\n')
    creds = read_credentials(formation.env(read_end), timeout=1)
    assert isinstance(creds, ChannelCredentials)
    assert creds.formation_id == formation.id
    assert creds.member == "planner"
    assert creds.key == formation.key.public_bytes
    assert dict(creds.tokens) == tokens
    assert creds.callees == ("coder", "reviewer")
    assert creds.entry is False
    assert creds.fd == read_end
    assert creds.pending == b'{"doors":{"coder":"http://127.0.0.1:1"}}\n'
    assert not os.get_inheritable(read_end)  # the member's own children never get it


def test_credentials_never_show_a_token_or_the_key(formation: Formation,
                                                   pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    send(write_end, formation.line(entry=True))
    creds = read_credentials(formation.env(read_end), timeout=1)
    assert creds is not None
    for text in (repr(creds), str(creds), f"{creds}"):
        assert "mft1." not in text
        assert b64url_encode(formation.key.public_bytes) not in text
        assert "coder" in text and formation.id in text
    with pytest.raises(TypeError):
        creds.tokens["coder"] = "x"  # type: ignore[index]


def test_a_member_with_no_callees_has_an_empty_token_map(formation: Formation,
                                                         pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    send(write_end, formation.line(member="coder", tokens={}))
    creds = read_credentials(formation.env(read_end), timeout=1)
    assert creds is not None and creds.callees == ()


def test_a_regular_file_is_a_channel_too(formation: Formation, tmp_path: Path) -> None:
    path = tmp_path / "channel"
    path.write_text(json.dumps(formation.line()))  # the last line needs no newline
    fd = os.open(path, os.O_RDONLY)
    try:
        creds = read_credentials(formation.env(fd), timeout=1)
        assert creds is not None and creds.member == "planner"
    finally:
        os.close(fd)


def test_a_first_line_split_across_writes_is_joined(formation: Formation,
                                                    pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    data = (json.dumps(formation.line()) + "\n").encode()
    send(write_end, data[:10])
    send(write_end, data[10:])
    assert read_credentials(formation.env(read_end), timeout=1) is not None


def test_the_launchers_writer_speaks_what_the_member_reads(formation: Formation,
                                                           pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    writer = ChannelWriter(write_end)
    writer.write_credentials(formation_id=formation.id, member="planner",
                             key=formation.key.public_bytes, tokens=formation.tokens(),
                             entry=True)
    writer.write_doors({"coder": "http://127.0.0.1:9"})
    creds = read_credentials(formation.env(read_end), timeout=1)
    assert creds is not None and creds.entry is True
    assert creds.pending == b'{"doors":{"coder":"http://127.0.0.1:9"}}\n'


def test_the_default_wait_for_the_first_line_is_ten_seconds() -> None:
    assert DEFAULT_TIMEOUT == 10.0
    default = inspect.signature(read_credentials).parameters["timeout"].default
    assert default == 10.0


# --------------------------------------------------------------------------- E-RUN-046


def test_peers_variable_in_mur_runs_own_environment_is_refused(
        formation: Formation, pipe: tuple[int, int]) -> None:
    peers = "coder=http://coder.formation.invalid"
    error = refused({"MURMUR_FORMATION_PEERS": peers})  # no channel at all
    assert error.case == "peers_in_environment"
    assert "MURMUR_FORMATION_PEERS" in str(error)
    read_end, write_end = pipe
    send(write_end, formation.line())
    error = refused(formation.env(read_end, MURMUR_FORMATION_PEERS=peers))
    assert error.case == "peers_in_environment"
    assert refused({"MURMUR_FORMATION_PEERS": ""}).case == "peers_in_environment"


@pytest.mark.parametrize("formation_id", [None, ""])
def test_channel_set_without_formation_id_is_refused(pipe: tuple[int, int],
                                                     formation_id: str | None) -> None:
    env = {"MURMUR_FORMATION_CHANNEL": str(pipe[0])}
    if formation_id is not None:
        env["MURMUR_FORMATION_ID"] = formation_id
    error = refused(env)
    assert error.case == "channel_without_id"
    assert "MURMUR_FORMATION_CHANNEL is set without MURMUR_FORMATION_ID" in str(error)


@pytest.mark.parametrize("value", ["", "three", "-1", "3.0", " 3", "3 ", "0x3", "٣",
                                   "99999999999999999999"])
def test_a_channel_that_is_not_a_descriptor_number_is_refused(formation: Formation,
                                                             value: str) -> None:
    error = refused({"MURMUR_FORMATION_ID": formation.id, "MURMUR_FORMATION_CHANNEL": value})
    assert error.case == "not_a_number"


def test_a_descriptor_that_is_not_open_is_refused(formation: Formation) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    error = refused(formation.env(read_end))
    assert error.case == "not_open"
    assert "not open" in str(error)


def test_a_socket_is_neither_a_pipe_nor_a_file(formation: Formation) -> None:
    left, right = socket.socketpair()
    with left, right:
        right.sendall(json.dumps(formation.line()).encode() + b"\n")
        assert refused(formation.env(left.fileno())).case == "not_pipe_or_file"


def test_a_directory_or_device_is_neither_a_pipe_nor_a_file(formation: Formation,
                                                            tmp_path: Path) -> None:
    for path in (tmp_path, Path("/dev/null")):
        fd = os.open(path, os.O_RDONLY)
        try:
            error = refused(formation.env(fd))
            assert error.case == "not_pipe_or_file"
            assert "neither a pipe nor a file" in str(error)
        finally:
            os.close(fd)


def test_no_first_line_within_the_timeout_is_refused(formation: Formation,
                                                     pipe: tuple[int, int]) -> None:
    started = time.monotonic()
    error = refused(formation.env(pipe[0]), timeout=0.2)
    elapsed = time.monotonic() - started
    assert error.case == "no_first_line"
    assert "within 0.2 seconds" in str(error)
    assert 0.15 <= elapsed < 2


def test_half_a_first_line_at_the_deadline_is_refused(formation: Formation,
                                                      pipe: tuple[int, int]) -> None:
    send(pipe[1], json.dumps(formation.line())[:40])
    assert refused(formation.env(pipe[0]), timeout=0.2).case == "no_first_line"


def test_a_channel_closed_before_its_first_line_is_refused_at_once(
        formation: Formation, pipe: tuple[int, int]) -> None:
    os.close(pipe[1])
    started = time.monotonic()
    error = refused(formation.env(pipe[0]), timeout=5)
    assert error.case == "no_first_line"
    assert "closed before its first line" in str(error)
    assert time.monotonic() - started < 1


def test_an_empty_file_has_no_first_line(formation: Formation, tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_text("")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert refused(formation.env(fd), timeout=1).case == "no_first_line"
    finally:
        os.close(fd)


def _not_credentials_lines(formation: Formation) -> list[tuple[str, bytes]]:
    good = formation.line()
    key = formation.key.public_bytes
    # A key whose base64url spelling has - or _, so its standard spelling differs.
    while not set(b64url_encode(key)) & set("-_"):
        key = FormationKey.generate().public_bytes
    dump = json.dumps
    return [
        ("not json", b"hello\n"),
        ("not utf-8", b"\xff\xfe{}\n"),
        ("array", b"[1, 2]\n"),
        ("empty object", b"{}\n"),
        ("missing entry", dump({k: v for k, v in good.items() if k != "entry"}).encode()
         + b"\n"),
        ("extra key", dump({**good, "extra": 1}).encode() + b"\n"),
        ("duplicate key", dump(good)[:-1].encode() + b', "entry": true}\n'),
        ("formation not an id", dump({**good, "formation": "frm_short"}).encode() + b"\n"),
        ("member not a name", dump({**good, "member": "Planner!"}).encode() + b"\n"),
        ("member a number", dump({**good, "member": 5}).encode() + b"\n"),
        ("entry a string", dump({**good, "entry": "true"}).encode() + b"\n"),
        ("entry a number", dump({**good, "entry": 1}).encode() + b"\n"),
        ("tokens a list", dump({**good, "tokens": ["x"]}).encode() + b"\n"),
        ("token a number", dump({**good, "tokens": {"coder": 5}}).encode() + b"\n"),
        ("callee not a name", dump({**good, "tokens": {"Coder": "x"}}).encode() + b"\n"),
        ("callee is itself", dump({**good, "tokens": {"planner": "x"}}).encode() + b"\n"),
        ("key too short", dump({**good, "key": b64url_encode(key[:31])}).encode() + b"\n"),
        ("key too long", dump({**good, "key": b64url_encode(key + b"x")}).encode() + b"\n"),
        ("key padded", dump({**good, "key": b64url_encode(key) + "="}).encode() + b"\n"),
        ("key standard base64",
         dump({**good, "key": b64url_encode(key).replace("-", "+").replace("_", "/")})
         .encode() + b"\n"),
        ("key a number", dump({**good, "key": 7}).encode() + b"\n"),
        ("a doors line first", b'{"doors":{"coder":"http://127.0.0.1:1"}}\n'),
    ]


def test_a_first_line_that_is_not_credentials_is_refused(formation: Formation) -> None:
    cases = _not_credentials_lines(formation)
    for name, line in cases:
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, line)
            with pytest.raises(ChannelRefused) as caught:
                read_credentials(formation.env(read_end), timeout=1)
            assert caught.value.case == "not_credentials", name
            assert "is not a member's credentials" in str(caught.value), name
            assert_no_secret(caught.value, formation)
        finally:
            os.close(read_end)
            os.close(write_end)


def test_a_key_that_is_not_on_the_curve_is_refused(formation: Formation,
                                                   pipe: tuple[int, int]) -> None:
    send(pipe[1], formation.line(key=b64url_encode(b"\xff" * 32)))
    # Some 32-byte strings are not valid points: either refusal is not_credentials,
    # or the key parses and no token verifies under it.
    error = refused(formation.env(pipe[0]))
    assert error.case in ("not_credentials", "token_not_issued")


def test_an_endless_first_line_is_refused(formation: Formation,
                                          monkeypatch: pytest.MonkeyPatch,
                                          pipe: tuple[int, int]) -> None:
    monkeypatch.setattr("launcher.spawn.channel.MAX_FIRST_LINE", 1000)
    send(pipe[1], b"x" * 5000)
    error = refused(formation.env(pipe[0]))
    assert error.case == "not_credentials"
    assert "longer than" in str(error)


def _foreign_tokens(formation: Formation) -> list[tuple[str, dict[str, str]]]:
    other_key = FormationKey.generate()
    good = formation.tokens()
    coder = good["coder"]
    prefix, payload, signature = coder.split(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    return [
        ("signed by another key", {
            "coder": other_key.mint(formation=formation.id, caller="planner",
                                    callee="coder")}),
        ("issued to another member", {
            "coder": formation.key.mint(formation=formation.id, caller="reviewer",
                                        callee="coder")}),
        ("for another callee's door", {"coder": good["reviewer"],
                                       "reviewer": good["coder"]}),
        ("of another formation under the same key", {
            "coder": formation.key.mint(formation=new_formation_id(), caller="planner",
                                        callee="coder")}),
        ("signature altered", {"coder": f"{prefix}.{payload}.{flipped}"}),
        ("payload padded", {"coder": f"{prefix}.{payload}=.{signature}"}),
        ("wrong prefix", {"coder": f"mft2.{payload}.{signature}"}),
        ("two parts", {"coder": f"{prefix}.{payload}"}),
        ("not a token", {"coder": "hello"}),
        ("oversized", {"coder": coder + "A" * 600}),
        ("non-ascii", {"coder": coder + "é"}),
    ]


def test_a_token_not_issued_to_this_member_is_refused(formation: Formation) -> None:
    for name, tokens in _foreign_tokens(formation):
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, json.dumps(formation.line(tokens=tokens)).encode() + b"\n")
            with pytest.raises(ChannelRefused) as caught:
                read_credentials(formation.env(read_end), timeout=1)
            assert caught.value.case == "token_not_issued", name
            assert "was not issued to member `planner`" in str(caught.value), name
            assert_no_secret(caught.value, formation)
        finally:
            os.close(read_end)
            os.close(write_end)


def test_a_first_line_naming_another_formation_is_refused(formation: Formation,
                                                          pipe: tuple[int, int]) -> None:
    # A whole, valid line of another formation: everything verifies except the id.
    other = Formation()
    send(pipe[1], other.line())
    error = refused(formation.env(pipe[0]))
    assert error.case == "other_formation"
    assert other.id in str(error) and formation.id in str(error)
    assert_no_secret(error, other)


def test_a_formation_member_cannot_launch_a_roster(formation: Formation) -> None:
    refuse_roster_inside_formation({})  # outside any formation: nothing to refuse
    with pytest.raises(ChannelRefused) as caught:
        refuse_roster_inside_formation({"MURMUR_FORMATION_ID": formation.id})
    assert caught.value.case == "roster_inside_formation"
    assert caught.value.code == "E-RUN-046"
    assert "is a formation member" in str(caught.value)


def test_every_refusal_names_the_variable_it_is_about(formation: Formation) -> None:
    error = refused({"MURMUR_FORMATION_CHANNEL": "5"})
    assert error.path == "MURMUR_FORMATION_CHANNEL"
    error = refused({"MURMUR_FORMATION_PEERS": "a=b"})
    assert error.path == "MURMUR_FORMATION_PEERS"
    assert "hint:" in str(error)


# --------------------------------------------------------------------------- writer


def test_writer_writes_credentials_once_then_doors(formation: Formation,
                                                   pipe: tuple[int, int]) -> None:
    writer = ChannelWriter(pipe[1])
    with pytest.raises(RuntimeError):
        writer.write_doors({"coder": "http://127.0.0.1:1"})
    writer.write_credentials(formation_id=formation.id, member="coder",
                             key=formation.key.public_bytes, tokens={}, entry=False)
    with pytest.raises(RuntimeError):
        writer.write_credentials(formation_id=formation.id, member="coder",
                                 key=formation.key.public_bytes, tokens={}, entry=False)
    writer.write_doors({"reviewer": "http://127.0.0.1:2"})
    writer.close()
    writer.close()
    assert writer.closed
    with pytest.raises(ValueError):
        writer.write_doors({"reviewer": "http://127.0.0.1:2"})
    lines = os.read(pipe[0], 65536).split(b"\n")
    assert json.loads(lines[0]) == {"formation": formation.id, "member": "coder",
                                    "key": b64url_encode(formation.key.public_bytes),
                                    "tokens": {}, "entry": False}
    assert json.loads(lines[1]) == {"doors": {"reviewer": "http://127.0.0.1:2"}}
    assert lines[2] == b""
    assert os.read(pipe[0], 1) == b""  # closed: end of file
    assert "mft1" not in repr(writer)


def test_writing_to_a_member_that_is_gone_raises_broken_pipe(formation: Formation) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    writer = ChannelWriter(write_end)
    try:
        with pytest.raises(BrokenPipeError):
            writer.write_credentials(formation_id=formation.id, member="coder",
                                     key=formation.key.public_bytes, tokens={},
                                     entry=False)
    finally:
        writer.close()


def test_the_writer_refuses_to_encode_what_a_member_would_refuse(
        formation: Formation) -> None:
    base = {"formation_id": formation.id, "member": "coder",
            "key": formation.key.public_bytes, "tokens": {}, "entry": False}
    for change in ({"formation_id": "frm_x"}, {"member": "Bad"}, {"key": b"short"}):
        with pytest.raises(ValueError):
            encode_credentials(**{**base, **change})  # type: ignore[arg-type]
    writer = ChannelWriter(-1)
    with pytest.raises(ValueError):
        from launcher.spawn.channel import encode_doors
        encode_doors({"coder": "ftp://host"})
    assert writer.closed


# --------------------------------------------------------------------------- bounds


def test_a_version_1_members_first_line_holds_exactly_the_five_keys(
        formation: Formation) -> None:
    line = encode_credentials(formation_id=formation.id, member="coder",
                              key=formation.key.public_bytes, tokens={}, entry=False,
                              bounds=None)
    assert set(json.loads(line)) == {"formation", "member", "key", "tokens", "entry"}


def test_bounds_on_the_first_line_reach_the_member(formation: Formation,
                                                   pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    writer = ChannelWriter(write_end)
    bounds = {"depth": 4, "incoming": {"planner": {"calls": 50, "per_minute": 20}},
              "calls": 200}
    writer.write_credentials(formation_id=formation.id, member="planner",
                             key=formation.key.public_bytes, tokens=formation.tokens(),
                             entry=True, bounds=bounds)
    creds = read_credentials(formation.env(read_end), timeout=1)
    assert creds is not None and creds.bounds is not None
    assert (creds.bounds.depth, creds.bounds.calls, creds.bounds.tokens) == (4, 200, None)
    assert creds.bounds.door.incoming["planner"].per_minute == 20
    assert creds.bounds.wire() == bounds


@pytest.mark.parametrize("bounds", [
    {"depth": 0}, {"calls": "many"}, {"incoming": {"Planner!": {}}},
    {"incoming": {"planner": {"calls": -1}}}, {"speed": 3}, [],
])
def test_bounds_a_member_cannot_read_are_refused(formation: Formation,
                                                 pipe: tuple[int, int],
                                                 bounds: object) -> None:
    read_end, write_end = pipe
    send(write_end, {**formation.line(), "bounds": bounds})
    error = refused(formation.env(read_end))
    assert error.case == "not_credentials"
    assert "`bounds`" in str(error)
