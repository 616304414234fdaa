"""murmur.yaml: its schema (docs/admission.md), its refusals, and safe YAML reading."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.admission import yaml_files
from launcher.admission.manifest import (
    Manifest,
    UpstreamHeaderError,
    check_files,
    load_manifest,
    parse_manifest,
    read_yaml,
    referenced_files,
)
from launcher.admission.roster import admit
from launcher.admission.store import install, pack
from launcher.diagnostics import DiagnosticError
from launcher.durations import format_duration, parse_duration

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


def test_metrics_is_a_scope_a_credential_has_only_when_it_names_it() -> None:
    manifest = parse_manifest(MINIMAL + "network: {authentication: {bearer: ["
                              "{name: prom, env: PROM, scopes: [Metrics]}, "
                              "{name: ci, env: CI}]}}\n")
    assert manifest.network.authentication is not None
    prom, ci = manifest.network.authentication.bearer
    assert prom.scopes == ["Metrics"]
    assert "Metrics" not in ci.scopes and "GetTask" in ci.scopes    # the default
    refused = refusal(MINIMAL + "network: {authentication: {bearer: "
                      "[{name: prom, env: PROM, scopes: [metrics]}]}}\n")
    assert refused.code == "E-MAN-001"


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


# --- gateway members (agent.a2a) ---------------------------------------------------------

GATEWAY_EXAMPLE = """\
manifest_version: 1
name: relay
version: 1.0.0
agent:
  a2a:
    command: [python3, server.py, --port, "{port}"]   # started by the runtime, or:
    # url: http://10.0.0.5:9999                       # an agent that already runs
    card_path: /.well-known/agent-card.json           # default
    headers: {X-Api-Key: "${AGENT_KEY}"}              # sent upstream; ${VAR} from env.allow
capabilities:
  env: {allow: [AGENT_KEY]}
"""


def a2a(body: str, addition: str = "") -> str:
    """A manifest whose agent is ``a2a: {body}``."""
    return MINIMAL.replace("{python: coder_agent:run}", f"{{a2a: {{{body}}}}}") + addition


def test_the_design_gateway_example_parses_into_what_the_runtime_needs() -> None:
    manifest = parse_manifest(GATEWAY_EXAMPLE)
    gateway = manifest.agent.a2a
    assert gateway is not None
    assert manifest.agent.kind == "a2a"
    assert (manifest.agent.python, manifest.agent.command, manifest.agent.module) == (
        None, None, None)
    assert gateway.command == ["python3", "server.py", "--port", "{port}"]
    assert gateway.url is None
    assert gateway.card_path == "/.well-known/agent-card.json"
    assert gateway.headers == {"X-Api-Key": "${AGENT_KEY}"}
    assert gateway.header_references() == [("X-Api-Key", "AGENT_KEY")]


def test_the_kind_of_a_python_and_a_command_agent_is_unchanged() -> None:
    assert parse_manifest(MINIMAL).agent.kind == "python"
    command = parse_manifest(MINIMAL.replace("{python: coder_agent:run}", "{command: [sh]}"))
    assert (command.agent.kind, command.agent.a2a) == ("command", None)


def test_a_url_gateway_takes_the_default_card_path_and_no_headers() -> None:
    gateway = parse_manifest(a2a("url: 'https://agent.example:8443/'")).agent.a2a
    assert gateway is not None
    assert (gateway.url, gateway.command, gateway.headers) == (
        "https://agent.example:8443/", None, {})
    assert gateway.card_url() == "https://agent.example:8443/.well-known/agent-card.json"


@pytest.mark.parametrize("url", ["http://10.0.0.5:9999", "http://localhost", "https://[::1]:8080",
                                 "http://agent.example/"])
def test_http_and_https_origins_are_accepted_as_urls(url: str) -> None:
    gateway = parse_manifest(a2a(f"url: '{url}'")).agent.a2a
    assert gateway is not None and gateway.url == url


def test_the_command_is_rendered_with_the_port_in_every_argument() -> None:
    gateway = parse_manifest(a2a(
        "command: [python3, server.py, --port, '{port}', '--listen=127.0.0.1:{port}', "
        "'{other}']")).agent.a2a
    assert gateway is not None
    assert gateway.command_for(41234) == ["python3", "server.py", "--port", "41234",
                                          "--listen=127.0.0.1:41234", "{other}"]
    assert gateway.command == ["python3", "server.py", "--port", "{port}",
                               "--listen=127.0.0.1:{port}", "{other}"]  # the model is unchanged
    assert gateway.card_url("http://127.0.0.1:41234") == (
        "http://127.0.0.1:41234/.well-known/agent-card.json")


def test_a_url_gateway_has_no_command_to_render() -> None:
    gateway = parse_manifest(a2a("url: 'http://h:1'")).agent.a2a
    assert gateway is not None
    with pytest.raises(ValueError, match="url, not a command"):
        gateway.command_for(1)


def test_header_values_are_expanded_from_the_given_environment() -> None:
    gateway = parse_manifest(a2a(
        "url: 'http://h:1', headers: {X-Api-Key: '${AGENT_KEY}', Authorization: "
        "'Token ${USER_ID}:${AGENT_KEY}', X-Plain: 'v1 $HOME'}",
        "capabilities: {env: {allow: [AGENT_KEY, USER_ID]}}\n")).agent.a2a
    assert gateway is not None
    expanded = gateway.expand_headers({"AGENT_KEY": "k-1", "USER_ID": "u7", "OTHER": "x"})
    assert expanded == {"X-Api-Key": "k-1", "Authorization": "Token u7:k-1",
                        "X-Plain": "v1 $HOME"}
    assert gateway.headers["X-Api-Key"] == "${AGENT_KEY}"  # the model keeps what was written


def test_a_header_variable_that_is_not_set_is_a_clear_error_naming_it() -> None:
    gateway = parse_manifest(a2a("url: 'http://h:1', headers: {X-Api-Key: '${AGENT_KEY}'}",
                                 "capabilities: {env: {allow: [AGENT_KEY]}}\n")).agent.a2a
    assert gateway is not None
    with pytest.raises(UpstreamHeaderError) as missing:
        gateway.expand_headers({})
    assert "AGENT_KEY" in str(missing.value)
    assert "agent.a2a.headers.X-Api-Key" in str(missing.value)


@pytest.mark.parametrize("secret", ["k\r\nX-Injected: 1", "k\nHost: evil", "k\x00", "k\u00e9"])
def test_header_injection_through_an_environment_value_is_refused_at_expansion(
        secret: str) -> None:
    gateway = parse_manifest(a2a("url: 'http://h:1', headers: {X-Api-Key: '${AGENT_KEY}'}",
                                 "capabilities: {env: {allow: [AGENT_KEY]}}\n")).agent.a2a
    assert gateway is not None
    with pytest.raises(UpstreamHeaderError) as refused:
        gateway.expand_headers({"AGENT_KEY": secret})
    assert "AGENT_KEY" in str(refused.value) and "X-Api-Key" in str(refused.value)
    assert secret not in str(refused.value) and "Injected" not in str(refused.value)


def test_an_oversized_environment_value_is_refused_at_expansion() -> None:
    gateway = parse_manifest(a2a("url: 'http://h:1', headers: {X-Api-Key: '${AGENT_KEY}'}",
                                 "capabilities: {env: {allow: [AGENT_KEY]}}\n")).agent.a2a
    assert gateway is not None
    with pytest.raises(UpstreamHeaderError, match="longer than 8192"):
        gateway.expand_headers({"AGENT_KEY": "k" * 8193})
    assert gateway.expand_headers({"AGENT_KEY": "k" * 8192})["X-Api-Key"] == "k" * 8192


@pytest.mark.parametrize("body, path, message, hint", [
    ("url: 'http://h:1', command: [x]", "agent.a2a", "exactly one of `command` and `url`",
     "url: http://host:port"),
    ("card_path: /card.json", "agent.a2a", "exactly one of `command` and `url`",
     "command: [program, args...]"),
    ("url: 'ftp://files.example'", "agent.a2a.url", "`http://` or `https://`",
     "http://10.0.0.5:9999"),
    ("url: 'file:///etc/passwd'", "agent.a2a.url", "`http://` or `https://`",
     "`http` or `https`, a host"),
    ("url: 'agent.example:9999'", "agent.a2a.url", "`http://` or `https://`",
     "`http` or `https`, a host"),
    ("url: 'http://'", "agent.a2a.url", "must name a host", "`http` or `https`, a host"),
    ("url: 'http://:9999'", "agent.a2a.url", "must name a host", "`http` or `https`, a host"),
    ("url: 'http://h:99999'", "agent.a2a.url", "valid host and port", "an optional port"),
    ("url: 'http://h:1/a2a'", "agent.a2a.url", "no path, query or fragment", "no path"),
    ("url: 'http://h:1?x=1'", "agent.a2a.url", "no path, query or fragment", "no path"),
    ("url: 'http://h:{port}'", "agent.a2a.url", "holds `{port}`", "use `command`"),
    ("url: 'http://h:1', colour: blue", "agent.a2a.colour", "is not a key murmur.yaml accepts",
     "card_path, command, headers, url"),
    ("url: 'http://h:1', port: 8080", "agent.a2a.port", "is not a key murmur.yaml accepts",
     "card_path, command, headers, url"),
    ("command: []", "agent.a2a.command", "must not be empty", '[python3, server.py'),
    ("command: 'python3 server.py'", "agent.a2a.command", "must be a list", "write a list"),
    ("command: [python3, 8080]", "agent.a2a.command[1]", "must be text", "write text"),
    ("command: [python3, '']", "agent.a2a.command[1]", "must not be blank", "write a value"),
    ("command: {python3: x}", "agent.a2a.command", "must be a list", "write a list"),
    ("url: 'http://h:1', headers: {'X Api': v}", "agent.a2a.headers.X Api",
     "not a valid HTTP header name", "`X-Api-Key`"),
    ("url: 'http://h:1', headers: {'X:Api': v}", "agent.a2a.headers.X:Api",
     "not a valid HTTP header name", "`X-Api-Key`"),
    ("url: 'http://h:1', headers: {'': v}", "agent.a2a.headers.", "not a valid HTTP header name",
     "`X-Api-Key`"),
    ("url: 'http://h:1', headers: {X-Api: 3}", "agent.a2a.headers.X-Api", "must be text",
     "write text"),
    ("url: 'http://h:1', headers: [X-Api]", "agent.a2a.headers", "must be a mapping",
     "write a mapping"),
    ("url: 'http://h:1', headers: {X-Api: '${}'}", "agent.a2a.headers.X-Api",
     "not an environment variable name", "letters, digits and `_`"),
    ("url: 'http://h:1', headers: {X-Api: '${KEY'}", "agent.a2a.headers.X-Api",
     "does not start a `${VAR}` reference", "`${NAME}`"),
    ("url: 'http://h:1', headers: {X-Api: ' v'}", "agent.a2a.headers.X-Api",
     "white space", "printable text"),
    ("url: 'http://h:1', card_path: agent-card.json", "agent.a2a.card_path",
     "must start with one `/`", "`/.well-known/agent-card.json`"),
    ("url: 'http://h:1', card_path: ''", "agent.a2a.card_path", "must start with one `/`",
     "`/.well-known/agent-card.json`"),
    ("url: 'http://h:1', card_path: '/card.json?v=1'", "agent.a2a.card_path",
     "query or a fragment", "an absolute path"),
    ("url: 'http://h:1', card_path: '/card.json#x'", "agent.a2a.card_path",
     "query or a fragment", "an absolute path"),
])
def test_a_gateway_refusal_names_the_field_and_what_is_accepted(body: str, path: str,
                                                                message: str,
                                                                hint: str) -> None:
    refused = refusal(a2a(body))
    assert (refused.code, refused.path) == ("E-MAN-001", path)
    assert f"`{path}`" in refused.diagnostic.message
    assert message in refused.diagnostic.message
    assert hint in refused.diagnostic.hint


@pytest.mark.parametrize("agent", ["{python: a:run, a2a: {url: 'http://h:1'}}",
                                   "{command: [x], a2a: {url: 'http://h:1'}}",
                                   "{python: a:run, command: [x], a2a: {url: 'http://h:1'}}"])
def test_an_agent_is_exactly_one_of_python_command_a2a_and_model(agent: str) -> None:
    refused = refusal(MINIMAL.replace("{python: coder_agent:run}", agent))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent")
    assert "exactly one of `python`, `command`, `a2a` and `model`" in refused.diagnostic.message
    assert "a2a: {url: ...}" in refused.diagnostic.hint


def test_skills_beside_a2a_are_refused_as_the_upstreams_own() -> None:
    refused = refusal(MINIMAL.replace("{python: coder_agent:run}",
                                      "{a2a: {url: 'http://h:1'}, skills: [{id: a, name: A}]}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.skills")
    assert "upstream" in refused.diagnostic.message


AUTHENTICATED = MINIMAL + "network: {authentication: {}}\n"


def with_agent(keys: str, base: str = AUTHENTICATED) -> str:
    return base.replace("{python: coder_agent:run}", "{python: coder_agent:run, " + keys + "}")


def test_input_modes_default_to_plain_text_and_take_media_types_and_wildcards() -> None:
    assert parse_manifest(MINIMAL).agent.input_modes == ["text/plain"]
    manifest = parse_manifest(with_agent(
        "input_modes: [text/plain, 'Application/JSON; charset=utf-8', 'image/*', '*/*']"))
    assert manifest.agent.input_modes == ["text/plain", "Application/JSON; charset=utf-8",
                                          "image/*", "*/*"]


@pytest.mark.parametrize("modes, problem", [
    ("[png]", "`agent.input_modes[0]` must be a media type such as `text/plain`, and `png`"),
    ("[text/plain, 'image/']", "`agent.input_modes[1]` must be a media type"),
    ("['*/png']", "`agent.input_modes[0]` is `*/png`: a wildcard type is `*/*`"),
    ("[text]", "`agent.input_modes[0]` must be a media type"),
    ("[]", "`agent.input_modes` must have at least 1"),
    ("[5]", "`agent.input_modes[0]` must be text"),
])
def test_input_modes_that_are_no_media_types_are_e_man_001_naming_the_entry(
        modes: str, problem: str) -> None:
    refused = refusal(with_agent(f"input_modes: {modes}"))
    assert refused.code == "E-MAN-001"
    assert refused.path.startswith("agent.input_modes")
    assert problem in refused.diagnostic.message
    if "media type" in problem:
        assert "`type/subtype`" in refused.diagnostic.hint


def test_input_modes_beside_a2a_are_taken_in_place_of_the_upstream_cards() -> None:
    # fasta2a's card always says application/json though its agents take text.
    written = parse_manifest(MINIMAL.replace(
        "{python: coder_agent:run}",
        "{a2a: {url: 'http://h:1'}, input_modes: [text/plain, application/json]}"))
    assert written.agent.declares_input_modes
    assert written.agent.input_modes == ["text/plain", "application/json"]
    left_out = parse_manifest(MINIMAL.replace("{python: coder_agent:run}",
                                              "{a2a: {url: 'http://h:1'}}"))
    assert not left_out.agent.declares_input_modes


def test_extended_skills_are_absent_by_default_and_read_like_skills() -> None:
    assert parse_manifest(AUTHENTICATED).agent.extended_skills is None
    manifest = parse_manifest(with_agent(
        "skills: [{id: code, name: Code}], "
        "extended_skills: [{id: audit, name: Audit, description: Audits, tags: [sec]}]"))
    [skill] = manifest.agent.extended_skills or []
    assert (skill.id, skill.name, skill.description, skill.tags) == (
        "audit", "Audit", "Audits", ["sec"])


@pytest.mark.parametrize("keys, path, problem", [
    ("extended_skills: []", "agent.extended_skills", "is an empty list"),
    ("skills: [{id: a, name: A}], extended_skills: [{id: a, name: B}]",
     "agent.extended_skills", "gives the skill id `a` twice"),
    ("extended_skills: [{id: b, name: B}, {id: b, name: C}]", "agent.extended_skills",
     "gives the skill id `b` twice"),
    ("extended_skills: [{id: b}]", "agent.extended_skills[0].name", "required"),
    ("extended_skills: [{id: b, name: B, level: 3}]", "agent.extended_skills[0].level", ""),
])
def test_bad_extended_skills_are_e_man_001_naming_the_field(keys: str, path: str,
                                                            problem: str) -> None:
    refused = refusal(with_agent(keys))
    assert (refused.code, refused.path) == ("E-MAN-001", path)
    assert problem in refused.diagnostic.message


def test_extended_skills_at_a_public_door_are_refused_naming_the_fix() -> None:
    refused = refusal(with_agent("extended_skills: [{id: a, name: A}]", base=MINIMAL))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.extended_skills")
    assert "authenticates nobody" in refused.diagnostic.message
    assert "network: {authentication: {}}" in refused.diagnostic.hint


def test_extended_skills_beside_a2a_are_the_doors_own() -> None:
    manifest = parse_manifest(AUTHENTICATED.replace(
        "{python: coder_agent:run}",
        "{a2a: {url: 'http://h:1'}, extended_skills: [{id: a, name: A}]}"))
    assert [skill.id for skill in manifest.agent.extended_skills or []] == ["a"]


@pytest.mark.parametrize("value", ['"a\\r\\nX-Injected: 1"', '"a\\nb"', '"a\\rb"', '"a\\x7fb"'])
def test_header_injection_through_a_crlf_value_in_the_manifest_is_refused(value: str) -> None:
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{X-Api: {value}}}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers.X-Api")
    assert "line break" in refused.diagnostic.message
    assert "Injected" not in refused.diagnostic.message + refused.diagnostic.hint


def test_reading_an_ungranted_variable_through_a_header_is_refused() -> None:
    # Only the granted environment reaches the upstream: a header must not reach further.
    refused = refusal(a2a("url: 'http://h:1', headers: {X-Api-Key: 'k ${AGENT_KEY}', "
                          "X-Home: '${HOME}'}",
                          "capabilities: {env: {allow: [AGENT_KEY]}}\n"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers.X-Home")
    assert "`${HOME}`" in refused.diagnostic.message
    assert "capabilities.env.allow" in refused.diagnostic.message
    assert refused.diagnostic.hint == "add HOME to capabilities.env.allow"


def test_a_header_variable_is_refused_when_no_env_grant_is_written() -> None:
    refused = refusal(a2a("command: [x], headers: {X-Api-Key: '${AGENT_KEY}'}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers.X-Api-Key")
    assert refused.diagnostic.hint == "add AGENT_KEY to capabilities.env.allow"


@pytest.mark.parametrize("value", ["Bearer abcdefghijklmnopqrstuvwxyz0123",
                                   "mft1.abcdefgh.ijklmnop", "x bearer abcdefghijklmnopqrstuvwxyz"])
def test_a_credential_written_into_a_header_value_is_refused_and_never_quoted(
        value: str) -> None:
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{Authorization: '{value}'}}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers.Authorization")
    assert "credential written into murmur.yaml" in refused.diagnostic.message
    assert "${VAR}" in refused.diagnostic.hint
    assert "abcdefgh" not in refused.diagnostic.message + refused.diagnostic.hint


def test_a_scheme_word_before_a_variable_is_not_taken_for_a_credential() -> None:
    gateway = parse_manifest(a2a("url: 'http://h:1', headers: {Authorization: "
                                 "'Bearer ${AGENT_KEY}'}",
                                 "capabilities: {env: {allow: [AGENT_KEY]}}\n")).agent.a2a
    assert gateway is not None
    assert gateway.expand_headers({"AGENT_KEY": "k"}) == {"Authorization": "Bearer k"}


@pytest.mark.parametrize("url", ["http://user:s3cret-pass@h:1", "ftp://user:s3cret-pass@h",
                                 "http://user:s3cret-pass@h:99999"])
def test_a_password_in_the_url_is_refused_and_never_quoted(url: str) -> None:
    refused = refusal(a2a(f"url: '{url}'"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.url")
    assert "user or password" in refused.diagnostic.message
    assert "s3cret" not in refused.diagnostic.message + refused.diagnostic.hint


@pytest.mark.parametrize("card_path", ["//evil.example/card.json", "/a/../../card.json",
                                       "/a/%2e%2e/card.json", "/a/./card.json",
                                       "/a\\\\..\\\\card.json", "/a b.json"])
def test_a_card_path_escaping_to_another_host_or_path_is_refused(card_path: str) -> None:
    refused = refusal(a2a(f"url: 'http://h:1', card_path: \"{card_path}\""))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.card_path")
    assert "/.well-known/agent-card.json" in refused.diagnostic.hint


@pytest.mark.parametrize("name", ["Host", "content-length", "Transfer-Encoding", "Connection",
                                  "A2A-Version", "X-Murmur-Caller", "x-murmur-session"])
def test_smuggling_through_a_framing_or_door_header_is_refused(name: str) -> None:
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{{name}: x}}"))
    assert (refused.code, refused.path) == ("E-MAN-001", f"agent.a2a.headers.{name}")
    assert "the door writes itself" in refused.diagnostic.message


def test_a_header_repeated_in_another_case_is_refused() -> None:
    refused = refusal(a2a("url: 'http://h:1', headers: {X-Api-Key: a, x-api-key: b}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers.x-api-key")
    assert "`X-Api-Key`" in refused.diagnostic.message


def test_too_many_or_too_long_headers_are_refused() -> None:
    many = ", ".join(f"X-H{index}: v" for index in range(33))
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{{many}}}"))
    assert (refused.code, refused.path) == ("E-MAN-001", "agent.a2a.headers")
    assert "more than 32" in refused.diagnostic.message
    assert parse_manifest(a2a("url: 'http://h:1', headers: {"
                              + ", ".join(f"X-H{index}: v" for index in range(32)) + "}"))
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{X-Long: '{'v' * 8193}'}}"))
    assert refused.path == "agent.a2a.headers.X-Long"
    refused = refusal(a2a(f"url: 'http://h:1', headers: {{{'X' * 129}: v}}"))
    assert refused.code == "E-MAN-001" and "at most 128" in refused.diagnostic.message
    refused = refusal(a2a(f"url: 'http://h{'o' * 2048}.example'"))
    assert refused.path == "agent.a2a.url" and "longer than 2048" in refused.diagnostic.message


def test_a_gateway_names_no_file_for_pack_and_install_to_check() -> None:
    manifest = parse_manifest(GATEWAY_EXAMPLE)
    assert referenced_files(manifest) == []
    check_files(manifest, set(), "murmur.yaml")  # nothing to find: never E-MAN-004


def test_a_gateway_capsule_is_packed_installed_and_admitted_unchanged(tmp_path: Path) -> None:
    source, project = tmp_path / "relay", tmp_path / "project"
    source.mkdir()
    project.mkdir()
    (source / "murmur.yaml").write_text(GATEWAY_EXAMPLE + "network: {authentication: {}}\n")
    (source / "server.py").write_text("print('an A2A server')\n")
    installed, _ = install(pack(source, tmp_path / "relay.mur.zip").path, project)
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: relay, capsule: local/relay, version: 1.0.0, entry: true}\n")
    admitted = admit(project)
    member = admitted.member("relay")
    assert member.sha256 == installed.sha256
    assert member.manifest.agent.kind == "a2a"
    assert member.manifest.agent.a2a == parse_manifest(GATEWAY_EXAMPLE).agent.a2a
