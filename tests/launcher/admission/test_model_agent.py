"""A model member's manifest (`agent.model` and `inference`, docs/llm.md): what admission
accepts and refuses, through `parse_manifest`, and how `${VAR}` expands."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.admission.manifest import parse_manifest, referenced_files
from launcher.admission.model_agent import expand, url_problem
from launcher.diagnostics import DiagnosticError

INFERENCE: dict[str, Any] = {"transport": "http", "base_url": "https://api.example.com/v1",
                             "model": "gpt-4o-mini", "api_key_env": "K"}


def manifest(*, agent: dict[str, Any] | None = None, env: tuple[str, ...] = ("K",),
             network: tuple[str, ...] = ("api.example.com",), drop: tuple[str, ...] = (),
             **inference: Any) -> str:
    """A model member's murmur.yaml (JSON is YAML): `inference` overrides or adds keys,
    `drop` removes them."""
    settings = {key: value for key, value in {**INFERENCE, **inference}.items()
                if key not in drop}
    return json.dumps({
        "manifest_version": 1, "name": "planner", "version": "1.0.0",
        "agent": {"model": {}} if agent is None else agent,
        "capabilities": {"network": {"allow": list(network)}, "env": {"allow": list(env)}},
        "inference": settings})


def refusal(text: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as refused:
        parse_manifest(text)
    return refused.value


def tool(name: str, argv: tuple[str, ...] = ("wc", "-w")) -> dict[str, Any]:
    return {"command": {"name": name, "argv": list(argv)}}


# --- what is admitted ---------------------------------------------------------------------


def test_a_valid_model_manifest_parses_into_a_model_agent_that_runs_turns() -> None:
    parsed = parse_manifest(manifest(max_turns=4, max_tokens=2048, temperature=0.2,
                                     budget={"tokens": 200000}))
    assert parsed.agent.kind == "model"
    assert parsed.agent.runs_turns is True
    assert parsed.agent.python is None
    inference = parsed.inference
    assert (inference.transport, inference.base_url, inference.model, inference.api_key_env) \
        == ("http", "https://api.example.com/v1", "gpt-4o-mini", "K")
    assert (inference.max_turns, inference.max_tokens, inference.temperature,
            inference.budget.tokens) == (4, 2048, 0.2, 200000)


def test_a_model_member_without_a_key_needs_no_env_grant() -> None:
    parsed = parse_manifest(manifest(env=(), drop=("api_key_env",)))
    assert parsed.inference.api_key_env is None


def test_a_wildcard_grant_admits_a_host_below_it() -> None:
    parsed = parse_manifest(manifest(network=("*.example.com",)))
    assert parsed.inference.base_url == "https://api.example.com/v1"


def test_a_granted_ipv6_loopback_base_url_is_admitted() -> None:
    parsed = parse_manifest(manifest(base_url="http://[::1]:8080/v1", network=("[::1]",)))
    assert parsed.inference.base_url == "http://[::1]:8080/v1"


def test_a_granted_host_with_a_port_admits_its_base_url() -> None:
    parsed = parse_manifest(manifest(base_url="http://gpu-box:8000/v1",
                                     network=("gpu-box:8000",)))
    assert parsed.inference.base_url == "http://gpu-box:8000/v1"


def test_a_localhost_grant_admits_a_loopback_address_base_url() -> None:
    parsed = parse_manifest(manifest(base_url="http://127.0.0.1:11434/v1",
                                     network=("localhost",)))
    assert parsed.inference.base_url == "http://127.0.0.1:11434/v1"


def test_instructions_are_a_file_the_manifest_references() -> None:
    parsed = parse_manifest(manifest(agent={"model": {"instructions": "prompts/x.md"}}))
    assert ("agent.model.instructions", ("prompts/x.md",)) in referenced_files(parsed)


def test_a_model_agent_without_instructions_references_no_file() -> None:
    assert referenced_files(parse_manifest(manifest())) == []


# --- the agent and the transport ----------------------------------------------------------


def test_an_agent_with_both_python_and_model_is_refused_at_agent() -> None:
    refused = refusal(manifest(agent={"python": "coder_agent:run", "model": {}}))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent")
    assert "exactly one of" in refused.diagnostic.message


@pytest.mark.parametrize("key", ["transport", "base_url", "model"])
def test_a_model_agent_without_each_inference_setting_is_refused_naming_it(key: str) -> None:
    refused = refusal(manifest(drop=(key,)))
    assert refused.code == "E-MAN-001"
    assert refused.path == f"inference.{key}"


def test_http_transport_on_a_python_agent_is_refused() -> None:
    text = json.dumps({"manifest_version": 1, "name": "coder", "version": "1.0.0",
                       "agent": {"python": "coder_agent:run"},
                       "inference": {"transport": "http"}})
    refused = refusal(text)
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.transport")
    assert "not a model" in refused.diagnostic.message


def test_a_transport_other_than_http_is_refused() -> None:
    refused = refusal(manifest(transport="grpc"))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.transport")


# --- grants -------------------------------------------------------------------------------


def test_a_key_variable_outside_the_env_grant_is_refused_with_the_fix() -> None:
    refused = refusal(manifest(env=()))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.api_key_env")
    assert "`K`" in refused.diagnostic.message
    assert "add K to capabilities.env.allow" in refused.diagnostic.hint


def test_a_literal_base_url_outside_the_network_grant_is_refused_naming_its_host() -> None:
    refused = refusal(manifest(base_url="https://api.openai.com/v1"))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.base_url")
    assert "api.openai.com" in refused.diagnostic.message
    assert "add api.openai.com to capabilities.network.allow" in refused.diagnostic.hint


def test_a_wildcard_grant_does_not_admit_the_bare_domain() -> None:
    refused = refusal(manifest(base_url="https://example.com/v1", network=("*.example.com",)))
    assert refused.path == "inference.base_url"
    assert "example.com" in refused.diagnostic.message


def test_an_ipv6_base_url_outside_the_grant_is_refused() -> None:
    refused = refusal(manifest(base_url="http://[::1]:8080/v1"))
    assert refused.path == "inference.base_url"
    assert "::1" in refused.diagnostic.message


@pytest.mark.parametrize("value", ["${VAR}", "${VAR:-https://x.example/v1}"])
def test_a_variable_base_url_outside_the_env_grant_is_refused(value: str) -> None:
    refused = refusal(manifest(base_url=value))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.base_url")
    assert "${VAR}" in refused.diagnostic.message
    assert "add VAR to capabilities.env.allow" in refused.diagnostic.hint


@pytest.mark.parametrize("value", ["${VAR}", "${VAR:-https://x.example/v1}"])
def test_a_granted_variable_base_url_is_admitted_without_a_network_grant(value: str) -> None:
    parsed = parse_manifest(manifest(base_url=value, env=("K", "VAR"), network=()))
    assert parsed.inference.base_url == value


def test_a_variable_model_outside_the_env_grant_is_refused() -> None:
    refused = refusal(manifest(model="${M:-gpt}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.model")
    assert "add M to capabilities.env.allow" in refused.diagnostic.hint


def test_a_granted_variable_model_is_admitted() -> None:
    assert parse_manifest(manifest(model="${M:-gpt}", env=("K", "M"))).inference.model \
        == "${M:-gpt}"


# --- the base URL's form ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["ftp://h/v1", "https://api.example.com/v1?x=1",
                                   "https://user:pw@api.example.com/v1", "api.example.com/v1",
                                   "https://api.example.com:99999/v1", "${VAR}/v1"])
def test_a_base_url_that_is_not_a_plain_http_url_is_refused(value: str) -> None:
    refused = refusal(manifest(base_url=value, network=("*.example.com", "h")))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.base_url")


def test_a_variable_default_that_is_not_a_url_is_refused() -> None:
    refused = refusal(manifest(base_url="${VAR:-not a url}", env=("K", "VAR")))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.base_url")
    assert "not a url" in refused.diagnostic.message


def test_url_problem_names_what_is_wrong() -> None:
    assert url_problem("https://api.example.com/v1") is None
    assert "no query" in (url_problem("https://h/v1#frag") or "")
    assert "http or https" in (url_problem("ftp://h/v1") or "")
    assert "longer than" in (url_problem("https://h/" + "a" * 2100) or "")


# --- tools and bounds ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["call_member", "delegate", "two words", "x" * 65])
def test_a_command_tool_with_a_runtime_or_bad_name_is_refused(name: str) -> None:
    refused = refusal(manifest(agent={"model": {"tools": [tool(name)]}}))
    assert refused.code == "E-MAN-001"
    assert refused.path == "agent.model.tools[0].command.name"


def test_two_command_tools_with_the_same_name_are_refused() -> None:
    refused = refusal(manifest(agent={"model": {"tools": [tool("count"), tool("count")]}}))
    assert refused.code == "E-MAN-001"
    assert "same `name`" in refused.diagnostic.message


def test_distinct_command_tools_and_an_mcp_server_are_admitted() -> None:
    parsed = parse_manifest(manifest(agent={"model": {"tools": [
        tool("count"), tool("lines", ("wc", "-l")), {"mcp": ["python3", "tools/server.py"]}]}}))
    assert parsed.agent.model is not None
    assert [t.command.name if t.command else t.mcp for t in parsed.agent.model.tools] == [
        "count", "lines", ["python3", "tools/server.py"]]


@pytest.mark.parametrize("entry", [
    {"mcp": ["python3", "server.py"], "command": {"name": "count", "argv": ["wc"]}}, {}])
def test_a_tool_with_both_or_neither_of_mcp_and_command_is_refused(
        entry: dict[str, Any]) -> None:
    refused = refusal(manifest(agent={"model": {"tools": [entry]}}))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.model.tools[0]")
    assert "exactly one of `mcp` and `command`" in refused.diagnostic.message


@pytest.mark.parametrize(("key", "value", "path"), [
    ("temperature", 3, "inference.temperature"),
    ("temperature", -0.1, "inference.temperature"),
    ("budget", {"tokens": 0}, "inference.budget.tokens"),
    ("max_turns", 0, "inference.max_turns"),
    ("max_tokens", 0, "inference.max_tokens"),
])
def test_a_setting_out_of_bounds_is_refused(key: str, value: Any, path: str) -> None:
    refused = refusal(manifest(**{key: value}))
    assert (refused.code, refused.path) == ("E-MAN-001", path)


def test_an_unknown_inference_key_is_refused() -> None:
    refused = refusal(manifest(api_key="sk-literal"))
    assert (refused.code, refused.path) == ("E-MAN-001", "inference.api_key")


# --- expansion ----------------------------------------------------------------------------


def test_expand_uses_the_default_when_the_variable_is_unset() -> None:
    assert expand("${A:-d}", {}) == "d"


def test_expand_prefers_the_variable_over_the_default() -> None:
    assert expand("${A:-d}", {"A": "v"}) == "v"


def test_expand_of_an_empty_variable_falls_back_to_the_default() -> None:
    assert expand("${A:-d}", {"A": "  "}) == "d"


def test_expand_of_an_unset_variable_without_a_default_is_none() -> None:
    assert expand("${A}", {}) is None
    assert expand("${A}", {"A": ""}) is None


def test_expand_passes_a_literal_through() -> None:
    assert expand("https://api.example.com/v1", {"A": "v"}) == "https://api.example.com/v1"
    assert expand("x${A}", {"A": "v"}) == "x${A}"
