"""bench_door's paired measure (loadtests/bench_door.py, ``_turn_costs``): a turn's
server CPU runs to the start of the next turn on the same server, so a writer's work
done while the other row is loaded is still counted with the turn that left it, and two
rows on one server (two bindings) never count each other's turns."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def bench_door() -> ModuleType:
    return load_script("loadtests/bench_door.py", "bench_door_turns")


def turn(cpu_at_start: float, done: int = 10) -> dict[str, float]:
    return {"rps": 100.0, "done": done, "errors": 0, "cpu_at_start": cpu_at_start}


def test_a_turn_counts_the_cpu_up_to_its_servers_next_turn(
        bench_door: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_door, "server_cpu_ns", lambda pid: {1: 9_000, 2: 7_000}[pid])
    played = [(0, turn(1_000)), (1, turn(2_000)), (1, turn(4_000)), (0, turn(5_000))]
    measured: Any = bench_door._turn_costs(played, [1, 2])
    # Server 1: 1000 -> 5000 (its next turn), then 5000 -> 9000 (now); 10 requests each.
    assert [cost["cpu_us"] for cost in measured[0]] == [0.4, 0.4]
    # Server 2: 2000 -> 4000, then 4000 -> 7000.
    assert [cost["cpu_us"] for cost in measured[1]] == [0.2, 0.3]


def test_two_rows_on_one_server_never_count_each_others_turns(
        bench_door: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_door, "server_cpu_ns", lambda pid: 8_000)
    played = [(0, turn(1_000)), (1, turn(2_000)), (1, turn(5_000)), (0, turn(6_000))]
    measured: Any = bench_door._turn_costs(played, [1, 1])
    assert [cost["cpu_us"] for cost in measured[0]] == [0.1, 0.2]
    assert [cost["cpu_us"] for cost in measured[1]] == [0.3, 0.1]


def test_the_servers_cpu_is_read_from_the_scheduler_to_the_nanosecond(
        bench_door: ModuleType) -> None:
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        pytest.skip("no /proc here: the bench reads a server's CPU from it")
    time.sleep(0.01)      # switched out: the scheduler's count is brought up to date
    before = bench_door.server_cpu_ns(os.getpid())
    busy_until = time.process_time() + 0.05
    while time.process_time() < busy_until:   # 50 ms of this process's own CPU
        pass
    time.sleep(0.01)
    after = bench_door.server_cpu_ns(os.getpid())
    assert isinstance(before, int) and after - before >= 40_000_000   # ns
