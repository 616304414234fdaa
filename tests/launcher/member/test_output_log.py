"""``logs/output.log``: what a member's programs print, one stamped line each, partial
lines held until their end, token shapes redacted, owner-only, and rotated once past its
bound so a flood never fills the disk."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.member.output_log import MAX_LINE, OutputLog, rotated

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


def test_each_line_is_stamped_with_its_source_and_partial_lines_wait(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "output.log")
    log.take("agent", b"hello\nwor")
    log.take("upstream", b"listening\n")
    log.take("agent", b"ld\n")
    log.take("agent", b"no newline at the end")
    log.close()
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert [re.sub(STAMP, "T", line) for line in lines] == [
        "T agent hello", "T upstream listening", "T agent world",
        "T agent no newline at the end"]
    assert (tmp_path / "output.log").stat().st_mode & 0o777 == 0o600


def test_a_token_an_agent_prints_is_not_kept(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "output.log")
    token = "mft1." + "a" * 40 + "." + "b" * 40
    log.take("agent", f"my token is {token}\n".encode())
    log.close()
    kept = (tmp_path / "output.log").read_text()
    assert "my token is" in kept and token not in kept


def test_a_flood_is_rotated_once_and_never_grows_past_two_files(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    log = OutputLog(path, rotate_bytes=4096)
    for index in range(2000):
        log.take("agent", f"line {index:05d}\n".encode())
    log.close()
    assert path.stat().st_size <= 4096 and rotated(path).stat().st_size <= 4096
    assert path.read_text().splitlines()[-1].endswith("line 01999")


def test_a_line_longer_than_the_bound_is_cut_into_lines(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "output.log")
    log.take("agent", b"x" * (MAX_LINE * 2 + 10))
    log.close()
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert [len(line.split(" ", 2)[2]) for line in lines] == [MAX_LINE, MAX_LINE, 10]


def test_a_log_that_cannot_be_opened_is_let_go(tmp_path: Path) -> None:
    log = OutputLog(tmp_path / "missing-folder" / "output.log")
    log.take("agent", b"printed anyway\n")  # reaches the terminal; nothing raised here
    log.close()
    assert not (tmp_path / "missing-folder").exists()
