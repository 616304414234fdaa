"""Members calling members, end to end: one real ``mur run --roster`` formation of probe
agents (``tests.support.calls.PROBE_AGENT``) serves every test of this module.

The formation: ``a`` (entry; may call ``r``, ``c`` and ``b``, written in that order;
a declared bearer besides the operator token; ``inference.max_turns: 3``), ``b``
(``concurrency: 1``, ``queue_depth: 0``; may call nobody; reaches no host at all), ``c``
(may call ``b``; ``max_turns: 1``) and ``r`` (a fake member whose door answers every
POST with ``307``). Each test hands ``a`` a JSON plan as its task and reads back what
every member on the way saw, as their answers and their traces.

The last test closes the formation (SIGTERM to the launcher during a call), so it stays
last in this file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gateway.proxy.formation import FormationRefused
from launcher.home import running_records
from tests.support.calls import (
    BEARER_ENV,
    REDIRECT_LOG_ENV,
    Formation,
    MemberSpec,
    RecordingServer,
    answer_of,
    bearer_authentication,
    build_project,
    nested,
    plan,
    send_task,
    wait_until,
    who,
    write_redirector,
)
from tests.support.formation import mur, wait_gone

pytestmark = pytest.mark.integration

MEMBERS = [
    MemberSpec("a", authentication=bearer_authentication(), peer_tasks=False, max_turns=3),
    MemberSpec("b", lifecycle="concurrency: 1\nqueue_depth: 0", allow=()),
    MemberSpec("c", max_turns=1),
    MemberSpec("r"),
]
REACH = {"a": ["r", "c", "b"], "c": ["b"]}
#: Who may reach whom: the only ``formation_member`` each door may ever name.
CALLERS = {"a": set(), "b": {"a", "c"}, "c": {"a"}}
BEARER = "calls-" + secrets.token_urlsafe(24)
PEERS_OF_A = ("b=http://b.formation.invalid c=http://c.formation.invalid "
              "r=http://r.formation.invalid")
SEND_B = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
    "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": json.dumps(plan(who()))}]}}}
A2A = ["A2A-Version", "1.0"]


def send_b(url: str, *headers: list[str], follow: bool = False) -> dict[str, Any]:
    """A step: ``task.http`` POSTs a blocking SendMessage (b reports what it saw) to
    ``url``, with ``A2A-Version: 1.0`` unless ``headers`` say otherwise."""
    return {"op": "http", "url": url, "json": SEND_B, "follow": follow,
            "headers": list(headers) or [A2A]}


@pytest.fixture(scope="module")
def formation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Formation]:
    root = tmp_path_factory.mktemp("calls")
    home = root / "home"
    home.mkdir(mode=0o700)
    project = build_project(root, MEMBERS, entry="a", reachability=REACH)
    started = time.monotonic()
    running = Formation.launch(project, home, **{
        BEARER_ENV: BEARER, REDIRECT_LOG_ENV: str(root / "redirects.jsonl"),
        "MURMUR_TEST_MEMBER_ARGV_PREFIX": write_redirector(root)})
    print(f"formation of 4 up in {time.monotonic() - started:.2f}s")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    recording = RecordingServer()
    yield recording
    recording.close()


def as_operator(formation: Formation, *steps: dict[str, Any]) -> dict[str, Any]:
    """Run ``steps`` at ``a`` as a task the operator sent; ``a``'s report."""
    task = send_task(formation.door("a"), formation.operator_token("a"),
                     json.dumps(plan(*steps)))
    return answer_of(task)


def as_client(formation: Formation, *steps: dict[str, Any]) -> dict[str, Any]:
    """Run ``steps`` at ``a`` as a task from its declared bearer credential."""
    task = send_task(formation.door("a"), BEARER, json.dumps(plan(*steps)))
    return answer_of(task)


def received(formation: Formation, name: str, task_id: str) -> dict[str, Any]:
    (found,) = [r for r in formation.received(name) if r["task_id"] == task_id]
    return found


def member_calls(formation: Formation, name: str, task_id: str) -> list[dict[str, Any]]:
    return [r for r in formation.trace(name)
            if r["event"] == "member_call" and r["task_id"] == task_id]


def refused_call(result: dict[str, Any], name: str) -> None:
    """A ``call`` step refused as docs/proxy.md says: the one refusal, nothing opened."""
    error = result["error"]
    assert error["type"] == "CallFailed", result
    assert (error["member"], error["state"]) == (name, "refused"), result
    assert error["message"] == (f"call to member {name!r} failed: refused: "
                                f"{FormationRefused.MESSAGE}"), result
    assert result["new_sockets"] == 0, result


def refused_request(result: dict[str, Any]) -> None:
    """An ``http`` step refused by the proxy before any connection opened."""
    assert result.get("error", {}).get("type") == "FormationRefused", result
    assert result["error"]["message"] == FormationRefused.MESSAGE, result
    assert result["new_sockets"] == 0, result


# --------------------------------------------------------------------------- one operator run


@pytest.fixture(scope="module")
def operator_run(formation: Formation) -> dict[str, Any]:
    """``a`` calls ``b`` and ``c``, and ``c`` calls ``b`` inside ``a``'s call, for a task
    the operator sent with ``mur send``; every member reports what it saw."""
    steps = plan(who(), {"op": "call", "to": "b", "text": plan(who())},
                 {"op": "call", "to": "c", "text": plan(
                     who(), {"op": "call", "to": "b", "text": plan(who())})})
    sent = mur("send", formation.formation_id, json.dumps(steps), env=formation.env)
    assert sent.returncode == 0, sent.stderr
    report: dict[str, Any] = json.loads(sent.stdout)
    return report


def test_every_allowed_call_works_and_each_callee_names_its_caller(
        formation: Formation, operator_run: dict[str, Any]) -> None:
    a_who, a_to_b, a_to_c = operator_run["results"]
    b_report = nested(a_to_b)
    c_report = nested(a_to_c)
    c_who, c_to_b = c_report["results"]
    b_via_c = nested(c_to_b)
    assert (a_who["member"], b_report["member"], c_report["member"], b_via_c["member"]) == \
        ("a", "b", "c", "b")
    # Each callee's door let the call in as the caller's formation credential and named
    # the calling member on a2a_task_received.
    for callee, report, caller in (("b", b_report, "a"), ("c", c_report, "a"),
                                   ("b", b_via_c, "c")):
        record = received(formation, callee, report["id"])
        assert record["formation_member"] == caller
        assert record["credential"] == f"member:{caller}"
        assert record["origin"] == "peer"
    entry = received(formation, "a", operator_run["id"])
    assert entry["credential"] == "operator" and "formation_member" not in entry
    # The callers' traces record each call at its virtual address, never the door.
    assert [(r["callee"], r["url"]) for r in member_calls(formation, "a", operator_run["id"])
            ] == [("b", "http://b.formation.invalid"), ("c", "http://c.formation.invalid")]
    assert [(r["callee"], r["url"]) for r in member_calls(formation, "c", c_report["id"])
            ] == [("b", "http://b.formation.invalid")]
    for name in ("a", "c"):
        text = json.dumps([r for r in formation.trace(name) if r["event"] == "member_call"])
        assert "127.0.0.1" not in text and "mft1." not in text


def test_a_task_the_operator_started_is_trusted_and_so_are_its_calls(
        formation: Formation, operator_run: dict[str, Any]) -> None:
    a_who, a_to_b, a_to_c = operator_run["results"]
    c_report = nested(a_to_c)
    b_via_c = nested(c_report["results"][1])
    assert (a_who["origin"], a_who["trust"]) == ("operator", "trusted")
    for report in (nested(a_to_b), c_report, b_via_c):
        seen = report["results"][0]
        assert (seen["origin"], seen["trust"]) == ("peer", "trusted"), report
        assert received(formation, report["member"], report["id"])["trust"] == "trusted"


def test_peers_are_in_the_environment_in_roster_order_and_absent_for_who_calls_nobody(
        operator_run: dict[str, Any]) -> None:
    a_who, a_to_b, a_to_c = operator_run["results"]
    c_who = nested(a_to_c)["results"][0]
    b_who = nested(a_to_b)["results"][0]
    # a's roster edges were written r, c, b: the variable follows the roster's order.
    assert a_who["env"] == {"MURMUR_FORMATION_PEERS": PEERS_OF_A}
    assert a_who["peers"] == ["b", "c", "r"] and a_who["call_member_error"] is None
    assert c_who["env"] == {"MURMUR_FORMATION_PEERS": "b=http://b.formation.invalid"}
    assert c_who["peers"] == ["b"] and c_who["call_member_error"] is None
    # b may call nobody: no variable at all (never set empty), no call_member, no answers.
    assert b_who["env"] == {} and b_who["peers"] == []
    assert b_who["call_member_error"] == (
        "task has no attribute 'call_member' (this member may call no other member)")
    assert b_who["answers_error"] is not None and b_who["has_http"] is True


def test_a_task_from_a_declared_bearer_is_untrusted_and_so_are_its_calls(
        formation: Formation) -> None:
    report = as_client(formation, who(), {"op": "call", "to": "b", "text": plan(who())},
                       {"op": "call", "to": "c", "text": plan(
                           who(), {"op": "call", "to": "b", "text": plan(who())})})
    a_who, a_to_b, a_to_c = report["results"]
    assert (a_who["origin"], a_who["trust"]) == ("client", "untrusted")
    assert received(formation, "a", report["id"])["credential"] == "bearer:ci"
    c_report = nested(a_to_c)
    for callee in (nested(a_to_b), c_report, nested(c_report["results"][1])):
        seen = callee["results"][0]
        assert (seen["origin"], seen["trust"]) == ("peer", "untrusted"), callee
        assert received(formation, callee["member"], callee["id"])["trust"] == "untrusted"


# --------------------------------------------------------------------------- refusals


def test_every_forbidden_call_gets_the_same_refusal_before_any_connection(
        formation: Formation, server: RecordingServer) -> None:
    before = {name: len(formation.received(name)) for name in ("a", "b", "c")}
    virtual = {name: f"http://{name}.formation.invalid/" for name in ("a", "b", "c", "zed")}
    control = {"op": "http", "method": "GET", "url": server.url + "/control"}
    b_plan = plan(*(send_b(virtual[name])
                    for name in ("a", "c", "b", "zed")))
    c_plan = plan(*({"op": "call", "to": name, "text": "hello"} for name in ("a", "c", "zed")),
                  *(send_b(virtual[name])
                    for name in ("a", "c", "zed")), control)
    report = as_operator(
        formation,
        *({"op": "call", "to": name, "text": "hello"} for name in ("a", "zed")),
        *(send_b(virtual[name]) for name in ("a", "zed")),
        {"op": "call", "to": "c", "text": c_plan},
        {"op": "call", "to": "b", "text": b_plan},
        control)
    a_self, a_unknown, a_http_self, a_http_unknown, a_to_c, a_to_b, a_control = \
        report["results"]
    # a to itself and to no member at all: the same refusal, nothing opened.
    refused_call(a_self, "a")
    refused_call(a_unknown, "zed")
    refused_request(a_http_self)
    refused_request(a_http_unknown)
    # c (which may call b) to the entry member, to itself, to no member.
    c_results = nested(a_to_c)["results"]
    for result, name in zip(c_results[:3], ("a", "c", "zed"), strict=True):
        refused_call(result, name)
    for result in c_results[3:6]:
        refused_request(result)
    # b (which may call nobody) to the entry member, to c, to itself, to no member.
    for result in nested(a_to_b)["results"]:
        refused_request(result)
    # The measure sees a connection when one opens (the control reached the server).
    assert a_control["status"] == 200 and a_control["new_sockets"] >= 1, a_control
    assert c_results[6]["status"] == 200 and c_results[6]["new_sockets"] >= 1
    assert [seen["path"] for seen in server.seen] == ["/control", "/control"]
    # No door was reached by a refused call: a got the operator's task alone, c and b
    # only a's calls; and no refused call was traced as a call.
    assert [r["credential"] for r in formation.received("a", before["a"])] == ["operator"]
    assert [r["formation_member"] for r in formation.received("c", before["c"])] == ["a"]
    assert [r["formation_member"] for r in formation.received("b", before["b"])] == ["a"]
    for name in ("a", "c"):
        assert {r["callee"] for r in formation.trace(name) if r["event"] == "member_call"
                } <= set(REACH[name])


TRICKS = [
    "http://B.formation.invalid/",
    "http://CODER.formation.invalid/",
    "http://b.formation.invalid./",
    "http://b.formation.invalid.evil.example/",
    "http://b.formation.invalid:8080/",
    "http://b.formation.invalid:80/",
    "http://x@b.formation.invalid/",
    "http://b:pw@b.formation.invalid/",
    "http://b%2Eformation.invalid/",
    "http://%62.formation.invalid/",
    "http://b.formation%2Einvalid/",
    "http://b%252Eformation.invalid/",
    "http://xn--bformationinvalid-1y2pja/",        # punycode of b<U+3002>formation<U+3002>invalid
    "http://b\u3002formation\u3002invalid/",
    "http://\uff42.formation.invalid/",            # fullwidth b
    "https://b.formation.invalid/",
    "http://bformation.invalid/",
]


def test_host_tricks_are_refused_inside_a_real_member(
        formation: Formation, server: RecordingServer) -> None:
    before = len(formation.received("b"))
    door_b = formation.door("b")
    host_tricks = [
        ("http://b.formation.invalid/", "c.formation.invalid"),
        ("http://b.formation.invalid/", "evil.example"),
        ("http://b.formation.invalid/", "B.formation.invalid"),
        (door_b + "/", "b.formation.invalid"),          # the real door, a virtual Host
        (server.url + "/", "b.formation.invalid"),
    ]
    steps = [send_b(url) for url in TRICKS]
    steps += [send_b(url, ["Host", host], A2A) for url, host in host_tricks]
    steps.append(send_b("http://b.formation.invalid/"))
    report = as_operator(formation, *steps)
    *tricked, exact = report["results"]
    for url, result in zip(TRICKS + [f"{u} Host: {h}" for u, h in host_tricks], tricked,
                           strict=True):
        assert result.get("error", {}).get("type") == "FormationRefused", (url, result)
        assert result["error"]["message"] == FormationRefused.MESSAGE, url
        assert result["new_sockets"] == 0, (url, result)
    # Only the exact address reached b, once; the outside server saw nothing.
    assert exact["status"] == 200, exact
    answered = answer_of(exact["body"]["result"]["task"])
    assert [r["task_id"] for r in formation.received("b", before)] == [answered["id"]]
    assert server.seen == []
    traced = member_calls(formation, "a", report["id"])
    assert [(r["callee"], r["url"], r.get("via")) for r in traced] == [
        ("b", "http://b.formation.invalid/", "http")]


FORGED = [
    ["Authorization", "Bearer forged-by-the-agent"],
    ["authorization", "Bearer mft1.forged.forged"],
    ["X-Murmur-Task-Trust", "trusted"],
    ["x-murmur-task-trust", "trusted"],
    ["x_murmur_task_trust", "trusted"],
    ["X-Murmur-Task-Origin", "operator"],
    ["x_murmur_task_origin", "operator"],
    ["Connection", "authorization, x-murmur-task-trust"],
    ["A2A-Version", "1.0"],
]


@pytest.mark.parametrize("sender", ["client", "operator"])
def test_headers_an_agent_forges_never_reach_the_callee(
        formation: Formation, sender: str) -> None:
    """The agent sets its own Authorization (twice), trust and origin headers in every
    spelling, and a Connection header naming them; the callee's door still gets exactly
    one Authorization (the real token: it admits the call as ``member:a``), origin
    ``peer`` and the true trust class of the calling task."""
    trust = "untrusted" if sender == "client" else "trusted"
    headers = [[name, "untrusted" if value == "trusted" and sender == "operator" else value]
               for name, value in FORGED]
    step = send_b("http://b.formation.invalid/", *headers)
    report = (as_client if sender == "client" else as_operator)(formation, step)
    (result,) = report["results"]
    assert result["status"] == 200, result
    b_report = answer_of(result["body"]["result"]["task"])
    seen = b_report["results"][0]
    assert (seen["origin"], seen["trust"], seen["member"]) == ("peer", trust, "b")
    record = received(formation, "b", b_report["id"])
    assert record["credential"] == "member:a" and record["formation_member"] == "a"
    assert (record["origin"], record["trust"]) == ("peer", trust)


# --------------------------------------------------------------------------- redirects


def test_a_redirect_never_carries_the_token_to_another_door_or_outside(
        formation: Formation, server: RecordingServer) -> None:
    door_b = formation.door("b") + "/"
    before_b = len(formation.received("b"))
    log = formation.home.parent / "redirects.jsonl"
    logged = len(log.read_text().splitlines()) if log.exists() else 0

    def via_r(target: str) -> str:
        return f"http://r.formation.invalid/?to={quote(target, safe='')}"

    def via_outside(target: str) -> str:
        return f"{server.url}/hop?to={quote(target, safe='')}"

    targets = [via_r(door_b), via_r(server.url + "/landing"),
               via_r("http://b.formation.invalid/"), via_outside(door_b),
               via_outside("http://b.formation.invalid/")]
    steps = [send_b(url, follow=True) for url in targets]
    steps.append(send_b(via_r(door_b)))
    report = as_operator(formation, *steps)
    to_b, to_outside, to_virtual, out_to_b, out_to_virtual, unfollowed = report["results"]
    # r's redirect to b's real door: followed without a token, so b's door refuses it.
    assert (to_b["status"], to_b["history"]) == (401, [307]), to_b
    assert to_b["body"]["error"] == "unauthenticated"
    # ...and to an outside address: the server got no credential and no runtime header.
    assert (to_outside["status"], to_outside["history"]) == (200, [307]), to_outside
    landing = [seen for seen in server.seen if seen["path"] == "/landing"]
    assert len(landing) == 1
    names = {name for name, _ in landing[0]["headers"]}
    assert "authorization" not in names and not any(n.startswith("x-murmur") for n in names)
    # Neither r nor an outside host can make a call b on its behalf (confused deputy).
    refused_request(to_virtual)
    assert (out_to_b["status"], out_to_b["history"]) == (401, [307]), out_to_b
    refused_request(out_to_virtual)
    # Not following: the 307 comes back as it is.
    assert unfollowed["status"] == 307 and unfollowed["history"] == []
    # No request reached b's door as a task; r itself was sent the token each time.
    assert formation.received("b", before_b) == []
    at_r = [json.loads(line) for line in log.read_text().splitlines()[logged:]]
    assert len(at_r) == 4
    assert all(seen["authorization"] == ["formation token"] and seen["origin"] == ["peer"]
               and seen["trust"] == ["trusted"] for seen in at_r), at_r
    for seen in server.seen:
        assert all(not value.startswith("Bearer") for _, value in seen["headers"])


# --------------------------------------------------------------------------- busy, turns


def test_three_calls_at_once_to_a_busy_member_all_complete(formation: Formation) -> None:
    before = len(formation.received("b"))
    texts = [plan({"op": "sleep", "seconds": 0.4}, who()) for _ in range(3)]
    report = as_operator(formation, {"op": "calls", "to": "b", "texts": texts,
                                     "at_once": True})
    (result,) = report["results"]
    # b holds one task at once: the other two were answered busy and offered again.
    assert sorted(result["placed"]) == ["held", "offering", "offering"], result
    answers = [nested(outcome) for outcome in result["results"]]
    assert all(answer["member"] == "b" for answer in answers)
    ids = [answer["id"] for answer in answers]
    assert len(set(ids)) == 3
    assert sorted(r["task_id"] for r in formation.received("b", before)) == sorted(ids)
    states = {(r["task_id"], r["state"]) for r in formation.trace("b")
              if r["event"] == "task_state"}
    assert all((task_id, "TASK_STATE_COMPLETED") in states for task_id in ids)


def fences(replies: str) -> dict[str, str]:
    found = re.findall(r"^(`{3,})member:([a-z][a-z0-9-]*)\n(.*?)\n\1$", replies,
                       flags=re.DOTALL | re.MULTILINE)
    return {name: body for _, name, body in found}


def test_with_a_turn_left_the_same_task_waits_for_every_answer_and_runs_again(
        formation: Formation) -> None:
    steps = {"turns": [
        [{"op": "call", "to": "b", "text": plan(who()), "wait": False},
         {"op": "call", "to": "c", "text": plan(who()), "wait": False}],
        [who()]]}
    task = send_task(formation.door("a"), formation.operator_token("a"), json.dumps(steps))
    report = answer_of(task)
    assert report["turn"] == 2 and report["id"] == task["id"]
    replies = fences(report["replies"])
    assert set(replies) == {"b", "c"}, report["replies"]
    assert json.loads(replies["b"])["member"] == "b"
    assert json.loads(replies["c"])["member"] == "c"
    assert report["replies"].index("member:b") < report["replies"].index("member:c")


def test_with_no_turn_left_the_task_does_not_wait_and_its_call_outlives_it(
        formation: Formation) -> None:
    """The reference: CancelTask only for a task a member took just after the calling
    task ended. c's call to b was taken while c's task ran: when c's one turn ends, b's
    task keeps running, and its answer is recorded in c's trace."""
    started = time.monotonic()
    report = as_operator(formation, {"op": "call", "to": "c", "text": plan(
        {"op": "call", "to": "b", "text": plan({"op": "sleep", "seconds": 2}),
         "wait": False})})
    elapsed = time.monotonic() - started
    c_report = nested(report["results"][0])
    (placed,) = c_report["results"]
    # c has max_turns 1: its one turn returned at once, with its call unanswered...
    assert c_report["turn"] == 1 and c_report["replies"] == ""
    assert placed["state"] == "held" and placed["task_id"], placed
    assert elapsed < 15, elapsed
    # ...and b's task ran to its end, its answer in c's trace.
    assert received(formation, "b", placed["task_id"])["formation_member"] == "c"
    late = wait_until(lambda: [r for r in formation.trace("c")
                               if r["event"] == "member_call_answer"
                               and r["callee_task_id"] == placed["task_id"]])
    assert late[0]["callee"] == "b" and late[0]["state"] == "TASK_STATE_COMPLETED"
    assert json.loads(late[0]["answer"])["member"] == "b"
    assert not any(r["event"] == "task_state" and r["task_id"] == placed["task_id"]
                   and r["state"] == "TASK_STATE_CANCELED" for r in formation.trace("b"))


# --------------------------------------------------------------------------- the end (last)


def test_the_lifeline_closing_during_a_call_ends_both_sides(
        formation: Formation, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM to the launcher while ``a`` waits on ``b``: every lifeline closes, ``b``
    and ``a`` both end ``formation_ended`` with their tasks canceled, and nothing is
    left running. Ends the module's formation: keep this test last."""
    before = len(formation.received("b"))
    outcome: dict[str, Any] = {}

    def send() -> None:
        try:
            outcome["task"] = send_task(formation.door("a"), formation.operator_token("a"),
                                        json.dumps(plan({"op": "call", "to": "b", "text":
                                                         plan({"op": "sleep",
                                                               "seconds": 60})})))
        except Exception as exc:
            outcome["error"] = exc

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    (call,) = wait_until(lambda: formation.received("b", before), timeout=20)
    assert call["formation_member"] == "a"
    wait_until(lambda: any(r["event"] == "task_state" and r["task_id"] == call["task_id"]
                           and r["state"] == "TASK_STATE_WORKING"
                           for r in formation.trace("b")))
    started = time.monotonic()
    formation.process.send_signal(signal.SIGTERM)
    assert formation.process.wait(60) == 0, formation.stderr.decode()
    gone = wait_gone(formation.pids.values(), 5)
    print(f"SIGTERM during a call: launcher out after {time.monotonic() - started:.2f}s, "
          f"members gone {gone:.2f}s")
    sender.join(30)
    # a's task, the one waiting on b, was answered canceled: the formation ended.
    status = outcome["task"]["status"]
    assert status["state"] == "TASK_STATE_CANCELED", outcome
    assert status["message"]["parts"] == [{"text": "the formation ended"}]
    for name in ("a", "b"):
        trace = formation.trace(name)
        events = [r["event"] for r in trace]
        assert events.count("formation_ended") == 1, (name, events)
        assert events.index("formation_ended") < events.index("session_end"), name
        assert events[-1] == "session_end"
        assert trace[-1]["exit_status"] == "formation_ended", (name, trace[-1])
        assert trace[-1]["code"] is None
    assert ("TASK_STATE_CANCELED" in
            [r["state"] for r in formation.trace("b")
             if r["event"] == "task_state" and r["task_id"] == call["task_id"]])
    for name in ("c", "r"):
        assert formation.trace(name)[-1]["exit_status"] == "ok"
    assert "E-RUN-040" not in formation.stderr.decode()
    monkeypatch.setenv("MURMUR_HOME", str(formation.home))
    assert running_records.list_running() == []
    # Over the whole module: each door was only ever reached by the members the roster
    # lets call it, and no formation token was written anywhere.
    for name, callers in CALLERS.items():
        assert {r.get("formation_member") for r in formation.received(name)} - {None} \
            <= callers, name
    assert "mft1." not in (formation.stdout + formation.stderr).decode()
    for current, _dirs, files in os.walk(formation.home):
        for file in files:
            if file != "operator.token":
                assert b"mft1." not in (Path(current) / file).read_bytes(), file
