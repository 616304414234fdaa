"""A real browser calls a door: headless Chromium loads a page served on another loopback
port, and the page's ``fetch`` sends a task to the door over the HTTP+JSON binding,
reads its answer, and reports back to the page's own server. The door allows the page's
origin (``network.cors.allow_origins``); a page of another origin cannot read anything.

Skips, saying so, where no Chromium is installed (``.ci/run`` installs Debian's
``chromium``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import TaskRun
from tests.support.door import card_info, serve

pytestmark = pytest.mark.integration

BROWSER = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                if (path := shutil.which(name))), None)
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium on PATH (Debian: apt-get install chromium); "
                            ".ci/run installs it")
#: A declared bearer token made up for this test (the page needs one to call the door).
PAGE_TOKEN = "browser-test-token-0123456789abcdef"
REPORT_WAIT_S = 45.0

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>door page</title></head>
<body><script>
const door = %(door)s;
const auth = {"Authorization": "Bearer " + %(token)s, "A2A-Version": "1.0"};
async function run() {
  const out = {};
  try {
    let r = await fetch(door + "/message:send", {method: "POST",
      headers: {...auth, "Content-Type": "application/json"},
      body: JSON.stringify({message: {messageId: "page-1", role: "ROLE_USER",
                                      parts: [{text: "from the browser"}]},
                            configuration: {returnImmediately: true}})});
    out.sendStatus = r.status;
    const sent = await r.json();
    const id = sent.task.id;
    for (let i = 0; i < 100; i++) {
      r = await fetch(door + "/tasks/" + encodeURIComponent(id), {headers: auth});
      const task = await r.json();
      out.state = task.status.state;
      if (out.state === "TASK_STATE_COMPLETED") {
        out.answer = task.artifacts[0].parts[0].text;
        break;
      }
      await new Promise(resolve => setTimeout(resolve, 50));
    }
    r = await fetch(door + "/tasks", {headers: {"A2A-Version": "1.0"}});
    out.withoutToken = {status: r.status, error: (await r.json()).error};
  } catch (e) {
    out.failure = String(e);
  }
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
}
run();
</script></body></html>
"""


async def answer(task: TaskRun) -> str:
    return f"the door heard: {task.text}"


class PageServer:
    """Serves the page at ``/`` and takes its report at ``POST /report``, on 127.0.0.1."""

    def __init__(self) -> None:
        self.page = b""
        self.report: dict[str, Any] | None = None
        self.reported = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(owner.page)))
                self.end_headers()
                self.wfile.write(owner.page)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                owner.report = json.loads(self.rfile.read(length))
                owner.reported.set()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @contextmanager
    def running(self) -> Iterator[PageServer]:
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


@contextmanager
def browser_at(url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Headless Chromium showing ``url`` until the block ends (then it is stopped)."""
    assert BROWSER is not None
    # Chromium's helper processes may still write to the profile for a moment after the
    # group is stopped: the folder's removal must not fail the test.
    with tempfile.TemporaryDirectory(prefix="murmur-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        argv = [BROWSER, "--headless=new", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", url]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            yield process
        finally:
            _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the browser and every helper process it started (its own process group)."""
    for signum, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        try:
            process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # helpers the main process left behind


async def page_report(allowed_origin: str | None) -> dict[str, Any]:
    """What the page reported after calling a door that allows ``allowed_origin``."""
    page = PageServer()
    origins = (page.origin,) if allowed_origin == "page" else (
        (allowed_origin,) if allowed_origin else ())
    policy = AuthPolicy(authenticated=True, operator=OperatorToken.generate(),
                        bearers=(DeclaredBearer("web", PAGE_TOKEN),), allow_origins=origins)
    door = build_door(answer, DoorSettings(card=card_info()), policy=policy)
    async with serve(door.app) as door_url:
        page.page = (PAGE % {"door": json.dumps(door_url),
                             "token": json.dumps(PAGE_TOKEN)}).encode()
        with page.running(), browser_at(page.origin + "/") as process:
            reported = await asyncio.to_thread(page.reported.wait, REPORT_WAIT_S)
            assert reported, f"the page reported nothing (browser exit: {process.poll()})"
    assert page.report is not None
    return page.report


@needs_browser
async def test_a_page_of_an_allowed_origin_sends_a_task_and_reads_its_answer() -> None:
    report = await page_report("page")
    assert "failure" not in report, report
    assert report["sendStatus"] == 200
    assert report["state"] == "TASK_STATE_COMPLETED"
    assert report["answer"] == "the door heard: from the browser"
    # CORS lets the page read a refusal, never skip it.
    assert report["withoutToken"] == {"status": 401, "error": "unauthenticated"}


@needs_browser
async def test_a_page_of_another_origin_reads_nothing() -> None:
    report = await page_report("http://127.0.0.1:1")
    assert "answer" not in report and "sendStatus" not in report
    assert "Failed to fetch" in report["failure"]


@needs_browser
async def test_a_door_without_cors_is_closed_to_every_page() -> None:
    report = await page_report(None)
    assert "sendStatus" not in report
    assert "Failed to fetch" in report["failure"]
