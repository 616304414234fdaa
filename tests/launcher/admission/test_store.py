"""Packing, installing, finding and unpacking capsules, and murmur.lock.

The capsule helpers (``capsule_source``, ``install_capsule``) are in
tests/support/capsules.py, shared with the roster and CLI tests.
"""

from __future__ import annotations

import io
import os
import stat
import time
import zipfile
from pathlib import Path

import pytest

from launcher.admission.store import (
    FIXED_DATE_TIME,
    LockPin,
    install,
    locate,
    pack,
    parse_lock,
    read_lock,
    render_lock,
    resolve,
    sha256_of,
    unpack,
    write_lock,
)
from launcher.diagnostics import DiagnosticError
from launcher.home.paths import global_store, project_store
from launcher.home.paths import murmur_home as home_of
from tests.support.capsules import capsule_source, install_capsule


def zip_with(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    """A zip holding exactly ``entries``, however unsafe."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return buffer.getvalue()


MINIMAL_MANIFEST = (b"manifest_version: 1\nname: evil\nversion: 1.0.0\n"
                    b"agent: {python: evil_agent:run}\n")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


# --- paths -------------------------------------------------------------------------------

def test_murmur_home_follows_the_environment(murmur_home: Path) -> None:
    assert home_of() == murmur_home
    assert global_store() == murmur_home / "artifacts"


def test_murmur_home_defaults_to_dot_murmur(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.delenv("MURMUR_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert home_of() == tmp_path / ".murmur"


# --- pack --------------------------------------------------------------------------------

def test_the_same_source_packs_to_the_same_sha256(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    first = pack(source, tmp_path / "a.mur.zip")
    later = time.time() + 3600
    for path in source.iterdir():
        os.utime(path, (later, later))
    second = pack(source, tmp_path / "b.mur.zip")
    assert first.sha256 == second.sha256
    assert (tmp_path / "a.mur.zip").read_bytes() == (tmp_path / "b.mur.zip").read_bytes()


def test_a_copy_of_the_source_made_in_another_order_packs_the_same(tmp_path: Path) -> None:
    one = capsule_source(tmp_path / "one", "coder")
    other = tmp_path / "other"
    other.mkdir()
    for path in sorted(one.iterdir(), reverse=True):
        (other / path.name).write_bytes(path.read_bytes())
    assert pack(one, tmp_path / "1.zip").sha256 == pack(other, tmp_path / "2.zip").sha256


def test_pack_leaves_out_state_caches_and_version_control(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    for junk in (".murmur/artifacts/x", "__pycache__/a.pyc", ".git/HEAD", "sub/__pycache__/b",
                 "old.pyc", "coder-0.9.0.mur.zip"):
        (source / junk).parent.mkdir(parents=True, exist_ok=True)
        (source / junk).write_text("junk")
    (source / "sub" / "data.txt").write_text("kept")
    packed = pack(source, source / "coder.mur.zip")  # inside the source: never packs itself
    with zipfile.ZipFile(packed.path) as archive:
        names = archive.namelist()
        infos = archive.infolist()
    assert names == ["coder_agent.py", "murmur.yaml", "sub/data.txt"]
    assert all(info.date_time == FIXED_DATE_TIME for info in infos)
    assert all(stat.S_IMODE(info.external_attr >> 16) == 0o644 for info in infos)
    assert pack(source, source / "coder.mur.zip").sha256 == packed.sha256


def test_pack_keeps_the_executable_bit_only(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    script = source / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    with zipfile.ZipFile(pack(source, tmp_path / "c.zip").path) as archive:
        mode = stat.S_IMODE(archive.getinfo("run.sh").external_attr >> 16)
    assert mode == 0o755


def test_pack_refuses_a_symbolic_link_in_the_source(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    (source / "secrets").symlink_to("/etc/passwd")
    with pytest.raises(DiagnosticError) as refused:
        pack(source, tmp_path / "c.zip")
    assert refused.value.code == "E-REG-007"
    assert "secrets" in refused.value.diagnostic.message


def test_pack_validates_the_manifest_first(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder", extra="lifecycle2: {}\n")
    with pytest.raises(DiagnosticError) as refused:
        pack(source, tmp_path / "c.zip")
    assert (refused.value.code, refused.value.path) == ("E-MAN-001", "lifecycle2")
    assert not (tmp_path / "c.zip").exists()


def test_pack_refuses_a_manifest_naming_a_missing_agent_module(tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    (source / "coder_agent.py").unlink()
    with pytest.raises(DiagnosticError) as refused:
        pack(source, tmp_path / "c.zip")
    assert (refused.value.code, refused.value.path) == ("E-MAN-004", "agent.python")


def test_pack_of_a_directory_without_manifest_is_e_man_002(tmp_path: Path) -> None:
    with pytest.raises(DiagnosticError) as refused:
        pack(tmp_path, tmp_path / "c.zip")
    assert refused.value.code == "E-MAN-002"


def test_pack_defaults_to_name_version_in_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = capsule_source(tmp_path / "src", "coder", "1.10")
    monkeypatch.chdir(tmp_path)
    packed = pack(source)
    assert packed.path == tmp_path / "coder-1.10.mur.zip"
    assert packed.path.is_file()


# --- install and lookup ------------------------------------------------------------------

def test_install_puts_the_artifact_and_its_sha256_in_the_project_store(project: Path) -> None:
    installed = install_capsule(project, "coder", "1.2.0")
    folder = project_store(project.resolve()) / "local" / "coder" / "1.2.0"
    assert installed.path == folder / "coder-1.2.0.mur.zip"
    assert (folder / "sha256").read_text() == installed.sha256 + "\n"
    assert sha256_of(installed.path.read_bytes()) == installed.sha256
    assert (installed.capsule, installed.version, installed.store) == (
        "local/coder", "1.2.0", "project")


def test_installing_the_same_bytes_again_changes_nothing(project: Path, tmp_path: Path) -> None:
    source = capsule_source(tmp_path, "coder")
    packed = pack(source, tmp_path / "c.zip")
    assert install(packed.path, project)[1] is True
    assert install(packed.path, project)[1] is False


def test_installing_other_bytes_at_an_installed_version_is_refused(project: Path) -> None:
    first = install_capsule(project, "coder", "1.0.0")
    with pytest.raises(DiagnosticError) as refused:
        install_capsule(project, "coder", "1.0.0", reply="changed")
    assert refused.value.code == "E-REG-002"
    assert "--force" in refused.value.diagnostic.hint
    assert sha256_of(first.path.read_bytes()) == first.sha256


def test_force_replaces_the_installed_bytes(project: Path) -> None:
    first = install_capsule(project, "coder", "1.0.0")
    second = install_capsule(project, "coder", "1.0.0", reply="changed", force=True)
    assert second.sha256 != first.sha256
    assert resolve(project, "local/coder", "1.0.0").sha256 == second.sha256


def test_global_install_goes_to_murmur_home(project: Path, murmur_home: Path) -> None:
    installed = install_capsule(project, "coder", to_global=True)
    assert installed.path.is_relative_to(murmur_home / "artifacts")
    assert not project_store(project).exists()
    assert resolve(project, "local/coder", "1.0.0").store == "global"


def test_lookup_takes_the_project_store_before_the_global_one(project: Path) -> None:
    install_capsule(project, "coder", to_global=True, reply="global")
    local = install_capsule(project, "coder", reply="project")
    found = locate(project, "local/coder", "1.0.0")
    assert found == (local.path, "project")
    assert resolve(project, "local/coder", "1.0.0").sha256 == local.sha256


def test_a_capsule_in_neither_store_is_e_reg_001(project: Path) -> None:
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/coder", "1.0.0")
    assert refused.value.code == "E-REG-001"
    assert "mur install coder-1.0.0.mur.zip" in refused.value.diagnostic.hint


def test_e_reg_001_names_the_installed_versions_to_run(project: Path) -> None:
    install_capsule(project, "coder", "2.0.0")
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/coder", "1.0.0")
    assert refused.value.diagnostic.hint.endswith(
        "; installed: local/coder 2.0.0 (run one with `--capsule-version V`)")
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/codr", "2.0.0")
    assert refused.value.diagnostic.hint.endswith("; did you mean `local/coder`?")


@pytest.mark.parametrize("capsule, version", [
    ("coder", "1.0.0"), ("local/Coder", "1.0.0"), ("local/coder", "latest"),
    ("local/coder", "../../../etc"), ("../x/coder", "1.0.0"), ("local/coder", ""),
])
def test_a_bad_capsule_reference_is_e_reg_008_and_touches_no_path(
        project: Path, capsule: str, version: str) -> None:
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, capsule, version)
    assert refused.value.code == "E-REG-008"


def test_resolve_gives_the_manifest_and_the_sha256(project: Path) -> None:
    installed = install_capsule(project, "coder", "1.10", accept=True)
    found = resolve(project, "local/coder", "1.10")
    assert found == installed
    assert found.manifest.version == "1.10"
    assert found.manifest.exports.peer_tasks.accept is True


def test_bytes_changed_behind_the_stores_back_are_refused(project: Path) -> None:
    installed = install_capsule(project, "coder")
    other = install_capsule(project.parent / "elsewhere", "coder", reply="x")
    installed.path.write_bytes(other.path.read_bytes())
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/coder", "1.0.0")
    assert refused.value.code == "E-REG-003"
    assert "recorded" in refused.value.diagnostic.message


def test_an_artifact_copied_to_another_version_is_refused(project: Path) -> None:
    installed = install_capsule(project, "coder", "1.0.0")
    wrong = installed.path.parent.parent / "2.0.0" / "coder-2.0.0.mur.zip"
    wrong.parent.mkdir()
    wrong.write_bytes(installed.path.read_bytes())
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/coder", "2.0.0")
    assert refused.value.code == "E-REG-003"


# --- unsafe artifacts --------------------------------------------------------------------

def _symlink_entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


UNSAFE_ENTRIES = {
    "parent_traversal": ("../evil.py", b"x"),
    "nested_traversal": ("sub/../../evil.py", b"x"),
    "absolute_path": ("/tmp/evil.py", b"x"),
    "windows_drive": ("C:/evil.py", b"x"),
    "backslash": ("..\\evil.py", b"x"),
    "symlink": (_symlink_entry("link"), b"/etc/passwd"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ENTRIES))
def test_zip_slip_entries_are_refused_at_install(project: Path, tmp_path: Path,
                                                 case: str) -> None:
    entry, data = UNSAFE_ENTRIES[case]
    artifact = tmp_path / "evil.mur.zip"
    artifact.write_bytes(zip_with([("murmur.yaml", MINIMAL_MANIFEST),
                                   ("evil_agent.py", b""), (entry, data)]))
    with pytest.raises(DiagnosticError) as refused:
        install(artifact, project)
    assert refused.value.code == "E-REG-003"
    assert not project_store(project).exists()


@pytest.mark.parametrize("case", sorted(UNSAFE_ENTRIES))
def test_zip_slip_entries_are_refused_at_unpack_before_anything_is_written(
        tmp_path: Path, case: str) -> None:
    entry, data = UNSAFE_ENTRIES[case]
    artifact = tmp_path / "evil.mur.zip"
    artifact.write_bytes(zip_with([("murmur.yaml", MINIMAL_MANIFEST), (entry, data)]))
    dest = tmp_path / "deep" / "dest"
    with pytest.raises(DiagnosticError) as refused:
        unpack(artifact, dest)
    assert refused.value.code == "E-REG-003"
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "deep" / "evil.py").exists()
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("content, problem", [
    (b"not a zip at all", "is not a zip file"),
    (b"", "is not a zip file"),
    ([("readme.txt", b"hi")], "has no murmur.yaml"),
    ([("murmur.yaml", b"x"), ("murmur.yaml", b"y")], "appears twice"),
])
def test_files_that_are_not_artifacts_are_e_reg_003(
        project: Path, tmp_path: Path, content: bytes | list[tuple[str, bytes]],
        problem: str) -> None:
    artifact = tmp_path / "bad.mur.zip"
    artifact.write_bytes(content if isinstance(content, bytes) else zip_with(
        list(content)))
    with pytest.raises(DiagnosticError) as refused:
        install(artifact, project)
    assert refused.value.code == "E-REG-003"
    assert problem in refused.value.diagnostic.message


def test_an_artifact_whose_manifest_does_not_parse_is_not_installed(project: Path,
                                                                    tmp_path: Path) -> None:
    artifact = tmp_path / "bad.mur.zip"
    artifact.write_bytes(zip_with([("murmur.yaml", MINIMAL_MANIFEST + b"shell: {}\n"),
                                   ("evil_agent.py", b"")]))
    with pytest.raises(DiagnosticError) as refused:
        install(artifact, project)
    assert (refused.value.code, refused.value.path) == ("E-MAN-001", "shell")


def test_a_missing_artifact_file_is_a_clear_refusal(project: Path, tmp_path: Path) -> None:
    with pytest.raises(DiagnosticError) as refused:
        install(tmp_path / "nope.mur.zip", project)
    assert refused.value.code == "E-REG-003"
    assert "does not exist" in refused.value.diagnostic.message


# --- unpack ------------------------------------------------------------------------------

def test_unpack_extracts_the_capsule_so_it_can_run(project: Path, tmp_path: Path) -> None:
    installed = install_capsule(project, "coder")
    dest = unpack(installed, tmp_path / "run")
    assert sorted(p.name for p in dest.iterdir()) == ["coder_agent.py", "murmur.yaml"]
    assert "from coder" in (dest / "coder_agent.py").read_text()
    assert stat.S_IMODE((dest / "murmur.yaml").stat().st_mode) == 0o644


def test_unpack_refuses_bytes_that_changed_since_they_were_resolved(project: Path,
                                                                     tmp_path: Path) -> None:
    installed = install_capsule(project, "coder")
    install_capsule(project, "coder", reply="swapped", force=True)
    with pytest.raises(DiagnosticError) as refused:
        unpack(installed, tmp_path / "run")
    assert refused.value.code == "E-RUN-047"


def test_unpack_wants_an_empty_directory(project: Path, tmp_path: Path) -> None:
    installed = install_capsule(project, "coder")
    dest = tmp_path / "run"
    dest.mkdir()
    (dest / "coder_agent.py").symlink_to(tmp_path / "victim")
    with pytest.raises(FileExistsError):
        unpack(installed, dest)
    assert not (tmp_path / "victim").exists()


# --- murmur.lock -------------------------------------------------------------------------

def test_the_lock_round_trips_and_keeps_versions_as_text(project: Path) -> None:
    pins = {"local/coder": LockPin("1.10", "a" * 64), "local/planner": LockPin("1.0", "b" * 64)}
    path = write_lock(project, pins)
    assert 'version: "1.10"' in path.read_text()
    assert read_lock(project) == pins


def test_unquoted_numbers_in_the_lock_read_as_their_text(project: Path) -> None:
    text = f"lock_version: 1\nartifacts:\n  local/coder: {{version: 1.10, sha256: {'1' * 64}}}\n"
    assert parse_lock(text, project / "murmur.lock") == {"local/coder": LockPin("1.10", "1" * 64)}


def test_no_lock_is_none_and_an_empty_lock_pins_nothing(project: Path) -> None:
    assert read_lock(project) is None
    (project / "murmur.lock").write_text(render_lock({}))
    assert read_lock(project) == {}


@pytest.mark.parametrize("text, path", [
    ("lock_version: 2\n", "lock_version"),
    ("lock_version: true\n", "lock_version"),
    ("artifacts: {}\n", "lock_version"),
    ("lock_version: 1\nextra: 1\n", "extra"),
    ("lock_version: 1\nartifacts: [a]\n", "artifacts"),
    ("lock_version: 1\nartifacts: {coder: {version: '1', sha256: x}}\n", "artifacts.coder"),
    ("lock_version: 1\nartifacts: {local/coder: {version: '1', sha256: xyz}}\n",
     "artifacts.local/coder.sha256"),
    ("lock_version: 1\nartifacts: {local/coder: {version: latest, sha256: x}}\n",
     "artifacts.local/coder.version"),
    ("lock_version: 1\nartifacts: {local/coder: {v: '1'}}\n", "artifacts.local/coder.v"),
    ("- 1\n", "murmur.lock"),
    ("a: [\n", "murmur.lock"),
])
def test_a_malformed_lock_is_e_reg_004_naming_the_field(project: Path, text: str,
                                                        path: str) -> None:
    (project / "murmur.lock").write_text(text)
    with pytest.raises(DiagnosticError) as refused:
        read_lock(project)
    assert refused.value.code == "E-REG-004"
    assert refused.value.path is not None and refused.value.path.endswith(path)


def test_resolve_refuses_what_the_lock_does_not_pin(project: Path) -> None:
    installed = install_capsule(project, "coder")
    write_lock(project, {"local/coder": LockPin("1.0.0", "0" * 64)})
    with pytest.raises(DiagnosticError) as refused:
        resolve(project, "local/coder", "1.0.0")
    assert refused.value.code == "E-REG-005"
    write_lock(project, {"local/coder": LockPin("1.0.0", installed.sha256)})
    assert resolve(project, "local/coder", "1.0.0") == installed
    assert resolve(project, "local/coder", "1.0.0", honour_lock=False) == installed
