"""The commands: mur new, pack, install, lock, doctor and explain, in-process and as ``mur``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from types import ModuleType

import pytest

from launcher.admission.store import read_lock, resolve
from launcher.cli import main
from tests.support.capsules import capsule_source, install_capsule

Run = tuple[int, str, str]


def mur(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"capsule_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeTask:
    """The part of the agent API (docs/door.md, "The agent API") the written agents use."""

    def __init__(self, text: str, peers: tuple[str, ...] = ()) -> None:
        self.text = text
        self.peers = peers
        self.calls: list[tuple[str, str]] = []
        self.statuses: list[str] = []

    async def status(self, text: str) -> None:
        self.statuses.append(text)

    async def call_member(self, name: str, text: str) -> Awaitable[str]:
        self.calls.append((name, text))

        async def answer() -> str:
            return f"<{name} did: {text}>"

        return answer()


# --- mur new --roster --------------------------------------------------------------------

def test_mur_new_roster_then_doctor_admits_it_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    status, out, err = mur(capsys, "new", "--roster", str(demo))
    assert (status, err) == (0, "")
    assert "mur doctor" in out
    for path in ("roster.yaml", "planner/murmur.yaml", "planner/planner_agent.py",
                 "worker/murmur.yaml", "worker/worker_agent.py"):
        assert (demo / path).is_file()
    status, out, err = mur(capsys, "doctor", "--project", str(demo))
    assert (status, err) == (0, "")
    first, isolation = out.splitlines()
    assert first == (f"admitted {demo.resolve() / 'roster.yaml'}: 2 members (entry planner), "
                     "1 edge: planner -> worker")
    assert isolation.startswith("isolation: Landlock ABI ") or isolation.startswith(
        "isolation: no Landlock")


def test_doctor_json_reports_members_edges_and_hashes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    mur(capsys, "new", "--roster", str(demo))
    status, out, err = mur(capsys, "doctor", "--project", str(demo), "--json")
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert report["admitted"] is True
    assert report["entry"] == "planner"
    assert report["edges"] == [{"from": "planner", "to": "worker"}]
    assert report["warnings"] == []
    assert [(m["name"], m["capsule"], m["version"], m["entry"], m["callees"])
            for m in report["members"]] == [
        ("planner", "local/planner", "0.1.0", True, ["worker"]),
        ("worker", "local/worker", "0.1.0", False, [])]
    worker = resolve(demo, "local/worker", "0.1.0")
    assert report["members"][1]["sha256"] == worker.sha256
    assert set(report["isolation"]) == {"mode", "landlock_abi", "files", "tcp", "scoped",
                                        "seccomp", "missing", "offered"}
    assert report["isolation"]["mode"] == "auto"


def test_the_written_roster_declares_what_admission_and_the_launch_need(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    mur(capsys, "new", "--roster", str(demo))
    planner = resolve(demo, "local/planner", "0.1.0").manifest
    worker = resolve(demo, "local/worker", "0.1.0").manifest
    assert planner.network.authentication is not None
    assert worker.network.authentication is not None
    assert planner.capabilities.network.allow == ["localhost"]
    assert worker.exports.peer_tasks.accept is True
    assert worker.lifecycle.holds >= 1


async def test_the_written_entry_member_calls_the_worker_and_answers_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    mur(capsys, "new", "--roster", str(demo))
    planner = load_module(demo / "planner" / "planner_agent.py")
    worker = load_module(demo / "worker" / "worker_agent.py")
    task = FakeTask("Outline it. Then write it!", peers=("worker",))
    answer = await planner.run(task)
    assert task.calls == [("worker", "part 1 of 2: Outline it."),
                          ("worker", "part 2 of 2: Then write it!")]
    assert answer == ("planner: worker did 2 part(s):\n"
                      "- <worker did: part 1 of 2: Outline it.>\n"
                      "- <worker did: part 2 of 2: Then write it!>")
    assert task.statuses == ["handing 2 part(s) to worker"]
    alone = FakeTask("hello")
    assert "hello" in await planner.run(alone)
    assert alone.calls == []
    assert await worker.run(FakeTask("sum 1 2")) == "worker: done: sum 1 2"


def test_mur_new_roster_never_overwrites(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "roster.yaml").write_text("mine\n")
    status, out, err = mur(capsys, "new", "--roster", str(demo))
    assert (status, out) == (1, "")
    assert err.startswith("error E-ROS-009: ")
    assert (demo / "roster.yaml").read_text() == "mine\n"


@pytest.mark.integration
def test_mur_new_roster_works_as_a_real_mur_process(tmp_path: Path, murmur_home: Path) -> None:
    environment = {**os.environ, "MURMUR_HOME": str(murmur_home)}
    command = [sys.executable, "-m", "launcher.cli"]
    made = subprocess.run([*command, "new", "--roster", "demo"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    checked = subprocess.run([*command, "doctor"], cwd=tmp_path / "demo", env=environment,
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("admitted ")
    assert "planner -> worker" in checked.stdout


# --- mur new, pack, install --------------------------------------------------------------

async def test_mur_new_writes_a_capsule_that_packs_installs_and_answers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    status, out, _ = mur(capsys, "new", "My_Agent")
    assert status == 0 and "my-agent" in out
    assert (tmp_path / "My_Agent" / "my_agent_agent.py").is_file()
    status, out, _ = mur(capsys, "pack", "My_Agent")
    assert status == 0 and "my-agent-0.1.0.mur.zip" in out
    project = tmp_path / "project"
    project.mkdir()
    status, out, _ = mur(capsys, "install", "my-agent-0.1.0.mur.zip", "--project", str(project))
    assert status == 0 and out.startswith("installed local/my-agent 0.1.0 in the project store")
    installed = resolve(project, "local/my-agent", "0.1.0")
    assert installed.manifest.agent.python == "my_agent_agent:run"
    agent = load_module(tmp_path / "My_Agent" / "my_agent_agent.py")
    assert await agent.run(FakeTask("hi")) == "my-agent received: hi"


def test_mur_new_takes_a_name_and_refuses_a_bad_one(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert mur(capsys, "new", str(tmp_path / "x"), "--name", "coder")[0] == 0
    assert "name: coder" in (tmp_path / "x" / "murmur.yaml").read_text()
    status, _, err = mur(capsys, "new", str(tmp_path / "y"), "--name", "Coder")
    assert status == 2 and "--name" in err


def test_mur_new_never_overwrites_a_manifest(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "murmur.yaml").write_text("mine\n")
    status, _, err = mur(capsys, "new", str(tmp_path), "--name", "coder")
    assert status == 1 and err.startswith("error E-MAN-005: ")
    assert (tmp_path / "murmur.yaml").read_text() == "mine\n"


def test_pack_prints_the_sha256_and_honours_output(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = capsule_source(tmp_path, "coder")
    target = tmp_path / "out" / "c.mur.zip"
    status, out, _ = mur(capsys, "pack", str(source), "-o", str(target))
    assert status == 0 and target.is_file()
    first_hash = out.split("sha256 ")[1].rstrip(")\n")
    assert mur(capsys, "pack", str(source), "-o", str(target))[1].endswith(f"{first_hash})\n")


def test_pack_refuses_a_bad_manifest_with_its_code(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    source = capsule_source(tmp_path, "coder", extra="inference: {max_turn: 1}\n")
    status, out, err = mur(capsys, "pack", str(source), "-o", str(tmp_path / "c.zip"))
    assert (status, out) == (1, "")
    assert err.startswith("error E-MAN-001: ")


def test_install_refuses_other_bytes_until_forced(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    one = capsule_source(tmp_path / "one", "coder")
    two = capsule_source(tmp_path / "two", "coder", reply="!")
    mur(capsys, "pack", str(one), "-o", str(tmp_path / "one.zip"))
    mur(capsys, "pack", str(two), "-o", str(tmp_path / "two.zip"))
    assert mur(capsys, "install", str(tmp_path / "one.zip"), "--project", str(project))[0] == 0
    status, _, err = mur(capsys, "install", str(tmp_path / "two.zip"), "--project", str(project))
    assert status == 1 and err.startswith("error E-REG-002: ") and "--force" in err
    status, out, _ = mur(capsys, "install", str(tmp_path / "two.zip"), "--project",
                         str(project), "--force")
    assert status == 0 and out.startswith("installed ")
    status, out, _ = mur(capsys, "install", str(tmp_path / "two.zip"), "--project",
                         str(project))
    assert status == 0 and out.startswith("already installed: ")


def test_install_global_serves_every_project(tmp_path: Path, murmur_home: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    source = capsule_source(tmp_path, "solo")
    mur(capsys, "pack", str(source), "-o", str(tmp_path / "solo.zip"))
    status, out, _ = mur(capsys, "install", str(tmp_path / "solo.zip"), "--global")
    assert status == 0 and "global store" in out
    assert (murmur_home / "artifacts" / "local" / "solo" / "1.0.0" / "sha256").is_file()
    project = tmp_path / "elsewhere"
    project.mkdir()
    (project / "roster.yaml").write_text("roster_version: 1\nmembers:\n"
                                         "  - {name: solo, capsule: local/solo, "
                                         "version: 1.0.0, entry: true}\n")
    assert mur(capsys, "doctor", "--project", str(project))[0] == 0


# --- mur lock ----------------------------------------------------------------------------

def test_lock_pins_what_the_members_resolve_to_and_doctor_checks_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    mur(capsys, "new", "--roster", str(demo))
    status, out, _ = mur(capsys, "lock", "--project", str(demo))
    assert status == 0 and out.startswith("pinned 2 capsules in ")
    pins = read_lock(demo)
    assert pins is not None
    assert pins["local/worker"].sha256 == resolve(demo, "local/worker", "0.1.0").sha256
    assert mur(capsys, "doctor", "--project", str(demo))[0] == 0
    worker = demo / "worker" / "worker_agent.py"
    worker.write_text(worker.read_text() + "# changed\n")
    mur(capsys, "pack", str(demo / "worker"), "-o", str(tmp_path / "w.zip"))
    mur(capsys, "install", str(tmp_path / "w.zip"), "--project", str(demo), "--force")
    status, _, err = mur(capsys, "doctor", "--project", str(demo))
    assert status == 1 and err.startswith("error E-REG-005: ")
    assert mur(capsys, "lock", "--project", str(demo))[0] == 0
    assert mur(capsys, "doctor", "--project", str(demo))[0] == 0


def test_lock_refuses_one_capsule_at_two_versions(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, "coder", "1.0.0")
    install_capsule(project, "coder", "2.0.0")
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: old, capsule: local/coder, version: 1.0.0, entry: true}\n"
        "  - {name: new, capsule: local/coder, version: 2.0.0}\n")
    status, _, err = mur(capsys, "lock", "--project", str(project))
    assert status == 1 and err.startswith("error E-REG-006: ")
    assert not (project / "murmur.lock").exists()


def test_lock_of_a_refused_structure_writes_nothing(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "roster.yaml").write_text("roster_version: 1\nmembers: []\n")
    status, _, err = mur(capsys, "lock", "--project", str(tmp_path))
    assert status == 1 and err.startswith("error E-ROS-001: ")
    assert not (tmp_path / "murmur.lock").exists()


# --- mur doctor and mur explain ----------------------------------------------------------

def test_doctor_on_a_missing_directory_is_a_usage_error(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    status, out, err = mur(capsys, "doctor", "--project", str(tmp_path / "nope"))
    assert (status, out) == (2, "")
    assert "not a directory" in err


def test_doctor_json_when_refused_is_one_object_and_nothing_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = mur(capsys, "doctor", "--project", str(tmp_path), "--json")
    assert (status, err) == (1, "")
    report = json.loads(out)
    assert report["admitted"] is False
    assert report["error"]["code"] == "E-ROS-001"
    assert set(report["error"]) == {"code", "severity", "message", "hint", "path"}
    # The diagnostic once, under "error", as docs/admission.md shows it.
    assert set(report) == {"admitted", "project_dir", "error", "warnings", "ok", "command",
                           "exit_status"}


def test_doctor_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--no-such-flag"])
    assert exited.value.code == 2


def test_explain_prints_an_entry(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = mur(capsys, "explain", "E-ROS-006")
    assert status == 0
    assert out.startswith("E-ROS-006 (error, part of the roster format)")
    assert "network.authentication" in out


def test_explain_of_an_unknown_code_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = mur(capsys, "explain", "E-ROS-999")
    assert (status, out) == (2, "")
    assert "`E-ROS-999` is not a diagnostic code" in err


def test_explain_with_no_code_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.diagnostics import TABLE

    status, out, _ = mur(capsys, "explain")
    assert status == 0
    assert [line.split()[0] for line in out.splitlines()] == [entry.code for entry in TABLE]


# --- model members in doctor --------------------------------------------------------------

def test_doctor_prints_each_model_members_endpoint_and_warns_of_an_unset_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    demo = tmp_path / "demo"
    mur(capsys, "new", "--roster", str(demo), "--template", "model")
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    status, out, err = mur(capsys, "doctor", "--project", str(demo))
    assert status == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("model planner: gpt-4o-mini at http://localhost:11434/v1; "
                               "key OPENAI_API_KEY NOT SET; max_turns "), out
    assert lines[2].startswith("model worker: "), out
    assert err.count("warning W-ROS-004") == 2, err
    assert "`OPENAI_API_KEY`" in err and "E-RUN-057" in err
    # Set, the key is reported as set (never printed) and the warnings go.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-a-key-doctor-never-prints")
    status, out, err = mur(capsys, "doctor", "--project", str(demo), "--json")
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert report["warnings"] == []
    assert [(row["member"], row["api_key_env"], row["api_key_set"], row["base_url"])
            for row in report["models"]] == [
        ("planner", "OPENAI_API_KEY", True, "http://localhost:11434/v1"),
        ("worker", "OPENAI_API_KEY", True, "http://localhost:11434/v1")]
    assert "sk-a-key-doctor-never-prints" not in out



def test_explain_json_is_one_object_for_a_code_and_for_the_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "e-ros-004", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["code"] == "E-ROS-004" and entry["severity"] == "error"
    assert set(entry) == {"code", "severity", "title", "meaning", "message", "hint",
                          "named_by"}
    assert main(["explain", "--json"]) == 0
    codes = json.loads(capsys.readouterr().out)["codes"]
    assert "W-ROS-005" in [row["code"] for row in codes]
    assert main(["explain", "E-NOPE-001", "--json"]) == 2
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["error"]["path"] == "CODE"
