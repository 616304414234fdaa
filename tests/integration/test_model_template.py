"""``mur new --roster --template model`` (and its earlier name ``llm``): two model
members, declared in murmur.yaml with no code, against an OpenAI-compatible server on
loopback (tests/support/fake_openai.py). The entry member's model asks for the
``call_member`` tool, the call really goes to the worker (whose model answers), and the
answer arrives fenced under ``member:worker`` on the entry member's next turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.home import paths
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, text, tools
from tests.support.formation import launcher_env, member_traces, mur

pytestmark = pytest.mark.integration

API_KEY = "test-model-key-not-a-murmur-token"


def counting(body: dict[str, Any], seen: SeenRequest) -> Reply:
    messages = body["messages"]
    user = messages[1]["content"]
    if "member: worker" in seen.system:
        return text(f"{len(user.split())} words")
    last = messages[-1]
    if last["role"] == "user" and last["content"].startswith("```member:worker"):
        return text("the worker counted " + last["content"].split("\n")[1])
    if last["role"] == "tool":
        return text("")
    return tools(("call_member", {"member": "worker", "task": user}))


@pytest.mark.parametrize("template", ["model", "llm"])
def test_a_model_formation_from_the_template_completes_a_task_through_the_worker(
        tmp_path: Path, murmur_home: Path, template: str) -> None:
    with FakeOpenAI(counting) as fake:
        env = launcher_env(MURMUR_HOME=str(murmur_home), OPENAI_BASE_URL=fake.base_url,
                           OPENAI_API_KEY=API_KEY, OPENAI_MODEL="fake-model")
        project = tmp_path / "team"
        made = mur("new", "--roster", str(project), "--template", template, env=env,
                   cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        assert not list(project.glob("*/*.py")), "a model member is declared, not coded"
        done = mur("run", "--roster", "--project", str(project), "--task",
                   "count these four words", env=env, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the worker counted 4 words\n"
    entry = [seen for seen in fake.requests if "member: planner" in seen.system]
    [worker] = [seen for seen in fake.requests if "member: worker" in seen.system]
    entry_first, entry_second, _ = entry
    assert entry_first.model == "fake-model"
    assert "You plan how to answer the task" in entry_first.system
    tool = entry_first.body["tools"][0]["function"]
    assert tool["name"] == "call_member"
    assert tool["parameters"]["properties"]["member"]["enum"] == ["worker"]
    assert "tools" not in worker.body  # the worker may call nobody
    assert [m["role"] for m in entry_second.body["messages"]][-2:] == ["assistant", "tool"]
    assert {seen.headers["Authorization"] for seen in fake.requests} == {f"Bearer {API_KEY}"}
    # ${OPENAI_MODEL:-gpt-4o-mini} is read where the member starts, for the trace too.
    records = member_traces(paths.records_root())["planner"]
    assert {r["model"] for r in records if r["event"] == "model_call"} == {"fake-model"}


def test_without_the_endpoint_host_in_the_grant_the_task_fails_naming_it(
        tmp_path: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home), OPENAI_API_KEY=API_KEY,
                       OPENAI_BASE_URL="http://model.example.invalid/v1")
    project = tmp_path / "team"
    assert mur("new", "--roster", str(project), "--template", "model", env=env,
               cwd=tmp_path).returncode == 0
    done = mur("run", "--roster", "--project", str(project), "--task", "hi", env=env,
               cwd=project, timeout=120)
    assert done.returncode == 1
    assert "E-RUN-058" in done.stderr
    assert "model.example.invalid is not in capabilities.network.allow" in done.stderr
