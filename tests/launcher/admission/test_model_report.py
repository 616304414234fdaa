"""What doctor and the launch say of model members (launcher/admission/model_report.py):
rows read against the environment, the line, and ``W-ROS-004`` for each unset variable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.admission.manifest import parse_manifest
from launcher.admission.model_report import model_line, model_rows, model_warnings
from launcher.admission.roster import AdmittedMember, AdmittedRoster


def roster(**inference: Any) -> AdmittedRoster:
    """One model member, ``planner``, whose ``inference`` takes ``inference``'s keys."""
    settings = {"transport": "http", "base_url": "https://api.example.com/v1",
                "model": "gpt-4o-mini", "api_key_env": "K", **inference}
    settings = {key: value for key, value in settings.items() if value is not None}
    manifest = parse_manifest(json.dumps({
        "manifest_version": 1, "name": "planner", "version": "1.0.0",
        "agent": {"model": {"tools": [{"command": {"name": "shout", "argv": ["cat"]}},
                                      {"mcp": ["python3", "server.py"]}]}},
        "capabilities": {"network": {"allow": ["api.example.com"]},
                         "env": {"allow": ["K", "URL", "MODEL"]}},
        "inference": settings}))
    member = AdmittedMember(name="planner", capsule="local/planner", version="1.0.0",
                            entry=True, sha256="0" * 64, artifact=Path("planner.capsule"),
                            manifest=manifest, store="project", index=0)
    return AdmittedRoster(project_dir=Path("."), members=(member,), edges=frozenset())


def test_a_row_reads_variables_from_the_environment_and_never_holds_the_key() -> None:
    admitted = roster(base_url="${URL:-http://localhost:11434/v1}", model="${MODEL}",
                      budget={"tokens": 900})
    [row] = model_rows(admitted, {"K": "secret-value", "MODEL": "llama3.1"})
    assert row == {"member": "planner", "base_url": "http://localhost:11434/v1",
                   "model": "llama3.1", "api_key_env": "K", "api_key_set": True,
                   "max_turns": 8, "max_tokens": None, "budget_tokens": 900,
                   "command_tools": ["shout"], "mcp_servers": 1}
    assert "secret-value" not in json.dumps(row)
    assert model_line(row) == ("model planner: llama3.1 at http://localhost:11434/v1; key K "
                               "set; max_turns 8; budget 900 tokens; tools: shout, 1 MCP "
                               "server")


def test_an_unset_key_and_an_unset_variable_with_no_default_are_warned_of() -> None:
    admitted = roster(base_url="${URL}", model="${MODEL:-gpt-4o-mini}")
    warnings = model_warnings(admitted, {"K": "  "})
    assert [warning.code for warning in warnings] == ["W-ROS-004", "W-ROS-004"]
    key, url = warnings
    assert "`K` (inference.api_key_env)" in key.message and "E-RUN-057" in key.message
    assert "remove `inference.api_key_env`" in key.hint
    assert "`URL` (inference.base_url)" in url.message and "E-RUN-065" in url.message
    assert "${URL:-...}" in url.hint
    [row] = model_rows(admitted, {})
    assert (row["base_url"], row["model"], row["api_key_set"]) == (None, "gpt-4o-mini", False)
    assert "(endpoint unset)" in model_line(row) and "key K NOT SET" in model_line(row)


def test_a_member_with_no_key_and_its_variables_set_is_not_warned_of() -> None:
    admitted = roster(api_key_env=None, base_url="${URL}")
    assert model_warnings(admitted, {"URL": "http://localhost:8080/v1"}) == []
    assert "no key" in model_line(model_rows(admitted, {"URL": "http://x:1/v1"})[0])
