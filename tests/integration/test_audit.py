"""``mur audit`` (docs/audit.md) on a real formation: clean after a run whose calls all
crossed admitted edges, then a trace edited to add a call along no edge is reported
with its file and line, exit 1; and what cannot be audited exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.ids import new_formation_id
from launcher.records import formation_dir
from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def ran(tmp_path: Path, murmur_home: Path) -> tuple[str, dict[str, str]]:
    project = simple_project(tmp_path, ["planner", "coder", "reviewer", "loner"],
                             entry="planner", reachability={"planner": ["coder", "reviewer"]},
                             agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT,
                                     "reviewer": REVIEWER_AGENT})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    process = start_launcher(project, "--json", "--task", "ship it", env=env)
    line = read_formation_line(process, timeout=90)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    return line["formation_id"], env


def _trace_of(formation_id: str, member: str, env: dict[str, str]) -> Path:
    shown = mur("trace", "show", formation_id, "--json", env=env)
    for line in shown.stdout.splitlines():
        record = json.loads(line)
        if record["event"] == "session_start" and record["member"] == member:
            return Path(record["records_dir"]) / "trace.jsonl"
    raise AssertionError(f"no session of {member}")


def test_a_run_whose_calls_crossed_admitted_edges_is_clean(
        ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    marker = json.loads((formation_dir(formation_id) / "formation.json").read_text())
    assert marker["edges"] == [{"from": "planner", "to": "coder"},
                               {"from": "planner", "to": "reviewer"}]
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 0, done.stderr
    # Two calls, each seen from both sides: the caller's member_call, the callee's task.
    assert done.stdout == (f"mur audit: {formation_id}: 4 calls checked, all along the 2 "
                           "admitted edges\n")
    report = json.loads(mur("audit", formation_id, "--json", env=env).stdout)
    assert report["ok"] is True and report["calls_checked"] == 4
    assert report["violations"] == []


def test_a_forged_call_along_no_edge_is_reported(ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    trace = _trace_of(formation_id, "coder", env)
    lines = trace.read_text().splitlines()
    forged = {"ts": "2026-12-03T10:00:00.000Z", "event": "a2a_task_received",
              "task_id": "forged-task", "context_id": "c", "credential": "member:loner",
              "origin": "peer", "trust": "untrusted", "formation_member": "loner"}
    trace.write_text("\n".join([*lines, json.dumps(forged)]) + "\n")
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 1
    first, summary = done.stdout.splitlines()
    assert first.startswith("violation: loner → coder is no admitted edge  "
                            "(a2a_task_received forged-task at 2026-12-03T10:00:00.000Z, ")
    assert first.endswith(f"{trace}:{len(lines) + 1})")
    assert summary == f"mur audit: {formation_id}: 1 violation in 5 calls checked"
    report = json.loads(mur("audit", formation_id, "--json", env=env).stdout)
    [violation] = report["violations"]
    assert (violation["caller"], violation["callee"], violation["line"]) == (
        "loner", "coder", len(lines) + 1)


def test_a_forged_member_call_along_no_edge_is_reported(
        ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    trace = _trace_of(formation_id, "reviewer", env)
    with trace.open("a") as out:
        out.write(json.dumps({"ts": "2026-12-03T10:00:01.000Z", "event": "member_call",
                              "task_id": "t", "callee": "planner",
                              "url": "http://planner.formation.invalid"}) + "\n")
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 1
    assert done.stdout.startswith("violation: reviewer → planner is no admitted edge")


def test_what_cannot_be_audited_exits_2(ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    unknown = mur("audit", new_formation_id(), env=env)
    assert unknown.returncode == 2 and "no readable formation.json" in unknown.stderr
    assert mur("audit", "frm_nope", env=env).returncode == 2
    marker = formation_dir(formation_id) / "formation.json"
    data = json.loads(marker.read_text())
    del data["edges"]                        # a formation launched before the edges
    marker.write_text(json.dumps(data))
    old = mur("audit", formation_id, "--json", env=env)
    assert old.returncode == 2
    assert json.loads(old.stdout)["error"].startswith(
        f"the formation.json of {formation_id} records no edges")
