"""GET /metrics on a real formation's doors, scraped with each member's operator token:
the caller's door counts its proxy's calls by callee and outcome, the callee's door the
request and its task by state."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.formation import (
    CODER_AGENT,
    formation_members,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

# Calls, then waits (bounded) so the test can scrape both doors while the formation runs.
PLANNER = """
import asyncio

async def run(task):
    answer = await (await task.call_member("coder", task.text))
    await asyncio.sleep(8)
    return answer
"""


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _scrape(row: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    token = (Path(row["records_dir"]) / "operator.token").read_text().strip()
    answer = httpx.get(row["door_url"] + "/metrics",
                       headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert token not in answer.text
    return _samples(answer.text)


def test_both_doors_of_a_call_show_it(tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             agents={"planner": PLANNER, "coder": CODER_AGENT})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    launcher = start_launcher(project, "--json", "--task", "ship it", env=env)
    try:
        formation_id = read_formation_line(launcher, timeout=90)["formation_id"]
        deadline = time.monotonic() + 60
        while True:
            members = formation_members(formation_id, env)
            coder = members.get("coder")
            if coder and coder["tasks"]["live"] == 0 and Path(
                    coder["records_dir"], "trace.jsonl").read_text().count(
                    "TASK_STATE_COMPLETED"):
                break
            assert time.monotonic() < deadline, "the coder never finished its task"
            time.sleep(0.2)
        planner, coder = _scrape(members["planner"]), _scrape(members["coder"])
    finally:
        kill_group_quietly(launcher)
        launcher.wait(timeout=60)
    assert planner[("murmur_proxy_calls_total",
                    (("callee", "coder"), ("outcome", "ok")))] >= 1
    assert planner[("murmur_proxy_call_duration_seconds_count", (("callee", "coder"),))] >= 1
    assert planner[("murmur_door_tasks", (("state", "TASK_STATE_WORKING"),))] == 1
    assert coder[("murmur_door_requests_total",
                  (("method", "SendMessage"), ("status", "200")))] == 1
    assert coder[("murmur_door_tasks", (("state", "TASK_STATE_COMPLETED"),))] == 1
    assert coder[("murmur_door_token_verifications_total", (("result", "verified"),))] >= 1
