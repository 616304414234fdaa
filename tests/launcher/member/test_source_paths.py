"""An agent's traceback in ``logs/member.log`` names the project's own source files
(launcher/member/source_paths.py): each file of the session's copy that is the project
source's byte for byte, a note naming the installed version for any other, and frames
outside the copy as they were."""

from __future__ import annotations

from pathlib import Path

from launcher.member.source_paths import SourcePaths

AGENT = "async def run(task):\n    return {}['missing']\n"


def copy_and_source(tmp_path: Path, source_text: str = AGENT) -> tuple[Path, Path, Path]:
    """A session's copy of local/boom 1.0.0, and a project holding its source."""
    copy = tmp_path / "records" / "capsule"
    copy.mkdir(parents=True)
    (copy / "boom_agent.py").write_text(AGENT)
    project = tmp_path / "project"
    source = project / "boom"
    source.mkdir(parents=True)
    (source / "murmur.yaml").write_text(
        "manifest_version: 1\nname: boom\nversion: 1.0.0\nagent: {python: boom_agent:run}\n")
    (source / "boom_agent.py").write_text(source_text)
    return copy, project, source


def traceback_of(copy: Path) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/asyncio/tasks.py", line 9, in step\n'
            f'  File "{copy / "boom_agent.py"}", line 2, in run\n'
            "KeyError: 'missing'")


def test_a_file_the_source_holds_byte_for_byte_is_named_as_the_projects(
        tmp_path: Path) -> None:
    copy, project, source = copy_and_source(tmp_path)
    paths = SourcePaths.of(copy, project, "local/boom", "1.0.0")
    rewritten = paths.rewrite(traceback_of(copy))
    assert f'  File "{source.resolve() / "boom_agent.py"}", line 2, in run\n' in rewritten
    assert '  File "/usr/lib/python3/asyncio/tasks.py", line 9, in step\n' in rewritten
    assert str(copy) not in rewritten and rewritten.endswith("KeyError: 'missing'")


def test_a_file_edited_since_the_install_keeps_the_copys_name_and_says_so(
        tmp_path: Path) -> None:
    copy, project, source = copy_and_source(tmp_path, AGENT + "# edited\n")
    rewritten = SourcePaths.of(copy, project, "local/boom", "1.0.0").rewrite(
        traceback_of(copy))
    assert f'File "{copy / "boom_agent.py"}", line 2' in rewritten
    assert rewritten.endswith(
        f"\n(files under {copy.resolve()} are the installed local/boom 1.0.0; the file "
        f"differs from the project's source in {source.resolve()}, edited since it was "
        "installed: pack and install it again to run the edited code)")


def test_a_capsule_with_no_source_in_the_project_says_which_version_ran(
        tmp_path: Path) -> None:
    copy, project, _ = copy_and_source(tmp_path)
    rewritten = SourcePaths.of(copy, project, "local/boom", "2.0.0").rewrite(
        traceback_of(copy))
    assert rewritten.endswith(f"(files under {copy.resolve()} are the installed "
                              "local/boom 2.0.0; the project holds no source of it)")


def test_a_traceback_outside_the_copy_is_left_as_it_is(tmp_path: Path) -> None:
    copy, project, _ = copy_and_source(tmp_path)
    text = 'Traceback (most recent call last):\n  File "/x/y.py", line 1, in f\nOSError'
    assert SourcePaths.of(copy, tmp_path / "gone", "local/boom", "1.0.0").rewrite(
        text) == text
