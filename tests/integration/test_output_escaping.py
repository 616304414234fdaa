"""Agent output is text (DESIGN.md 28): what ``mur send`` and ``mur run --task`` print of
an agent's answer, and of its reason when the task fails, has its control characters
escaped as ``mur logs`` escapes them, line breaks kept; so agent code cannot write to the
operator's terminal (an OSC 52 clipboard write, a forged ``[mur run]`` line). What a peer
agent prints reaches the launcher's stderr behind its member's name, escaped; what the
entry member's agent prints (the entry member shares the launcher's stderr) is still
copied as it came, so its test is marked as expected to fail until it is not.

The output is read as text: a raw carriage return reads as a line break, so one that was
not escaped shows as a line of its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.formation import launcher_env, mur, simple_project
from tests.support.member import Project

pytestmark = pytest.mark.integration

#: An OSC 52 clipboard write ("hello"), as agent code would hide it in its answer...
CLIPBOARD = "\x1b]52;c;aGVsbG8=\x07"
#: ...and as the terminal shows it once escaped (also its literal in an agent's source).
SHOWN = r"\x1b]52;c;aGVsbG8=\x07"

ANSWERING = f"""
async def run(task):
    return "copied{SHOWN}\\nsecond line\\r\\n\\r[mur run] formation ended"
"""
#: The answer as ``mur send`` and ``mur run --task`` print it.
ANSWER_SHOWN = f"copied{SHOWN}\nsecond line\n" r"\x0d[mur run] formation ended" "\n"
STREAMING = r"""
async def run(task):
    first = await task.artifact("part one \x1b]52;c;", name="story")
    await task.artifact("aGVsbG8=\x07 part two \x9b2J", append=True, artifact_id=first,
                        last_chunk=True)
"""
FAILING = f"""
async def run(task):
    raise RuntimeError("no{SHOWN}\\n[mur run] formation ended")
"""
PRINTING = """
import sys


async def run(task):
    print("\\r[mur run] formation ended", flush=True)
    print("working\\n[mur run] formation ended", file=sys.stderr, flush=True)
    return "printed"
"""
ASKING = """
async def run(task):
    return await (await task.call_member("printer", task.text))
"""


def _no_control(text: str) -> bool:
    """Whether ``text`` holds no control character but newline and tab."""
    return re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text) is None


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def test_an_osc52_clipboard_write_in_the_answer_of_mur_send_is_escaped(
        project: Project) -> None:
    project.capsule("answerer", agent=ANSWERING)
    member = project.run("answerer")
    done = project.mur("send", str(member.ready["session_id"]), "copy this")
    assert done.returncode == 0, done.stderr
    assert _no_control(done.stdout), repr(done.stdout)
    assert done.stdout == ANSWER_SHOWN
    member.signal()
    assert member.wait() == 0


def test_an_osc52_clipboard_write_streamed_in_chunks_to_mur_send_is_escaped(
        project: Project) -> None:
    project.capsule("streamer", agent=STREAMING)
    member = project.run("streamer")
    done = project.mur("send", str(member.ready["session_id"]), "stream it")
    assert done.returncode == 0, done.stderr
    assert _no_control(done.stdout), repr(done.stdout)
    # The chunks are joined as every reader joins an artifact's parts: a sequence cut
    # across two chunks is escaped whole.
    assert done.stdout == "part one \\x1b]52;c;aGVsbG8=\\x07 part two \\x9b2J\n"
    member.signal()
    assert member.wait() == 0


def test_an_osc52_clipboard_write_in_the_answer_of_mur_run_capsule_task_is_escaped(
        project: Project) -> None:
    project.capsule("answerer", agent=ANSWERING)
    process = project.start("answerer", "--task", "copy this", json_line=False)
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, err.decode()
    assert _no_control(out.decode()), out
    assert out.decode() == ANSWER_SHOWN
    # out/result.txt keeps the answer as the agent gave it.
    [result] = project.home.glob("records/**/out/result.txt")
    assert CLIPBOARD in result.read_text()


def test_an_osc52_clipboard_write_in_the_answer_of_mur_run_roster_task_is_escaped(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["answerer"], entry="answerer",
                             agents={"answerer": ANSWERING})
    done = mur("run", "--roster", "--project", str(project), "--task", "copy this",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _no_control(done.stdout), repr(done.stdout)
    assert done.stdout == ANSWER_SHOWN


def test_an_osc52_clipboard_write_in_a_failed_tasks_reason_is_escaped_on_stderr(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["failer"], entry="failer",
                             agents={"failer": FAILING})
    done = mur("run", "--roster", "--project", str(project), "--task", "fail",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "E-RUN-041" in done.stderr and SHOWN in done.stderr, done.stderr
    assert _no_control(done.stderr + done.stdout), repr(done.stderr + done.stdout)
    forged = [line for line in done.stderr.splitlines()
              if line.startswith("[mur run] formation ended")]
    assert forged == [], done.stderr


def test_a_forged_mur_run_line_printed_by_a_peer_agent_stays_behind_its_name(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["asker", "printer"], entry="asker",
                             reachability={"asker": ["printer"]},
                             agents={"asker": ASKING, "printer": PRINTING})
    done = mur("run", "--roster", "--project", str(project), "--task", "print",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "printed\n"
    assert _no_control(done.stderr), repr(done.stderr)
    lines = done.stderr.splitlines()
    assert not [line for line in lines if line.startswith("[mur run] formation ended")]
    assert r"[printer] \x0d[mur run] formation ended" in lines, done.stderr
    assert "[printer] [mur run] formation ended" in lines, done.stderr


def test_a_forged_mur_run_line_printed_by_the_entry_agent_stays_behind_its_name(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["printer"], entry="printer",
                             agents={"printer": PRINTING})
    done = mur("run", "--roster", "--project", str(project), "--task", "print",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _no_control(done.stderr), repr(done.stderr)
    lines = done.stderr.splitlines()
    assert not [line for line in lines if line.startswith("[mur run] formation ended")]
    assert r"[printer] \x0d[mur run] formation ended" in lines, done.stderr
    assert "[printer] [mur run] formation ended" in lines, done.stderr
