"""What ``mur doctor`` (and the launch) say about an admitted roster's model members.

In order: :func:`model_rows` reads each model member's ``inference`` against the
environment ``mur`` runs in (where the members take their variables from), then
:func:`model_line` words one row for the terminal, and :func:`model_warnings` gives
``W-ROS-004`` for each variable a model member reads that is not set here, which can only
fail the member's first model call. Nothing here reads the key's value beyond whether it
is set; the key is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from launcher.admission.model_agent import VARIABLE, expand
from launcher.diagnostics import Diagnostic, diagnostic

if TYPE_CHECKING:
    from launcher.admission.roster import AdmittedMember, AdmittedRoster

__all__ = ["model_line", "model_rows", "model_warnings"]

ROSTER_FILE = "roster.yaml"


def _model_members(admitted: AdmittedRoster) -> list[AdmittedMember]:
    return [member for member in admitted.members if member.manifest.agent.model is not None]


def model_rows(admitted: AdmittedRoster, environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per model member: its endpoint and model as the member will read them
    (``None`` where a variable is unset with no default), and its bounds and tools."""
    rows = []
    for member in _model_members(admitted):
        inference = member.manifest.inference
        tools = member.manifest.agent.model.tools  # type: ignore[union-attr]
        key_env = inference.api_key_env
        rows.append({
            "member": member.name,
            "base_url": expand(inference.base_url or "", environ),
            "model": expand(inference.model or "", environ),
            "api_key_env": key_env,
            "api_key_set": None if key_env is None else bool(environ.get(key_env, "").strip()),
            "max_turns": inference.max_turns,
            "max_tokens": inference.max_tokens,
            "budget_tokens": inference.budget.tokens,
            "command_tools": [tool.command.name for tool in tools if tool.command is not None],
            "mcp_servers": sum(1 for tool in tools if tool.mcp is not None),
        })
    return rows


def model_line(row: Mapping[str, Any]) -> str:
    """``model planner: gpt-4o-mini at https://…/v1; key OPENAI_API_KEY set; …``."""
    parts = [f"{row['model'] or '(model unset)'} at {row['base_url'] or '(endpoint unset)'}"]
    if row["api_key_env"] is None:
        parts.append("no key")
    else:
        parts.append(f"key {row['api_key_env']} {'set' if row['api_key_set'] else 'NOT SET'}")
    parts.append(f"max_turns {row['max_turns']}")
    if row["max_tokens"] is not None:
        parts.append(f"max_tokens {row['max_tokens']}")
    if row["budget_tokens"] is not None:
        parts.append(f"budget {row['budget_tokens']} tokens")
    tools = list(row["command_tools"])
    if row["mcp_servers"]:
        tools.append(f"{row['mcp_servers']} MCP server{'s' if row['mcp_servers'] > 1 else ''}")
    if tools:
        parts.append("tools: " + ", ".join(tools))
    return f"model {row['member']}: " + "; ".join(parts)


def model_warnings(admitted: AdmittedRoster, environ: Mapping[str, str]) -> list[Diagnostic]:
    """``W-ROS-004`` for each variable a model member reads that is unset here."""
    warnings = []
    for member in _model_members(admitted):
        inference = member.manifest.inference
        if inference.api_key_env and not environ.get(inference.api_key_env, "").strip():
            warnings.append(_unset(member, inference.api_key_env, "inference.api_key_env",
                                   "E-RUN-057", "its key",
                                   f"or, for a server that takes no key, remove "
                                   f"`inference.api_key_env` from the murmur.yaml of "
                                   f"{member.capsule}"))
        for field in ("base_url", "model"):
            value = getattr(inference, field) or ""
            found = VARIABLE.fullmatch(value)
            if found is not None and expand(value, environ) is None:
                warnings.append(_unset(member, found[1], f"inference.{field}", "E-RUN-065",
                                       f"`inference.{field}`",
                                       f"or give it a default in the murmur.yaml of "
                                       f"{member.capsule}: `${{{found[1]}:-...}}`"))
    return warnings


def _unset(member: AdmittedMember, variable: str, field: str, code: str, what: str,
           alternative: str) -> Diagnostic:
    return diagnostic("W-ROS-004", member.field(), file=ROSTER_FILE, field=member.field(),
                      member=member.name, variable=variable, what=what, manifest_field=field,
                      fails_with=code, alternative=alternative)
