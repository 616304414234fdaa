"""The sealed record (docs/audit.md): a real formation's traces are hash-chained and
sealed by the launcher, ``mur audit`` reads them clean, and each way of changing the
record afterwards is found with its file and line. Each way of cutting its tail is
found too: the traces cut back to a seal with the later seals removed, ``seals.jsonl``
removed, the key removed from ``formation.json``; the head the launcher printed as it
ended (and kept in its running record while it ran) is checked by ``--expect``. A
launcher killed with SIGKILL leaves a sealed part that verifies, a tail reported
unsealed, and no final seal: incomplete, not tampered."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.home.formations import formation_dir
from launcher.home.paths import running_dir
from launcher.home.seals import SEALS_FILE, canonical
from launcher.home.trace import find_formation_traces
from tests.support.formation import (
    PLANNER_AGENT,
    kill_group_quietly,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)
from tests.support.member import wait_for

pytestmark = pytest.mark.integration

#: The coder takes 11 s, so the launcher seals once while the formation runs (every
#: 10 s) and once after: two seals, one of which a test removes.
AGENTS = {"planner": PLANNER_AGENT, "coder": (
    "import asyncio\nasync def run(task):\n    await asyncio.sleep(11)\n"
    "    return f'code for <{task.text}>'\n")}
REACH = {"planner": ["coder", "reviewer"]}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One formation that ran to its end, its MURMUR_HOME copied fresh for each test."""
    root = tmp_path_factory.mktemp("sealed")
    home = root / "home"
    env = {**os.environ, "MURMUR_HOME": str(home), "PYTHONPATH": str(Path.cwd())}
    previous = os.environ.get("MURMUR_HOME")
    os.environ["MURMUR_HOME"] = str(home)
    try:
        project = simple_project(root, ["planner", "coder", "reviewer"], entry="planner",
                                 reachability=REACH, agents=AGENTS)
    finally:
        if previous is None:
            os.environ.pop("MURMUR_HOME", None)
        else:
            os.environ["MURMUR_HOME"] = previous
    process = start_launcher(project, "--json", "--task", "the report", env=env)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    return {"home": home, "formation": json.loads(out.decode().splitlines()[0])[
        "formation_id"], "stderr": err.decode()}


@pytest.fixture
def home(ran: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import shutil

    copy = tmp_path / "home"
    shutil.copytree(ran["home"], copy, symlinks=True)
    monkeypatch.setenv("MURMUR_HOME", str(copy))
    return copy


def audit(formation_id: str) -> tuple[int, str, dict[str, Any]]:
    shown = mur("audit", formation_id, env={**os.environ})
    report = mur("audit", formation_id, "--json", env={**os.environ})
    return shown.returncode, shown.stdout, json.loads(report.stdout)


def trace_of(formation_id: str, member: str) -> Path:
    return dict(find_formation_traces(formation_id))[member]


def rewrite(path: Path, change: Any) -> None:
    lines = path.read_text().splitlines()
    change(lines)
    path.write_text("\n".join(lines) + "\n")


def tampered(report: dict[str, Any]) -> list[tuple[str, int]]:
    return [(Path(v["trace"]).name, v["line"]) for v in report["violations"]
            if v["event"] == "tampered"]


def head_of(seal_line: str) -> str:
    """A seal's head (docs/audit.md): the SHA-256 of what its signature covers."""
    return hashlib.sha256(canonical(json.loads(seal_line))).hexdigest()


def seal_lines(formation_id: str) -> list[str]:
    return (formation_dir(formation_id) / SEALS_FILE).read_text().splitlines()


def cut_to_first_seal(formation_id: str) -> int:
    """Every member's trace cut back to what seal 1 sealed; the records cut."""
    first = json.loads(seal_lines(formation_id)[0])
    cut = 0
    for member, path in find_formation_traces(formation_id):
        lines = path.read_text().splitlines()
        keep = first["members"][member]["records"]
        cut += len(lines) - keep
        path.write_text("".join(line + "\n" for line in lines[:keep]))
    return cut


def test_a_formation_that_ran_audits_clean_and_sealed(ran: dict[str, Any],
                                                      home: Path) -> None:
    code, shown, report = audit(ran["formation"])
    assert code == 0, shown
    assert report["sealed"] is True and report["seals_read"] >= 1
    assert report["violations"] == [] and report["unsealed"] == []
    assert "; record sealed (" in shown
    marker = json.loads((formation_dir(ran["formation"]) / "formation.json").read_text())
    assert len(marker["public_key"]) == 43             # 32 bytes, unpadded base64url
    seals = (formation_dir(ran["formation"]) / SEALS_FILE).read_text().splitlines()
    last = json.loads(seals[-1])
    assert last["final"] is True and set(last["members"]) == {"planner", "coder",
                                                              "reviewer"}
    # Every record of every trace carries prev.
    for _, path in find_formation_traces(ran["formation"]):
        assert all("prev" in json.loads(line) for line in path.read_text().splitlines())


@pytest.mark.parametrize(("change", "line"), [
    ("edited", 3), ("removed", 3), ("inserted", 3), ("swapped", 3),
])
def test_a_record_changed_after_the_fact_is_found_at_its_line(
        ran: dict[str, Any], home: Path, change: str, line: int) -> None:
    path = trace_of(ran["formation"], "coder")

    def alter(lines: list[str]) -> None:
        if change == "edited":
            record = json.loads(lines[2])
            record["ts"] = "2020-01-01T00:00:00.000000Z"
            lines[2] = json.dumps(record, separators=(",", ":"))
        elif change == "removed":
            del lines[3]
        elif change == "inserted":
            forged = json.loads(lines[2])
            forged["event"] = "a2a_task_received"
            lines.insert(2, json.dumps(forged, separators=(",", ":")))
        else:
            lines[2], lines[3] = lines[3], lines[2]

    rewrite(path, alter)
    code, shown, report = audit(ran["formation"])
    assert code == 1, shown
    assert tampered(report)[0] == ("trace.jsonl", line), report["violations"]
    assert report["violations"][0]["trace"] == str(path)
    assert f"tampered: {path}:{line}: " in shown


def test_a_record_rewritten_with_its_chain_is_found_by_the_seal(
        ran: dict[str, Any], home: Path) -> None:
    """A forger who recomputes every prev after the change keeps the chain whole: the
    seal's head no longer matches."""
    from launcher.home.trace_chain import link, seed

    path = trace_of(ran["formation"], "reviewer")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[1]["ts"] = "2020-01-01T00:00:00.000000Z"
    prev = seed(records[0]["session_id"])
    lines = []
    for record in records:
        record["prev"] = prev
        line = json.dumps(record, separators=(",", ":"))
        lines.append(line)
        prev = link(line.encode())
    path.write_text("\n".join(lines) + "\n")
    code, shown, report = audit(ran["formation"])
    assert code == 1
    # Found at the first sealed record at or after the change (line 2): the last record
    # the earliest seal covering it sealed.
    [(name, line)] = tampered(report)
    assert name == "trace.jsonl" and 2 <= line <= len(records)
    assert "is not the one seal" in report["violations"][0]["problem"]


def test_a_whole_sessions_trace_replaced_is_found(ran: dict[str, Any], home: Path) -> None:
    coder, reviewer = trace_of(ran["formation"], "coder"), trace_of(ran["formation"],
                                                                   "reviewer")
    text = reviewer.read_text().replace('"formation_member":"reviewer"',
                                        '"formation_member":"coder"')
    coder.write_text(text)
    code, shown, report = audit(ran["formation"])
    assert code == 1
    assert ("trace.jsonl", 1) in tampered(report), report["violations"]
    assert any(v["trace"] == str(coder) for v in report["violations"])


@pytest.mark.parametrize("change", ["edited", "removed"])
def test_a_seal_changed_is_found_at_its_line(ran: dict[str, Any], home: Path,
                                             change: str) -> None:
    seals = formation_dir(ran["formation"]) / SEALS_FILE
    lines = seals.read_text().splitlines()
    assert len(lines) >= 2, "the formation ran past its first periodic seal"
    if change == "edited":
        seal = json.loads(lines[-1])
        seal["members"]["coder"]["records"] -= 1
        lines[-1] = json.dumps(seal, separators=(",", ":"))
        expected = len(lines)
    else:
        del lines[0]
        expected = 1
    seals.write_text("\n".join(lines) + "\n")
    code, shown, report = audit(ran["formation"])
    assert code == 1, shown
    assert (SEALS_FILE, expected) in tampered(report), report["violations"]


def test_a_launcher_killed_leaves_a_sealed_part_and_an_unsealed_tail(
        tmp_path: Path, murmur_home: Path) -> None:
    """SIGKILL to the launcher after its first periodic seal: the sealed part verifies;
    what the members wrote after it is reported unsealed; the record has no final seal,
    and the audit fails, saying so (a cut tail leaves the same record)."""
    slow = ("import asyncio\nasync def run(task):\n"
            "    await asyncio.sleep(float(task.text))\n    return 'slept'\n")
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             agents={"planner": slow})
    process = start_launcher(project, "--json", "--task", "14")
    try:
        formation_id = read_formation_line(process)["formation_id"]
        seals = formation_dir(formation_id) / SEALS_FILE
        deadline = time.monotonic() + 30
        while not (seals.exists() and seals.read_text().strip()):
            assert time.monotonic() < deadline, "no periodic seal within 30 s"
            time.sleep(0.2)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        kill_group_quietly(process)
        subprocess.run(["pkill", "-KILL", "-f", formation_id], check=False)
    time.sleep(1.0)
    code, shown, report = audit(formation_id)
    assert code == 1, shown
    assert [(v["event"], v["trace"]) for v in report["violations"]] == [
        ("incomplete", str(seals))], report["violations"]
    assert "the record has no final seal" in report["violations"][0]["problem"]
    assert report["unsealed"], shown
    assert "unsealed: " in shown and "after the last seal" in shown


# --- a cut tail, and the head the launcher printed ---------------------------------------

def test_traces_cut_back_to_the_first_seal_with_the_later_seals_removed_fail_the_audit(
        ran: dict[str, Any], home: Path) -> None:
    """Every trace cut back to what seal 1 sealed, every later seal removed, the final
    one included: each part left verifies on its own; the missing final seal fails it."""
    formation_id = ran["formation"]
    calls = audit(formation_id)[2]["calls"]
    seals = formation_dir(formation_id) / SEALS_FILE
    assert len(seal_lines(formation_id)) >= 2, "the formation ran past its first seal"
    assert cut_to_first_seal(formation_id) > 0
    seals.write_text(seal_lines(formation_id)[0] + "\n")
    code, shown, report = audit(formation_id)
    assert report["calls"] < calls, report         # the cut took calls with it
    assert code == 1, shown
    assert f"incomplete: {seals}:1: the record has no final seal: it ends at seal 1 " \
        in shown
    assert [(v["event"], v["trace"], v["line"]) for v in report["violations"]] == [
        ("incomplete", str(seals), 1)]
    assert report["head"] is None and report["seals_read"] == 1


def test_the_key_removed_the_seals_removed_and_the_traces_cut_fail_the_audit(
        ran: dict[str, Any], home: Path) -> None:
    """Without formation.json's key, the seals cannot be checked: the chained traces
    say the launcher sealed, so the missing key fails the audit, naming formation.json."""
    formation_id = ran["formation"]
    marker = formation_dir(formation_id) / "formation.json"
    data = json.loads(marker.read_text())
    del data["public_key"]
    marker.write_text(json.dumps(data))
    cut_to_first_seal(formation_id)
    (formation_dir(formation_id) / SEALS_FILE).unlink()
    code, shown, report = audit(formation_id)
    assert code == 1, shown
    assert f"tampered: {marker}: formation.json names no public_key, yet its traces are " \
        "hash-chained (" in shown
    assert [(v["event"], v["trace"], v["line"]) for v in report["violations"]] == [
        ("tampered", str(marker), 0)]
    assert report["sealed"] is False


def test_seals_jsonl_removed_alone_fails_the_audit(ran: dict[str, Any], home: Path) -> None:
    formation_id = ran["formation"]
    seals = formation_dir(formation_id) / SEALS_FILE
    seals.unlink()
    code, shown, report = audit(formation_id)
    assert code == 1, shown
    assert f"incomplete: {seals}: seals.jsonl is gone" in shown
    assert [(v["event"], v["trace"]) for v in report["violations"]] == [
        ("incomplete", str(seals))]


def test_a_record_added_after_the_final_seal_with_its_chain_fails_the_audit(
        ran: dict[str, Any], home: Path) -> None:
    """A record appended with a correct prev keeps the chain whole; the final seal was
    written after every member stopped, so nothing of theirs can follow it."""
    from launcher.home.trace_chain import link

    path = trace_of(ran["formation"], "reviewer")
    last = path.read_text().splitlines()[-1]
    forged = {**json.loads(last), "event": "member_call", "callee": "coder",
              "task_id": "forged", "prev": link(last.encode())}
    with path.open("a") as out:
        out.write(json.dumps(forged, separators=(",", ":")) + "\n")
    code, shown, report = audit(ran["formation"])
    assert code == 1, shown
    line = len(path.read_text().splitlines())
    assert ("trace.jsonl", line) in tampered(report), report["violations"]
    assert "follow the final seal" in shown and report["unsealed"] == []


def test_expect_checks_the_head_the_launcher_printed_last(ran: dict[str, Any],
                                                          home: Path) -> None:
    """With --json the launcher's last stderr line is {"event": "sealed", "head"}: the
    final seal's head, short. --expect passes with it (or the full head), fails with
    another."""
    formation_id = ran["formation"]
    said = json.loads(ran["stderr"].splitlines()[-1])
    final = seal_lines(formation_id)[-1]
    head = head_of(final)
    assert said == {"event": "sealed", "formation_id": formation_id,
                    "head": head[:12], "seals": json.loads(final)["seq"]}
    for given in (head[:12], head, head[:12].upper()):
        done = mur("audit", formation_id, "--expect", given, env={**os.environ})
        assert done.returncode == 0, done.stdout
        assert f"final head {head[:12]})" in done.stdout
    wrong = ("0" if head[0] != "0" else "1") + head[1:12]
    done = mur("audit", formation_id, "--expect", wrong, env={**os.environ})
    assert done.returncode == 1, done.stdout
    assert f"the final seal's head is {head[:12]}, not the {wrong} expected" in done.stdout
    report = json.loads(mur("audit", formation_id, "--expect", wrong, "--json",
                            env={**os.environ}).stdout)
    assert (report["head"], report["expected_head"]) == (head, wrong)
    assert [v["event"] for v in report["violations"]] == ["unexpected_head"]
    assert mur("audit", formation_id, "--expect", head[:6],
               env={**os.environ}).returncode == 2


def test_the_running_record_holds_the_latest_head_and_the_last_line_the_final(
        tmp_path: Path, murmur_home: Path) -> None:
    """While a formation runs, running/<id>.json (and mur ps --json) holds the head of
    the latest seal; as it ends, the launcher's last line (text) names the final one."""
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]})
    process = start_launcher(project)      # no --task: it serves until stopped
    try:
        formation_id = wait_for(lambda: next(
            (path.stem for path in running_dir().glob("frm_*.json")), None), timeout=60)
        record = running_dir() / f"{formation_id}.json"
        # The first periodic seal comes SEAL_INTERVAL (10 s) after the launch.
        head = wait_for(lambda: json.loads(record.read_text()).get("seal_head"),
                        timeout=60)
        assert head == head_of(seal_lines(formation_id)[-1])
        [row] = [f for f in json.loads(mur("ps", "--json").stdout)["formations"]
                 if f["formation_id"] == formation_id]
        assert row["seal_head"] in (head, head_of(seal_lines(formation_id)[-1]))
        assert mur("stop", formation_id).returncode == 0
        _, err = process.communicate(timeout=120)
    finally:
        kill_group_quietly(process)
    last = err.decode().splitlines()[-1]
    final = seal_lines(formation_id)[-1]
    assert json.loads(final)["final"] is True
    short = head_of(final)[:12]
    assert last.startswith(f"[mur run] sealed: head {short} ("), err.decode()
    assert last.split("head ", 1)[1].split()[0] == short
    done = mur("audit", formation_id, "--expect", short)
    assert done.returncode == 0, done.stdout
