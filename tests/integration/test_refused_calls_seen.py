"""A call the roster does not allow reaches the operator's view (the newcomer hour): the
agent still gets the reference's one refusal message, and the caller's trace has
``member_call_refused``, which ``mur trace show --tree`` shows under the task and
``mur audit`` reports (the roster held: not a violation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.formation import (
    ECHO_AGENT,
    launcher_env,
    mur,
    simple_project,
)

pytestmark = pytest.mark.integration

TRESPASSER = """
async def run(task):
    try:
        await task.call_member("reviewer", "let me in")
    except Exception as exc:
        said = str(exc)
    try:
        await task.http.get("http://reviewer.formation.invalid/")
    except Exception as exc:
        said += f" | http: {exc}"
    return f"refused: {said}"
"""


def test_a_call_along_no_edge_is_refused_for_the_agent_and_recorded_for_the_operator(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                             reachability={"planner": ["coder"], "coder": ["reviewer"]},
                             agents={"planner": TRESPASSER, "coder": ECHO_AGENT,
                                     "reviewer": ECHO_AGENT})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    done = mur("run", "--roster", "--project", str(project), "--json", "--task", "go",
               env=env, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    line, answer = done.stdout.split("\n", 1)
    formation = json.loads(line)["formation_id"]
    # The agent's view: the one message, nothing about which members exist.
    assert answer.count("refused by the formation proxy: the address is not "
                        "http://<member>.formation.invalid for a member this member may "
                        "call") == 2, answer
    tree = mur("trace", "show", formation, "--tree", env=env, cwd=project)
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.count("reviewer  (no task: refused: no edge)") == 2, tree.stdout
    audit = mur("audit", formation, env=env, cwd=project)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert audit.stdout.count("refused: planner → reviewer") == 2, audit.stdout
    assert "2 calls refused by their callers' proxies (no edge)" in audit.stdout
    report = json.loads(mur("audit", formation, "--json", env=env, cwd=project).stdout)
    assert [r["detail"].split(":")[0] for r in report["refused"]] == ["call_member", "http"]
