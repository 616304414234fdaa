"""``mur graph`` (docs/graph.md): the roster as SVG, DOT and Mermaid, the SVG drawn in
headless Chromium with every member's name on it, and a formation that ran with its
tasks per member and calls per edge."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from launcher.ids import new_formation_id
from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

BROWSER = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                if (path := shutil.which(name))), None)
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return simple_project(tmp_path, ["planner", "coder", "reviewer", "loner"],
                          entry="planner", reachability={"planner": ["coder", "reviewer"]},
                          agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT,
                                  "reviewer": REVIEWER_AGENT})


def graph(project: Path, *args: str) -> str:
    done = mur("graph", "--project", str(project), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_roster_as_dot_and_mermaid(project: Path) -> None:
    dot = graph(project, "--format", "dot")
    assert '"planner" [label="planner (entry)", style=bold];' in dot
    assert '"planner" -> "coder";' in dot and '"planner" -> "reviewer";' in dot
    assert '"loner" [label="loner"];' in dot and "loner\" ->" not in dot
    mermaid = graph(project, "--format", "mermaid")
    assert mermaid.startswith("flowchart TD\n")
    assert '  m0["planner (entry)"]' in mermaid and "  m0 --> m1" in mermaid


def test_the_roster_as_svg_names_every_member_and_edge(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "roster.svg"
    assert graph(project, "-o", str(out)) == ""
    root = ElementTree.fromstring(out.read_text())  # noqa: S314 - mur's own output
    names = [g.get("data-name") for g in root.iter(f"{SVG}g")]
    assert names == ["planner", "coder", "reviewer", "loner"]
    edges = {(line.get("data-from"), line.get("data-to")) for line in root.iter(f"{SVG}line")}
    assert edges == {("planner", "coder"), ("planner", "reviewer")}


PAGE = """<!doctype html><html><body>{svg}<pre id="out"></pre><script>
const drawn = {{}};
for (const group of document.querySelectorAll("g.member")) {{
  const text = group.querySelector("text");
  const box = text.getBBox();
  drawn[group.dataset.name] = {{text: text.textContent, width: box.width, height: box.height}};
}}
document.getElementById("out").textContent = JSON.stringify(drawn);
</script></body></html>"""


@pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH (Debian: apt-get install "
                                            "chromium); .ci/run installs it")
def test_chromium_draws_every_members_name(project: Path, tmp_path: Path) -> None:
    assert BROWSER is not None
    page = tmp_path / "graph.html"
    page.write_text(PAGE.format(svg=graph(project)))
    with tempfile.TemporaryDirectory(prefix="murmur-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        argv = [BROWSER, "--headless=new", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--dump-dom",
                page.as_uri()]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            dom, _ = process.communicate(timeout=90)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = dom.decode()
    report = json.loads(text[text.index('<pre id="out">') + 14:text.index("</pre>")])
    assert set(report) == {"planner", "coder", "reviewer", "loner"}
    for name, drawn in report.items():
        assert drawn["text"].startswith(name)
        assert drawn["width"] > 5 * len(name) and drawn["height"] > 5, (name, drawn)


def test_a_formation_that_ran_with_its_tasks_and_calls(project: Path,
                                                       murmur_home: Path) -> None:
    process = start_launcher(project, "--json", "--task", "ship it",
                             env=launcher_env(MURMUR_HOME=str(murmur_home)))
    line = read_formation_line(process, timeout=90)
    _, err = process.communicate(timeout=90)
    assert process.returncode == 0, err.decode()
    done = mur("graph", line["formation_id"], "--format", "dot",
               env=launcher_env(MURMUR_HOME=str(murmur_home)))
    assert done.returncode == 0, done.stderr
    dot = done.stdout
    assert '"planner" [label="planner (entry) · 1 task", style=bold];' in dot
    assert '"coder" [label="coder · 1 task"];' in dot
    assert '"loner" [label="loner · 0 tasks"];' in dot
    assert '"planner" -> "coder" [label="1 call"];' in dot
    assert '"planner" -> "reviewer" [label="1 call"];' in dot
    missing = mur("graph", new_formation_id(), env=launcher_env(MURMUR_HOME=str(murmur_home)))
    assert missing.returncode == 1 and "no trace of formation" in missing.stderr
