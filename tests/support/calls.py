"""Helpers for the call-member process tests (no tests here).

* ``PROBE_AGENT``: one python agent for every real member. Its task text is a JSON plan
  (``{"steps": [...]}``, or ``{"turns": [[...], [...]]}`` for one list of steps a turn);
  it runs the steps and answers with a JSON report of what it saw, so one formation
  serves many assertions. A step may call a member, send a request with ``task.http``,
  report the task's identity and environment, or wait.
* ``REDIRECTOR``: a fake member put in front of ``mur run`` with the launcher's test-only
  ``MURMUR_TEST_MEMBER_ARGV_PREFIX``. For capsule ``local/r`` it speaks the member
  contract (readiness line, agent card, the lifeline's ending) and answers every POST
  with ``307`` to the ``to`` query parameter, noting what it was sent (never a token's
  value) in ``$CALLS_REDIRECT_LOG``; any other capsule runs the real ``mur run``.
* ``RecordingServer``: an "outside address" on loopback that notes every request's
  headers and can answer ``307`` itself.
* ``Formation``: a launched ``mur run --roster --json`` and what its members wrote.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support.formation import (
    descendants_of,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    start_launcher,
    wait_gone,
    write_roster,
)
from tests.support.member import install_capsule, write_capsule

#: The agent every real member runs (see the module docstring).
PROBE_AGENT = r'''
import asyncio, json, os


def client_sockets():
    """This process's TCP sockets that are not its door's (listening or accepted): the
    connections it opened itself."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    rows = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                rows += [line.split() for line in handle]
        except OSError:
            pass
    rows = [(row[1].rsplit(":", 1)[1], row[3], row[9]) for row in rows if row[9] in mine]
    listening = {port for port, state, _ in rows if state == "0A"}
    return {inode for port, state, inode in rows if state != "0A" and port not in listening}


def failure(exc):
    return {"type": type(exc).__name__, "message": str(exc),
            "state": getattr(exc, "state", None), "member": getattr(exc, "member", None)}


def text_of(value):
    return value if isinstance(value, str) else json.dumps(value)


def attribute_error(task, name):
    try:
        getattr(task, name)
    except AttributeError as exc:
        return str(exc)
    return None


def who(task):
    return {"origin": task.origin, "trust": task.trust, "member": task.member,
            "formation_id": task.formation_id, "peers": list(task.peers),
            "env": dict(task.env), "call_member_error": attribute_error(task, "call_member"),
            "answers_error": attribute_error(task, "answers"),
            "has_http": attribute_error(task, "http") is None}


async def outcome(handle):
    try:
        return {"answer": await handle, "state": handle.state}
    except Exception as exc:
        return {"error": failure(exc)}


def record(step, value):
    if step.get("record"):
        with open(step["record"], "w") as handle:
            json.dump(value, handle)


async def call(task, step):
    before = client_sockets()
    try:
        handle = await task.call_member(step["to"], text_of(step["text"]))
    except Exception as exc:
        result = {"error": failure(exc)}
    else:
        result = await outcome(handle) if step.get("wait", True) else \
            {"state": handle.state, "task_id": handle.task_id}
    result["new_sockets"] = len(client_sockets() - before)
    return result


async def calls(task, step):
    texts = [text_of(text) for text in step["texts"]]
    if step.get("at_once"):
        handles = await asyncio.gather(*(task.call_member(step["to"], t) for t in texts))
    else:
        handles = [await task.call_member(step["to"], t) for t in texts]
    placed = [handle.state for handle in handles]
    try:
        results = await asyncio.gather(*(outcome(handle) for handle in handles))
    except asyncio.CancelledError:
        # The task itself is being ended (the formation's deadline): the calls end on
        # the same deadline, so let them settle and keep what they ended as.
        waiting = [asyncio.ensure_future(outcome(handle)) for handle in handles]
        await asyncio.wait(waiting, timeout=5)
        record(step, {"placed": placed, "canceled": True,
                      "results": [w.result() if w.done() else None for w in waiting]})
        raise
    value = {"placed": placed, "results": list(results)}
    record(step, value)
    return value


async def http(task, step):
    before = client_sockets()
    try:
        response = await task.http.request(
            step.get("method", "POST"), step["url"],
            headers=[tuple(pair) for pair in step.get("headers", [])],
            json=step.get("json"), follow_redirects=step.get("follow", False))
        try:
            body = response.json()
        except ValueError:
            body = response.text
        result = {"status": response.status_code, "body": body,
                  "history": [r.status_code for r in response.history]}
    except Exception as exc:
        result = {"error": failure(exc)}
    result["new_sockets"] = len(client_sockets() - before)
    return result


async def step_of(task, step):
    kind = step["op"]
    if kind == "who":
        return who(task)
    if kind == "call":
        return await call(task, step)
    if kind == "calls":
        return await calls(task, step)
    if kind == "http":
        return await http(task, step)
    if kind == "sleep":
        await asyncio.sleep(step["seconds"])
        return {"slept": step["seconds"]}
    raise ValueError(f"unknown step {kind!r}")


async def run(task):
    try:
        plan = json.loads(task.text)
    except ValueError:
        plan = {"steps": [{"op": "who"}]}
    turns = plan.get("turns") or [plan.get("steps", [])]
    steps = turns[min(task.turn, len(turns)) - 1]
    results = [await step_of(task, step) for step in steps]
    return json.dumps({"member": task.member, "turn": task.turn, "id": task.id,
                       "replies": task.replies, "results": results})
'''

#: The fake member ``r``: a door that redirects every POST (see the module docstring).
REDIRECTOR = r'''
import json, os, secrets, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

argv = sys.argv[1:]
if argv[argv.index("--capsule") + 1] != "local/r":
    os.execv(sys.executable, [sys.executable, "-m", "launcher.cli", *argv])

from launcher.home import records, trace
from launcher.ids import new_session_id

formation = os.environ["MURMUR_FORMATION_ID"]
lifeline = int(os.environ["MURMUR_FORMATION_LIFELINE"])
channel = int(os.environ["MURMUR_FORMATION_CHANNEL"])
log_path = os.environ["CALLS_REDIRECT_LOG"]
data = b""
while b"\n" not in data:
    chunk = os.read(channel, 65536)
    if not chunk:
        break
    data += chunk
creds = json.loads(data.split(b"\n")[0])
session = new_session_id()
staged = records.stage_session(os.getcwd(), session)
records.write_operator_token(staged.operator_token, secrets.token_urlsafe(24))
writer = trace.TraceWriter(staged.trace)
writer.write("session_start", session_id=session, formation_id=formation,
             formation_member=creds["member"], formation_callees=list(creds["tokens"]))
card = json.dumps({"name": "r", "capabilities": {"extensions": [{
    "uri": "urn:murmur:session:v1",
    "params": {"member": creds["member"], "sessionId": session,
               "formationId": formation}}]}}).encode()
lock = threading.Lock()


def credential(value):
    if value is None:
        return None
    return "formation token" if value.startswith("Bearer mft1.") else "other"


class Door(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.answer(200, card, {"content-type": "application/json"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        given = self.headers.get_all("authorization") or []
        seen = {"path": self.path, "authorization": [credential(v) for v in given],
                "origin": self.headers.get_all("x-murmur-task-origin") or [],
                "trust": self.headers.get_all("x-murmur-task-trust") or []}
        with lock, open(log_path, "a") as handle:
            handle.write(json.dumps(seen) + "\n")
        target = parse_qs(urlsplit(self.path).query)["to"][0]
        self.answer(307, b"", {"location": target})

    def answer(self, status, body, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Door)
threading.Thread(target=server.serve_forever, daemon=True).start()
ready = {"event": "ready", "session_id": session, "pid": os.getpid(),
         "door_url": f"http://127.0.0.1:{server.server_address[1]}", "capsule": "local/r",
         "version": "1.0.0", "records_dir": str(staged.dir), "formation_id": formation,
         "member": creds["member"]}
sys.stdout.write(json.dumps(ready) + "\n")
sys.stdout.flush()
while os.read(lifeline, 4096):
    pass
writer.write("formation_ended", formation_id=formation)
writer.write("session_end", exit_status="ok", code=None)
'''

#: Environment variable naming the entry member's declared bearer token.
BEARER_ENV = "CALLS_DOOR_TOKEN"
REDIRECT_LOG_ENV = "CALLS_REDIRECT_LOG"


@dataclass(frozen=True)
class MemberSpec:
    """One member of a test formation: its capsule's manifest choices."""

    name: str
    authentication: str = "{}"
    peer_tasks: bool = True
    allow: tuple[str, ...] = ("localhost",)
    lifecycle: str = "concurrency: 4\nqueue_depth: 4"
    max_turns: int | None = None


def bearer_authentication(env: str = BEARER_ENV) -> str:
    return ("{bearer: [{name: ci, env: " + env
            + ", scopes: [SendMessage, GetTask]}]}")


def build_project(root: Path, members: list[MemberSpec], *, entry: str,
                  reachability: Mapping[str, list[str]]) -> Path:
    """A project with one probe capsule per member, installed, and its roster."""
    project = root / "project"
    project.mkdir(parents=True)
    for spec in members:
        source = write_capsule(root / "src" / spec.name, spec.name,
                               authentication=spec.authentication,
                               peer_tasks=spec.peer_tasks, allow=spec.allow,
                               lifecycle=spec.lifecycle, agent=PROBE_AGENT)
        if spec.max_turns is not None:
            with (source / "murmur.yaml").open("a") as manifest:
                manifest.write(f"inference: {{max_turns: {spec.max_turns}}}\n")
        install_capsule(project, source)
    write_roster(project, [(spec.name, spec.name == entry) for spec in members],
                 reachability)
    return project


def write_redirector(folder: Path) -> str:
    """The redirector script; the value for ``MURMUR_TEST_MEMBER_ARGV_PREFIX``."""
    script = folder / "redirector.py"
    script.write_text(REDIRECTOR)
    return shlex.join([sys.executable, str(script)])


# --------------------------------------------------------------------------- the outside


class RecordingServer:
    """A loopback HTTP/1.1 server (keep-alive) noting each request's path and headers.
    ``/hop?to=URL`` answers ``307`` to URL; anything else ``200 {"ok": true}``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                seen.append({"path": self.path,
                             "headers": [(k.lower(), v) for k, v in self.headers.items()]})
                parts = urlsplit(self.path)
                if parts.path == "/hop":
                    self.send_response(307)
                    self.send_header("location", parse_qs(parts.query)["to"][0])
                    body = b""
                else:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    body = b'{"ok": true}'
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = handle_one

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --------------------------------------------------------------------------- a formation


def _drain(stream: Any, sink: bytearray) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        sink.extend(chunk)


@dataclass
class Formation:
    """A running ``mur run --roster --json`` (without ``--task``) and its members."""

    home: Path
    process: Any
    line: dict[str, Any]
    env: dict[str, str]
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)

    @classmethod
    def launch(cls, project: Path, home: Path, *args: str, **env: str) -> Formation:
        environ = launcher_env(MURMUR_HOME=str(home), **env)
        process = start_launcher(project, "--json", *args, env=environ)
        try:
            line = read_formation_line(process, timeout=90)
        except BaseException:
            kill_group_quietly(process)
            _, err = process.communicate(timeout=30)
            raise AssertionError(f"the formation did not come up: {err.decode()}") from None
        formation = cls(home, process, line, environ)
        for stream, sink in ((process.stdout, formation.stdout),
                             (process.stderr, formation.stderr)):
            threading.Thread(target=_drain, args=(stream, sink), daemon=True).start()
        return formation

    @property
    def formation_id(self) -> str:
        return str(self.line["formation_id"])

    @property
    def pids(self) -> dict[str, int]:
        return {member["name"]: member["pid"] for member in self.line["members"]}

    def door(self, name: str) -> str:
        return next(str(m["door_url"]) for m in self.line["members"] if m["name"] == name)

    def session(self, name: str) -> str:
        return next(str(m["session_id"]) for m in self.line["members"] if m["name"] == name)

    def operator_token(self, name: str) -> str:
        (path,) = (self.home / "records").rglob(f"{self.session(name)}/operator.token")
        return path.read_text().strip()

    def trace(self, name: str) -> list[dict[str, Any]]:
        (path,) = (self.home / "records").rglob(f"{self.session(name)}/trace.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def received(self, name: str, since: int = 0) -> list[dict[str, Any]]:
        """``a2a_task_received`` records of member ``name`` after the first ``since``."""
        found = [r for r in self.trace(name) if r["event"] == "a2a_task_received"]
        return found[since:]

    def stop(self) -> None:
        """Kill the launcher, its members and all they started. What they started is
        found first: a gateway member's upstream runs in a session of its own, and
        killed with the launcher (its subreaper) and its member it was left to init."""
        doomed = {*self.pids.values(), *descendants_of(self.process.pid)}
        if self.process.poll() is None:
            kill_group_quietly(self.process)
            self.process.wait(30)
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        wait_gone(doomed, 10)


def send_task(door: str, token: str, text: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """A blocking ``SendMessage`` (A2A 1.0) with ``token``; the final task."""
    with httpx.Client(trust_env=False, timeout=timeout) as client:
        response = client.post(door + "/", headers={"Authorization": f"Bearer {token}",
                                                    "A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                "parts": [{"text": text}]}}})
    document: dict[str, Any] = response.json()
    assert "result" in document, document
    task: dict[str, Any] = document["result"]["task"]
    return task


def answer_of(task: Mapping[str, Any]) -> dict[str, Any]:
    """The probe agent's JSON report, from a completed task."""
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    text = "".join(part.get("text", "") for artifact in task["artifacts"]
                   for part in artifact["parts"])
    report: dict[str, Any] = json.loads(text)
    return report


def nested(result: Mapping[str, Any]) -> dict[str, Any]:
    """The callee's report inside a ``call`` step's result."""
    assert "answer" in result, result
    report: dict[str, Any] = json.loads(result["answer"])
    return report


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout} s")


def who() -> dict[str, Any]:
    return {"op": "who"}


def plan(*steps: Mapping[str, Any]) -> dict[str, Any]:
    return {"steps": list(steps)}
