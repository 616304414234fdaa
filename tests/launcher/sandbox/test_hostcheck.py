"""W-SEC-013: running as root, or a MURMUR_HOME other users can write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.sandbox.hostcheck import host_diagnostics, host_warnings, mark_reported

USER = 1000 if os.geteuid() == 0 else os.geteuid()


def owned_dir(path: Path, mode: int, uid: int = USER) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    if os.geteuid() == 0:
        os.chown(path, uid, -1)
    return path


def test_a_private_home_owned_by_the_user_gives_no_warning(tmp_path: Path) -> None:
    home = owned_dir(tmp_path / "home", 0o700)
    assert host_warnings({"MURMUR_HOME": str(home)}, euid=USER) == []


def test_running_as_root_is_reported(tmp_path: Path) -> None:
    home = owned_dir(tmp_path / "home", 0o700, uid=0)
    warnings = host_warnings({"MURMUR_HOME": str(home)}, euid=0)
    assert [w.problem for w in warnings] == [
        "mur runs as root, so every capsule's code runs as root too"]


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777, 0o720])
def test_a_home_group_or_others_can_write_is_reported(tmp_path: Path, mode: int) -> None:
    home = owned_dir(tmp_path / "home", mode)
    (warning,) = host_warnings({"MURMUR_HOME": str(home)}, euid=USER)
    assert f"MURMUR_HOME {home} can be written by other users" in warning.problem
    assert f"mode {mode:04o}" in warning.problem
    assert f"chmod 700 {home}" in warning.fix


@pytest.mark.parametrize("mode", [0o750, 0o755, 0o705])
def test_a_home_others_can_only_read_gives_no_warning(tmp_path: Path, mode: int) -> None:
    home = owned_dir(tmp_path / "home", mode)
    assert host_warnings({"MURMUR_HOME": str(home)}, euid=USER) == []


def test_a_home_owned_by_another_user_is_reported(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    home = owned_dir(tmp_path / "home", 0o700, uid=4242)
    (warning,) = host_warnings({"MURMUR_HOME": str(home)}, euid=USER)
    assert "owned by another user (uid 4242)" in warning.problem


def test_a_missing_home_is_judged_by_its_first_existing_parent(tmp_path: Path) -> None:
    shared = owned_dir(tmp_path / "shared", 0o1777)
    home = shared / "a" / "b" / "murmur"
    (warning,) = host_warnings({"MURMUR_HOME": str(home)}, euid=USER)
    assert warning.problem.startswith(f"{shared}, where MURMUR_HOME {home} would be made,")
    private = owned_dir(tmp_path / "private", 0o700)
    assert host_warnings({"MURMUR_HOME": str(private / "x" / "murmur")}, euid=USER) == []


def test_the_default_home_is_under_home(tmp_path: Path) -> None:
    user_home = owned_dir(tmp_path / "user", 0o777)
    (warning,) = host_warnings({"HOME": str(user_home)}, euid=USER)
    assert f"MURMUR_HOME {user_home / '.murmur'}" in warning.problem


def test_both_conditions_are_reported_together(tmp_path: Path) -> None:
    home = owned_dir(tmp_path / "home", 0o777, uid=0)
    assert len(host_warnings({"MURMUR_HOME": str(home)}, euid=0)) == 2


def test_nothing_is_reported_again_once_the_launcher_reported(tmp_path: Path) -> None:
    home = owned_dir(tmp_path / "home", 0o777)
    env = {"MURMUR_HOME": str(home)}
    assert host_warnings(env, euid=0)
    member_env = dict(env)
    mark_reported(member_env)
    assert member_env["MURMUR_HOST_WARNINGS_REPORTED"] == "1"
    assert host_warnings(member_env, euid=0) == []
    assert host_warnings({**env, "MURMUR_HOST_WARNINGS_REPORTED": "0"}, euid=0)


def test_warnings_render_as_w_sec_013(tmp_path: Path) -> None:
    home = owned_dir(tmp_path / "home", 0o777)
    (diag,) = host_diagnostics({"MURMUR_HOME": str(home)}, euid=USER)
    assert diag.code == "W-SEC-013" and diag.severity == "warning"
    assert diag.render().startswith("warning W-SEC-013: host: ")
    assert "hint: use a MURMUR_HOME only you can write" in diag.render()
