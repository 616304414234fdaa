"""murmur.yaml: its schema (docs/admission.md), its refusals, and safe YAML reading."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher import yaml_files
from launcher.diagnostics import DiagnosticError
from launcher.durations import format_duration, parse_duration
from launcher.manifest import (
    Manifest,
    check_files,
    load_manifest,
    parse_manifest,
    read_yaml,
)

DESIGN_EXAMPLE = """\
manifest_version: 1
name: coder                      # ^[a-z][a-z0-9-]{0,31}$
version: 1.2.0                   # kept as its text: 1.10 stays "1.10"
description: Writes code.
agent:                           # exactly one of python | command
  python: coder_agent:run        # module:callable inside the capsule
  # command: [python3, run.py]   # process harness: task text on stdin, result on stdout
  skills: [{id: code, name: Code, description: Writes code, tags: [code]}]
exports:
  peer_tasks: {accept: true}     # default false
network:
  authentication:                # absent: a public door that checks nothing
    bearer: [{name: ci, env: CI_DOOR_TOKEN, scopes: [SendMessage, GetTask]}]
    jwt: [{name: corp, issuer: https://id.example, audience: coder,
           jwks_file: keys/jwks.json, algorithms: [EdDSA, ES256]}]
capabilities:
  network: {allow: [localhost]}  # hosts the runtime's HTTP client may reach
  spawn: {allow: []}             # with network.authentication: E-MAN-003
  env: {allow: [OPENAI_API_KEY]} # environment passed through to the agent
lifecycle:
  task_acceptance: queue         # single | queue
  after_task: sleep              # exit | sleep
  concurrency: 1                 # tasks run at once
  queue_depth: 0                 # tasks held waiting beyond those running
  idle_timeout: 10m              # optional
inference: {max_turns: 8}
trace:
  retain: {max_sessions: 20, max_age: 7d}
"""

MINIMAL = "manifest_version: 1\nname: coder\nversion: 1.0.0\nagent: {python: coder_agent:run}\n"


def refusal(text: str | bytes) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as refused:
        parse_manifest(text)
    return refused.value


def test_the_design_example_parses_into_every_attribute() -> None:
    manifest = parse_manifest(DESIGN_EXAMPLE)
    assert (manifest.name, manifest.version, manifest.description) == (
        "coder", "1.2.0", "Writes code.")
    assert manifest.agent.python == "coder_agent:run"
    assert manifest.agent.command is None
    assert (manifest.agent.module, manifest.agent.function) == ("coder_agent", "run")
    assert manifest.agent.skills[0].id == "code"
    assert manifest.agent.skills[0].tags == ["code"]
    assert manifest.exports.peer_tasks.accept is True
    authentication = manifest.network.authentication
    assert authentication is not None
    assert [(b.name, b.env, b.scopes) for b in authentication.bearer] == [
        ("ci", "CI_DOOR_TOKEN", ["SendMessage", "GetTask"])]
    jwt = authentication.jwt[0]
    assert (jwt.name, jwt.issuer, jwt.audience, jwt.jwks_file, jwt.pem_file) == (
        "corp", "https://id.example", "coder", "keys/jwks.json", None)
    assert jwt.algorithms == ["EdDSA", "ES256"]
    assert "SendStreamingMessage" in jwt.scopes  # no scopes: every task method
    assert manifest.capabilities.network.allow == ["localhost"]
    assert manifest.capabilities.spawn.allow == []
    assert manifest.capabilities.env.allow == ["OPENAI_API_KEY"]
    lifecycle = manifest.lifecycle
    assert (lifecycle.task_acceptance, lifecycle.after_task, lifecycle.concurrency,
            lifecycle.queue_depth, lifecycle.idle_timeout) == ("queue", "sleep", 1, 0, 600)
    assert lifecycle.holds == 1
    assert manifest.inference.max_turns == 8
    assert (manifest.trace.retain.max_sessions, manifest.trace.retain.max_age) == (20, 7 * 86400)


def test_a_minimal_manifest_takes_the_defaults() -> None:
    manifest = parse_manifest(MINIMAL)
    assert manifest.network.authentication is None
    assert manifest.authenticated is False
    assert manifest.serves_peers is False
    assert manifest.capabilities.network.allow == []
    assert (manifest.lifecycle.concurrency, manifest.lifecycle.queue_depth,
            manifest.lifecycle.idle_timeout) == (1, 0, None)
    assert (manifest.trace.retain.max_sessions, manifest.trace.retain.max_age) == (None, None)


def test_empty_authentication_is_a_door_for_operator_and_formation_tokens_only() -> None:
    manifest = parse_manifest(MINIMAL + "network: {authentication: {}}\n")
    assert manifest.network.authentication is not None
    assert manifest.network.authentication.bearer == []
    assert manifest.network.authentication.jwt == []
    assert manifest.authenticated is True


def test_authentication_written_with_no_value_is_refused_not_read_as_public() -> None:
    refused = refusal(MINIMAL + "network:\n  authentication:\n")
    assert refused.code == "E-MAN-001"
    assert "authentication: {}" in refused.diagnostic.hint


def test_a_key_with_no_value_is_absent() -> None:
    manifest = parse_manifest(MINIMAL + "lifecycle:\n  idle_timeout:\n  concurrency: 2\n")
    assert (manifest.lifecycle.idle_timeout, manifest.lifecycle.concurrency) == (None, 2)


@pytest.mark.parametrize("written, text", [
    ("1.10", "1.10"), ("1.0", "1.0"), ("2", "2"), ("1.2.0", "1.2.0"), ('"1.10"', "1.10"),
    ("0x1F", "0x1F"), ("1_000", "1_000"), ("2024-01-01", "2024-01-01"), ("1.0-rc.1", "1.0-rc.1"),
])
def test_versions_keep_their_source_text(written: str, text: str) -> None:
    manifest = parse_manifest(MINIMAL.replace("version: 1.0.0", f"version: {written}"))
    assert manifest.version == text


@pytest.mark.parametrize("version", ["latest", "stable", "edge", "Latest", '""', '" "',
                                     "../x", "1 0", "-1"])
def test_floating_blank_and_unsafe_versions_are_refused(version: str) -> None:
    refused = refusal(MINIMAL.replace("version: 1.0.0", f"version: {version}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "version")


@pytest.mark.parametrize("addition, path", [
    ("colour: blue\n", "colour"),
    ("lifecycle: {concurency: 2}\n", "lifecycle.concurency"),
    ("capabilities: {shell: {baseline_env: []}}\n", "capabilities.shell"),
    ("exports: {peer_tasks: {accept: true, trust: all}}\n", "exports.peer_tasks.trust"),
    ("network: {authentication: {bearer: [{name: ci, env: X, token: abc}]}}\n",
     "network.authentication.bearer[0].token"),
    ("trace: {retain: {max_files: 3}}\n", "trace.retain.max_files"),
])
def test_every_unknown_key_is_e_man_001_naming_its_dotted_path(addition: str,
                                                               path: str) -> None:
    refused = refusal(MINIMAL + addition)
    assert (refused.code, refused.path) == ("E-MAN-001", path)
    assert f"`{path}` is not a key murmur.yaml accepts" in refused.diagnostic.message


def test_an_unknown_key_hint_suggests_the_close_key() -> None:
    refused = refusal(MINIMAL + "lifecycle: {concurency: 2}\n")
    assert "did you mean `concurrency`?" in refused.diagnostic.hint
    assert "queue_depth" in refused.diagnostic.hint


def test_an_unknown_key_inside_a_skill_is_named_by_its_index() -> None:
    refused = refusal(MINIMAL.replace("{python: coder_agent:run}",
                                      "{python: a:run, skills: [{id: a, name: A, idd: 1}]}"))
    assert refused.path == "agent.skills[0].idd"


def test_authentication_beside_spawn_is_e_man_003() -> None:
    refused = refusal(MINIMAL + "network: {authentication: {}}\n"
                      "capabilities: {spawn: {allow: [local/helper]}}\n")
    assert (refused.code, refused.path) == ("E-MAN-003", "capabilities.spawn.allow")
    assert "local/helper" in refused.diagnostic.message


def test_spawn_without_authentication_or_authentication_without_spawn_is_fine() -> None:
    parse_manifest(MINIMAL + "capabilities: {spawn: {allow: [local/helper]}}\n")
    parse_manifest(MINIMAL + "network: {authentication: {}}\ncapabilities: {spawn: {allow: []}}\n")


@pytest.mark.parametrize("agent, path", [
    ("{python: a:run, command: [x]}", "agent"),
    ("{skills: []}", "agent"),
    ("{python: a}", "agent.python"),
    ("{python: 'class:run'}", "agent.python"),
    ("{command: []}", "agent.command"),
    ("{command: ['']}", "agent.command[0]"),
    ("python", "agent"),
])
def test_an_agent_needs_exactly_one_of_python_and_command(agent: str, path: str) -> None:
    refused = refusal(MINIMAL.replace("{python: coder_agent:run}", agent))
    assert (refused.code, refused.path) == ("E-MAN-001", path)


def test_a_command_agent_parses() -> None:
    manifest = parse_manifest(MINIMAL.replace("{python: coder_agent:run}",
                                              "{command: [python3, run.py]}"))
    assert manifest.agent.command == ["python3", "run.py"]
    assert manifest.agent.module is None


@pytest.mark.parametrize("addition, path", [
    ("lifecycle: {concurrency: 0}\n", "lifecycle.concurrency"),
    ("lifecycle: {concurrency: '2'}\n", "lifecycle.concurrency"),
    ("lifecycle: {concurrency: 1.5}\n", "lifecycle.concurrency"),
    ("lifecycle: {concurrency: true}\n", "lifecycle.concurrency"),
    ("lifecycle: {queue_depth: -1}\n", "lifecycle.queue_depth"),
    ("lifecycle: {task_acceptance: many}\n", "lifecycle.task_acceptance"),
    ("lifecycle: {after_task: stop}\n", "lifecycle.after_task"),
    ("lifecycle: {idle_timeout: 10 minutes}\n", "lifecycle.idle_timeout"),
    ("lifecycle: {idle_timeout: 0s}\n", "lifecycle.idle_timeout"),
    ("inference: {max_turns: 0}\n", "inference.max_turns"),
    ("trace: {retain: {max_age: forever}}\n", "trace.retain.max_age"),
    ("exports: {peer_tasks: {accept: 'yes please'}}\n", "exports.peer_tasks.accept"),
    ("capabilities: {network: {allow: ['http://localhost/']}}\n",
     "capabilities.network.allow[0]"),
    ("capabilities: {env: {allow: ['A=B']}}\n", "capabilities.env.allow[0]"),
    ("network: {authentication: {bearer: [{name: ci, env: X, scopes: [Everything]}]}}\n",
     "network.authentication.bearer[0].scopes[0]"),
    ("network: {authentication: {bearer: [{name: ci, env: X, scopes: []}]}}\n",
     "network.authentication.bearer[0].scopes"),
    ("network: {authentication: {bearer: [{name: ci}]}}\n",
     "network.authentication.bearer[0].env"),
    ("network: {authentication: {bearer: [{name: a, env: X}, {name: a, env: Y}]}}\n",
     "network.authentication"),
    ("manifest_version: 2\n", "manifest_version"),
    ("name: Coder\n", "name"),
])
def test_bad_values_are_e_man_001_naming_the_field(addition: str, path: str) -> None:
    lines = dict(line.split(":", 1) for line in MINIMAL.splitlines())
    key = addition.split(":", 1)[0]
    text = "".join(f"{k}:{v}\n" for k, v in lines.items() if k != key) + addition
    refused = refusal(text)
    assert (refused.code, refused.path) == ("E-MAN-001", path)


@pytest.mark.parametrize("algorithm", ["HS256", "none", "hs512", "RS1"])
def test_jwt_algorithms_are_asymmetric_only(algorithm: str) -> None:
    refused = refusal(MINIMAL + "network: {authentication: {jwt: [{name: corp, issuer: i, "
                      f"audience: a, pem_file: k.pem, algorithms: [{algorithm}]}}]}}}}\n")
    assert refused.path == "network.authentication.jwt[0].algorithms[0]"


@pytest.mark.parametrize("keys", ["", "jwks_file: a.json, pem_file: b.pem, "])
def test_a_jwt_issuer_names_exactly_one_key_file(keys: str) -> None:
    refused = refusal(MINIMAL + "network: {authentication: {jwt: [{name: corp, issuer: i, "
                      f"audience: a, {keys}algorithms: [EdDSA]}}]}}}}\n")
    assert refused.path == "network.authentication.jwt[0]"


@pytest.mark.parametrize("key_file", ["/etc/key.pem", "../key.pem", "keys/../../k.pem"])
def test_jwt_key_files_stay_inside_the_capsule(key_file: str) -> None:
    refused = refusal(MINIMAL + "network: {authentication: {jwt: [{name: corp, issuer: i, "
                      f"audience: a, pem_file: '{key_file}', algorithms: [EdDSA]}}]}}}}\n")
    assert refused.path == "network.authentication.jwt[0].pem_file"


# --- durations ---------------------------------------------------------------------------

@pytest.mark.parametrize("written, seconds", [
    ("30s", 30), ("10m", 600), ("2h", 7200), ("7d", 604800), ("2w", 1209600), ("45", 45),
    (90, 90),
])
def test_durations_parse_to_seconds(written: str | int, seconds: int) -> None:
    assert parse_duration(written) == seconds


@pytest.mark.parametrize("written", ["10 minutes", "1.5h", "0s", 0, -5, "", "m", True, None,
                                     "99999999999w", "1h30m"])
def test_bad_durations_are_refused(written: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(written)


@pytest.mark.parametrize("seconds, text", [(600, "10m"), (90, "90s"), (7 * 86400, "1w"),
                                           (86400, "1d")])
def test_durations_format_back_to_their_shortest_form(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


# --- reading YAML safely -----------------------------------------------------------------

BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
       f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
       f"*{chr(97 + i)}]" for i in range(8)]) + "\n"


@pytest.fixture(params=["libyaml", "python"])
def yaml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both parsers the reader may run on: libyaml's, and PyYAML's own where it is missing."""
    if request.param == "python":
        monkeypatch.setattr(yaml_files, "_LOADER", yaml_files._PythonLoader)
    return str(request.param)


@pytest.mark.parametrize("text, problem", [
    ("", "is empty"),
    ("# only a comment\n", "is empty"),
    ("- a\n- b\n", "must hold a mapping"),
    ("just text\n", "must hold a mapping"),
    ("name: x\n\tversion: 1\n", "tab"),
    ("a: &x 1\nb: *x\n", "anchor or alias"),
    (BILLION_LAUGHS, "anchor or alias"),
    ("a: 1\n---\nb: 2\n", "one document"),
    ("a: [1, 2\n", "does not read as YAML"),
    ("a: !!python/object:os.system x\n", "tag"),
    ("a: !custom x\n", "tag"),
    ("a: !!set {x}\n", "tag"),
    ("name: a\nname: b\n", "written twice"),
    ("? [a, b]\n: c\n", "not plain text"),
    ("a:" + " [" * 200 + "\n", "nests deeper"),
    ("a: \x00\n", "character YAML does not allow"),
])
def test_malformed_manifests_are_e_man_002_never_a_traceback(yaml_parser: str, text: str,
                                                              problem: str) -> None:
    refused = refusal(text)
    assert refused.code == "E-MAN-002"
    message = refused.diagnostic.message + refused.diagnostic.hint
    assert problem in message


@pytest.mark.parametrize("data, problem", [
    (b"\xff\xfe\x00n\x00a", "not UTF-8"),
    (b"name: caf\xe9\n", "not UTF-8"),
    (bytes(range(256)), "not UTF-8"),
    (b"a: " + b"x" * (10 * 1024 * 1024), "larger than"),
])
def test_binary_non_utf8_and_huge_manifests_are_refused(data: bytes, problem: str) -> None:
    refused = refusal(data)
    assert refused.code == "E-MAN-002"
    assert problem in refused.diagnostic.message


def test_both_parsers_read_the_design_example_alike(yaml_parser: str) -> None:
    assert parse_manifest(DESIGN_EXAMPLE).version == "1.2.0"


def test_a_billion_laughs_document_is_refused_quickly() -> None:
    started = time.monotonic()
    refusal(BILLION_LAUGHS)
    assert time.monotonic() - started < 1.0


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    assert parse_manifest(b"\xef\xbb\xbf" + MINIMAL.encode()).name == "coder"


def test_yes_and_on_as_keys_stay_text() -> None:
    assert read_yaml("on: 1\nyes: 2\n") == {"on": 1, "yes": 2}


def test_merge_keys_are_plain_unknown_keys() -> None:
    refused = refusal(MINIMAL + "<<: {description: x}\n")
    assert (refused.code, refused.path) == ("E-MAN-001", "<<")


# --- loading from files ------------------------------------------------------------------

def test_load_manifest_reads_a_directory_a_path_or_text(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").write_text(MINIMAL)
    assert load_manifest(tmp_path).name == "coder"
    assert load_manifest(tmp_path / "murmur.yaml").name == "coder"
    assert load_manifest(str(tmp_path / "murmur.yaml")).name == "coder"
    assert load_manifest(MINIMAL).name == "coder"
    assert isinstance(load_manifest(MINIMAL.encode()), Manifest)


def test_a_missing_manifest_is_e_man_002_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(DiagnosticError) as refused:
        load_manifest(tmp_path)
    assert refused.value.code == "E-MAN-002"
    assert refused.value.path == str(tmp_path / "murmur.yaml")


def test_an_unreadable_manifest_is_e_man_002(tmp_path: Path) -> None:
    (tmp_path / "murmur.yaml").mkdir()
    with pytest.raises(DiagnosticError) as refused:
        load_manifest(tmp_path / "murmur.yaml" / ".." / "murmur.yaml")
    assert refused.value.code == "E-MAN-002"


def test_files_the_manifest_names_must_be_in_the_capsule() -> None:
    manifest = parse_manifest(DESIGN_EXAMPLE)
    check_files(manifest, {"coder_agent.py", "keys/jwks.json"}, "murmur.yaml")
    check_files(manifest, {"coder_agent/__init__.py", "keys/jwks.json"}, "murmur.yaml")
    with pytest.raises(DiagnosticError) as refused:
        check_files(manifest, {"coder_agent.py"}, "murmur.yaml")
    assert (refused.value.code, refused.value.path) == (
        "E-MAN-004", "network.authentication.jwt[0].jwks_file")
    with pytest.raises(DiagnosticError) as refused:
        check_files(manifest, {"keys/jwks.json"}, "murmur.yaml")
    assert refused.value.path == "agent.python"
