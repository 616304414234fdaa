"""Roster admission: one case per code, the roster format's order of checks (docs/admission.md),
its example roster, and malformed input that never gives a traceback."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.admission.roster import AdmittedRoster, admit, check_structure, parse_roster
from launcher.admission.store import LockPin, pack, write_lock
from launcher.cli import main
from launcher.diagnostics import DiagnosticError
from tests.support.capsules import capsule_source, install_capsule

#: Every code admission may refuse a roster with (W-ROS-001 only warns).
ADMISSION_CODES = {f"E-ROS-00{n}" for n in range(1, 9)} | {"E-REG-004", "E-REG-005"}
#: The codes of checks 1-5, which read no store.
STRUCTURE_CODES = {"E-ROS-001", "E-ROS-002", "E-ROS-003", "E-ROS-004", "E-ROS-008"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


def write_roster(project: Path, text: str | bytes) -> None:
    path = project / "roster.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def refusal(project: Path) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as refused:
        admit(project)
    return refused.value


def doctor(project: Path, capsys: pytest.CaptureFixture[str], *flags: str
           ) -> tuple[int, str, str]:
    status = main(["doctor", "--project", str(project), *flags])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def member(name: str, capsule: str | None = None, version: str = "1.0.0",
           entry: bool = False) -> str:
    line = f"  - {{name: {name}, capsule: {capsule or 'local/' + name}, version: {version}"
    return line + (", entry: true}" if entry else "}")


def roster(*members: str, reachability: str = "") -> str:
    return "roster_version: 1\nmembers:\n" + "\n".join(members) + "\n" + reachability


# --- One case per code -------------------------------------------------------------------

@dataclass
class Case:
    code: str
    roster: str
    path: str
    installs: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: dict[str, LockPin] = field(default_factory=dict)


SERVES = {"accept": True}
CASES = {
    "E-ROS-001": Case("E-ROS-001", roster(
        "  - {name: a, capsule: local/a, version: 1.0.0, entry: true, entri: true}"),
        "members[0].entri"),
    "E-ROS-002": Case("E-ROS-002", roster(member("a")), "members"),
    "E-ROS-003": Case("E-ROS-003", roster(member("a", entry=True), member("a")),
                      "members[1].name"),
    "E-ROS-004": Case("E-ROS-004", roster(member("a", entry=True),
                                          reachability="reachability: [{from: a, to: [b]}]\n"),
                      "reachability[0].to[0]"),
    "E-ROS-005": Case("E-ROS-005", roster(member("a", entry=True), member("b"),
                                          reachability="reachability: [{from: a, to: [b]}]\n"),
                      "reachability[0].to[0]", installs={"a": {}, "b": {}}),
    "E-ROS-006": Case("E-ROS-006", roster(member("a", entry=True), member("b"),
                                          reachability="reachability: [{from: a, to: [b]}]\n"),
                      "members[0]", installs={"a": {"auth": False}, "b": SERVES}),
    "E-ROS-007": Case("E-ROS-007", roster(member("a", entry=True)), "members[0]"),
    "E-ROS-008": Case("E-ROS-008", roster(member("a", entry=True), member("b"),
                                          reachability="reachability: [{from: b, to: [a]}]\n"),
                      "reachability[0].to[0]"),
    "E-REG-005": Case("E-REG-005", roster(member("a", entry=True)), "members[0].version",
                      installs={"a": {}}, lock={"local/a": LockPin("1.0.0", "0" * 64)}),
}


def build(project: Path, case: Case) -> None:
    for name, options in case.installs.items():
        install_capsule(project, name, **options)
    if case.lock:
        write_lock(project, case.lock)
    write_roster(project, case.roster)


@pytest.mark.parametrize("code", sorted(CASES))
def test_each_code_with_the_smallest_roster_that_triggers_it(
        project: Path, capsys: pytest.CaptureFixture[str], code: str) -> None:
    case = CASES[code]
    build(project, case)
    refused = refusal(project)
    assert (refused.code, refused.path) == (case.code, case.path)
    status, out, err = doctor(project, capsys)
    assert (status, out) == (1, "")
    assert err.startswith(f"error {case.code}: ")
    assert "\n  hint: " in err and "Traceback" not in err
    status, out, err = doctor(project, capsys, "--json")
    report = json.loads(out)
    assert (status, err, report["admitted"]) == (1, "", False)
    assert (report["error"]["code"], report["error"]["path"]) == (case.code, case.path)


def test_w_ros_001_names_the_member_and_the_queue_depth_that_holds_every_caller(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reaching = "capabilities: {network: {allow: [localhost]}}\n"   # no W-RUN-008
    install_capsule(project, "a", extra=reaching)
    install_capsule(project, "b", extra=reaching)
    install_capsule(project, "c", accept=True, concurrency=1, queue_depth=0)
    write_roster(project, roster(member("a", entry=True), member("b"), member("c"),
                                 reachability="reachability:\n  - {from: a, to: [c]}\n"
                                              "  - {from: b, to: [c]}\n"))
    admitted = admit(project)
    [warning] = admitted.warnings
    assert (warning.code, warning.path, warning.severity) == ("W-ROS-001", "members[2]",
                                                              "warning")
    assert "2 members may call `c` (`a`, `b`)" in warning.message
    assert "`lifecycle.queue_depth: 1`" in warning.hint
    status, out, err = doctor(project, capsys)
    assert status == 0
    assert err.startswith("warning W-ROS-001: ")
    assert out.startswith("admitted ") and out.count("\n") == 2  # and the isolation line
    status, out, _ = doctor(project, capsys, "--json")
    report = json.loads(out)
    assert (status, report["admitted"]) == (0, True)
    assert [w["code"] for w in report["warnings"]] == ["W-ROS-001"]


def test_a_member_holding_every_caller_gets_no_warning(project: Path) -> None:
    install_capsule(project, "a")
    install_capsule(project, "b")
    install_capsule(project, "c", accept=True, concurrency=2, queue_depth=0)
    write_roster(project, roster(member("a", entry=True), member("b"), member("c"),
                                 reachability="reachability: [{from: a, to: [c]}, "
                                              "{from: b, to: [c]}]\n"))
    assert admit(project).warnings == []


# --- Order -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, code, path", [
    # check 1 before 2: an unknown key and a duplicate name
    (roster(member("a", entry=True), member("a"), reachability="colour: red\n"),
     "E-ROS-001", "colour"),
    # check 2 before 3: a duplicate name and no entry member
    (roster(member("a"), member("a")), "E-ROS-003", "members[1].name"),
    # check 3 before 4: two entry members and a rule naming no member
    (roster(member("a", entry=True), member("b", entry=True),
            reachability="reachability: [{from: a, to: [zed]}]\n"),
     "E-ROS-002", "members[1].entry"),
    # check 4 over every rule before check 5: rule 0 calls the entry, rule 1 names no member
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: b, to: [a]}, {from: a, to: [zed]}]\n"),
     "E-ROS-004", "reachability[1].to[0]"),
    # check 4 reads `from` before `to`
    (roster(member("a", entry=True), reachability="reachability: [{from: x, to: [y]}]\n"),
     "E-ROS-004", "reachability[0].from"),
    # within check 1, members in roster order
    (roster("  - {name: A, capsule: local/a, version: 1}", "  - {name: b, capsule: b, "
            "version: 1}"), "E-ROS-001", "members[0].name"),
])
def test_a_roster_with_two_faults_reports_the_earlier_check(project: Path, text: str,
                                                           code: str, path: str) -> None:
    write_roster(project, text)
    refused = refusal(project)
    assert (refused.code, refused.path) == (code, path)


def test_a_structural_fault_is_reported_with_an_empty_store(project: Path,
                                                            murmur_home: Path) -> None:
    write_roster(project, CASES["E-ROS-008"].roster)
    refused = refusal(project)
    assert refused.code == "E-ROS-008"
    assert not (project / ".murmur").exists() and not (murmur_home / "artifacts").exists()


def test_check_structure_needs_no_store_at_all() -> None:
    document = yaml.safe_load(CASES["E-ROS-004"].roster)
    with pytest.raises(DiagnosticError) as refused:
        check_structure(document)
    assert refused.value.code == "E-ROS-004"
    structure = parse_roster(roster(member("a", entry=True), member("b"),
                                    reachability="reachability: [{from: a, to: [b]}]\n"))
    assert [m.name for m in structure.members] == ["a", "b"]
    assert structure.entry.name == "a"


def test_members_are_taken_in_roster_order(project: Path) -> None:
    write_roster(project, roster(member("a", entry=True), member("b"), member("c")))
    assert refusal(project).path == "members[0]"
    install_capsule(project, "a")
    assert refusal(project).path == "members[1]"


def test_check_6_takes_each_member_through_both_rows_before_the_next(project: Path) -> None:
    install_capsule(project, "a")
    write_lock(project, {"local/a": LockPin("1.0.0", "0" * 64)})
    write_roster(project, roster(member("a", entry=True), member("b")))  # b not installed
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-REG-005", "members[0].version")


def test_an_earlier_member_not_installed_comes_before_a_later_lock_fault(project: Path) -> None:
    install_capsule(project, "b")
    write_lock(project, {"local/b": LockPin("1.0.0", "0" * 64)})
    write_roster(project, roster(member("a", entry=True), member("b")))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-007", "members[0]")


def test_a_member_not_installed_hint_names_no_file_that_is_not_there(project: Path) -> None:
    write_roster(project, roster(member("a", entry=True)))
    hint = refusal(project).diagnostic.hint
    assert "pack its source with `mur pack DIR`, then `mur install a-1.0.0.mur.zip`" in hint
    assert "installed:" not in hint and "did you mean" not in hint


def test_a_member_not_installed_hint_names_the_installed_versions(project: Path) -> None:
    install_capsule(project, "a", "2.0.0")
    install_capsule(project, "a", "1.5.0", to_global=True)
    write_roster(project, roster(member("a", entry=True)))
    hint = refusal(project).diagnostic.hint
    assert "installed: local/a 2.0.0, 1.5.0 (set the member's `version:` to one of them)" \
        in hint


def test_a_member_not_installed_hint_suggests_the_capsule_meant(project: Path) -> None:
    install_capsule(project, "researcher")
    install_capsule(project, "writer")
    write_roster(project, roster(member("a", "local/reseacher", entry=True)))
    assert refusal(project).diagnostic.hint.endswith("; did you mean `local/researcher`?")
    write_roster(project, roster(member("a", "local/zz", entry=True)))
    assert "did you mean" not in refusal(project).diagnostic.hint


def test_a_member_not_installed_hint_rebuilds_a_source_in_the_project(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = capsule_source(project, "a")
    write_roster(project, roster(member("a", entry=True)))
    hint = refusal(project).diagnostic.hint
    assert f"`mur run --roster --rebuild --project {project}` packs and installs it" in hint
    monkeypatch.chdir(project)
    hint = refusal(project).diagnostic.hint
    assert f"its source is in {source.name}: `mur run --roster --rebuild` packs" in hint
    assert f"`mur pack {source.name} && mur install a-1.0.0.mur.zip`" in hint


def test_a_member_not_installed_hint_installs_its_artifact_in_the_project(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack(capsule_source(project.parent / "elsewhere", "a"), project / "a-1.0.0.mur.zip")
    write_roster(project, roster(member("a", entry=True)))
    monkeypatch.chdir(project)
    assert refusal(project).diagnostic.hint.startswith(
        "install it with `mur install a-1.0.0.mur.zip`")


def test_a_malformed_lock_is_read_only_once_a_member_is_installed(project: Path) -> None:
    (project / "murmur.lock").write_text("lock_version: 7\n")
    write_roster(project, roster(member("a", entry=True)))
    assert refusal(project).code == "E-ROS-007"
    install_capsule(project, "a")
    assert refusal(project).code == "E-REG-004"


def test_check_6_comes_before_7_and_7_before_8(project: Path) -> None:
    install_capsule(project, "a", auth=False)
    install_capsule(project, "b")  # serves no peers
    text = roster(member("a", entry=True), member("b"), member("c"),
                  reachability="reachability: [{from: a, to: [b]}]\n")
    write_roster(project, text)
    assert refusal(project).code == "E-ROS-007"  # c is not installed
    install_capsule(project, "c")
    assert refusal(project).code == "E-ROS-005"
    install_capsule(project, "b", accept=True, force=True)
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-006", "members[0]")


def test_check_7_takes_callees_in_roster_order_not_rule_order(project: Path) -> None:
    for name in ("a", "b", "c"):
        install_capsule(project, name)
    write_roster(project, roster(member("a", entry=True), member("b"), member("c"),
                                 reachability="reachability: [{from: a, to: [c, b]}]\n"))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-005", "reachability[0].to[1]")
    assert "call `b`" in refused.diagnostic.message


def test_check_8_names_the_first_member_without_authentication(project: Path) -> None:
    install_capsule(project, "a")
    install_capsule(project, "b", accept=True)
    install_capsule(project, "c", auth=False)
    install_capsule(project, "d", auth=False)
    write_roster(project, roster(member("a", entry=True), member("b"), member("c"),
                                 member("d"),
                                 reachability="reachability: [{from: a, to: [b]}]\n"))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-006", "members[2]")  # on no edge, still


# --- The roster format's example roster ------------------------------------------------

REFERENCE_EXAMPLE = """\
roster_version: 1
members:
  - name: planner
    capsule: local/planner
    version: 0.3.0
    entry: true
  - name: coder
    capsule: local/coder
    version: 1.2.0
  - name: reviewer
    capsule: local/reviewer
    version: 0.9.0
reachability:
  - from: planner
    to: [coder, reviewer]
  - from: reviewer
    to: [coder]
"""


def install_reference_members(project: Path, coder_queue: int = 1) -> None:
    install_capsule(project, "planner", "0.3.0")
    install_capsule(project, "coder", "1.2.0", accept=True, queue_depth=coder_queue)
    install_capsule(project, "reviewer", "0.9.0", accept=True)


def test_the_reference_example_admits_once_its_members_are_installed(project: Path) -> None:
    write_roster(project, REFERENCE_EXAMPLE)
    assert refusal(project).code == "E-ROS-007"
    install_reference_members(project)
    admitted = admit(project)
    assert isinstance(admitted, AdmittedRoster)
    assert admitted.project_dir == project.resolve()
    assert [m.name for m in admitted.members] == ["planner", "coder", "reviewer"]
    assert admitted.entry.name == "planner"
    assert [m.name for m in admitted.peers] == ["coder", "reviewer"]
    assert admitted.edges == {("planner", "coder"), ("planner", "reviewer"),
                              ("reviewer", "coder")}
    assert admitted.callees("planner") == ["coder", "reviewer"]
    assert admitted.callees("reviewer") == ["coder"]
    assert admitted.callees("coder") == []
    assert admitted.warnings == []
    coder = admitted.member("coder")
    assert (coder.capsule, coder.version, coder.store) == ("local/coder", "1.2.0", "project")
    assert coder.artifact.is_file()
    assert coder.manifest.serves_peers


def test_the_reference_example_warns_for_a_coder_that_holds_one_task(project: Path) -> None:
    write_roster(project, REFERENCE_EXAMPLE)
    install_reference_members(project, coder_queue=0)
    [warning] = admit(project).warnings
    assert warning.path == "members[1]"
    assert "`lifecycle.queue_depth: 1`" in warning.hint


def test_members_are_bound_to_the_sha256_they_were_found_with(project: Path) -> None:
    installed = install_capsule(project, "a")
    write_roster(project, roster(member("a", entry=True)))
    assert admit(project).entry.sha256 == installed.sha256


def test_the_project_store_comes_before_the_global_store(project: Path) -> None:
    install_capsule(project, "a", to_global=True, reply="global")
    write_roster(project, roster(member("a", entry=True)))
    assert admit(project).entry.store == "global"
    local = install_capsule(project, "a", reply="project")
    bound = admit(project).entry
    assert (bound.store, bound.sha256) == ("project", local.sha256)


@pytest.mark.parametrize("written, installed", [("1.10", "1.10"), ("1.0", "1.0"),
                                                ("'1.10'", "1.10"), ("2", "2")])
def test_an_unquoted_number_version_reads_as_its_text(project: Path, written: str,
                                                      installed: str) -> None:
    install_capsule(project, "a", installed)
    write_roster(project, roster(member("a", version=written, entry=True)))
    assert admit(project).entry.version == installed


def test_a_key_written_with_no_value_is_absent(project: Path) -> None:
    install_capsule(project, "a")
    install_capsule(project, "b")
    write_roster(project, "roster_version: 1\nmembers:\n"
                          "  - {name: a, capsule: local/a, version: 1.0.0, entry: true}\n"
                          "  - name: b\n    capsule: local/b\n    version: 1.0.0\n    entry:\n"
                          "reachability:\n")
    admitted = admit(project)
    assert admitted.entry.name == "a"
    assert admitted.edges == frozenset()


def test_a_bare_capsule_name_gets_a_hint_naming_its_scoped_forms(project: Path) -> None:
    write_roster(project, roster(member("coder", capsule="coder", entry=True)))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-001", "members[0].capsule")
    assert "`local/coder`" in refused.diagnostic.hint
    assert "`<scope>/coder`" in refused.diagnostic.hint


@pytest.mark.parametrize("version", ["latest", "stable", "edge", "''", "' '", "LATEST"])
def test_floating_and_blank_versions_are_refused(project: Path, version: str) -> None:
    write_roster(project, roster(member("a", version=version, entry=True)))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-001", "members[0].version")


def test_a_version_written_with_no_value_is_missing(project: Path) -> None:
    write_roster(project, "roster_version: 1\nmembers:\n  - name: a\n    capsule: local/a\n"
                          "    version:\n    entry: true\n")
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-001", "members[0].version")


@pytest.mark.parametrize("text, path", [
    ("", "roster.yaml"),
    ("roster_version: 3\nmembers: []\n", "roster_version"),
    ("roster_version: '1'\n", "roster_version"),
    ("roster_version: true\n", "roster_version"),
    ("roster_version: 1.0\n", "roster_version"),
    ("members: []\n", "roster_version"),
    ("roster_version: 1\n", "members"),
    ("roster_version: 1\nmembers: []\n", "members"),
    ("roster_version: 1\nmembers: {a: 1}\n", "members"),
    ("roster_version: 1\nmembers: [a]\n", "members[0]"),
    (roster("  - {name: a, version: 1, entry: true}"), "members[0].capsule"),
    (roster("  - {capsule: local/a, version: 1, entry: true}"), "members[0].name"),
    (roster(member("Coder", "local/coder", entry=True)), "members[0].name"),
    (roster(member("1abc", "local/abc", entry=True)), "members[0].name"),
    (roster(member("a" * 33, "local/a", entry=True)), "members[0].name"),
    (roster(member("a", "local/A", entry=True)), "members[0].capsule"),
    (roster(member("a", "local/a/b", entry=True)), "members[0].capsule"),
    (roster("  - {name: a, capsule: local/a, version: 1, entry: 'true'}"), "members[0].entry"),
    (roster("  - {name: a, capsule: local/a, version: [1], entry: true}"),
     "members[0].version"),
    (roster(member("a", entry=True), reachability="reachability: some\n"), "reachability"),
    (roster(member("a", entry=True), reachability="reachability: {from: a}\n"),
     "reachability"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: a, to: []}]\n"), "reachability[0].to"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: a, to: b}]\n"), "reachability[0].to"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: a}]\n"), "reachability[0].to"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{to: [b]}]\n"), "reachability[0].from"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: a, to: [b], also: [a]}]\n"),
     "reachability[0].also"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: b, to: [b]}]\n"), "reachability[0].to[0]"),
    (roster(member("a", entry=True), member("b"),
            reachability="reachability: [{from: a, to: [1]}]\n"), "reachability[0].to[0]"),
])
def test_shape_faults_are_e_ros_001_naming_the_field(project: Path, text: str,
                                                    path: str) -> None:
    write_roster(project, text)
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-001", path)


def test_a_32_character_name_is_accepted() -> None:
    structure = parse_roster(roster(member("a" * 32, "local/a", entry=True)))
    assert structure.members[0].name == "a" * 32


def test_an_unknown_key_hint_suggests_the_field_meant(project: Path) -> None:
    write_roster(project, CASES["E-ROS-001"].roster)
    assert "did you mean `entry`?" in refusal(project).diagnostic.hint


def test_an_unknown_member_name_hint_suggests_the_member_meant(project: Path) -> None:
    write_roster(project, roster(member("planner", entry=True), member("reviewer"),
                                 reachability="reachability: [{from: planner, "
                                              "to: [revewer]}]\n"))
    refused = refusal(project)
    assert refused.code == "E-ROS-004"
    assert "did you mean `reviewer`?" in refused.diagnostic.hint


def test_no_reachability_or_an_empty_list_means_no_edges_and_no_authentication(
        project: Path) -> None:
    install_capsule(project, "a", auth=False)
    install_capsule(project, "b", auth=False, accept=True)
    for reachability in ("", "reachability: []\n"):
        write_roster(project, roster(member("a", entry=True), member("b"),
                                     reachability=reachability))
        assert admit(project).edges == frozenset()


def test_a_single_member_roster_needs_no_authentication(project: Path) -> None:
    install_capsule(project, "a", auth=False)
    write_roster(project, roster(member("a", entry=True)))
    assert admit(project).peers == ()


def test_reachability_all_pairs_members_that_serve_peers_never_into_the_entry(
        project: Path) -> None:
    install_capsule(project, "planner", accept=True)
    install_capsule(project, "coder", accept=True)
    install_capsule(project, "reviewer", accept=True)
    install_capsule(project, "tester")
    write_roster(project, roster(member("planner", entry=True), member("coder"),
                                 member("reviewer"), member("tester"),
                                 reachability="reachability: all\n"))
    admitted = admit(project)
    assert admitted.edges == {("planner", "coder"), ("planner", "reviewer"),
                              ("coder", "reviewer"), ("reviewer", "coder")}
    assert admitted.callers("planner") == []


def test_reachability_all_gives_the_entry_no_callees_when_it_serves_no_peers(
        project: Path) -> None:
    install_capsule(project, "planner")
    install_capsule(project, "coder", accept=True)
    install_capsule(project, "reviewer", accept=True)
    write_roster(project, roster(member("planner", entry=True), member("coder"),
                                 member("reviewer"), reachability="reachability: all\n"))
    admitted = admit(project)
    assert admitted.edges == {("coder", "reviewer"), ("reviewer", "coder")}
    assert admitted.callees("planner") == []


def test_w_ros_002_warns_when_all_leaves_the_entry_member_calling_nobody(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    install_capsule(project, "planner")
    install_capsule(project, "coder", accept=True)
    write_roster(project, roster(member("planner", entry=True), member("coder"),
                                 reachability="reachability: all\n"))
    [warning] = admit(project).warnings
    assert (warning.code, warning.path) == ("W-ROS-002", "reachability")
    assert "`planner` call no other member" in warning.message
    assert "exports.peer_tasks.accept: true" in warning.hint
    assert "{" not in warning.hint.replace("{from:", "")  # no unfilled placeholder
    status, out, err = doctor(project, capsys)
    assert status == 0 and err.startswith("warning W-ROS-002: ")


def test_w_ros_002_names_the_missing_callees_when_the_entry_serves_peers(
        project: Path) -> None:
    install_capsule(project, "planner", accept=True)
    install_capsule(project, "coder")
    write_roster(project, roster(member("planner", entry=True), member("coder"),
                                 reachability="reachability: all\n"))
    [warning] = admit(project).warnings
    assert warning.code == "W-ROS-002" and "no other member serves peers" in warning.message


def test_all_that_gives_the_entry_callees_or_a_single_member_warns_nothing(
        project: Path) -> None:
    install_capsule(project, "planner", accept=True)
    install_capsule(project, "coder", accept=True)
    write_roster(project, roster(member("planner", entry=True), member("coder"),
                                 reachability="reachability: all\n"))
    assert admit(project).warnings == []
    write_roster(project, roster(member("planner", entry=True),
                                 reachability="reachability: all\n"))
    assert admit(project).warnings == []


def test_an_all_that_pairs_no_members_needs_no_authentication(project: Path) -> None:
    install_capsule(project, "a", auth=False, accept=True)
    install_capsule(project, "b", auth=False)
    write_roster(project, roster(member("a", entry=True), member("b"),
                                 reachability="reachability: all\n"))
    assert admit(project).edges == frozenset()


def test_the_same_edge_written_twice_is_one_edge(project: Path) -> None:
    install_capsule(project, "a")
    install_capsule(project, "b", accept=True)
    write_roster(project, roster(member("a", entry=True), member("b"),
                                 reachability="reachability:\n  - {from: a, to: [b, b]}\n"
                                              "  - {from: a, to: [b]}\n"))
    admitted = admit(project)
    assert admitted.edges == {("a", "b")}
    assert admitted.callers("b") == ["a"]
    assert admitted.warnings == []


def test_two_members_may_run_the_same_capsule(project: Path) -> None:
    install_capsule(project, "coder", accept=True, queue_depth=1)
    install_capsule(project, "planner")
    write_roster(project, roster(member("planner", entry=True),
                                 member("left", "local/coder"), member("right", "local/coder"),
                                 reachability="reachability: [{from: planner, "
                                              "to: [left, right]}]\n"))
    admitted = admit(project)
    assert admitted.member("left").sha256 == admitted.member("right").sha256
    assert admitted.callees("planner") == ["left", "right"]


def test_a_caller_need_not_serve_peers(project: Path) -> None:
    install_capsule(project, "a")
    install_capsule(project, "b")
    install_capsule(project, "c", accept=True, queue_depth=1)
    write_roster(project, roster(member("a", entry=True), member("b"), member("c"),
                                 reachability="reachability: [{from: b, to: [c]}, "
                                              "{from: a, to: [c]}]\n"))
    assert admit(project).callers("c") == ["a", "b"]


def test_a_lock_that_agrees_admits_and_a_capsule_it_does_not_pin_is_free(
        project: Path) -> None:
    a = install_capsule(project, "a")
    install_capsule(project, "b")
    write_lock(project, {"local/a": LockPin("1.0.0", a.sha256)})
    write_roster(project, roster(member("a", entry=True), member("b")))
    lock_text = (project / "murmur.lock").read_text()
    assert [m.name for m in admit(project).members] == ["a", "b"]
    assert (project / "murmur.lock").read_text() == lock_text


def test_admission_never_creates_a_lock(project: Path) -> None:
    install_capsule(project, "a")
    write_roster(project, roster(member("a", entry=True)))
    admit(project)
    assert not (project / "murmur.lock").exists()


def test_a_lock_pinning_another_version_is_e_reg_005(project: Path) -> None:
    a = install_capsule(project, "a")
    write_lock(project, {"local/a": LockPin("0.9.0", a.sha256)})
    write_roster(project, roster(member("a", entry=True)))
    refused = refusal(project)
    assert refused.code == "E-REG-005"
    assert "0.9.0" in refused.diagnostic.message and "member `a`" in refused.diagnostic.message


def test_a_member_whose_packed_manifest_does_not_parse_is_e_ros_007(project: Path) -> None:
    installed = install_capsule(project, "a")
    other = project.parent / "broken"
    other.mkdir()
    (other / "murmur.yaml").write_text("manifest_version: 1\nname: a\nversion: 1.0.0\n"
                                       "agent: {python: a_agent:run}\nlifecycle: {x: 1}\n")
    (other / "a_agent.py").write_text("")
    import zipfile
    with zipfile.ZipFile(installed.path, "w") as archive:
        for path in sorted(other.iterdir()):
            archive.write(path, path.name)
    (installed.path.parent / "sha256").unlink()
    write_roster(project, roster(member("a", entry=True)))
    refused = refusal(project)
    assert (refused.code, refused.path) == ("E-ROS-007", "members[0]")
    assert "E-MAN-001" in refused.diagnostic.message
    assert "lifecycle.x" in refused.diagnostic.message


# --- Malformed input never gives a traceback ---------------------------------------------

BILLION_LAUGHS = "lol: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"l{i}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
) + "roster_version: 1\n"

MALFORMED: dict[str, bytes] = {
    "empty": b"",
    "list_at_top": b"- roster_version: 1\n- members: []\n",
    "tabs": b"roster_version: 1\nmembers:\n\t- name: a\n",
    "ten_megabytes": b"roster_version: 1\n# " + b"x" * (10 * 1024 * 1024) + b"\n",
    "binary": bytes(range(256)) * 4,
    "nul_bytes": b"roster_version: 1\x00\n",
    "billion_laughs": BILLION_LAUGHS.encode(),
    "alias": b"roster_version: 1\nmembers: &m []\nreachability: *m\n",
    "latin_1": "roster_version: 1\nmembers:\n  - name: caf\xe9\n".encode("latin-1"),
    "utf_16": "roster_version: 1\n".encode("utf-16"),
    "deep": b"roster_version: 1\nmembers: " + b"[" * 5000 + b"\n",
    "two_documents": b"roster_version: 1\n---\nroster_version: 1\n",
    "python_tag": b"roster_version: !!python/object/apply:os.system [echo hi]\n",
    "scalar": b"hello\n",
    "duplicate_keys": b"roster_version: 1\nroster_version: 1\n",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_rosters_are_e_ros_001_never_a_traceback(
        project: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    write_roster(project, MALFORMED[case])
    started = time.monotonic()
    refused = refusal(project)
    assert time.monotonic() - started < 2.0
    assert refused.code == "E-ROS-001"
    status, _, err = doctor(project, capsys)
    assert status == 1
    assert err.startswith("error E-ROS-001: roster.yaml: ")
    assert "Traceback" not in err and len(err) < 2000


def test_a_missing_roster_is_e_ros_001_naming_mur_new(project: Path) -> None:
    refused = refusal(project)
    assert refused.code == "E-ROS-001"
    assert "mur new --roster" in refused.diagnostic.hint


def test_an_unreadable_roster_is_e_ros_001(project: Path) -> None:
    (project / "roster.yaml").mkdir()
    assert refusal(project).code == "E-ROS-001"


# --- Any roster document: admitted, or exactly one admission code -------------------------

NAMES = st.sampled_from(["a", "b", "c", "d", "zed", "A", "", "a-1"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=5))


@st.composite
def plausible_rosters(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly well-formed rosters over the installed capsules a, b, c, d, with the odd fault
    (a duplicate name, a second entry, a missing capsule, an edge into the entry...)."""
    count = draw(st.integers(1, 4))
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=count,
                          max_size=count, unique=draw(st.integers(0, 9)) > 0))
    entry = draw(st.integers(0, count - 1))
    members: list[Any] = []
    for index, name in enumerate(names):
        capsule = draw(st.sampled_from([f"local/{name}"] * 6 + ["local/a", "local/missing"]))
        version = "1.10" if capsule == "local/d" else "1.0.0"
        fields: dict[str, Any] = {"name": name, "capsule": capsule,
                                  "version": draw(st.sampled_from([version] * 8 + ["9.9"]))}
        if index == entry or draw(st.integers(0, 14)) == 0:
            fields["entry"] = True
        members.append(fields)
    document: dict[str, Any] = {"roster_version": 1, "members": members}
    choice = draw(st.integers(0, 5))
    if choice == 0:
        document["reachability"] = "all"
    elif choice > 1:
        rules = []
        for _ in range(draw(st.integers(0, 3))):
            caller = draw(st.sampled_from([*names] * 5 + ["zed"]))
            others = [name for name in names if name != caller] * 5 + ["zed"]
            if draw(st.integers(0, 9)) == 0:
                others.append(caller)  # a shape fault, now and then
            rules.append({"from": caller, "to": draw(st.lists(st.sampled_from(others),
                                                              min_size=1, max_size=3))})
        document["reachability"] = rules
    return document


def junk_rosters() -> st.SearchStrategy[Any]:
    member_fields = st.fixed_dictionaries(
        {"name": NAMES, "capsule": st.sampled_from(["local/a", "a", "Local/a"]),
         "version": st.one_of(st.sampled_from(["1.0.0", "latest", ""]), st.integers(0, 3))},
        optional={"entry": st.one_of(st.booleans(), st.none(), st.just("yes")),
                  "extra": SCALARS})
    rules = st.one_of(st.fixed_dictionaries({"from": NAMES, "to": st.lists(NAMES, max_size=3)}),
                      st.fixed_dictionaries({"from": NAMES}), SCALARS)
    return st.one_of(
        st.fixed_dictionaries(
            {"roster_version": st.sampled_from([1, 1, 2, "1"]),
             "members": st.one_of(st.lists(st.one_of(member_fields, SCALARS), max_size=4),
                                  SCALARS)},
            optional={"reachability": st.one_of(st.just("all"), st.lists(rules, max_size=3),
                                                SCALARS),
                      "colour": SCALARS}),
        SCALARS, st.lists(SCALARS, max_size=2))


def roster_documents() -> st.SearchStrategy[Any]:
    return st.one_of(plausible_rosters(), plausible_rosters(), plausible_rosters(),
                     junk_rosters())


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=roster_documents())
def test_any_roster_admits_or_gives_exactly_one_admission_code(
        tmp_path: Path, document: Any) -> None:
    project = tmp_path / "hypothesis-project"
    if not project.exists():
        project.mkdir()
        install_capsule(project, "a", accept=True)
        install_capsule(project, "b")
        install_capsule(project, "c", accept=True, auth=False)
        install_capsule(project, "d", "1.10", accept=True)
    write_roster(project, yaml.safe_dump(document, sort_keys=False))
    try:
        admitted = admit(project)
    except DiagnosticError as refused:
        assert refused.code in ADMISSION_CODES
        assert refused.diagnostic.message and refused.diagnostic.hint
        return
    entries = [m for m in admitted.members if m.entry]
    assert len(entries) == 1
    assert all(callee != admitted.entry.name for _, callee in admitted.edges)
    assert all(admitted.member(callee).manifest.serves_peers for _, callee in admitted.edges)
    if admitted.edges:
        assert all(m.manifest.authenticated for m in admitted.members)


@settings(max_examples=150, deadline=None)
@given(document=roster_documents())
def test_any_document_passes_the_structure_checks_or_gives_one_structural_code(
        document: Any) -> None:
    try:
        structure = check_structure(document)
    except DiagnosticError as refused:
        assert refused.code in STRUCTURE_CODES
        return
    assert sum(m.entry for m in structure.members) == 1
    assert len({m.name for m in structure.members}) == len(structure.members)
