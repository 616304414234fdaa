"""``make bench``'s summary (loadtests/summary.py): every results table's goals read and
judged, goals in prose or for information left out, and the count of goals that hold."""

from __future__ import annotations

from types import ModuleType

from tests.support.scripts import ROOT, load_script


def summary_module() -> ModuleType:
    return load_script("loadtests/summary.py", "bench_summary")


RESULTS = """
# bench

| ratio | value | goal |
|---|---:|---|
| auth_vs_no_auth_GetTask | 0.864 | >= 0.95 |
| chain_vs_no_chain | 0.9 | (what the chain costs) |
| door_vs_sdk | 4.88 | >= 3 |

| measure | per second | ratio | goal |
|---|---:|---:|---|
| cached verify | 8,222,146 | | >= 1,000,000/s |

| goal, isolation on | value | goal |
|---|---:|---|
| 30 members to the formation line (s) | 1.62 | < 1.5 |
| p99 (ms) | 0.4 | <= 1 ms (met) |
"""


def test_each_goal_is_read_and_judged() -> None:
    summary = summary_module()
    rows = summary.goal_rows("bench", RESULTS)
    assert [(row.measure, row.value, row.goal, row.holds) for row in rows] == [
        ("auth_vs_no_auth_GetTask", 0.864, ">= 0.95", False),
        ("door_vs_sdk", 4.88, ">= 3", True),
        ("cached verify", 8222146.0, ">= 1,000,000", True),
        ("30 members to the formation line (s)", 1.62, "< 1.5", False),
        ("p99 (ms)", 0.4, "<= 1", True)]
    text = summary.render(rows)
    assert text.endswith("3 of 5 goals hold.\n")
    assert "| bench | auth_vs_no_auth_GetTask | 0.864 | >= 0.95 | **no** |" in text


def test_the_committed_results_have_goals_to_read() -> None:
    summary = summary_module()
    sources = {row.source for path in sorted((ROOT / "loadtests" / "results").glob("*.md"))
               for row in summary.goal_rows(path.stem, path.read_text())}
    assert {"bench_door", "bench_gateway", "bench_launch", "bench_proxy",
            "bench_tokens"} <= sources
