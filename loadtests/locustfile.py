"""Load scenarios for locust (the ``loadtest`` extra; docs/loadtests.md).

Two user classes, run one at a time by ``loadtests/run_loadtest.py`` (``make loadtest``):

* :class:`DoorUser`: the A2A door of a running formation's entry member, with the
  operator token read from the file ``MURMUR_LOADTEST_TOKEN_FILE`` names (the token is
  never in an argument or a variable): ``GetTask`` (the polling path), ``SendMessage``
  and ``SendStreamingMessage`` (the stream read to its end) over JSON-RPC;
* :class:`TokenUser`: formation-token verification at scale. A formation's tokens never
  leave its members, so this file mints its own formation: at the test's start it makes
  a launch key, starts a real door (``loadtests/token_door.py``, DoorAuth under uvicorn
  in its own process on 127.0.0.1) for the member ``hub`` of a formation of
  ``MURMUR_LOADTEST_MEMBERS`` members (default 5000), and mints, in this process only,
  a token for each caller as it is first used. Most requests carry a token the door has
  never seen (full Ed25519 verification); some repeat one (the door's cache); one in
  five is forged (signed with another key) and must be refused ``401``.

In this order at run time: ``test_start`` starts the token door when a TokenUser runs;
each user's ``on_start`` reads its credential; the tasks run until locust's
``--run-time``; ``quitting`` ends the token door.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from locust import FastHttpUser, constant, events, task

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.auth.tokens import FormationKey  # noqa: E402 - after the repository is on the path

A2A = {"A2A-Version": "1.0", "Content-Type": "application/json"}
#: How many members the token scenario's formation has (callers of ``hub``).
MEMBERS = int(os.environ.get("MURMUR_LOADTEST_MEMBERS", "5000"))
#: Of the token scenario's requests: forged, and repeating a token already seen.
FORGED_SHARE = 0.2
REPEAT_SHARE = 0.1


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def _message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": text}]}}


def _rpc_outcome(response: Any, *, stream: bool = False) -> str | None:
    """Why an answer is a failure (None: it is not). A ``-32050`` busy answer is one:
    the run's table then shows the gate was the limit."""
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    text = response.text or ""
    if stream:
        return None if '"result"' in text and '"error"' not in text else "stream error"
    try:
        answer = json.loads(text)
    except ValueError:
        return "not JSON"
    error = answer.get("error")
    if error:
        return f"JSON-RPC {error.get('code')}"
    return None


class DoorUser(FastHttpUser):
    """GetTask, SendMessage and a stream against a formation's entry door."""

    wait_time = constant(0)

    def on_start(self) -> None:
        token_file = os.environ.get("MURMUR_LOADTEST_TOKEN_FILE")
        if not token_file:
            raise RuntimeError("MURMUR_LOADTEST_TOKEN_FILE must name the entry member's "
                               "operator.token (run_loadtest.py sets it)")
        token = Path(token_file).read_text().strip()
        self.headers = {**A2A, "Authorization": f"Bearer {token}"}
        self.task_id = self._send("SendMessage (setup)")

    def _send(self, name: str) -> str | None:
        params = {**_message("load"), "configuration": {"returnImmediately": True}}
        with self.client.post("/", json=_rpc("SendMessage", params), headers=self.headers,
                              name=name, catch_response=True) as response:
            problem = _rpc_outcome(response)
            if problem:
                response.failure(problem)
                return None
            result = json.loads(response.text or "{}").get("result", {})
            return str(result.get("task", {}).get("id") or "") or None

    @task(5)
    def get_task(self) -> None:
        if self.task_id is None:
            self.task_id = self._send("SendMessage")
            return
        with self.client.post("/", json=_rpc("GetTask", {"id": self.task_id}),
                              headers=self.headers, name="GetTask",
                              catch_response=True) as response:
            problem = _rpc_outcome(response)
            if problem:
                response.failure(problem)

    @task(2)
    def send_message(self) -> None:
        self._send("SendMessage")

    @task(1)
    def streaming(self) -> None:
        with self.client.post("/", json=_rpc("SendStreamingMessage", _message("stream")),
                              headers={**self.headers, "Accept": "text/event-stream"},
                              name="SendStreamingMessage", catch_response=True) as response:
            problem = _rpc_outcome(response, stream=True)
            if problem:
                response.failure(problem)


class _TokenDoor:
    """The token scenario's door process and the formation it belongs to."""

    def __init__(self) -> None:
        self.key = FormationKey.generate()
        self.forger = FormationKey.generate()
        self.formation = "frm_" + uuid.uuid4().hex
        self.process: subprocess.Popen[str] | None = None
        self.callers = itertools.count(1)
        self.seen: list[str] = []

    def start(self) -> str:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "loadtests" / "token_door.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        # The public key and the formation id: nothing secret crosses the pipe.
        self.process.stdin.write(f"{self.key.public_bytes.hex()} {self.formation}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the token door did not start: {line!r}")
        return f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def fresh(self) -> str:
        caller = f"m{next(self.callers) % MEMBERS:05d}"
        token = self.key.mint(formation=self.formation, caller=caller, callee="hub")
        if len(self.seen) < 10_000:
            self.seen.append(token)
        return token

    def repeated(self) -> str:
        return random.choice(self.seen) if self.seen else self.fresh()

    def forged(self) -> str:
        return self.forger.mint(formation=self.formation, caller="m00000", callee="hub")


TOKEN_DOOR = _TokenDoor()


class TokenUser(FastHttpUser):
    """GetTask with formation tokens: mostly first seen, some cached, some forged."""

    wait_time = constant(0)
    #: Replaced by the token door's address at the start (so run it without --host).
    host = "http://127.0.0.1"

    @task
    def verify(self) -> None:
        draw = random.random()
        if draw < FORGED_SHARE:
            token, name, expected = TOKEN_DOOR.forged(), "token: forged (401)", 401
        elif draw < FORGED_SHARE + REPEAT_SHARE:
            token, name, expected = TOKEN_DOOR.repeated(), "token: cached", 200
        else:
            token, name, expected = TOKEN_DOOR.fresh(), "token: first seen", 200
        with self.client.post("/", json=_rpc("GetTask", {"id": "no-such-task"}),
                              headers={**A2A, "Authorization": f"Bearer {token}"},
                              name=name, catch_response=True) as response:
            if response.status_code == expected:
                response.success()          # a forged token's 401 is the right answer
            else:
                response.failure(f"HTTP {response.status_code}, expected {expected}")


@events.test_start.add_listener
def _start_token_door(environment: Any, **_: Any) -> None:
    classes = getattr(environment, "user_classes", [])
    if any(cls is TokenUser for cls in classes):
        TokenUser.host = TOKEN_DOOR.start()


@events.quitting.add_listener
def _stop_token_door(environment: Any, **_: Any) -> None:
    # At quitting, not test_stop: users still finishing a request at test_stop would
    # count the door's going as failures.
    TOKEN_DOOR.stop()
