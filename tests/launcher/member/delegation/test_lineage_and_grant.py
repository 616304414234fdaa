"""A child's lineage read from its environment, and the capsule and version a
delegation runs (``capabilities.spawn.allow``, the lock, the stores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.ids import new_session_id
from launcher.member.delegation.grant import SpawnGrant, version_order
from launcher.member.delegation.lineage import DEPTH_CEILING, Lineage, read_lineage
from launcher.member.delegation.refused import CASES, DelegationRefused


def test_a_root_is_bounded_by_its_own_max_depth_and_a_child_by_the_smallest_above() -> None:
    assert Lineage().bound(3) == 3
    assert Lineage(depth=1, max_depth=1).bound(5) == 1
    assert Lineage(depth=1, max_depth=4).bound(2) == 2


def test_a_child_is_started_one_deeper_with_the_bound_it_inherits() -> None:
    parent = new_session_id()
    env = Lineage(depth=1, max_depth=2).for_child(session_id=parent, delegated_by="boss",
                                                  own_max_depth=3)
    assert env == {"MURMUR_PARENT_SESSION": parent, "MURMUR_DELEGATED_BY": "boss",
                   "MURMUR_DELEGATION_DEPTH": "2", "MURMUR_DELEGATION_MAX_DEPTH": "2"}
    assert read_lineage(env) == Lineage(parent, "boss", 2, 2)


@pytest.mark.parametrize("depth", ["", "-1", "two", "1e3"])
def test_a_malformed_depth_reads_as_a_first_child(depth: str) -> None:
    lineage = read_lineage({"MURMUR_DELEGATION_DEPTH": depth,
                            "MURMUR_PARENT_SESSION": "not-a-session"})
    assert lineage.depth == 1 and lineage.parent_session is None
    assert lineage.max_depth is None


def test_a_huge_depth_is_held_at_the_ceiling() -> None:
    lineage = read_lineage({"MURMUR_DELEGATION_DEPTH": "99999",
                            "MURMUR_DELEGATION_MAX_DEPTH": "99999"})
    assert lineage.depth == DEPTH_CEILING and lineage.max_depth == DEPTH_CEILING


def _installed(project: Path, capsule: str, *versions: str) -> None:
    name = capsule.rsplit("/", 1)[-1]
    for version in versions:
        folder = project / ".murmur" / "artifacts" / capsule / version
        folder.mkdir(parents=True)
        (folder / f"{name}-{version}.mur.zip").write_bytes(b"")


def test_versions_compare_number_by_number() -> None:
    assert sorted(["1.10", "1.9", "1.9.1", "0.2"], key=version_order) == [
        "0.2", "1.9", "1.9.1", "1.10"]


def test_the_newest_installed_version_runs_unless_one_is_pinned(tmp_path: Path) -> None:
    _installed(tmp_path, "local/summarizer", "1.9", "1.10", "0.3")
    grant = SpawnGrant.of(["local/summarizer"])
    assert grant.version_for(tmp_path, "local/summarizer", None) == "1.10"
    assert grant.version_for(tmp_path, "local/summarizer", "0.3") == "0.3"
    pinned = SpawnGrant.of(["local/summarizer@1.9"])
    assert pinned.version_for(tmp_path, "local/summarizer", None) == "1.9"


def test_the_locks_pin_is_run_when_the_grant_pins_nothing(tmp_path: Path) -> None:
    _installed(tmp_path, "local/summarizer", "1.9", "1.10")
    (tmp_path / "murmur.lock").write_text(
        "lock_version: 1\nartifacts:\n  local/summarizer:\n    version: '1.9'\n"
        f"    sha256: '{'0' * 64}'\n")
    grant = SpawnGrant.of(["local/summarizer"])
    assert grant.version_for(tmp_path, "local/summarizer", None) == "1.9"


@pytest.mark.parametrize(("allow", "capsule", "asked", "case", "names"), [
    (["local/summarizer"], "local/other", None, "not_allowed", "capabilities.spawn.allow"),
    (["local/summarizer@1.9"], "local/summarizer", "1.10", "not_allowed", "pins"),
    (["local/summarizer"], "local/summarizer", "2.0", "not_installed", "mur install"),
    (["local/absent"], "local/absent", None, "not_installed", "mur pack"),
])
def test_a_delegation_past_the_grant_or_the_stores_is_refused_naming_why(
        tmp_path: Path, allow: list[str], capsule: str, asked: str | None, case: str,
        names: str) -> None:
    _installed(tmp_path, "local/summarizer", "1.9")
    with pytest.raises(DelegationRefused) as refused:
        SpawnGrant.of(allow).version_for(tmp_path, capsule, asked)
    assert refused.value.case == case and case in CASES
    assert capsule in str(refused.value) and names in str(refused.value)
    assert isinstance(refused.value, RuntimeError), "agents catch it as a RuntimeError"
