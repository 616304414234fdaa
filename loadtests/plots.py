"""PNG plots of the load test and the benchmarks, under ``loadtests/results/`` (matplotlib,
the ``loadtest`` extra; without it each function says so and draws nothing).

* :func:`plot_loadtest`: ``loadtest_throughput.png`` and ``loadtest_latency.png``, one
  panel per sweep, requests/s and p50/p95 by number of users, one line per request;
* :func:`plot_benchmarks` (``python loadtests/plots.py``, run by ``make bench``): for each
  ``bench_*.json`` with ratios, ``bench_*.png``, a bar per ratio with the 1.0 line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")        # files only: no display here
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots: matplotlib is not installed (pip install -e '.[loadtest]'); no PNG "
              "written", file=sys.stderr)
        return None
    return plt


def plot_loadtest(summary: dict[str, Any], out: Path = RESULTS) -> list[Path]:
    """The load test's two figures; the paths written."""
    plt = _pyplot()
    if plt is None or not summary:
        return []
    written = []
    for figure_name, keys, label in (
            ("loadtest_throughput.png", ("rps",), "requests/s"),
            ("loadtest_latency.png", ("p50_ms", "p95_ms"), "latency (ms)")):
        figure, axes = plt.subplots(1, len(summary), figsize=(6.5 * len(summary), 4.5),
                                    squeeze=False)
        for axis, (sweep, data) in zip(axes[0], summary.items(), strict=True):
            for name, series in data["requests"].items():
                for key in keys:
                    style = "--" if key == "p95_ms" else "-"
                    suffix = f" {key.removesuffix('_ms')}" if len(keys) > 1 else ""
                    axis.plot(data["users"], series[key], style, marker="o",
                              label=f"{name}{suffix}")
            axis.set_title(f"{sweep}: {label} by concurrency")
            axis.set_xlabel("users (concurrent, no wait)")
            axis.set_ylabel(label)
            axis.set_xscale("log", base=2)
            axis.set_xticks(data["users"], [str(users) for users in data["users"]])
            axis.grid(True, alpha=0.3)
            axis.legend(fontsize=7)
        figure.tight_layout()
        path = out / figure_name
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def plot_benchmarks(results: Path = RESULTS) -> list[Path]:
    """A bar chart of each benchmark's figures (its ratios; the proxy benchmarks' calls
    per second); the paths written."""
    plt = _pyplot()
    if plt is None:
        return []
    written = []
    for source in sorted(results.glob("bench_*.json")):
        figures, unit = _figures(source)
        if not figures:
            continue
        figure, axis = plt.subplots(figsize=(9, 0.3 * len(figures) + 1.3))
        names = list(figures)
        axis.barh(names, [figures[name] for name in names], color="#4a7fb5")
        if unit == "ratio":
            axis.axvline(1.0, color="#b03030", linewidth=1)
        axis.invert_yaxis()
        axis.tick_params(axis="y", labelsize=7)
        axis.set_xlabel("ratio (1.0: as fast as what it is compared with)" if unit == "ratio"
                        else "calls/s (median of the runs)")
        axis.set_title(source.stem)
        figure.tight_layout()
        path = source.with_suffix(".png")
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _figures(source: Path) -> tuple[dict[str, float], str]:
    """Every number of a results file whose name says it is a ratio (goals left out),
    by its dotted path; else every median calls/s."""
    try:
        document = json.loads(source.read_text())
    except (OSError, ValueError):
        return {}, ""
    leaves = dict(_leaves(document, ""))
    ratios = {path: value for path, value in leaves.items()
              if "ratio" in path and "goal" not in path
              and not path.endswith("_rounds")}
    if ratios:
        return ratios, "ratio"
    rates = {path.removesuffix(".median_calls_per_s"): value for path, value in leaves.items()
             if path.startswith("summary.") and path.endswith(".median_calls_per_s")}
    return {path.removeprefix("summary."): value for path, value in rates.items()}, "rate"


def _leaves(value: Any, path: str) -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items()
                for leaf in _leaves(item, f"{path}.{key}" if path else str(key))]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [(path, float(value))]
    return []


if __name__ == "__main__":
    for path in plot_benchmarks():
        print(f"plot: {path}")
