"""Model members against a real OpenAI-compatible server from PyPI: LiteLLM's proxy
(``make litellm`` installs it into ``.venv-litellm``), run on loopback with mock answers,
so no network and no model. In order: the proxy started once for the module (its master
key is the member's key, so the server itself checks what the driver sends), a model
member answering in a formation with the proxy's text and its usage in the trace, a
streaming client seeing the proxy's chunks, and the proxy's own refusal named by the
driver's code. The tools path is tested against tests/support/fake_openai.py only: the
proxy's ``mock_tool_calls`` is not applied to streamed answers, and the driver streams."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from launcher.home import paths
from tests.support.formation import (
    REPO,
    kill_group_quietly,
    launcher_env,
    member_traces,
    start_launcher,
)
from tests.support.model_members import FAKE_KEY, KEY_ENV, model_project
from tests.support.third_party import free_port

pytestmark = pytest.mark.integration

LITELLM = Path(os.environ.get("MURMUR_TEST_LITELLM", REPO / ".venv-litellm/bin/litellm"))
ANSWER = "hello from litellm, a real server"
CONFIG = f"""
model_list:
  - model_name: fake-model
    litellm_params:
      model: openai/fake-model
      api_key: not-used-by-a-mock
      mock_response: {json.dumps(ANSWER)}
general_settings:
  master_key: {FAKE_KEY}
"""


@pytest.fixture(scope="module")
def litellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The proxy's base URL, once it answers its liveness probe (at most 120 s)."""
    if not LITELLM.exists():
        pytest.skip(f"LiteLLM's proxy is not installed at {LITELLM}: run `make litellm`")
    folder = tmp_path_factory.mktemp("litellm")
    (folder / "config.yaml").write_text(CONFIG)
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(folder),
           # The cost map from the package, not from the network.
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    log = (folder / "litellm.log").open("wb")
    process = subprocess.Popen([str(LITELLM), "--config", "config.yaml", "--host",
                                "127.0.0.1", "--port", str(port)], cwd=folder, env=env,
                               stdout=log, stderr=subprocess.STDOUT, process_group=0)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail("LiteLLM's proxy exited: "
                            + (folder / "litellm.log").read_text()[-2000:])
            try:
                if httpx.get(base + "/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("LiteLLM's proxy did not answer within 120 s")
            time.sleep(0.3)
        yield base + "/v1"
    finally:
        kill_group_quietly(process)
        process.wait()
        log.close()


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        kill_group_quietly(process)
        process.wait()


def run_formation(project: Path, launched: list[subprocess.Popen[bytes]],
                  task: str) -> tuple[int, str, str]:
    process = start_launcher(project, "--json", "--task", task,
                             env=launcher_env(**{KEY_ENV: FAKE_KEY}))
    launched.append(process)
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(), err.decode()


def files_holding(root: Path, needle: bytes) -> list[Path]:
    return [path for path in root.rglob("*")
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes()]


def test_a_model_member_answers_with_litellms_text_and_its_usage_is_traced(
        litellm: str, tmp_path: Path, murmur_home: Path,
        launched: list[subprocess.Popen[bytes]]) -> None:
    project = model_project(tmp_path, litellm, {"solo": {}}, entry="solo", reachability={})
    code, out, err = run_formation(project, launched, "say hello")
    assert code == 0, err
    assert out.rstrip().endswith(ANSWER), out
    calls = [record for record in member_traces(paths.records_root())["solo"]
             if record["event"] == "model_call"]
    assert len(calls) == 1 and calls[0]["model"] == "fake-model", calls
    # LiteLLM's usage arrives in the stream's last chunk (stream_options.include_usage).
    assert calls[0]["input_tokens"] > 0 and calls[0]["output_tokens"] > 0, calls
    assert FAKE_KEY not in out + err
    assert files_holding(murmur_home, FAKE_KEY.encode()) == []
    assert files_holding(project, FAKE_KEY.encode()) == []


def test_a_streaming_client_sees_litellms_chunks_as_artifact_chunks(
        litellm: str, tmp_path: Path, murmur_home: Path) -> None:
    from tests.support.member import install_capsule, member_env, read_ready, start_member
    from tests.support.model_members import write_model_capsule

    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, write_model_capsule(tmp_path / "src", "solo", litellm))
    member = read_ready(start_member(project, "local/solo", "--json", env=member_env(
        murmur_home, **{KEY_ENV: FAKE_KEY})))
    chunks: list[str] = []
    states: list[str] = []
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                       "parts": [{"text": "stream"}]}}}
        headers = {"Authorization": f"Bearer {member.token}", "A2A-Version": "1.0",
                   "Accept": "text/event-stream"}
        with httpx.stream("POST", member.door + "/", json=body, headers=headers,
                          timeout=60) as response:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                result = json.loads(line[5:])["result"]
                if "artifactUpdate" in result:
                    chunks.append("".join(part.get("text", "") for part in
                                          result["artifactUpdate"]["artifact"]["parts"]))
                if "statusUpdate" in result:
                    states.append(result["statusUpdate"]["status"]["state"])
    finally:
        member.kill()
    assert "".join(chunks) == ANSWER
    assert len([chunk for chunk in chunks if chunk]) > 1, "the proxy's deltas, one by one"
    assert states[-1] == "TASK_STATE_COMPLETED"


def test_litellms_refusal_of_an_unknown_model_is_named_with_its_status_and_host(
        litellm: str, tmp_path: Path, murmur_home: Path,
        launched: list[subprocess.Popen[bytes]]) -> None:
    project = model_project(tmp_path, litellm, {"solo": {"model": "no-such-model"}},
                            entry="solo", reachability={})
    code, out, err = run_formation(project, launched, "say hello")
    said = out + err
    assert code == 1, said
    assert "E-RUN-061" in said and "127.0.0.1" in said and "400" in said, said
    assert "no-such-model" in said, "LiteLLM's own message, passed on"
    assert FAKE_KEY not in said
