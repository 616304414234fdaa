"""``mur audit`` (docs/audit.md) on a real formation: clean after a run whose calls all
crossed admitted edges, then a trace edited to add a call along no edge is reported
with its file and line, exit 1; and what cannot be audited exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.home.formations import formation_dir
from launcher.ids import new_formation_id
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


def _append(trace: Path, record: dict[str, object]) -> int:
    """Append ``record`` as TraceWriter writes one (compact JSON, one line); its line
    number."""
    with trace.open("ab") as out:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                  .encode("utf-8") + b"\n")
    return len(trace.read_bytes().splitlines())


def _real_record(trace: Path, event: str) -> dict[str, object]:
    """The first ``event`` record the member's runtime wrote, to forge a twin of."""
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    return next(record for record in records if record["event"] == event)


def test_a_run_whose_calls_crossed_admitted_edges_is_clean(
        ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    marker = json.loads((formation_dir(formation_id) / "formation.json").read_text())
    assert marker["edges"] == [{"from": "planner", "to": "coder"},
                               {"from": "planner", "to": "reviewer"}]
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 0, done.stderr
    # Two calls, each seen from both sides: the caller's member_call, the callee's task.
    # Four members, one trace each (loner too: it ran, and nobody called it).
    # The record is sealed too (docs/audit.md): one seal at least, the final one.
    assert done.stdout.startswith(
        f"mur audit: {formation_id}: 2 calls checked (4 records, callers' and callees') "
        "in 4 traces, all along the 2 admitted edges; record sealed (")
    report = json.loads(mur("audit", formation_id, "--json", env=env).stdout)
    assert report["ok"] is True and report["calls_checked"] == 4
    assert report["calls"] == 2
    assert report["traces_read"] == 4
    assert report["violations"] == [] and report["unsealed"] == []
    assert report["sealed"] is True and report["seals_read"] >= 1


def test_a_forged_call_along_no_edge_is_reported(ran: tuple[str, dict[str, str]]) -> None:
    # The attack: coder's trace gains a task "received" from loner, which may call no
    # one: a twin of the real record of planner's call, with the caller changed.
    formation_id, env = ran
    trace = _trace_of(formation_id, "coder", env)
    real = _real_record(trace, "a2a_task_received")
    assert real["formation_member"] == "planner"     # the call that really happened
    forged = {**real, "ts": "2026-12-03T10:00:00.000000Z", "task_id": "forged-task",
              "credential": "member:loner", "formation_member": "loner"}
    line = _append(trace, forged)
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == ("violation: loner → coder is no admitted edge  (a2a_task_received "
                        f"forged-task at 2026-12-03T10:00:00.000000Z, {trace}:{line})")
    # The forged line breaks the trace's chain too: it is found twice over.
    assert f"tampered: {trace}:{line}: " in done.stdout
    assert lines[-1].startswith(f"mur audit: {formation_id}: 2 violations; 3 calls "
                                "checked (5 records, callers' and callees') in 4 traces; "
                                "record sealed (")
    report = json.loads(mur("audit", formation_id, "--json", env=env).stdout)
    assert report["ok"] is False and report["calls_checked"] == 5
    violation, chain = report["violations"]
    assert (chain["event"], chain["trace"], chain["line"]) == ("tampered", str(trace), line)
    assert violation == {"trace": str(trace), "line": line,
                         "ts": "2026-12-03T10:00:00.000000Z", "event": "a2a_task_received",
                         "caller": "loner", "callee": "coder", "task_id": "forged-task",
                         "problem": "is no admitted edge"}


def test_a_forged_member_call_along_no_edge_is_reported(
        ran: tuple[str, dict[str, str]]) -> None:
    # The attack from the caller's side: reviewer's trace claims it called planner.
    formation_id, env = ran
    trace = _trace_of(formation_id, "reviewer", env)
    line = _append(trace, {"ts": "2026-12-03T10:00:01.000000Z", "event": "member_call",
                           "task_id": "t", "callee": "planner",
                           "url": "http://planner.formation.invalid"})
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 1
    assert done.stdout.startswith("violation: reviewer → planner is no admitted edge  "
                                  "(member_call t at 2026-12-03T10:00:01.000000Z, "
                                  f"{trace}:{line})\n")


def test_a_received_task_whose_credential_names_another_member_is_reported(
        ran: tuple[str, dict[str, str]]) -> None:
    # The attack: a record that names an admitted caller in formation_member while its
    # credential says the token was loner's. A door writes both from one token.
    formation_id, env = ran
    trace = _trace_of(formation_id, "reviewer", env)
    forged = {**_real_record(trace, "a2a_task_received"), "task_id": "mixed",
              "credential": "member:loner"}
    line = _append(trace, forged)
    done = mur("audit", formation_id, env=env)
    assert done.returncode == 1
    assert done.stdout.startswith("violation: planner → reviewer is named by a record "
                                  "whose credential is member:loner  (a2a_task_received "
                                  "mixed at ")
    assert f"{trace}:{line})\n" in done.stdout


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
    assert json.loads(old.stdout)["error"]["message"].startswith(
        f"the formation.json of {formation_id} records no edges")
