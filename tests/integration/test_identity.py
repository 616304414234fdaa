"""The session's MURMUR.md and its Identity section, with real members: two members of
one roster running the same capsule are each told their own roster name, in
$HOME/MURMUR.md and task.instructions (docs/agent-api.md, "Instructions and identity")."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.formation import (
    install_capsule,
    kill_group_quietly,
    start_launcher,
    write_capsule,
)

pytestmark = pytest.mark.integration

WRITER_AGENT = """
import json
import os

async def run(task):
    with open(os.path.join(os.environ["HOME"], "MURMUR.md")) as shipped:
        on_disk = shipped.read()
    return json.dumps({"member": task.member, "instructions": task.instructions,
                       "same_on_disk": on_disk == task.instructions})
"""

BOSS_AGENT = """
import json

async def run(task):
    first = await task.call_member("first", "who are you?")
    second = await task.call_member("second", "who are you?")
    return json.dumps({"first": json.loads(await first), "second": json.loads(await second),
                       "boss": task.instructions})
"""


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        kill_group_quietly(process)


def test_members_of_the_same_capsule_each_read_their_own_roster_name(
        tmp_path: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    writer = write_capsule(tmp_path / "src", "writer", WRITER_AGENT, accept_peers=True)
    (writer / "MURMUR.md").write_text("# Writer\n\nWrite what you are asked.\n")
    install_capsule(project, writer)
    boss = write_capsule(tmp_path / "src", "boss", BOSS_AGENT, allow_localhost=True)
    install_capsule(project, boss)
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: boss, capsule: local/boss, version: 1.0.0, entry: true}\n"
        "  - {name: first, capsule: local/writer, version: 1.0.0}\n"
        "  - {name: second, capsule: local/writer, version: 1.0.0}\n"
        "reachability:\n  - {from: boss, to: [first, second]}\n")
    process = start_launcher(project, "--json", "--task", "go")
    launched.append(process)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    line, result = out.decode().splitlines()
    formation = json.loads(line)["formation_id"]
    told = json.loads(result)
    for name in ("first", "second"):
        text = told[name]["instructions"]
        assert told[name]["same_on_disk"], "task.instructions is $HOME/MURMUR.md"
        assert text.startswith("# Writer\n\nWrite what you are asked.\n"), text
        identity = text.split("## Identity\n", 1)[1]
        assert f"- Roster name: {name}\n" in identity
        assert f"- Formation id: {formation}\n" in identity
        assert "- Capsule: local/writer, version 1.0.0\n" in identity
        assert "- Members you may call: none\n" in identity
    assert "- Members you may call: first, second\n" in told["boss"]
    assert "http://" not in result and "mft1." not in result, "names only"
