"""launcher/member/instructions.py: the session's MURMUR.md, the capsule's own text first,
then the Identity section."""

from __future__ import annotations

from pathlib import Path

from launcher.member.instructions import identity_section, write_session_instructions


def test_a_session_in_no_formation_says_so_and_names_its_capsule() -> None:
    assert identity_section(capsule="local/coder", version="1.2.0", member=None,
                            formation_id=None, callees=()) == (
        "## Identity\n\n- Capsule: local/coder, version 1.2.0\n"
        "- Formation: none (this session runs on its own)\n"
        "- Members you may call: none\n")


def test_a_member_is_told_its_roster_name_formation_and_callees_in_roster_order() -> None:
    text = identity_section(capsule="local/writer", version="1.0.0", member="second",
                            formation_id="frm_0199c4e2f1b7712a9d3e4f5061728394",
                            callees=("reviewer", "tester"))
    assert text.splitlines()[2:] == [
        "- Capsule: local/writer, version 1.0.0", "- Roster name: second",
        "- Formation id: frm_0199c4e2f1b7712a9d3e4f5061728394",
        "- Members you may call: reviewer, tester"]


def test_the_capsules_own_murmur_md_comes_first_and_the_file_is_written_whole(
        tmp_path: Path) -> None:
    capsule, home = tmp_path / "capsule", tmp_path / "home"
    capsule.mkdir()
    home.mkdir()
    (capsule / "MURMUR.md").write_text("# Coder\n\nWrite tests first.\n\n\n")
    text = write_session_instructions(capsule, home, capsule="local/coder", version="1",
                                      member=None, formation_id=None, callees=())
    assert text.startswith("# Coder\n\nWrite tests first.\n\n## Identity\n")
    assert (home / "MURMUR.md").read_text() == text
    assert [path.name for path in home.iterdir()] == ["MURMUR.md"], "no temporary file left"


def test_without_its_own_murmur_md_the_identity_alone_is_written(tmp_path: Path) -> None:
    text = write_session_instructions(tmp_path, tmp_path, capsule="local/x", version="1",
                                      member=None, formation_id=None, callees=())
    assert text.startswith("## Identity\n")
