"""Gateway members' capsules for the tests (no tests here): a capsule whose
``agent.a2a.command`` starts the a2a-sdk agent, the @a2a-js/sdk agent or the a2a-sdk
agent that replies only in its task's history, and the first child of a member runtime
(its upstream, or its agent process)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tests.support import third_party


def gateway_capsule(source: Path, name: str, command: list[str]) -> Path:
    """A gateway member's capsule source: ``agent.a2a.command`` with ``{port}``."""
    source.mkdir(parents=True, exist_ok=True)
    argv = ", ".join(f'"{part}"' for part in command)
    (source / "murmur.yaml").write_text(
        "manifest_version: 1\n"
        f"name: {name}\nversion: 1.0.0\ndescription: The {name} gateway test member.\n"
        f"agent:\n  a2a:\n    command: [{argv}]\n"
        "exports:\n  peer_tasks: {accept: true}\n"
        "network:\n  authentication: {}\n"
        # its callee's door listens on loopback
        "capabilities:\n  network: {allow: [localhost]}\n"
        "lifecycle: {concurrency: 4, queue_depth: 0}\n")
    return source


def sdk_capsule(root: Path, name: str = "sdkbot") -> Path:
    source = root / "src" / name
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(third_party.SDK_AGENT, source / "sdk_agent.py")
    return gateway_capsule(source, name,
                           ["python3", "sdk_agent.py", "--port", "{port}", "--name", name])


def history_capsule(root: Path, name: str = "historybot",
                    input_modes: tuple[str, ...] = ()) -> Path:
    """The agent that replies in a WORKING status message and completes with none
    (``tests/agents/history_agent.py``); ``input_modes`` are its card's, when given."""
    source = root / "src" / name
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(third_party.HISTORY_AGENT, source / "history_agent.py")
    modes = ["--input-modes", *input_modes] if input_modes else []
    return gateway_capsule(source, name, ["python3", "history_agent.py", "--port", "{port}",
                                          "--name", name, *modes])


def js_capsule(root: Path, name: str = "jsbot") -> Path:
    # server.mjs imports its packages by bare name: node resolves them next to the script,
    # so the capsule runs the original script (tests/agents/js/node_modules beside it).
    node = shutil.which("node") or "node"
    source = root / "src" / name
    source.mkdir(parents=True, exist_ok=True)
    shutil.copy(third_party.JS_AGENT, source / "server.mjs")
    return gateway_capsule(source, name, [node, str(third_party.JS_AGENT), "--port", "{port}",
                                          "--name", name])


def first_child(pid: int) -> int | None:
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children = (task / "children").read_text().split()
            if children:
                return int(children[0])
    return None
