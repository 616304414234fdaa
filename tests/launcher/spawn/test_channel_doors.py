"""The channel's later lines (door URLs) and the whole channel across a real process."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.auth.tokens import FormationKey
from launcher.ids import new_formation_id
from launcher.spawn.channel import (
    ChannelWriter,
    DoorAddressMissing,
    DoorDirectory,
)
from launcher.spawn.process import ManagedProcess, make_channel_pipe, read_line


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        try:
            os.close(fd)
        except OSError:
            pass


def fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def test_doors_written_before_start_are_known_at_once(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    directory = DoorDirectory(read_end, pending=b'{"doors":{"coder":"http://127.0.0.1:5"}}\n',
                              callees=["coder", "reviewer"])
    directory.start()
    try:
        assert directory.get("coder") == "http://127.0.0.1:5"
        assert await directory.wait_for("coder", timeout=0.1) == "http://127.0.0.1:5"
    finally:
        directory.close()


async def test_a_door_that_arrives_later_wakes_its_waiter(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    directory = DoorDirectory(read_end, callees=["coder", "reviewer"])
    directory.start()
    try:
        waiter = asyncio.create_task(directory.wait_for("reviewer", timeout=5))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        os.write(write_end, b'{"doors":{"coder":"http://127.0.0.1:6"}}\n{"doors":')
        await asyncio.sleep(0.05)
        assert directory.get("coder") == "http://127.0.0.1:6"
        assert not waiter.done()
        os.write(write_end, b'{"reviewer":"http://127.0.0.1:7"}}\n')
        assert await asyncio.wait_for(waiter, 2) == "http://127.0.0.1:7"
        assert directory.doors == {"coder": "http://127.0.0.1:6",
                                   "reviewer": "http://127.0.0.1:7"}
    finally:
        directory.close()
    assert not fd_open(read_end)


async def test_waiting_past_the_timeout_is_a_clear_error(pipe: tuple[int, int]) -> None:
    directory = DoorDirectory(pipe[0], callees=["coder"])
    directory.start()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match=r"no door address for member `coder` "
                                               r"arrived .* within 0.1 seconds") as caught:
            await directory.wait_for("coder", timeout=0.1)
        assert isinstance(caught.value, DoorAddressMissing)
    finally:
        directory.close()
    assert time.monotonic() - started < 1


async def test_the_default_wait_for_a_door_is_ten_seconds() -> None:
    import inspect
    assert inspect.signature(DoorDirectory.wait_for).parameters["timeout"].default == 10.0


async def test_a_channel_that_ends_without_the_door_fails_the_wait_at_once(
        pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    directory = DoorDirectory(read_end, callees=["coder", "reviewer"])
    directory.start()
    waiter = asyncio.create_task(directory.wait_for("reviewer", timeout=5))
    os.write(write_end, b'{"doors":{"coder":"http://127.0.0.1:6"}}')  # no newline
    os.close(write_end)
    started = time.monotonic()
    with pytest.raises(DoorAddressMissing, match="closed without a door address"):
        await waiter
    assert time.monotonic() - started < 1
    assert directory.ended
    assert directory.get("coder") == "http://127.0.0.1:6"  # the unterminated last line
    assert not fd_open(read_end)


async def test_a_name_that_is_not_a_callee_is_refused_without_waiting(
        pipe: tuple[int, int]) -> None:
    directory = DoorDirectory(pipe[0], callees=["coder"])
    directory.start()
    try:
        with pytest.raises(DoorAddressMissing, match="not a member this one may call"):
            await directory.wait_for("planner", timeout=5)
    finally:
        directory.close()


async def test_lines_that_are_not_doors_are_ignored_and_described(
        pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    directory = DoorDirectory(read_end, callees=["coder"])
    directory.start()
    lines = [
        b"not json",
        b"[1]",
        b'{"doors":{"coder":"http://127.0.0.1:1"},"extra":1}',
        b'{"doors":["coder"]}',
        b'{"doors":{"planner":"http://127.0.0.1:2"}}',
        b'{"doors":{"coder":"ftp://127.0.0.1:3"}}',
        b'{"doors":{"coder":"http://127.0.0.1:99999"}}',
        b'{"doors":{"coder":5}}',
        b"",
        b'{"doors":{"coder":"http://127.0.0.1:4"}}',
    ]
    os.write(write_end, b"\n".join(lines) + b"\n")
    try:
        assert await directory.wait_for("coder", timeout=2) == "http://127.0.0.1:4"
        assert len(directory.problems) == 8
        assert directory.doors == {"coder": "http://127.0.0.1:4"}
    finally:
        directory.close()


async def test_a_regular_file_channel_is_read_to_its_end_at_start(tmp_path: Path) -> None:
    path = tmp_path / "channel"
    path.write_bytes(b'{"doors":{"coder":"http://127.0.0.1:8"}}\n')
    fd = os.open(path, os.O_RDONLY)
    directory = DoorDirectory(fd, callees=["coder"])
    directory.start()
    assert directory.ended
    assert await directory.wait_for("coder", timeout=0.1) == "http://127.0.0.1:8"
    assert not fd_open(fd)


async def test_a_directory_without_a_channel_is_fed_by_set() -> None:
    directory = DoorDirectory(callees=None)
    directory.start()
    directory.set({"coder": "http://127.0.0.1:9"})
    assert await directory.wait_for("coder", timeout=0.1) == "http://127.0.0.1:9"
    with pytest.raises(DoorAddressMissing):
        await directory.wait_for("reviewer", timeout=0.1)


async def test_repr_names_callees_only(pipe: tuple[int, int]) -> None:
    directory = DoorDirectory(pipe[0], pending=b'{"doors":{"coder":"http://127.0.0.1:1"}}\n',
                              callees=["coder"])
    directory.start()
    try:
        assert repr(directory) == "DoorDirectory(doors=['coder'], ended=False)"
    finally:
        directory.close()


# --------------------------------------------------------------------------- a real member


MEMBER = textwrap.dedent("""
    import asyncio, os, sys
    from launcher.spawn.channel import DoorDirectory, read_credentials
    from launcher.diagnostics import DiagnosticError

    try:
        creds = read_credentials(os.environ, timeout=float(sys.argv[1]))
    except DiagnosticError as error:
        print(error, file=sys.stderr)
        sys.exit(1)
    print(repr(creds), flush=True)

    async def main():
        directory = DoorDirectory.for_channel(creds)
        directory.start()
        for callee in creds.callees:
            print(callee, await directory.wait_for(callee, timeout=5), flush=True)
    asyncio.run(main())
""")


def start_member(channel_fd: int, formation_id: str, timeout: str = "5",
                 **env: str) -> ManagedProcess:
    environ = {"PATH": os.environ.get("PATH", ""), "MURMUR_FORMATION_ID": formation_id,
               "MURMUR_FORMATION_CHANNEL": str(channel_fd), **env}
    return ManagedProcess.start([sys.executable, "-c", MEMBER, timeout], cwd=os.getcwd(),
                                env=environ, pass_fds=(channel_fd,), new_process_group=True)


async def test_a_real_member_reads_its_credentials_and_waits_for_its_doors() -> None:
    key, formation = FormationKey.generate(), new_formation_id()
    pipe = make_channel_pipe()
    writer = ChannelWriter(pipe.parent_fd)
    tokens = {c: key.mint(formation=formation, caller="planner", callee=c)
              for c in ("coder", "reviewer")}
    writer.write_credentials(formation_id=formation, member="planner",
                             key=key.public_bytes, tokens=tokens, entry=True)
    member = start_member(pipe.child_fd, formation)
    try:
        stdout = await member.stdout_reader()
        described = await read_line(stdout, 5)
        assert described is not None
        assert b"callees=['coder', 'reviewer']" in described and b"mft1" not in described
        writer.write_doors({"coder": "http://127.0.0.1:1111"})
        assert await read_line(stdout, 5) == b"coder http://127.0.0.1:1111"
        writer.write_doors({"reviewer": "http://127.0.0.1:2222"})
        assert await read_line(stdout, 5) == b"reviewer http://127.0.0.1:2222"
        assert await asyncio.wait_for(member.wait_async(), 5) == 0
    finally:
        writer.close()
        member.kill_group()
        member.join(5)
        member.close_pipes()


async def test_a_real_member_refuses_a_channel_that_stays_silent() -> None:
    pipe = make_channel_pipe()
    member = start_member(pipe.child_fd, new_formation_id(), timeout="0.3")
    try:
        assert await asyncio.wait_for(member.wait_async(), 5) == 1
        assert member.stderr is not None
        err = member.stderr.read().decode()
        assert err.startswith("error E-RUN-046: formation refused: no first line")
    finally:
        pipe.close()
        member.close_pipes()


async def test_a_real_member_refuses_when_the_launcher_is_killed_before_writing() -> None:
    pipe = make_channel_pipe()
    member = start_member(pipe.child_fd, new_formation_id())
    pipe.close_parent_end()  # what the kernel does when the launcher dies
    try:
        assert await asyncio.wait_for(member.wait_async(), 5) == 1
        assert member.stderr is not None
        assert "closed before its first line" in member.stderr.read().decode()
    finally:
        member.close_pipes()
