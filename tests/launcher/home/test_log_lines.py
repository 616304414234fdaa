"""How ``mur logs`` reads a session's logs: each line's time and source, a traceback's
lines taking their entry's time, files merged in time order, and a tail read on from
where it stopped, whole lines only."""

from __future__ import annotations

from pathlib import Path

from launcher.home.log_lines import LogTail, in_time_order, session_log_files

T1 = "2026-12-06T02:30:01.000001Z"
T2 = "2026-12-06T02:30:02.000002Z"
T3 = "2026-12-06T02:30:03.000003Z"


def tail(path: Path, output: bool) -> LogTail:
    return LogTail(path, member="coder", session="ses_x", output=output)


def test_lines_take_their_time_and_a_traceback_its_entrys(tmp_path: Path) -> None:
    member_log = tmp_path / "member.log"
    member_log.write_text(f"{T1} ERROR murmur: the agent failed\nTraceback (most recent "
                          f"call last):\nKeyError: 'k'\n")
    output = tmp_path / "output.log"
    output.write_text(f"{T2} agent hello\n{T3} upstream listening\n")
    merged = in_time_order([tail(output, True).lines(), tail(member_log, False).lines()])
    assert [(line.time, line.source, line.text) for line in merged] == [
        (T1, "runtime", "ERROR murmur: the agent failed"),
        (T1, "runtime", "Traceback (most recent call last):"),
        (T1, "runtime", "KeyError: 'k'"),
        (T2, "agent", "hello"),
        (T3, "upstream", "listening")]
    assert {line.member for line in merged} == {"coder"}


def test_a_tail_reads_on_whole_lines_only(tmp_path: Path) -> None:
    output = tmp_path / "output.log"
    output.write_text(f"{T1} agent one\n{T2} agent tw")
    reader = tail(output, True)
    assert [line.text for line in reader.lines()] == ["one"]
    with output.open("a") as handle:
        handle.write("o\n")
    assert [(line.time, line.text) for line in reader.lines()] == [(T2, "two")]
    assert reader.lines() == []


def test_a_file_not_there_yet_gives_no_lines(tmp_path: Path) -> None:
    assert tail(tmp_path / "output.log", True).lines() == []


def test_the_files_of_a_session_in_the_order_they_are_read(tmp_path: Path) -> None:
    names = [path.name for path, _ in session_log_files(tmp_path)]
    assert names == ["member.log", "output.log.1", "output.log", "bootstrap.log"]
