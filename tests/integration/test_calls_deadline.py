"""A busy member and the formation's deadline, end to end: ``mur run --roster --task
--deadline`` where the entry member ``a`` keeps ``b`` (``concurrency: 1``,
``queue_depth: 0``) busy with one call and offers it a second: the second call is
offered again until the deadline, then fails with a clear error naming ``b`` and the
state, and nothing keeps running."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launcher.home import paths, running_records
from tests.support.calls import MemberSpec, build_project, plan, who
from tests.support.formation import (
    kill_group_quietly,
    launcher_env,
    member_traces,
    read_formation_line,
    start_launcher,
    wait_gone,
)

pytestmark = pytest.mark.integration

DEADLINE_SECONDS = 7


def test_a_call_refused_busy_until_the_deadline_fails_clearly_and_nothing_keeps_running(
        tmp_path: Path, murmur_home: Path) -> None:
    project = build_project(tmp_path, [
        MemberSpec("a", peer_tasks=False),
        MemberSpec("b", lifecycle="concurrency: 1\nqueue_depth: 0", allow=())],
        entry="a", reachability={"a": ["b"]})
    outcome = project / "outcome.json"  # a's work folder: agent code may write there
    task = plan({"op": "calls", "to": "b", "record": str(outcome), "texts": [
        plan({"op": "sleep", "seconds": 60}), plan(who())]})
    started = time.monotonic()
    process = start_launcher(project, "--json", "--deadline", f"{DEADLINE_SECONDS}s",
                             "--task", json.dumps(task),
                             env=launcher_env(MURMUR_HOME=str(murmur_home)))
    try:
        formation = read_formation_line(process, timeout=DEADLINE_SECONDS)
        _, err = process.communicate(timeout=60)
    finally:
        kill_group_quietly(process)
    elapsed = time.monotonic() - started
    stderr = err.decode()
    assert process.returncode == 1, stderr
    assert "E-RUN-053" in stderr
    assert DEADLINE_SECONDS - 0.5 < elapsed < DEADLINE_SECONDS + 10, elapsed
    # Nothing keeps running: every member is gone, no running record is left.
    assert wait_gone([m["pid"] for m in formation["members"]], 5) < 5
    assert running_records.list_running() == []

    # b took the first call; the second was answered busy and offered again until the
    # deadline, then failed naming the member and the state.
    seen = json.loads(outcome.read_text())
    print(f"outcome of the calls: {seen}")
    assert seen["placed"] == ["held", "offering"], seen
    held, busy = seen["results"]
    assert busy["error"] == {
        "type": "CallFailed", "member": "b", "state": "deadline",
        "message": "call to member 'b' failed: deadline: the member stayed busy until "
                   "the call's deadline"}, busy
    assert held["error"]["member"] == "b", held
    assert held["error"]["state"] in ("deadline", "TASK_STATE_CANCELED"), held

    traces = member_traces(paths.records_root())
    received = [r for r in traces["b"] if r["event"] == "a2a_task_received"]
    assert len(received) == 1, received   # the busy offers never became a task
    # The operator's --task is trusted, and so is the call made for it.
    assert (received[0]["formation_member"], received[0]["trust"]) == ("a", "trusted")
    for name, trace in traces.items():
        events = [r["event"] for r in trace]
        assert "deadline_reached" in events and "formation_ended" not in events, name
        assert trace[-1]["event"] == "session_end", name
        assert trace[-1]["exit_status"] == "deadline_reached", (name, trace[-1])
