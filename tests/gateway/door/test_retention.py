"""gateway/door/retention.py: the ended tasks a door keeps, the oldest forgotten first;
one implementation for a local door and a relay."""

from __future__ import annotations

from gateway.door.retention import FinishedTasks


def keeper(max_count: int, max_bytes: int) -> tuple[FinishedTasks, list[str]]:
    forgotten: list[str] = []
    return FinishedTasks(max_count, max_bytes, forgotten.append), forgotten


def test_past_the_count_the_oldest_is_forgotten_first() -> None:
    finished, forgotten = keeper(2, 10_000)
    for task_id in ("a", "b", "c", "d"):
        finished.remember(task_id, 10)
    assert forgotten == ["a", "b"]
    assert "c" in finished and "d" in finished and "a" not in finished
    assert finished.bytes == 20


def test_past_the_byte_budget_the_oldest_go_but_the_newest_stays_alone() -> None:
    finished, forgotten = keeper(100, 50)
    finished.remember("a", 30)
    finished.remember("b", 30)
    assert forgotten == ["a"]
    finished.remember("huge", 500)
    assert forgotten == ["a", "b"], "the task that just ended stays, over budget alone"
    assert "huge" in finished and finished.bytes == 500
    finished.remember("next", 1)
    assert forgotten == ["a", "b", "huge"]


def test_remembering_twice_counts_once() -> None:
    finished, _ = keeper(10, 1000)
    finished.remember("a", 40)
    finished.remember("a", 40)
    assert finished.bytes == 40


def test_a_kept_task_weighed_again_moves_the_total_and_the_bound() -> None:
    finished, forgotten = keeper(10, 100)
    finished.remember("a", 10)
    finished.remember("b", 10)
    finished.reweigh("a", 95)
    assert finished.bytes == 105
    finished.reweigh("unknown", 1_000)
    assert finished.bytes == 105, "a task not kept is not counted"
    finished.remember("c", 1)
    assert forgotten == ["a"]
    assert finished.bytes == 11
