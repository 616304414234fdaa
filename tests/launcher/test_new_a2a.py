"""``mur new --template a2a DIR``: the capsule it writes, and its server.py on its own.

In order: what ``mur new`` writes (a manifest the loader admits, that ``mur pack`` packs),
server.py run as a process and answered by a2a-sdk's own client (its card, a blocking
and a streaming message, PORT instead of --port, the line it prints without a2a-sdk),
and the refusals (existing files, ``--template`` beside ``--roster``). The runtime that
starts server.py behind a door (``mur run --capsule``) is not tested here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.admission.manifest import load_manifest
from launcher.cli import main

Run = tuple[int, str, str]
#: How long server.py may take to serve its card, and one request to answer.
START_BUDGET_S = 20.0
ANSWER_BUDGET_S = 15.0
INSTALL_HINT = 'pip install "a2a-sdk[http-server]~=1.3"'


def mur(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def new_a2a(capsys: pytest.CaptureFixture[str], directory: Path) -> Path:
    status, _, err = mur(capsys, "new", "--template", "a2a", str(directory))
    assert status == 0, err
    return directory


# --- what mur new writes -----------------------------------------------------------------

def test_new_a2a_writes_a_manifest_and_server_that_pack(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    status, out, err = mur(capsys, "new", "--template", "a2a", "My_Gateway")
    assert status == 0 and err == ""
    assert "my-gateway" in out and "server.py" in out
    for step in ("mur pack My_Gateway", "mur install my-gateway-0.1.0.mur.zip",
                 "mur run --capsule local/my-gateway --capsule-version 0.1.0"):
        assert step in out
    source = tmp_path / "My_Gateway"
    assert sorted(path.name for path in source.iterdir()) == ["murmur.yaml", "server.py"]

    manifest = load_manifest(source)
    assert (manifest.name, manifest.version, manifest.agent.kind) == ("my-gateway", "0.1.0",
                                                                       "a2a")
    assert manifest.agent.a2a is not None
    assert manifest.agent.a2a.command == ["python3", "server.py", "--port", "{port}"]
    assert manifest.agent.a2a.command_for(4321)[-1] == "4321"
    assert manifest.agent.skills == []
    assert manifest.serves_peers and manifest.authenticated
    assert manifest.description
    assert 'NAME = "my-gateway"' in (source / "server.py").read_text()

    status, out, err = mur(capsys, "pack", "My_Gateway")
    assert status == 0, err
    assert "packed my-gateway 0.1.0" in out
    with zipfile.ZipFile(tmp_path / "my-gateway-0.1.0.mur.zip") as packed:
        assert {"murmur.yaml", "server.py"} <= set(packed.namelist())


def test_template_python_is_the_default(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert mur(capsys, "new", "--template", "python", str(tmp_path / "chosen"))[0] == 0
    assert mur(capsys, "new", str(tmp_path / "default"))[0] == 0
    chosen, default = (load_manifest(tmp_path / name) for name in ("chosen", "default"))
    assert chosen.agent.kind == default.agent.kind == "python"
    assert not (tmp_path / "chosen" / "server.py").exists()


def test_an_unknown_template_is_a_usage_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["new", "--template", "rust", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert "python" in capsys.readouterr().err and not (tmp_path / "x").exists()


# --- server.py on its own ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_server(source: Path, argv: list[str], env: dict[str, str]) -> Iterator[Path]:
    """server.py as a process of its own; yields its log, and kills it on the way out."""
    log = source / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, "server.py", *argv], cwd=source,
                                   env={**os.environ, **env}, stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        yield log
    finally:
        process.kill()
        process.wait(timeout=10)


def wait_for_card(base: str, log: Path) -> dict[str, Any]:
    """The card once served, within START_BUDGET_S."""
    deadline = time.monotonic() + START_BUDGET_S
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"{base}/.well-known/agent-card.json", timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        assert answer.status_code == 200, answer.text
        card: dict[str, Any] = answer.json()
        return card
    raise AssertionError(f"server.py served no card in {START_BUDGET_S} s: "
                         f"{log.read_text(errors='replace')}")


def a2a_message(text: str) -> Any:
    from a2a.types import Message, Part, Role, SendMessageRequest

    return SendMessageRequest(message=Message(message_id=uuid.uuid4().hex,
                                              role=Role.ROLE_USER, parts=[Part(text=text)]))


async def sdk_events(base: str, text: str, *, streaming: bool) -> list[Any]:
    """Every event a2a-sdk's client yields for one message, within ANSWER_BUDGET_S."""
    from a2a.client import ClientConfig, ClientFactory

    async def send() -> list[Any]:
        client = await ClientFactory(ClientConfig(streaming=streaming)).create_from_url(base)
        try:
            return [event async for event in client.send_message(a2a_message(text))]
        finally:
            await client.close()

    return await asyncio.wait_for(send(), ANSWER_BUDGET_S)


@pytest.mark.integration
async def test_server_serves_its_card_and_answers_the_sdk_client(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("a2a", reason="a2a-sdk (a test dependency) is not installed")
    from a2a.helpers import get_artifact_text
    from a2a.types import TaskState

    source = new_a2a(capsys, tmp_path / "echo")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running_server(source, ["--port", str(port)], {}) as log:
        card = await asyncio.to_thread(wait_for_card, base, log)
        assert card["name"] == "echo" and card["capabilities"]["streaming"] is True
        assert [skill["id"] for skill in card["skills"]] == ["reply"]
        assert card["supportedInterfaces"] == [{"url": f"{base}/", "protocolBinding": "JSONRPC",
                                                "protocolVersion": "1.0"}]

        (event,) = await sdk_events(base, "hi there", streaming=False)
        task = event.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [get_artifact_text(artifact) for artifact in task.artifacts] == [
            "Hello from echo: you said hi there"]

        streamed = await sdk_events(base, "stream me", streaming=True)
        kinds = [event.WhichOneof("payload") for event in streamed]
        assert kinds == ["task", "status_update", "artifact_update", "status_update"], kinds
        working, answer, done = streamed[1:]
        assert working.status_update.status.state == TaskState.TASK_STATE_WORKING
        assert get_artifact_text(answer.artifact_update.artifact) == (
            "Hello from echo: you said stream me")
        assert done.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert "serving A2A 1.0 (JSON-RPC) at" in log.read_text()


@pytest.mark.integration
async def test_server_takes_its_port_from_PORT(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("a2a", reason="a2a-sdk (a test dependency) is not installed")
    source = new_a2a(capsys, tmp_path / "ported")
    port = free_port()
    with running_server(source, [], {"PORT": str(port)}) as log:
        card = await asyncio.to_thread(wait_for_card, f"http://127.0.0.1:{port}", log)
    assert card["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/"


def test_server_without_a_port_is_a_usage_error(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("a2a", reason="a2a-sdk (a test dependency) is not installed")
    source = new_a2a(capsys, tmp_path / "portless")
    env = {name: value for name, value in os.environ.items() if name != "PORT"}
    done = subprocess.run([sys.executable, "server.py"], cwd=source, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "give --port PORT or set PORT" in done.stderr


def test_server_without_a2a_sdk_says_how_to_install_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = new_a2a(capsys, tmp_path / "bare")
    # A package named a2a that fails to import, first on the path: a2a-sdk as if absent.
    shadow = tmp_path / "shadow" / "a2a"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'a2a'\", name='a2a')\n")
    done = subprocess.run([sys.executable, "server.py", "--port", "1"], cwd=source,
                          env={**os.environ, "PYTHONPATH": str(shadow.parent)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and INSTALL_HINT in done.stderr, done.stderr
    assert "needs a2a" in done.stderr


# --- refusals ----------------------------------------------------------------------------

@pytest.mark.parametrize("existing", ["murmur.yaml", "server.py"])
def test_new_a2a_never_overwrites_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         existing: str) -> None:
    (tmp_path / existing).write_text("mine\n")
    status, out, err = mur(capsys, "new", "--template", "a2a", str(tmp_path), "--name", "gw")
    assert status == 1 and out == "" and err.startswith("error E-MAN-005: ")
    assert str(tmp_path / existing) in err
    assert [path.name for path in tmp_path.iterdir()] == [existing]
    assert (tmp_path / existing).read_text() == "mine\n"


def test_an_a2a_template_beside_roster_is_refused_naming_both_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = tmp_path / "demo"
    status, out, err = mur(capsys, "new", "--roster", "--template", "a2a", str(demo))
    assert status == 2 and out == ""
    assert "a2a" in err and "--roster" in err
    assert not demo.exists()


@pytest.mark.parametrize("template", ["model", "llm"])
def test_the_model_template_writes_a_model_capsule_with_no_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str) -> None:
    status, out, err = mur(capsys, "new", "--template", template, str(tmp_path / "one"))
    assert status == 0, err
    assert "MURMUR.md, its instructions" in out
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["MURMUR.md", "murmur.yaml"]
    from launcher.admission.manifest import load_manifest

    manifest = load_manifest(tmp_path / "one")
    assert manifest.agent.kind == "model" and manifest.inference.transport == "http"


# --- the template behind a door, run as `mur new` says -----------------------------------

@pytest.mark.integration
def test_the_printed_commands_run_the_template_behind_a_door(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("a2a", reason="the a2a template's server needs a2a-sdk")
    monkeypatch.chdir(tmp_path)
    status, out, err = mur(capsys, "new", "--template", "a2a", "greeter")
    assert status == 0, err
    commands = out.split("next: ", 1)[1].strip().split(" && ")
    assert [command.split()[:2] for command in commands] == [
        ["mur", "pack"], ["mur", "install"], ["mur", "run"]]
    mur_bin = str(Path(sys.executable).with_name("mur"))
    for command in commands:
        argv = [mur_bin, *command.split()[1:]]
        completed = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True,
                                   timeout=90, check=False)
        assert completed.returncode == 0, (command, completed.stderr[-2000:])
    # The last command ran the capsule's a2a-sdk server behind its door: its answer.
    assert completed.stdout.strip().splitlines()[-1] == "Hello from greeter: you said hello"
    assert completed.stdout == "Hello from greeter: you said hello\n"  # the answer alone
    assert "is ready at http://127.0.0.1:" in completed.stderr
