"""launcher.commands.audit and the ``edges`` of formation.json, on synthetic traces under a
temporary MURMUR_HOME."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import main
from launcher.commands.audit import AuditRefused, audit, render_report
from launcher.home.formations import (
    formation_dir,
    formation_records,
    make_formation_dir,
    read_formation_marker,
    write_formation_marker,
)
from launcher.ids import new_formation_id, new_session_id

EDGES = [("planner", "coder")]


def formation(murmur_home: Path, edges: list[tuple[str, str]] | None = EDGES) -> str:
    formation_id = new_formation_id()
    make_formation_dir(formation_id)
    write_formation_marker(formation_id, project_dir="/p", launcher_pid=1,
                           launcher_start="", edges=edges or ())
    return formation_id


def trace(formation_id: str, member: str, *records: dict[str, Any]) -> Path:
    session = formation_records(formation_id) / member / new_session_id()
    session.mkdir(parents=True)
    path = session / "trace.jsonl"
    start = {"ts": "2026-12-03T10:00:00.000Z", "event": "session_start",
             "formation_id": formation_id, "formation_member": member}
    path.write_text("".join(json.dumps(r) + "\n" for r in (start, *records)))
    return path


def test_the_marker_keeps_the_edges_in_order(murmur_home: Path) -> None:
    formation_id = formation(murmur_home, [("a", "b"), ("a", "c"), ("b", "c")])
    marker = read_formation_marker(formation_id)
    assert marker is not None and marker.edges == (("a", "b"), ("a", "c"), ("b", "c"))
    data = json.loads((formation_dir(formation_id) / "formation.json").read_text())
    assert data["edges"][0] == {"from": "a", "to": "b"}


@pytest.mark.parametrize("edges", [None, "all", [{"from": "a"}], [{"from": "a", "to": 1}],
                                   [{"from": "a", "to": "b", "extra": 1}]])
def test_a_marker_without_well_formed_edges_has_none(murmur_home: Path, edges: Any) -> None:
    formation_id = formation(murmur_home)
    path = formation_dir(formation_id) / "formation.json"
    data = json.loads(path.read_text())
    if edges is None:
        del data["edges"]
    else:
        data["edges"] = edges
    path.write_text(json.dumps(data))
    marker = read_formation_marker(formation_id)
    assert marker is not None and marker.edges is None
    with pytest.raises(AuditRefused, match="records no edges"):
        audit(formation_id)


def test_calls_along_edges_are_clean_and_each_forgery_is_found(murmur_home: Path) -> None:
    formation_id = formation(murmur_home)
    trace(formation_id, "planner",
          {"ts": "t1", "event": "member_call", "task_id": "p1", "callee": "coder"},
          {"ts": "t2", "event": "a2a_task_received", "task_id": "p1",
           "credential": "operator"})
    coder = trace(formation_id, "coder",
                  {"ts": "t3", "event": "a2a_task_received", "task_id": "c1",
                   "formation_member": "planner"})
    report = audit(formation_id)
    assert (report.calls_checked, report.violations) == (2, ())
    assert render_report(report).endswith(
        "1 call checked (2 records, callers' and callees') in 2 traces, all along the 1 "
        "admitted edge\n")

    with coder.open("a") as out:
        out.write("{torn line\n")
        out.write(json.dumps({"ts": "t4", "event": "member_call", "task_id": "c1",
                              "callee": "planner"}) + "\n")
        out.write(json.dumps({"ts": "t5", "event": "a2a_task_received", "task_id": "c2",
                              "formation_member": "coder\x1b[2J"}) + "\n")
    report = audit(formation_id)
    assert report.calls_checked == 4
    assert [(v.caller, v.callee, v.line, v.event) for v in report.violations] == [
        ("coder", "planner", 4, "member_call"),
        ("coder\x1b[2J", "coder", 5, "a2a_task_received")]
    text = render_report(report)
    assert "\x1b" not in text
    assert text.endswith("2 violations; 2 calls checked (4 records, callers' and callees') in 2 "
                         "traces\n")
    assert report.to_json()["ok"] is False


def test_a_formation_with_no_marker_cannot_be_audited(murmur_home: Path) -> None:
    with pytest.raises(AuditRefused, match="no readable formation.json"):
        audit(new_formation_id())


def test_a_received_task_named_only_by_its_credential_is_still_a_call(
        murmur_home: Path) -> None:
    # A forger who leaves out formation_member does not hide the call: the credential
    # the door writes beside it names the caller too.
    formation_id = formation(murmur_home)
    trace(formation_id, "coder",
          {"ts": "t1", "event": "a2a_task_received", "task_id": "c1",
           "credential": "member:planner"},
          {"ts": "t2", "event": "a2a_task_received", "task_id": "c2",
           "credential": "member:loner"},
          {"ts": "t3", "event": "a2a_task_received", "task_id": "c3",
           "credential": "bearer:ci"})
    report = audit(formation_id)
    assert report.calls_checked == 2
    assert [(v.caller, v.callee, v.task_id, v.line) for v in report.violations] == [
        ("loner", "coder", "c2", 3)]


def test_a_record_whose_two_caller_fields_disagree_is_a_violation(
        murmur_home: Path) -> None:
    formation_id = formation(murmur_home)
    trace(formation_id, "coder",
          {"ts": "t1", "event": "a2a_task_received", "task_id": "c1",
           "credential": "member:loner", "formation_member": "planner"})
    [violation] = audit(formation_id).violations
    assert (violation.caller, violation.callee) == ("planner", "coder")
    assert violation.problem == "is named by a record whose credential is member:loner"


def test_a_formation_with_no_trace_left_says_so(murmur_home: Path) -> None:
    formation_id = formation(murmur_home)
    report = audit(formation_id)
    assert (report.traces_read, report.calls_checked) == (0, 0)
    assert render_report(report) == (
        f"mur audit: {formation_id}: 0 calls checked (0 records, callers' and callees') "
        "in 0 traces, all along the 1 admitted edge\n")


def test_the_command_exits_0_clean_and_1_with_violations(
        murmur_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    formation_id = formation(murmur_home)
    coder = trace(formation_id, "coder",
                  {"ts": "t1", "event": "a2a_task_received", "task_id": "c1",
                   "credential": "member:planner", "formation_member": "planner"})
    assert main(["audit", formation_id]) == 0
    assert capsys.readouterr().out == (
        f"mur audit: {formation_id}: 1 call checked (1 record, callers' and callees') "
        "in 1 trace, all along the 1 admitted edge\n")
    with coder.open("a") as out:
        out.write(json.dumps({"ts": "t2", "event": "member_call", "task_id": "c1",
                              "callee": "planner"}, separators=(",", ":")) + "\n")
    assert main(["audit", formation_id, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "formation_id": formation_id, "ok": False,
        "edges": [{"from": "planner", "to": "coder"}], "traces_read": 1, "calls": 1,
        "calls_checked": 2,
        "violations": [{"trace": str(coder), "line": 3, "ts": "t2", "event": "member_call",
                        "caller": "coder", "callee": "planner", "task_id": "c1",
                        "problem": "is no admitted edge"}],
        "limits_reached": [], "approvals": [], "refused": [],
        # A formation.json without the formation's public key, traces without prev:
        # launched by a mur that did not seal, nothing sealed to check. Its launcher_pid
        # (1, no start time) runs.
        "sealed": False, "seals_read": 0, "unsealed": [], "head": None,
        "expected_head": None, "launcher_running": True}


def test_a_chained_trace_beside_a_marker_without_its_key_is_tampered(
        murmur_home: Path) -> None:
    """The chain, the seals and the key came together: a chained trace (or a
    seals.jsonl) beside a formation.json without public_key says the key was removed."""
    formation_id = formation(murmur_home)
    marker = formation_dir(formation_id) / "formation.json"
    path = trace(formation_id, "coder", {"ts": "t1", "event": "task_state", "prev": "x"})
    [violation] = audit(formation_id).violations
    assert (violation.event, violation.trace, violation.line) == ("tampered", str(marker), 0)
    assert f"its traces are hash-chained ({path}:2 carries prev)" in violation.problem
    assert render_report(audit(formation_id)).startswith(f"tampered: {marker}: ")
    path.write_text(path.read_text().replace(',"prev": "x"', "").replace(', "prev": "x"', ""))
    assert audit(formation_id).violations == ()            # a mur before the seals
    (formation_dir(formation_id) / "seals.jsonl").write_text("{}\n")
    [violation] = audit(formation_id).violations
    assert "seals.jsonl holds seals" in violation.problem


@pytest.mark.parametrize("case", ["bad id", "no marker", "no edges", "short head"])
def test_the_command_exits_2_when_it_cannot_audit(
        murmur_home: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    formation_id = "frm_nope" if case == "bad id" else new_formation_id()
    if case == "short head":
        formation_id = formation(murmur_home)
        assert main(["audit", formation_id, "--expect", "3f9c2a"]) == 2
        assert main(["audit", formation_id, "--expect", "3f9c2a1b7d4z"]) == 2
        assert "is not a head: 12 to 64 hex digits" in capsys.readouterr().err
        return
    if case == "no edges":
        formation_id = formation(murmur_home)
        path = formation_dir(formation_id) / "formation.json"
        data = json.loads(path.read_text())
        del data["edges"]                       # as a mur older than `mur audit` wrote it
        path.write_text(json.dumps(data))
    assert main(["audit", formation_id]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith("mur audit: ")
    assert main(["audit", formation_id, "--json"]) == 2
    failure = json.loads(capsys.readouterr().out)
    assert failure["ok"] is False and failure["exit_status"] == 2
    expected = {"bad id": "is not a formation id", "no marker": "no readable formation.json",
                "no edges": "records no edges"}[case]
    assert expected in failure["error"]["message"]
