"""Model members for tests (no tests here): a capsule whose ``agent`` is ``model``,
pointed at a :class:`tests.support.fake_openai.FakeOpenAI`, and a roster of them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.formation import install_capsule

#: The key the tests give their model members (looked for everywhere afterwards).
FAKE_KEY = "sk-fake-key-0123456789-never-written-anywhere"
KEY_ENV = "FAKE_MODEL_KEY"


def write_model_capsule(root: Path, name: str, base_url: str, *, accept_peers: bool = False,
                        authenticated: bool = True, tools: str = "", max_turns: int = 8,
                        budget: int | None = None, content: bool = False,
                        instructions: str | None = None, files: Mapping[str, str] = {},
                        api_key_env: str | None = KEY_ENV, allow: Sequence[str] = (
                            "localhost", "127.0.0.1"), extra: str = "",
                        env_allow: Sequence[str] | None = None, spawn: str = "",
                        model: str = "fake-model", inference: Sequence[str] = ()) -> Path:
    source = root / name
    source.mkdir(parents=True, exist_ok=True)
    for relative, body in files.items():
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    if instructions is not None:
        (source / "MURMUR.md").write_text(instructions)
    inference_lines = ["  transport: http", f"  base_url: {json.dumps(base_url)}",
                       f"  model: {model}", f"  max_turns: {max_turns}"]
    if api_key_env is not None:
        inference_lines.append(f"  api_key_env: {api_key_env}")
    if budget is not None:
        inference_lines.append(f"  budget: {{tokens: {budget}}}")
    inference_lines += [f"  {line}" for line in inference]
    lines = ["manifest_version: 1", f"name: {name}", "version: 1.0.0",
             f"description: The {name} model member.", "agent:", "  model:"]
    lines.append(textwrap.indent(textwrap.dedent(tools).strip(), "    ") if tools.strip()
                 else "    {}")
    lines += ["inference:", *inference_lines,
              "exports:", f"  peer_tasks: {{accept: {'true' if accept_peers else 'false'}}}"]
    if authenticated:
        lines += ["network:", "  authentication: {}"]
    granted = list(env_allow) if env_allow is not None else [api_key_env] if api_key_env \
        else []
    lines += ["capabilities:", f"  network: {{allow: {json.dumps(list(allow))}}}",
              f"  env: {{allow: {json.dumps(granted)}}}"]
    if spawn:
        lines.append(f"  spawn: {spawn}")
    if content:
        lines += ["trace:", "  content: true"]
    (source / "murmur.yaml").write_text("\n".join(lines) + "\n" + extra)
    return source


def model_project(tmp_path: Path, base_url: str, members: Mapping[str, Mapping[str, object]],
                  *, entry: str, reachability: Mapping[str, Sequence[str]]) -> Path:
    """A project with one model capsule per member, installed, and its roster."""
    project = tmp_path / "project"
    project.mkdir()
    called = {name for callees in reachability.values() for name in callees}
    for name, options in members.items():
        source = write_model_capsule(tmp_path / "src", name, base_url,
                                     accept_peers=name in called,
                                     authenticated=bool(reachability), **options)  # type: ignore[arg-type]
        install_capsule(project, source)
    lines = ["roster_version: 1", "members:"]
    for name in members:
        lines += [f"  - name: {name}", f"    capsule: local/{name}", "    version: 1.0.0"]
        if name == entry:
            lines.append("    entry: true")
    if reachability:
        lines.append("reachability:")
        for caller, callees in reachability.items():
            lines += [f"  - from: {caller}", f"    to: [{', '.join(callees)}]"]
    (project / "roster.yaml").write_text("\n".join(lines) + "\n")
    return project
