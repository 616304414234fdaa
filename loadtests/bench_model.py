"""A model member's driver: what it adds to each model request and each tool run.

Two real members, each ``mur run --capsule`` serving on loopback, against one
zero-latency chat-completions endpoint (a bare asyncio HTTP server in its own process,
answering every request at once with a whole JSON answer):

* **model**: a model member (``agent.model``, one ``command`` tool running ``cat``);
* **python**: a ``python`` agent that makes the same round trips by hand, with
  ``task.http`` (the same forward proxy) and ``asyncio.create_subprocess_exec("cat")``.

Two scenarios, each task sent as the operator with a blocking ``SendMessage``:

* **answer**: one request, the model answers in text;
* **tool**: one request asking for the tool, the tool run, a second request answered.

Rounds interleave the members; per scenario the figure is the median over rounds of
(model / python) seconds per task, and the driver's overhead per request and per tool
run is read from the differences: ``answer`` gives the per-request overhead, and
``tool`` minus two of those the per-tool-run overhead. Bounded: ``--tasks`` per round,
``--rounds`` rounds.

    .venv/bin/python loadtests/bench_model.py [--tasks 40] [--rounds 3]

Results: ``loadtests/results/bench_model.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "loadtests" / "results"

PYTHON_AGENT = '''
import asyncio, json

async def run(task):
    url = task.env["BENCH_URL"] + "/chat/completions"
    messages = [{"role": "user", "content": task.text}]
    answer = (await task.http.post(url, json={"model": "m", "messages": messages})).json()
    message = answer["choices"][0]["message"]
    if message.get("tool_calls"):
        process = await asyncio.create_subprocess_exec(
            "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        out, _ = await process.communicate(b"x")
        messages += [message, {"role": "tool", "tool_call_id": "call_0",
                               "content": out.decode()}]
        answer = (await task.http.post(url, json={"model": "m", "messages": messages})).json()
        message = answer["choices"][0]["message"]
    return message["content"]
'''


# --------------------------------------------------------------------------- the endpoint


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages", [])
    wants_tool = messages and "tool" in str(messages[-1].get("content", "")) \
        and messages[-1].get("role") == "user"
    if wants_tool:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "echo", "arguments": "{\"input\": \"x\"}"}}]}
    else:
        message = {"role": "assistant", "content": "done"}
    return {"choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if wants_tool else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}}


async def _serve_endpoint(port_file: Path) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                data = json.dumps(_answer(body)).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()


# --------------------------------------------------------------------------- the members


def _capsules(source: Path, url: str) -> None:
    common = ("network:\n  authentication: {}\ncapabilities:\n"
              "  network: {allow: [localhost, 127.0.0.1]}\n")
    model = source / "modelbench"
    model.mkdir(parents=True)
    (model / "murmur.yaml").write_text(
        "manifest_version: 1\nname: modelbench\nversion: 1.0.0\nagent:\n  model:\n"
        "    tools:\n      - command: {name: echo, argv: [cat]}\n" + common +
        f"inference:\n  transport: http\n  base_url: {url}\n  model: m\n  max_turns: 4\n")
    python = source / "pythonbench"
    python.mkdir(parents=True)
    (python / "pythonbench_agent.py").write_text(PYTHON_AGENT)
    (python / "murmur.yaml").write_text(
        "manifest_version: 1\nname: pythonbench\nversion: 1.0.0\nagent:\n"
        "  python: pythonbench_agent:run\n" + common + "  env: {allow: [BENCH_URL]}\n")


def _start(project: Path, capsule: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes],
                                                                      str, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--capsule", f"local/{capsule}",
         "--capsule-version", "1.0.0", "--project", str(project), "--json"],
        cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    ready = json.loads(process.stdout.readline())
    token = (Path(ready["records_dir"]) / "operator.token").read_text()
    return process, ready["door_url"], token


def _per_task(door: str, token: str, text: str, tasks: int) -> float:
    import httpx

    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    with httpx.Client(headers=headers, timeout=30.0) as client:
        started = time.perf_counter()
        for _ in range(tasks):
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"role": "ROLE_USER", "messageId": uuid.uuid4().hex,
                            "parts": [{"text": text}]},
                "configuration": {"returnImmediately": False}}}
            answer = client.post(door + "/", json=body).json()
            state = answer["result"]["task"]["status"]["state"]
            if state != "TASK_STATE_COMPLETED":
                raise SystemExit(f"a bench task ended {state}: {answer}")
        return (time.perf_counter() - started) / tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="tasks per member per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from launcher.admission.store import install, pack

    with tempfile.TemporaryDirectory(prefix="bench-model-") as scratch:
        root = Path(scratch)
        port_file = root / "port"
        endpoint = subprocess.Popen([sys.executable, "-c", (
            "import asyncio, sys; sys.path.insert(0, sys.argv[1]); "
            "from loadtests.bench_model import _serve_endpoint; "
            "from pathlib import Path; asyncio.run(_serve_endpoint(Path(sys.argv[2])))"),
            str(ROOT), str(port_file)])
        members: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(100):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text()}/v1"
            project = root / "project"
            project.mkdir()
            _capsules(root / "src", url)
            for name in ("modelbench", "pythonbench"):
                install(pack(root / "src" / name, root / f"{name}.mur.zip").path, project)
            env = {**os.environ, "MURMUR_HOME": str(root / "home"), "BENCH_URL": url,
                   "PYTHONPATH": str(ROOT), "MURMUR_HOST_WARNINGS_REPORTED": "1"}
            model, model_door, model_token = _start(project, "modelbench", env)
            python, python_door, python_token = _start(project, "pythonbench", env)
            members += [model, python]
            ratios: dict[str, list[float]] = {"answer": [], "tool": []}
            seconds: dict[str, list[tuple[float, float]]] = {"answer": [], "tool": []}
            for scenario, text in (("answer", "say done"), ("tool", "use the tool")):
                _per_task(model_door, model_token, text, 5)      # warm both up
                _per_task(python_door, python_token, text, 5)
                for _ in range(args.rounds):
                    driven = _per_task(model_door, model_token, text, args.tasks)
                    by_hand = _per_task(python_door, python_token, text, args.tasks)
                    seconds[scenario].append((driven, by_hand))
                    ratios[scenario].append(by_hand / driven)
        finally:
            for process in [*members, endpoint]:
                process.terminate()
                process.wait(10)
    report = _report(ratios, seconds, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_model.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "bench_model.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


def _report(ratios: dict[str, list[float]], seconds: dict[str, list[tuple[float, float]]],
            args: argparse.Namespace) -> dict[str, Any]:
    def median_ms(scenario: str, index: int) -> float:
        return statistics.median(pair[index] for pair in seconds[scenario]) * 1000

    per_request = median_ms("answer", 0) - median_ms("answer", 1)
    per_tool = (median_ms("tool", 0) - median_ms("tool", 1)) - 2 * per_request
    return {
        "tasks_per_round": args.tasks, "rounds": args.rounds,
        "ms_per_task": {scenario: {"model": round(median_ms(scenario, 0), 2),
                                   "python": round(median_ms(scenario, 1), 2)}
                        for scenario in seconds},
        "python_over_model": {scenario: round(statistics.median(values), 3)
                              for scenario, values in ratios.items()},
        "driver_overhead_ms": {"per_request": round(per_request, 2),
                               "per_tool_run": round(per_tool, 2)},
    }


def _markdown(report: dict[str, Any]) -> str:
    lines = ["# bench_model: a model member's driver vs the same round trips by hand", "",
             f"{report['tasks_per_round']} tasks a round, {report['rounds']} rounds; "
             "medians over the rounds.", "",
             "| scenario | model member ms/task | python agent ms/task | python / model |",
             "|---|---|---|---|"]
    for scenario, times in report["ms_per_task"].items():
        lines.append(f"| {scenario} | {times['model']} | {times['python']} | "
                     f"{report['python_over_model'][scenario]} |")
    overhead = report["driver_overhead_ms"]
    lines += ["", f"Driver overhead: {overhead['per_request']} ms per request, "
              f"{overhead['per_tool_run']} ms per tool run.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
