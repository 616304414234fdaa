"""``mur new --roster --template llm``: two model-backed members against a fake
OpenAI-compatible chat-completions server on loopback. The entry member's model asks for
the ``call_member`` tool, the call really goes to the worker (whose model answers), and
the answer goes back to the entry member's model: one real tool-call round trip."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.formation import launcher_env, mur

pytestmark = pytest.mark.integration

API_KEY = "test-model-key-not-a-murmur-token"


class FakeModel:
    """A chat-completions endpoint that calls the tool once, then answers with it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                owner.keys.append(self.headers.get("Authorization"))
                answer = json.dumps({"choices": [{"message": owner.answer(body)}]}).encode()
                self.send_response(200 if self.path == "/v1/chat/completions" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @staticmethod
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        if not body.get("tools"):
            return {"role": "assistant", "content": f"{len(user.split())} words"}
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if results:
            return {"role": "assistant", "content": f"the worker counted {results[0]}"}
        arguments = json.dumps({"member": "worker", "task": user})
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "call_member", "arguments": arguments}}]}

    def __enter__(self) -> FakeModel:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with FakeModel() as fake:
        yield fake


def test_an_llm_formation_completes_a_task_with_a_tool_call_round_trip(
        tmp_path: Path, murmur_home: Path, model: FakeModel) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home), OPENAI_BASE_URL=model.url,
                       OPENAI_API_KEY=API_KEY, OPENAI_MODEL="fake-model")
    project = tmp_path / "team"
    made = mur("new", "--roster", str(project), "--template", "llm", env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    done = mur("run", "--roster", "--project", str(project), "--task",
               "count these four words", env=env, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the worker counted 4 words\n"
    entry_first, worker, entry_second = model.requests
    assert entry_first["model"] == "fake-model"
    tool = entry_first["tools"][0]["function"]
    assert tool["name"] == "call_member"
    assert tool["parameters"]["properties"]["member"]["enum"] == ["worker"]
    assert "tools" not in worker  # the worker may call nobody
    assert [m["role"] for m in entry_second["messages"]][-2:] == ["assistant", "tool"]
    assert set(model.keys) == {f"Bearer {API_KEY}"}


def test_without_the_api_host_in_the_grant_the_call_is_refused(
        tmp_path: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home),
                       OPENAI_BASE_URL="http://model.example.invalid/v1")
    project = tmp_path / "team"
    assert mur("new", "--roster", str(project), "--template", "llm", env=env,
               cwd=tmp_path).returncode == 0
    done = mur("run", "--roster", "--project", str(project), "--task", "hi", env=env,
               cwd=project, timeout=120)
    assert done.returncode == 1
    assert "capabilities.network.allow does not allow model.example.invalid" in done.stderr
