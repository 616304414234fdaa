"""The load test users run (docs/loadtests.md): a short real run of the locustfile's two
scenarios against a real formation (``run_loadtest.py``, locust as a subprocess), its
summary and plots; and the benchmark plots. Skips, saying why, where the ``loadtest``
extra is missing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.formation import REPO

pytestmark = pytest.mark.integration

# Found, never imported here: importing locust monkey-patches the test process (gevent).
HAS_LOCUST = importlib.util.find_spec("locust") is not None
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not (HAS_LOCUST and HAS_MATPLOTLIB),
                    reason="the loadtest extra (locust, matplotlib) is not installed; "
                           "make test installs it")
def test_a_short_load_test_runs_both_scenarios_against_a_real_formation(
        tmp_path: Path, murmur_home: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "loadtests" / "run_loadtest.py"), "--users", "1,2",
         "--seconds", "3", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "loadtest.json").read_text())["sweeps"]
    door, tokens = summary["door"], summary["tokens"]
    assert door["users"] == tokens["users"] == [1, 2]
    assert set(door["requests"]) == {"GetTask", "SendMessage", "SendStreamingMessage"}
    assert set(tokens["requests"]) == {"token: first seen", "token: cached",
                                       "token: forged (401)"}
    for sweep in (door, tokens):
        for name, series in sweep["requests"].items():
            assert all(count > 0 for count in series["requests"]), name
            assert series["failures"] == [0, 0], (name, series)
    first_seen = tokens["requests"]["token: first seen"]["requests"]
    assert sum(first_seen) > sum(tokens["requests"]["token: cached"]["requests"])
    for name in ("loadtest_throughput.png", "loadtest_latency.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)
    assert "| door | GetTask | 1 |" in (tmp_path / "loadtest.md").read_text()


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the loadtest extra) is not "
                                               "installed; make test installs it")
def test_every_benchmark_with_figures_gets_a_plot(tmp_path: Path) -> None:
    (tmp_path / "bench_x.json").write_text(json.dumps(
        {"ratios": {"a_vs_b": 1.2, "goal_ratio": 0.9}, "in_process": {"c": {"ratio": 0.8}}}))
    (tmp_path / "bench_y.json").write_text(json.dumps(
        {"summary": {"hop | GetTask": {"proxy": {"median_calls_per_s": 410.0}}}}))
    (tmp_path / "bench_z.json").write_text(json.dumps({"nothing": "to draw"}))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from plots import plot_benchmarks; "
            "from pathlib import Path; print(*plot_benchmarks(Path(sys.argv[2])))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "loadtests"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(Path(path).name for path in done.stdout.split()) == ["bench_x.png",
                                                                       "bench_y.png"]
    assert (tmp_path / "bench_x.png").read_bytes().startswith(PNG)
