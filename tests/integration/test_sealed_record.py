"""The sealed record (docs/audit.md): a real formation's traces are hash-chained and
sealed by the launcher, ``mur audit`` reads them clean, and each way of changing the
record afterwards is found with its file and line; a launcher killed with SIGKILL leaves
a sealed part that verifies and a tail reported unsealed, not tampered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.home.formations import formation_dir
from launcher.home.seals import SEALS_FILE
from launcher.home.trace import find_formation_traces
from tests.support.formation import (
    PLANNER_AGENT,
    kill_group_quietly,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

#: The coder takes 11 s, so the launcher seals once while the formation runs (every
#: 10 s) and once after: two seals, one of which a test removes.
AGENTS = {"planner": PLANNER_AGENT, "coder": (
    "import asyncio\nasync def run(task):\n    await asyncio.sleep(11)\n"
    "    return f'code for <{task.text}>'\n")}
REACH = {"planner": ["coder", "reviewer"]}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One formation that ran to its end, its MURMUR_HOME copied fresh for each test."""
    root = tmp_path_factory.mktemp("sealed")
    home = root / "home"
    env = {**os.environ, "MURMUR_HOME": str(home), "PYTHONPATH": str(Path.cwd())}
    previous = os.environ.get("MURMUR_HOME")
    os.environ["MURMUR_HOME"] = str(home)
    try:
        project = simple_project(root, ["planner", "coder", "reviewer"], entry="planner",
                                 reachability=REACH, agents=AGENTS)
    finally:
        if previous is None:
            os.environ.pop("MURMUR_HOME", None)
        else:
            os.environ["MURMUR_HOME"] = previous
    process = start_launcher(project, "--json", "--task", "the report", env=env)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    return {"home": home, "formation": json.loads(out.decode().splitlines()[0])[
        "formation_id"]}


@pytest.fixture
def home(ran: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import shutil

    copy = tmp_path / "home"
    shutil.copytree(ran["home"], copy, symlinks=True)
    monkeypatch.setenv("MURMUR_HOME", str(copy))
    return copy


def audit(formation_id: str) -> tuple[int, str, dict[str, Any]]:
    shown = mur("audit", formation_id, env={**os.environ})
    report = mur("audit", formation_id, "--json", env={**os.environ})
    return shown.returncode, shown.stdout, json.loads(report.stdout)


def trace_of(formation_id: str, member: str) -> Path:
    return dict(find_formation_traces(formation_id))[member]


def rewrite(path: Path, change: Any) -> None:
    lines = path.read_text().splitlines()
    change(lines)
    path.write_text("\n".join(lines) + "\n")


def tampered(report: dict[str, Any]) -> list[tuple[str, int]]:
    return [(Path(v["trace"]).name, v["line"]) for v in report["violations"]
            if v["event"] == "tampered"]


def test_a_formation_that_ran_audits_clean_and_sealed(ran: dict[str, Any],
                                                      home: Path) -> None:
    code, shown, report = audit(ran["formation"])
    assert code == 0, shown
    assert report["sealed"] is True and report["seals_read"] >= 1
    assert report["violations"] == [] and report["unsealed"] == []
    assert "; record sealed (" in shown
    marker = json.loads((formation_dir(ran["formation"]) / "formation.json").read_text())
    assert len(marker["public_key"]) == 43             # 32 bytes, unpadded base64url
    seals = (formation_dir(ran["formation"]) / SEALS_FILE).read_text().splitlines()
    last = json.loads(seals[-1])
    assert last["final"] is True and set(last["members"]) == {"planner", "coder",
                                                              "reviewer"}
    # Every record of every trace carries prev.
    for _, path in find_formation_traces(ran["formation"]):
        assert all("prev" in json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize(("change", "line"), [
    ("edited", 3), ("removed", 3), ("inserted", 3), ("swapped", 3),
])
def test_a_record_changed_after_the_fact_is_found_at_its_line(
        ran: dict[str, Any], home: Path, change: str, line: int) -> None:
    path = trace_of(ran["formation"], "coder")

    def alter(lines: list[str]) -> None:
        if change == "edited":
            record = json.loads(lines[2])
            record["ts"] = "2020-01-01T00:00:00.000000Z"
            lines[2] = json.dumps(record, separators=(",", ":"))
        elif change == "removed":
            del lines[3]
        elif change == "inserted":
            forged = json.loads(lines[2])
            forged["event"] = "a2a_task_received"
            lines.insert(2, json.dumps(forged, separators=(",", ":")))
        else:
            lines[2], lines[3] = lines[3], lines[2]

    rewrite(path, alter)
    code, shown, report = audit(ran["formation"])
    assert code == 1, shown
    assert tampered(report)[0] == ("trace.jsonl", line), report["violations"]
    assert report["violations"][0]["trace"] == str(path)
    assert f"tampered: {path}:{line}: " in shown


def test_a_record_rewritten_with_its_chain_is_found_by_the_seal(
        ran: dict[str, Any], home: Path) -> None:
    """A forger who recomputes every prev after the change keeps the chain whole: the
    seal's head no longer matches."""
    from launcher.home.trace_chain import link, seed

    path = trace_of(ran["formation"], "reviewer")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[1]["ts"] = "2020-01-01T00:00:00.000000Z"
    prev = seed(records[0]["session_id"])
    lines = []
    for record in records:
        record["prev"] = prev
        line = json.dumps(record, separators=(",", ":"))
        lines.append(line)
        prev = link(line.encode())
    path.write_text("\n".join(lines) + "\n")
    code, shown, report = audit(ran["formation"])
    assert code == 1
    # Found at the first sealed record at or after the change (line 2): the last record
    # the earliest seal covering it sealed.
    [(name, line)] = tampered(report)
    assert name == "trace.jsonl" and 2 <= line <= len(records)
    assert "is not the one seal" in report["violations"][0]["problem"]


def test_a_whole_sessions_trace_replaced_is_found(ran: dict[str, Any], home: Path) -> None:
    coder, reviewer = trace_of(ran["formation"], "coder"), trace_of(ran["formation"],
                                                                   "reviewer")
    text = reviewer.read_text().replace('"formation_member":"reviewer"',
                                        '"formation_member":"coder"')
    coder.write_text(text)
    code, shown, report = audit(ran["formation"])
    assert code == 1
    assert ("trace.jsonl", 1) in tampered(report), report["violations"]
    assert any(v["trace"] == str(coder) for v in report["violations"])


@pytest.mark.parametrize("change", ["edited", "removed"])
def test_a_seal_changed_is_found_at_its_line(ran: dict[str, Any], home: Path,
                                             change: str) -> None:
    seals = formation_dir(ran["formation"]) / SEALS_FILE
    lines = seals.read_text().splitlines()
    assert len(lines) >= 2, "the formation ran past its first periodic seal"
    if change == "edited":
        seal = json.loads(lines[-1])
        seal["members"]["coder"]["records"] -= 1
        lines[-1] = json.dumps(seal, separators=(",", ":"))
        expected = len(lines)
    else:
        del lines[0]
        expected = 1
    seals.write_text("\n".join(lines) + "\n")
    code, shown, report = audit(ran["formation"])
    assert code == 1, shown
    assert (SEALS_FILE, expected) in tampered(report), report["violations"]


def test_a_launcher_killed_leaves_a_sealed_part_and_an_unsealed_tail(
        tmp_path: Path, murmur_home: Path) -> None:
    """SIGKILL to the launcher after its first periodic seal: the sealed part verifies;
    what the members wrote after it is reported unsealed, and the audit passes."""
    slow = ("import asyncio\nasync def run(task):\n"
            "    await asyncio.sleep(float(task.text))\n    return 'slept'\n")
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             agents={"planner": slow})
    process = start_launcher(project, "--json", "--task", "14")
    try:
        formation_id = read_formation_line(process)["formation_id"]
        seals = formation_dir(formation_id) / SEALS_FILE
        deadline = time.monotonic() + 30
        while not (seals.exists() and seals.read_text().strip()):
            assert time.monotonic() < deadline, "no periodic seal within 30 s"
            time.sleep(0.2)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        kill_group_quietly(process)
        subprocess.run(["pkill", "-KILL", "-f", formation_id], check=False)
    time.sleep(1.0)
    code, shown, report = audit(formation_id)
    assert code == 0, shown
    assert report["violations"] == []
    assert report["unsealed"], shown
    assert "unsealed: " in shown and "after the last seal" in shown
