"""Bounds along the edges (roster version 2, docs/bounds.md) in real formations: a
runaway loop between two members ended by ``limits.depth``; an edge's ``calls``,
``concurrent`` and ``per_minute``; a member's own ``limits.calls``; a depth an agent
forges never reaching the callee, through ``task.http`` and through the forward proxy;
calls that wait for the operator, each caller within its share of the callee's
approval room (``approve_queue``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.home import paths
from tests.support.formation import (
    ECHO_AGENT,
    install_capsule,
    kill_group_quietly,
    launcher_env,
    member_traces,
    mur,
    read_formation_line,
    start_launcher,
    write_capsule,
    write_roster,
)

pytestmark = pytest.mark.integration

#: ping and pong call each other with the same text until a call fails; each answer
#: names who answered, so the chain can be read back.
LOOP_AGENT = """
async def run(task):
    other = "pong" if task.member == "ping" else "ping"
    try:
        answer = await (await task.call_member(other, task.text))
    except Exception as failed:
        return f"{task.member} stopped: {failed}"
    return f"{task.member} <- {answer}"
"""

BOSS_AGENT = """
import asyncio, json, time

async def run(task):
    plan = json.loads(task.text)
    results = []
    async def one(text):
        try:
            return await (await task.call_member(plan["to"], text))
        except Exception as failed:
            return f"failed: {failed}"
    if plan.get("parallel"):
        results = await asyncio.gather(*(one(f"call {n}") for n in range(plan["calls"])))
    else:
        for n in range(plan["calls"]):
            results.append(await one(f"call {n}"))
    return json.dumps(list(results))
"""

TIMED_AGENT = """
import asyncio, time

async def run(task):
    started = time.time()
    await asyncio.sleep(0.4)
    return f"{started:.3f} {time.time():.3f}"
"""


def simple_project(tmp_path: Path, names: list[str], *, entry: str,
                   reachability: dict[str, list[str]] | str,
                   agents: dict[str, str], manifests: dict[str, str] | None = None) -> Path:
    """A project of python members (echo agents unless ``agents`` says otherwise), each
    holding four tasks at once (a loop's member is called again while it waits);
    ``manifests`` adds lines to some members' ``murmur.yaml``."""
    project = tmp_path / "project"
    project.mkdir()
    called = {name for targets in (reachability if isinstance(reachability, dict) else {})
              .values() for name in targets}
    for name in names:
        source = write_capsule(tmp_path, name, agents.get(name, ECHO_AGENT),
                               accept_peers=name in called or reachability == "all",
                               allow_localhost=True,
                               lifecycle="{concurrency: 4, queue_depth: 4}")
        if manifests and name in manifests:
            with (source / "murmur.yaml").open("a") as manifest:
                manifest.write(manifests[name] + "\n")
        install_capsule(project, source)
    write_roster(project, [(name, name == entry) for name in names], reachability)
    return project


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        kill_group_quietly(process)
        process.wait()


def version_2(project: Path, head: str = "", rules: str | None = None,
              members: dict[str, str] | None = None) -> None:
    """The project's roster as version 2: ``head`` after the version line, ``rules`` in
    place of its reachability, ``members`` a ``limits`` line for those members."""
    lines = (project / "roster.yaml").read_text().splitlines()
    out = ["roster_version: 2", *([head] if head else [])]
    for line in lines[1:]:
        if rules is not None and line.startswith("reachability"):
            out.append(rules.rstrip())
            break
        out.append(line)
        name = line.split("name: ", 1)[1] if "- name: " in line else None
        if name and members and name in members:
            out.append(f"    limits: {members[name]}")
    (project / "roster.yaml").write_text("\n".join(out) + "\n")


def run_task(project: Path, launched: list[subprocess.Popen[bytes]],
             task: str) -> tuple[int, str, str]:
    process = start_launcher(project, "--json", "--task", task)
    launched.append(process)
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(), err.decode()


def answer(out: str) -> str:
    return out.split("\n", 1)[1].strip()


def test_a_runaway_loop_between_two_members_ends_at_limits_depth(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "ping", "pong"], entry="boss",
                             reachability="all",
                             agents={"boss": BOSS_AGENT, "ping": LOOP_AGENT,
                                     "pong": LOOP_AGENT})
    version_2(project, head="limits: {depth: 4}")
    code, out, err = run_task(project, launched, json.dumps({"to": "ping", "calls": 1}))
    assert code == 0, err
    [chain] = json.loads(answer(out))
    # boss (0) -> ping (1) -> pong (2) -> ping (3) -> pong (4); pong's call would be 5.
    assert chain.startswith("ping <- pong <- ping <- pong stopped: "), chain
    assert "depth_exceeded" in chain and "limits.depth" in chain, chain
    traces = member_traces(paths.records_root())
    depths = sorted(record["depth"] for name in ("ping", "pong") for record in traces[name]
                    if record["event"] == "a2a_task_received")
    assert depths == [1, 2, 3, 4]
    # The refusal is in the refusing door's trace: ping's, which pong called fifth.
    [refused] = [record for record in traces["ping"] if record["event"] == "limit_reached"]
    assert (refused["caller"], refused["limit"], refused["value"], refused["error"]) == (
        "pong", "depth", 4, "depth_exceeded")


def test_an_edge_over_calls_is_refused_naming_the_limit(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]},
                             agents={"boss": BOSS_AGENT})
    version_2(project, rules="reachability:\n  - from: boss\n    to: [worker]\n"
                             "    limits: {calls: 2}\n")
    code, out, err = run_task(project, launched, json.dumps({"to": "worker", "calls": 3}))
    assert code == 0, err
    first, second, third = json.loads(answer(out))
    assert first == "worker: call 0" and second == "worker: call 1"
    assert third.startswith("failed: ") and "limit_reached" in third, third
    assert "made its 2 calls along this edge (limits.calls" in third
    [refused] = [record for record in member_traces(paths.records_root())["worker"]
                 if record["event"] == "limit_reached"]
    assert (refused["caller"], refused["limit"], refused["error"]) == (
        "boss", "calls", "limit_reached")
    # mur audit reports the limit that held, with its place in the trace.
    formation_id = json.loads(out.splitlines()[0])["formation_id"]
    audited = mur("audit", formation_id)
    assert audited.returncode == 0, audited.stderr
    assert "limit: boss → worker calls 2: limit_reached  (at " in audited.stdout
    assert audited.stdout.rstrip().endswith("; 1 limit reached"), audited.stdout
    report = json.loads(mur("audit", formation_id, "--json").stdout)
    assert [(held["caller"], held["callee"], held["what"], held["detail"])
            for held in report["limits_reached"]] == [
        ("boss", "worker", "calls 2", "limit_reached")]


def test_concurrent_holds_and_the_calls_over_it_wait_and_succeed(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]},
                             agents={"boss": BOSS_AGENT, "worker": TIMED_AGENT})
    # The worker holds four at once; the edge lets one run.
    version_2(project, rules="reachability:\n  - from: boss\n    to: [worker]\n"
                             "    limits: {concurrent: 1}\n")
    code, out, err = run_task(project, launched,
                              json.dumps({"to": "worker", "calls": 3, "parallel": True}))
    assert code == 0, err
    spans = sorted(tuple(map(float, result.split())) for result in json.loads(answer(out)))
    assert len(spans) == 3
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end - 0.01, spans


def test_per_minute_spaces_the_calls_which_all_succeed(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]},
                             agents={"boss": BOSS_AGENT, "worker": TIMED_AGENT})
    version_2(project, rules="reachability:\n  - from: boss\n    to: [worker]\n"
                             "    limits: {per_minute: 40}\n")
    code, out, err = run_task(project, launched,
                              json.dumps({"to": "worker", "calls": 3, "parallel": True}))
    assert code == 0, err
    starts = sorted(float(result.split()[0]) for result in json.loads(answer(out)))
    # 40 a minute: one call every 1.5 s.
    assert starts[1] - starts[0] >= 1.4 and starts[2] - starts[1] >= 1.4, starts


def test_a_members_own_calls_limit_refuses_before_any_connection(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]},
                             agents={"boss": BOSS_AGENT})
    version_2(project, members={"boss": "{calls: 1}"})
    code, out, err = run_task(project, launched, json.dumps({"to": "worker", "calls": 2}))
    assert code == 0, err
    first, second = json.loads(answer(out))
    assert first == "worker: call 0"
    assert "made its 1 member calls (its limits.calls" in second, second
    traces = member_traces(paths.records_root())
    received = [record for record in traces["worker"]
                if record["event"] == "a2a_task_received"]
    assert len(received) == 1
    [refused] = [record for record in traces["boss"] if record["event"] == "limit_reached"]
    assert (refused["limit"], refused["value"]) == ("member.calls", 1)


#: Two SendMessage calls to the worker, each with a forged depth: one through
#: ``task.http`` (the formation proxy), one with urllib through the forward proxy.
FORGER_AGENT = """
import asyncio, json, urllib.request

BODY = ('{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
        '{"messageId": "m-%s", "role": "ROLE_USER", "parts": [{"text": "forged"}]}, '
        '"configuration": {"returnImmediately": true}}}')
FORGED = {"x-murmur-call-depth": "7", "X_Murmur_Call_Depth": "9", "A2A-Version": "1.0",
          "Content-Type": "application/json"}

def through_the_forward_proxy():
    request = urllib.request.Request("http://worker.formation.invalid/",
                                     data=(BODY % "proxy").encode(), headers=FORGED,
                                     method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status

async def run(task):
    response = await task.http.post("http://worker.formation.invalid/",
                                    content=BODY % "http", headers=FORGED)
    proxied = await asyncio.to_thread(through_the_forward_proxy)
    return json.dumps([response.status_code, proxied])
"""


def test_a_forged_call_depth_never_reaches_the_callee(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]},
                             agents={"boss": FORGER_AGENT})
    version_2(project, head="limits: {depth: 3}")
    code, out, err = run_task(project, launched, "forge")
    assert code == 0, err
    assert json.loads(answer(out)) == [200, 200]
    received = [record for record in member_traces(paths.records_root())["worker"]
                if record["event"] == "a2a_task_received"]
    # Both arrived as the runtime stamped them: one call deep, not 7 (or 9).
    assert [record["depth"] for record in received] == [1, 1]


# --------------------------------------------------------------------------- approvals

def approval_project(tmp_path: Path, timeout: str = "10m") -> Path:
    project = simple_project(tmp_path, ["boss", "deployer"], entry="boss",
                             reachability={"boss": ["deployer"]},
                             agents={"boss": BOSS_AGENT})
    version_2(project, rules="reachability:\n  - from: boss\n    to: [deployer]\n"
                             f"    approve: true\n    approve_timeout: {timeout}\n")
    return project


def waiting(formation_id: str, env: dict[str, str],
            until: Callable[[list[dict[str, object]]], bool] = bool
            ) -> list[dict[str, object]]:
    """``mur approvals --json``'s rows, once ``until`` holds of them (by default: once one
    is there; at most 30 s)."""
    deadline = time.monotonic() + 30
    rows: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        listed = mur("approvals", formation_id, "--json", env=env)
        assert listed.returncode == 0, listed.stderr
        rows = list(json.loads(listed.stdout)["approvals"])
        if until(rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"the calls waiting for approval never became what was awaited: "
                         f"{rows}")


def one_call_waiting(tmp_path: Path, murmur_home: Path,
                     launched: list[subprocess.Popen[bytes]]
                     ) -> tuple[subprocess.Popen[bytes], str, dict[str, object], dict[str, str]]:
    """A formation whose boss's one call to the deployer waits for approval: the
    launcher, the formation id, the call's row in ``mur approvals``, the environment."""
    project = approval_project(tmp_path)
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    process = start_launcher(project, "--json", "--task",
                             json.dumps({"to": "deployer", "calls": 1}), env=env)
    launched.append(process)
    formation_id = read_formation_line(process)["formation_id"]
    [row] = waiting(formation_id, env)
    return process, formation_id, row, env


def finish(process: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out.decode(), err.decode()


def test_an_approved_call_waits_in_auth_required_until_mur_approve(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    process, formation_id, row, env = one_call_waiting(tmp_path, murmur_home, launched)
    assert (row["member"], row["caller"], row["text"]) == ("deployer", "boss", "call 0")
    human = mur("approvals", formation_id, env=env)
    assert "deployer" in human.stdout and "boss" in human.stdout and "call 0" in human.stdout
    task_id = str(row["taskId"])
    approved = mur("approve", formation_id, "deployer", task_id, env=env)
    assert approved.returncode == 0, approved.stderr
    assert f"approved task {task_id} at member deployer" in approved.stdout
    code, out, err = finish(process)
    assert code == 0, err
    assert json.loads(out.splitlines()[0]) == ["deployer: call 0"]
    records = member_traces(paths.records_root())["deployer"]
    states = [r["state"] for r in records if r["event"] == "task_state"
              and r["task_id"] == task_id]
    assert states[:3] == ["TASK_STATE_SUBMITTED", "TASK_STATE_AUTH_REQUIRED",
                          "TASK_STATE_SUBMITTED"] and states[-1] == "TASK_STATE_COMPLETED"
    decisions = [(r["decision"], r.get("by")) for r in records if r["event"] == "approval"]
    assert decisions == [("waiting", None), ("approved", "operator")]
    # Asked again, the task no longer waits.
    again = mur("approve", formation_id, "deployer", task_id, env=env)
    assert again.returncode == 1
    # mur graph of the formation that ran: its call, and the edge's bound.
    picture = mur("graph", formation_id, "--format", "mermaid", env=env)
    assert "-->|1 call · approve (10m)|" in picture.stdout, picture.stdout
    # mur audit: who decided, and when.
    report = json.loads(mur("audit", formation_id, "--json", env=env).stdout)
    [decided] = report["approvals"]
    assert (decided["caller"], decided["callee"], decided["task_id"], decided["what"]) == (
        "boss", "deployer", task_id, "approved")
    assert decided["detail"].startswith("by operator after ") and decided["ts"]


def test_mur_approvals_finds_the_one_formation_and_approve_takes_a_unique_start_of_the_id(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    process, formation_id, row, env = one_call_waiting(tmp_path, murmur_home, launched)
    task_id = str(row["taskId"])
    listed = mur("approvals", "--json", env=env)      # no id: the one formation running
    assert listed.returncode == 0, listed.stderr
    assert [r["taskId"] for r in json.loads(listed.stdout)["approvals"]] == [task_id]
    # Time-ordered ids of one moment share their first digits: the start given here is
    # whatever is unique among what waits at the member, the whole id sent to its door.
    approved = mur("approve", formation_id[:12], "deployer", task_id[:20], env=env)
    assert approved.returncode == 0, approved.stderr
    assert f"approved task {task_id} at member deployer" in approved.stdout
    code, out, err = finish(process)
    assert code == 0, err
    assert json.loads(out.splitlines()[0]) == ["deployer: call 0"]


def test_mur_deny_rejects_the_call_with_the_reason(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    process, formation_id, row, env = one_call_waiting(tmp_path, murmur_home, launched)
    denied = mur("deny", formation_id, "deployer", str(row["taskId"]), "--reason",
                 "not on a Friday", env=env)
    assert denied.returncode == 0, denied.stderr
    code, out, err = finish(process)
    assert code == 0, err
    [result] = json.loads(out.splitlines()[0])
    assert result.startswith("failed: ") and "not on a Friday" in result, result
    assert "REJECTED" in result.upper()
    records = member_traces(paths.records_root())["deployer"]
    assert [(r["decision"], r.get("reason")) for r in records if r["event"] == "approval"][-1] \
        == ("denied", "not on a Friday")
    # The deployer's agent never ran it.
    assert [r["state"] for r in records if r["event"] == "task_state"] == [
        "TASK_STATE_SUBMITTED", "TASK_STATE_AUTH_REQUIRED", "TASK_STATE_REJECTED"]


def test_approve_timeout_rejects_a_call_nobody_decided(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    project = approval_project(tmp_path, timeout="2s")
    code, out, err = run_task(project, launched, json.dumps({"to": "deployer", "calls": 1}))
    assert code == 0, err
    [result] = json.loads(answer(out))
    assert "No approval within 2 s (approve_timeout" in result, result
    records = member_traces(paths.records_root())["deployer"]
    assert [r["decision"] for r in records if r["event"] == "approval"] == [
        "waiting", "timed_out"]


#: The entry member of the lockout: hands its task's ``plan`` to the member ``via``.
RELAY_AGENT = """
import json

async def run(task):
    plan = json.loads(task.text)
    return await (await task.call_member(plan["via"], json.dumps(plan["plan"])))
"""

#: Offers ``calls`` calls to ``to`` one after another, each once its door held it or
#: answered busy, and answers with how each was placed (``held`` or ``offering``: told
#: busy). With one turn (``inference.max_turns: 1``) its task ends without waiting for
#: the answers: the held calls outlive it, the busy ones stop with it.
FLOOD_AGENT = """
import json

async def run(task):
    plan = json.loads(task.text)
    handles = [await task.call_member(plan["to"], f"flood {n}")
               for n in range(plan["calls"])]
    return json.dumps([handle.state for handle in handles])
"""


def callers(rows: list[dict[str, object]]) -> list[str]:
    return sorted(str(row["caller"]) for row in rows)


def test_one_caller_filling_its_approval_share_never_locks_another_out(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    """Issue 52: member ``a`` calls ``c`` along its ``approve`` edge to fill ``c``'s
    waiting room. It holds its share (``approve_queue: 2``) and no more: its third call
    is told busy. ``b``'s call along its own ``approve`` edge still waits, and runs once
    approved with ``mur approve``, while ``a``'s two calls go on waiting."""
    project = simple_project(tmp_path, ["boss", "a", "b", "c"], entry="boss",
                             reachability={"boss": ["a", "b"], "a": ["c"], "b": ["c"]},
                             agents={"boss": RELAY_AGENT, "a": FLOOD_AGENT,
                                     "b": BOSS_AGENT},
                             manifests={"a": "inference: {max_turns: 1}"})
    version_2(project, rules="reachability:\n  - {from: boss, to: [a, b]}\n"
                             "  - {from: a, to: [c], approve: true, approve_queue: 2}\n"
                             "  - {from: b, to: [c], approve: true}\n")
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    process = start_launcher(project, "--json", env=env)
    launched.append(process)
    formation_id = read_formation_line(process)["formation_id"]
    flood = mur("send", formation_id, json.dumps({"via": "a", "plan": {"to": "c", "calls": 3}}),
                env=env, timeout=120)
    assert flood.returncode == 0, flood.stderr
    assert '["held", "held", "offering"]' in flood.stdout, flood.stdout
    assert callers(waiting(formation_id, env)) == ["a", "a"]
    legitimate = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "send", formation_id,
         json.dumps({"via": "b", "plan": {"to": "c", "calls": 1}})],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        process_group=0)
    launched.append(legitimate)
    rows = waiting(formation_id, env, until=lambda rows: "b" in callers(rows))
    assert callers(rows) == ["a", "a", "b"], rows
    [row] = [row for row in rows if row["caller"] == "b"]
    assert (row["member"], row["text"]) == ("c", "call 0")
    task_id = str(row["taskId"])
    approved = mur("approve", formation_id, "c", task_id, env=env)
    assert approved.returncode == 0, approved.stderr
    out, err = legitimate.communicate(timeout=60)
    assert legitimate.returncode == 0, err.decode()
    assert "c: call 0" in out.decode(), out.decode()
    records = member_traces(paths.records_root())["c"]
    assert [(r["caller"], r["decision"]) for r in records if r["event"] == "approval"
            and r["task_id"] == task_id] == [("b", "waiting"), ("b", "approved")]
    assert callers(waiting(formation_id, env)) == ["a", "a"]
    stopped = mur("stop", formation_id, env=env)
    assert stopped.returncode == 0, stopped.stderr
    process.wait(timeout=60)


# --------------------------------------------------------------------------- tokens

def test_a_model_members_limits_tokens_ends_its_tasks_once_spent(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    from tests.support.fake_openai import FakeOpenAI, text
    from tests.support.model_members import FAKE_KEY, KEY_ENV, write_model_capsule

    with FakeOpenAI(lambda body, seen: text("summed")) as fake:   # 10 + 5 tokens each
        project = tmp_path / "project"
        project.mkdir()
        install_capsule(project, write_capsule(tmp_path, "boss", BOSS_AGENT,
                                               allow_localhost=True))
        install_capsule(project, write_model_capsule(tmp_path / "src", "worker",
                                                     fake.base_url, accept_peers=True))
        write_roster(project, [("boss", True), ("worker", False)], {"boss": ["worker"]})
        version_2(project, members={"worker": "{tokens: 20}"})
        process = start_launcher(project, "--json", "--task",
                                 json.dumps({"to": "worker", "calls": 3}),
                                 env=launcher_env(**{KEY_ENV: FAKE_KEY}))
        launched.append(process)
        code, out, err = finish(process)
    assert code == 0, err
    first, second, third = json.loads(out.splitlines()[1])
    assert first == "summed"
    # The second request passed the limit (30 > 20); the third was never sent.
    for failed in (second, third):
        assert "E-RUN-066" in failed and "limits.tokens (20)" in failed, failed
    assert len(fake.requests) == 2
    records = member_traces(paths.records_root())["worker"]
    assert [(r["limit"], r["spent"]) for r in records if r["event"] == "limit_reached"] == [
        ("member.tokens", 30), ("member.tokens", 30)]
