"""Roster version 2 (docs/bounds.md): every new key admitted into the formation's bounds,
refused in a version 1 roster with ``E-ROS-001`` naming the version it needs, and each
bound no call can meet refused with ``E-ROS-012``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.auth.edge_limits import (
    APPROVAL_ROOM,
    APPROVE_QUEUE_DEFAULT,
    APPROVE_QUEUE_MAX,
    EdgeLimits,
)
from launcher.admission.artifacts import pack
from launcher.admission.roster import admit, parse_roster
from launcher.admission.store import install
from launcher.cli import main
from launcher.diagnostics import DiagnosticError
from launcher.spawn.member_bounds import MemberBounds
from tests.support.capsules import install_capsule
from tests.support.gateway_capsules import gateway_capsule

MEMBERS = """members:
  - {name: planner, capsule: local/planner, version: 1.0.0, entry: true}
  - {name: coder, capsule: local/coder, version: 1.0.0}
  - {name: deployer, capsule: local/deployer, version: 1.0.0}
"""
FULL = """roster_version: 2
limits: {depth: 4}
members:
  - {name: planner, capsule: local/planner, version: 1.0.0, entry: true}
  - name: coder
    capsule: local/coder
    version: 1.0.0
    limits: {calls: 200}
  - {name: deployer, capsule: local/deployer, version: 1.0.0}
reachability:
  - from: planner
    to: [coder]
    limits: {calls: 50, concurrent: 2, per_minute: 20}
  - from: coder
    to: [deployer]
    approve: true
    approve_timeout: 10m
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    install_capsule(directory, "planner")
    for name in ("coder", "deployer"):
        install_capsule(directory, name, accept=True)
    return directory


def refusal(text: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as refused:
        parse_roster(text)
    return refused.value


def test_a_version_2_roster_is_admitted_with_its_bounds(project: Path) -> None:
    (project / "roster.yaml").write_text(FULL)
    admitted = admit(project)
    bounds = admitted.bounds
    assert (bounds.version, bounds.depth) == (2, 4)
    assert bounds.members == {"coder": {"calls": 200}}
    assert bounds.edge("planner", "coder") == EdgeLimits(calls=50, concurrent=2,
                                                         per_minute=20)
    assert bounds.edge("coder", "deployer") == EdgeLimits(approve=True,
                                                          approve_timeout=600.0)
    # Each member is handed its own part: the depth, the edges into it, its own limits.
    assert bounds.for_member("planner") == {"depth": 4}
    assert bounds.for_member("coder") == {
        "depth": 4, "incoming": {"planner": {"calls": 50, "concurrent": 2,
                                             "per_minute": 20}}, "calls": 200}
    assert MemberBounds.from_wire(bounds.for_member("deployer")).door.incoming == {
        "coder": EdgeLimits(approve=True, approve_timeout=600.0)}
    assert bounds.lines() == [
        "limits: depth 4", "limits coder: calls 200",
        "limits planner -> coder: calls 50, concurrent 2, per_minute 20",
        "limits coder -> deployer: approve (10m)"]


def test_a_version_1_roster_has_no_bounds_and_hands_none_out(project: Path) -> None:
    (project / "roster.yaml").write_text(
        "roster_version: 1\n" + MEMBERS + "reachability: [{from: planner, to: [coder]}]\n")
    admitted = admit(project)
    assert admitted.bounds.version == 1
    assert [admitted.bounds.for_member(name) for name in ("planner", "coder")] == [None, None]
    assert admitted.bounds.lines() == []


@pytest.mark.parametrize(("text", "path"), [
    ("roster_version: 1\nlimits: {depth: 3}\n" + MEMBERS, "limits"),
    ("roster_version: 1\n" + MEMBERS.replace("version: 1.0.0}\n",
                                             "version: 1.0.0, limits: {calls: 1}}\n", 1),
     "members[1].limits"),
    ("roster_version: 1\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "limits: {calls: 3}}\n", "reachability[0].limits"),
    ("roster_version: 1\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve: true}\n", "reachability[0].approve"),
    ("roster_version: 1\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve_queue: 2}\n", "reachability[0].approve_queue"),
])
def test_a_version_2_key_in_a_version_1_roster_is_e_ros_001_naming_the_version(
        text: str, path: str) -> None:
    refused = refusal(text)
    assert (refused.code, refused.path) == ("E-ROS-001", path)
    assert "needs `roster_version: 2`" in refused.diagnostic.message
    assert "roster_version: 2" in refused.diagnostic.hint


@pytest.mark.parametrize(("written", "path", "words"), [
    ("roster_version: 3\n" + MEMBERS, "roster_version", "must be 1 or 2"),
    ("roster_version: 2\nlimits: {depth: four}\n" + MEMBERS, "limits.depth",
     "must be a whole number"),
    ("roster_version: 2\nlimits: {deep: 3}\n" + MEMBERS, "limits.deep", "is not a key"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "limits: {rate: 3}}\n", "reachability[0].limits.rate", "is not a key"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve: yes please}\n", "reachability[0].approve", "must be `true` or `false`"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve_timeout: 5m}\n", "reachability[0].approve_timeout", "`approve` is not"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve: true, approve_timeout: soon}\n", "reachability[0].approve_timeout", ""),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve_queue: 4}\n", "reachability[0].approve_queue", "`approve` is not"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve: true, approve_queue: many}\n", "reachability[0].approve_queue",
     "must be a whole number"),
])
def test_a_malformed_version_2_key_is_e_ros_001(written: str, path: str, words: str) -> None:
    refused = refusal(written)
    assert (refused.code, refused.path) == ("E-ROS-001", path)
    assert words in refused.diagnostic.message


@pytest.mark.parametrize(("written", "path"), [
    ("roster_version: 2\nlimits: {depth: 0}\n" + MEMBERS, "limits.depth"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "limits: {per_minute: -1}}\n", "reachability[0].limits.per_minute"),
    ("roster_version: 2\n" + MEMBERS.replace("version: 1.0.0}\n",
                                             "version: 1.0.0, limits: {calls: 0}}\n", 1),
     "members[1].limits.calls"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "limits: {calls: 3}}\n  - {from: planner, to: [coder]}\n", "reachability[1].to[0]"),
    ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, to: [coder], "
     "approve: true, approve_queue: 0}\n", "reachability[0].approve_queue"),
])
def test_a_bound_no_call_can_meet_is_e_ros_012(written: str, path: str) -> None:
    refused = refusal(written)
    assert (refused.code, refused.path) == ("E-ROS-012", path)


def test_approve_queue_is_handed_to_the_callees_door_and_printed(project: Path) -> None:
    """A rule's ``approve_queue``: the caller's share of the callee's approval room, on
    the callee's channel line with the edge's other bounds, and in doctor's line."""
    (project / "roster.yaml").write_text(FULL.replace(
        "    approve_timeout: 10m\n", "    approve_timeout: 10m\n    approve_queue: 4\n"))
    bounds = admit(project).bounds
    limits = EdgeLimits(approve=True, approve_timeout=600.0, approve_queue=4)
    assert bounds.edge("coder", "deployer") == limits
    assert bounds.for_member("deployer") == {"depth": 4, "incoming": {"coder": {
        "approve": True, "approve_timeout": 600.0, "approve_queue": 4}}}
    handed = MemberBounds.from_wire(bounds.for_member("deployer")).door.incoming["coder"]
    assert (handed, handed.approval_share) == (limits, 4)
    assert bounds.lines()[-1] == "limits coder -> deployer: approve (10m, queue 4)"


def test_an_approve_queue_past_its_largest_share_is_e_ros_012() -> None:
    """One caller may hold at most 48 of a door's 64 approval places, so the others
    always keep a default share (16)."""
    written = ("roster_version: 2\n" + MEMBERS + "reachability:\n  - {from: planner, "
               "to: [coder], approve: true, approve_queue: %d}\n")
    assert parse_roster(written % APPROVE_QUEUE_MAX).rules[0].approve_queue is not None
    refused = refusal(written % (APPROVE_QUEUE_MAX + 1))
    assert (refused.code, refused.path) == ("E-ROS-012", "reachability[0].approve_queue")
    assert f"at most `approve_queue: {APPROVE_QUEUE_MAX}`" in refused.diagnostic.hint
    assert (APPROVE_QUEUE_MAX, APPROVE_QUEUE_DEFAULT, APPROVAL_ROOM) == (48, 16, 64)


def test_tokens_on_a_member_that_is_not_a_model_is_e_ros_012(project: Path) -> None:
    (project / "roster.yaml").write_text(FULL.replace("limits: {calls: 200}",
                                                      "limits: {tokens: 1000}"))
    with pytest.raises(DiagnosticError) as refused:
        admit(project)
    assert (refused.value.code, refused.value.path) == ("E-ROS-012", "members[1].limits.tokens")
    assert "not a model member" in refused.value.diagnostic.message


def test_approval_into_a_gateway_member_is_e_ros_012(project: Path, tmp_path: Path) -> None:
    source = gateway_capsule(tmp_path / "gw", "gate", ["python3", "upstream.py", "{port}"])
    install(pack(source, tmp_path / "gate.mur.zip").path, project)
    (project / "roster.yaml").write_text(
        "roster_version: 2\n" + MEMBERS + "  - {name: gate, capsule: local/gate, "
        "version: 1.0.0}\nreachability:\n  - {from: planner, to: [coder, gate], "
        "approve: true}\n")
    with pytest.raises(DiagnosticError) as refused:
        admit(project)
    assert (refused.value.code, refused.value.path) == ("E-ROS-012", "reachability[0].to[1]")
    assert "gateway member" in refused.value.diagnostic.message


def test_doctor_prints_the_limits(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "roster.yaml").write_text(FULL)
    assert main(["doctor", "--project", str(project)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:5] == ["limits: depth 4", "limits coder: calls 200",
                        "limits planner -> coder: calls 50, concurrent 2, per_minute 20",
                        "limits coder -> deployer: approve (10m)"]
    assert main(["doctor", "--project", str(project), "--json"]) == 0


    bounds = json.loads(capsys.readouterr().out)["bounds"]
    assert bounds["depth"] == 4 and bounds["edges"][1] == {
        "from": "coder", "to": "deployer", "approve": True, "approve_timeout": 600.0}


def test_mur_graph_labels_each_bounded_edge(project: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (project / "roster.yaml").write_text(FULL)
    assert main(["graph", "--project", str(project), "--format", "mermaid"]) == 0
    out = capsys.readouterr().out
    assert "m0 -->|calls 50, concurrent 2, per_minute 20| m1" in out
    assert "m1 -->|approve (10m)| m2" in out


# --- restarts (docs/restarts.md) -------------------------------------------------------

RESTARTING = """roster_version: 2
members:
  - {name: planner, capsule: local/planner, version: 1.0.0, entry: true}
  - {name: coder, capsule: local/coder, version: 1.0.0, restart: on-failure,
     restart_limit: {count: 5, within: 2m}}
  - {name: deployer, capsule: local/deployer, version: 1.0.0, restart: on-failure}
reachability:
  - from: planner
    to: [coder, deployer]
"""


def test_restart_on_a_member_wins_over_its_capsules_lifecycle(project: Path) -> None:
    (project / "roster.yaml").write_text(RESTARTING)
    admitted = admit(project)
    coder, deployer = admitted.member("coder").restart, admitted.member("deployer").restart
    assert (coder.on_failure, coder.count, coder.within) == (True, 5, 120)
    assert (deployer.on_failure, deployer.count, deployer.within) == (True, 3, 600)
    assert not admitted.member("planner").restart.on_failure
    assert coder.describe() == "on-failure, at most 5 within 2m"


@pytest.mark.parametrize(("member", "field", "words"), [
    ("restart: always", "members[1].restart", "must be `never` or `on-failure`"),
    ("restart_limit: {count: 0}", "members[1].restart_limit.count", "from 1 to 1000"),
    ("restart_limit: {within: soon}", "members[1].restart_limit.within", ""),
    ("restart_limit: {times: 3}", "members[1].restart_limit.times", "is not a key"),
])
def test_a_restart_that_cannot_hold_is_refused_naming_the_field(
        member: str, field: str, words: str) -> None:
    text = (f"roster_version: 2\nmembers:\n  - {{name: planner, capsule: local/planner, "
            f"version: 1.0.0, entry: true}}\n  - {{name: coder, capsule: local/coder, "
            f"version: 1.0.0, {member}}}\nreachability: all\n")
    refused = refusal(text)
    assert refused.code == "E-ROS-001"
    assert refused.path == field
    assert words in refused.diagnostic.message


def test_restart_in_a_version_1_roster_is_refused_naming_version_2() -> None:
    refused = refusal(MEMBERS.replace("version: 1.0.0}\n  - {name: deployer",
                                      "version: 1.0.0, restart: on-failure}\n"
                                      "  - {name: deployer", 1).replace(
        "members:", "roster_version: 1\nmembers:", 1) + "reachability: all\n")
    assert refused.code == "E-ROS-001"
    assert "roster_version: 2" in refused.diagnostic.message + refused.diagnostic.hint


def test_doctor_prints_each_members_restart(project: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (project / "roster.yaml").write_text(RESTARTING)
    assert main(["doctor", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "restart coder: on-failure, at most 5 within 2m" in out.splitlines()
    assert "restart deployer: on-failure, at most 3 within 10m" in out.splitlines()
    assert main(["doctor", "--project", str(project), "--json"]) == 0
    members = {m["name"]: m for m in json.loads(capsys.readouterr().out)["members"]}
    assert members["coder"]["restart"] == {"policy": "on-failure", "count": 5,
                                           "within_seconds": 120}
    assert members["planner"]["restart"]["policy"] == "never"
