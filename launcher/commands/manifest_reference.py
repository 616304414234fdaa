"""``docs/manifest.md``: every key ``murmur.yaml`` accepts, generated from the manifest's
own model (``python -m launcher.commands.manifest_reference --write-docs``; a test fails
when the page is stale or a key has no meaning written here), so the page lists exactly
what admission accepts.

In this order: :data:`MEANINGS` (one row a key: what it means, an example), the walk
over the model (each key's dotted path, its type and default, read from the model), and
the page.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from launcher.admission.manifest import Duration, Manifest
from launcher.generated_pages import page_command

DOCS_PATH = Path(__file__).resolve().parents[2] / "docs" / "manifest.md"

#: Every key: (what it means, an example value as YAML). The one table the page is
#: written from; a key of the model missing here fails the test.
MEANINGS: dict[str, tuple[str, str]] = {
    "manifest_version": ("The format of this file. Must be `1`.", "1"),
    "name": ("The capsule's name, `^[a-z][a-z0-9-]{0,31}$`; installed as `local/<name>`.",
             "coder"),
    "version": ("The capsule's exact version, kept as its text (`1.10` stays `1.10`); "
                "letters, digits, `.`, `_`, `+`, `-`; not `latest`, `stable` or `edge`.",
                "1.2.0"),
    "description": ("What the agent does, in a sentence: the agent card's description.",
                    "Writes code."),
    "agent": ("What runs each task: exactly one of `python`, `command`, `a2a` and `model`.",
              "{python: coder_agent:run}"),
    "agent.python": ("`module:callable` inside the capsule: an `async def run(task)` "
                     "called once per turn (docs/agent-api.md).",
                     "coder_agent:run"),
    "agent.command": ("A process harness, run once per task: the task text on stdin, "
                      "the result on stdout, a non-zero exit fails the task.",
                      "[python3, run.py]"),
    "agent.a2a": ("An A2A server of its own, any language, behind the door "
                  "(docs/gateway.md): exactly one of `command` and `url`.",
                  '{command: [python3, server.py, --port, "{port}"]}'),
    "agent.a2a.command": ("The server to start; `{port}` (and `PORT`) is the loopback "
                          "port the runtime picked.", '[node, server.mjs, "{port}"]'),
    "agent.a2a.url": ("The address of an A2A agent that already runs.",
                      "http://10.0.0.5:9999"),
    "agent.a2a.card_path": ("Where the server serves its agent card.",
                            "/.well-known/agent-card.json"),
    "agent.a2a.headers": ("Headers sent upstream on every request; `${VAR}` is a variable "
                          "of `capabilities.env.allow`.", '{X-Api-Key: "${AGENT_KEY}"}'),
    "agent.model": ("A member that is a model (docs/llm.md): the runtime drives an "
                    "OpenAI-compatible endpoint (`inference.transport: http`), its system "
                    "prompt the `[Capsule]` block and the session's `MURMUR.md`.",
                    "{tools: [{command: {name: word_count, argv: [wc, -w]}}]}"),
    "agent.model.instructions": ("The capsule's file of instructions, after the `[Capsule]` "
                                 "block (default: `MURMUR.md` when the capsule ships one).",
                                 "prompts/planner.md"),
    "agent.model.tools": ("Tools offered to the model beside `call_member` and `delegate`; "
                          "each runs confined, in the agent's sandbox, in the capsule's "
                          "directory, without the endpoint's key.",
                          "[{mcp: [python3, tools/server.py]}]"),
    "agent.model.tools[].mcp": ("An MCP server over stdio: its tools are offered by their "
                                "names and schemas.", "[python3, tools/server.py]"),
    "agent.model.tools[].command": ("A program run once per call: the model's `input` on "
                                    "stdin, its stdout the result.",
                                    "{name: word_count, argv: [wc, -w]}"),
    "agent.model.tools[].command.name": ("The tool's name for the model (letters, digits, "
                                         "`_`, `-`; not `call_member` or `delegate`).",
                                         "word_count"),
    "agent.model.tools[].command.argv": ("The program and its arguments.", "[wc, -w]"),
    "agent.model.tools[].command.description": ("What the tool does, for the model.",
                                                "Counts the words of its input."),
    "agent.model.tools[].command.timeout": ("Seconds a run may take before it is killed "
                                            "(1 to 3600).", "60"),
    "agent.skills": ("The skills the agent card lists.",
                     "[{id: code, name: Code, description: Writes code, tags: [code]}]"),
    "agent.skills[].id": ("A skill's id, unique to the agent.", "code"),
    "agent.skills[].name": ("A skill's name, for people.", "Code"),
    "agent.skills[].description": ("What the skill does.", "Writes code"),
    "agent.skills[].tags": ("Words to find the skill by.", "[code, python]"),
    "agent.extended_skills": ("Skills only authenticated callers see: the card says "
                              "`extendedAgentCard: true` and `GetExtendedAgentCard` answers "
                              "with `skills` and these (docs/door.md). Needs "
                              "`network.authentication`; ids distinct from `skills`'.",
                              "[{id: audit, name: Audit, description: Audits a repo}]"),
    "agent.extended_skills[].id": ("A skill's id, unique to the agent.", "audit"),
    "agent.extended_skills[].name": ("A skill's name, for people.", "Audit"),
    "agent.extended_skills[].description": ("What the skill does.", "Audits a repo"),
    "agent.extended_skills[].tags": ("Words to find the skill by.", "[security]"),
    "agent.input_modes": ("The media types of the parts the agent takes (the card's "
                          "`defaultInputModes`), `type/subtype` or a wildcard (`image/*`, "
                          "`*/*`); a message with a part outside them is refused "
                          "`-32005` (docs/door.md). Beside `agent.a2a`, in place of the "
                          "upstream card's (docs/gateway.md).",
                          "[text/plain, application/json]"),
    "agent.requires": ("Python distributions the agent needs, as pip requirement "
                       "strings: `mur doctor` and the launch refuse a missing one "
                       "(`E-ROS-011`, `E-RUN-054`) naming the `pip install` that fixes it.",
                       "[httpx>=0.27, openai]"),
    "exports": ("What this member offers other members.", "{peer_tasks: {accept: true}}"),
    "exports.peer_tasks": ("Tasks from other members of a formation.", "{accept: true}"),
    "exports.peer_tasks.accept": ("`true` to take tasks from members that may call it; a "
                                  "roster rule that calls a member without it is "
                                  "`E-ROS-005`.", "true"),
    "network": ("The door: who may call it, and from which web pages.",
                "{authentication: {}}"),
    "network.authentication": ("Absent: a public door that checks nothing. Present (`{}` "
                               "at least): the door takes the operator token, formation "
                               "tokens, and the credentials declared here "
                               "(docs/door-auth.md).",
                               "{bearer: [{name: ci, env: CI_DOOR_TOKEN}]}"),
    "network.authentication.bearer": ("Declared bearer tokens.",
                                      "[{name: ci, env: CI_DOOR_TOKEN, scopes: [GetTask]}]"),
    "network.authentication.bearer[].name": ("The credential's name (`bearer:<name>` in "
                                             "traces and errors).", "ci"),
    "network.authentication.bearer[].env": ("The environment variable of `mur run` that "
                                            "holds the token (never the token itself).",
                                            "CI_DOOR_TOKEN"),
    "network.authentication.bearer[].scopes": ("The methods it may call; absent: every "
                                               "task method.", "[SendMessage, GetTask]"),
    "network.authentication.jwt": ("Declared JWT issuers, verified with a public key.",
                                   "[{name: corp, issuer: https://id.example, audience: "
                                   "coder, jwks_file: keys/jwks.json, algorithms: [EdDSA]}]"),
    "network.authentication.jwt[].name": ("The credential's name (`jwt:<name>`).", "corp"),
    "network.authentication.jwt[].issuer": ("The `iss` a token must carry.",
                                            "https://id.example"),
    "network.authentication.jwt[].audience": ("The `aud` a token must carry.", "coder"),
    "network.authentication.jwt[].jwks_file": ("The issuer's public keys, a JWKS file "
                                               "inside the capsule (or `pem_file`).",
                                               "keys/jwks.json"),
    "network.authentication.jwt[].pem_file": ("One public key, a PEM file inside the "
                                              "capsule (or `jwks_file`).", "keys/corp.pem"),
    "network.authentication.jwt[].algorithms": ("The algorithms accepted (asymmetric only: "
                                                "`EdDSA`, `ES*`, `RS*`, `PS*`).",
                                                "[EdDSA, ES256]"),
    "network.authentication.jwt[].scopes": ("The methods it may call; absent: every task "
                                            "method.", "[SendMessage]"),
    "network.cors": ("Web pages that may call the door (docs/bindings.md); off by default.",
                     "{allow_origins: ['http://localhost:5173']}"),
    "network.cors.allow_origins": ("Origins as browsers send them, or `*`.",
                                   "['http://localhost:5173']"),
    "network.public_card": ("Serve the agent card, without its session extension, to "
                            "callers with no credential (standard discovery).", "true"),
    "network.push": ("Push notifications (docs/push.md); off by default. Not beside "
                     "`agent.a2a`.", "{allow: ['hooks.example.com:443']}"),
    "network.push.allow": ("Where webhooks may be sent: `host` or `host:port` entries as "
                           "in `capabilities.network.allow`; a name that resolves inside the "
                           "machine is refused unless its address is listed too.",
                           "['127.0.0.1:8099']"),
    "capabilities": ("What the agent's runtime may do for it.",
                     "{network: {allow: [localhost]}}"),
    "capabilities.network": ("Hosts the agent's HTTP clients may reach.",
                             "{allow: [localhost]}"),
    "capabilities.network.allow": ("Bare hosts, optionally `:port` or `*.` wildcards; "
                                   "`localhost` covers every loopback address and is needed "
                                   "to call other members.", "[localhost, api.example.com]"),
    "capabilities.spawn": ("Child capsules the agent may delegate to.", "{allow: []}"),
    "capabilities.spawn.allow": ("The capsules it may delegate to with `task.delegate` "
                                 "(docs/delegation.md): `local/<name>`, or pinned "
                                 "`local/<name>@<version>`; not beside "
                                 "`network.authentication` (`E-MAN-003`).",
                                 "[local/summarizer]"),
    "capabilities.spawn.max_children": ("Its children alive at once (1 to 64); one more is "
                                        "refused.", "2"),
    "capabilities.spawn.max_depth": ("How deep delegations below it may go (1 to 16): a "
                                     "child's own delegations count, and the smallest "
                                     "bound above a child holds.", "1"),
    "capabilities.env": ("Environment variables passed through to the agent.",
                         "{allow: [OPENAI_API_KEY]}"),
    "capabilities.env.allow": ("The variables of `mur run`'s environment the agent sees "
                               "(`task.env`); nothing else of the runtime's.",
                               "[OPENAI_API_KEY]"),
    "capabilities.filesystem": ("Paths the confined agent may also read (docs/isolation.md).",
                                "{read: [/srv/models]}"),
    "capabilities.filesystem.read": ("Absolute folders or files the agent (and a gateway "
                                     "upstream) may read and execute, never write: a model, "
                                     "data, a framework installed elsewhere. The program a "
                                     "command runs and its virtual environment are granted "
                                     "without it.", "[/srv/models]"),
    "lifecycle": ("How the member takes tasks and when it ends.",
                  "{concurrency: 1, queue_depth: 2}"),
    "lifecycle.task_acceptance": ("`queue`: take tasks until stopped; `single`: one task, "
                                  "then refuse the rest.", "queue"),
    "lifecycle.after_task": ("`sleep`: keep serving after a task; `exit`: end the session "
                             "once a task ends.", "sleep"),
    "lifecycle.concurrency": ("Tasks run at once (1 to 1024).", "1"),
    "lifecycle.queue_depth": ("Tasks held waiting beyond those running (0 to 100000); past "
                              "them a new task is `-32050` member busy.", "2"),
    "lifecycle.idle_timeout": ("End the session after this long without a task "
                               "(a duration: `30s`, `10m`, `2h`, `7d`).", "10m"),
    "lifecycle.restart": ("In a formation, a peer that fails while the formation runs: "
                          "`never` (it stays down; calls to it fail) or `on-failure` (the "
                          "launcher starts it again as the same member, its tasks kept). A "
                          "version 2 roster's `restart` on the member wins.", "on-failure"),
    "lifecycle.restart_limit": ("At most `count` restarts within `within`; the next failure "
                                "leaves the member down.", "{count: 3, within: 10m}"),
    "lifecycle.restart_limit.count": ("Restarts allowed within `within` (1 to 1000).", "3"),
    "lifecycle.restart_limit.within": ("The window the restarts are counted in (a "
                                       "duration).", "10m"),
    "inference": ("Limits of the agent's turns; for `agent.model`, the endpoint it drives.",
                  "{max_turns: 8}"),
    "inference.max_turns": ("Turns per task (1 to 1000): calls of `run`, or a model "
                            "member's requests to its endpoint; a turn that leaves member "
                            "calls unanswered is followed by one with their answers while "
                            "turns are left.", "8"),
    "inference.transport": ("`http`: an OpenAI-compatible chat-completions endpoint; "
                            "required with `agent.model`.", "http"),
    "inference.base_url": ("The endpoint, or `${VAR}` read at start; a literal URL's host "
                           "must be in `capabilities.network.allow`.",
                           "https://api.openai.com/v1"),
    "inference.model": ("The model's name at the endpoint.", "gpt-4o-mini"),
    "inference.api_key_env": ("The variable holding the endpoint's key, granted by "
                              "`capabilities.env.allow`; read by the member runtime, which "
                              "attaches the key at its egress: agent code never holds it.",
                              "OPENAI_API_KEY"),
    "inference.api_key_header": ("The header the runtime puts the key in: `authorization` "
                                 "(as `Bearer <key>`) or another (the bare key); the agent's "
                                 "own header of that name is replaced.", "x-api-key"),
    "inference.max_answer_bytes": ("The most bytes one answer of the endpoint may have "
                                   "(default 8 MiB); past it the task fails (`E-RUN-068`).",
                                   "8388608"),
    "inference.timeout": ("How long one whole answer may take, request to last byte (a "
                          "duration); past it the task fails (`E-RUN-069`).", "600s"),
    "inference.idle_timeout": ("How long a streamed answer may go silent (a duration); past "
                               "it the task fails (`E-RUN-070`).", "60s"),
    "inference.max_tokens": ("The most tokens one answer may have.", "2048"),
    "inference.temperature": ("Sampling temperature (0 to 2).", "0.2"),
    "inference.budget": ("What one task may spend.", "{tokens: 200000}"),
    "inference.budget.tokens": ("Input and output tokens one task may spend across its "
                                "requests, counted by the runtime's egress; past it the task "
                                "fails (`E-RUN-063`).", "200000"),
    "trace": ("What the session keeps of its records.", "{retain: {max_sessions: 20}}"),
    "trace.retain": ("Which earlier sessions' records are kept.",
                     "{max_sessions: 20, max_age: 7d}"),
    "trace.retain.max_sessions": ("Keep at most this many sessions of this capsule.", "20"),
    "trace.retain.max_age": ("Remove sessions older than this (a duration).", "7d"),
    "trace.content": ("`true`: a model member's prompts, answers and tool arguments and "
                      "results in its trace (tokens and timings are always there).", "false"),
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, directly, optionally or in a list."""
    for candidate in (annotation, *typing.get_args(annotation)):
        origin = typing.get_origin(candidate)
        if origin is typing.Annotated:
            candidate = typing.get_args(candidate)[0]
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        if origin is list:
            inner = _model_of(typing.get_args(candidate)[0])
            if inner is not None:
                return inner
    return None


def _is_list(annotation: Any) -> bool:
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            return True
    return False


def keys(model: type[BaseModel] = Manifest, prefix: str = ""
         ) -> Iterator[tuple[str, FieldInfo]]:
    """Every key of ``model``, dotted, depth first, in the model's order."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path, info
        inner = _model_of(info.annotation)
        if inner is not None:
            yield from keys(inner, path + ("[]." if _is_list(info.annotation) else "."))


def _type_text(annotation: Any) -> str:
    if annotation == Duration:
        return "duration"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_text(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        shown = [_type_text(arg) for arg in typing.get_args(annotation)
                 if arg is not type(None)]
        return " or ".join(shown)
    if origin is list:
        return f"list of {_type_text(typing.get_args(annotation)[0])}"
    if origin is dict:
        return "mapping"
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    names = {str: "string", int: "integer", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "see its keys"
        if isinstance(value, list) and value:
            # The only non-empty list defaults: a credential's scopes (every task method)
            # and agent.input_modes (plain text), written as they read.
            return "all task methods" if len(value) > 1 else f"`[{', '.join(value)}]`"
        return "`[]`" if value == [] else "`{}`"
    if info.default is None or info.default is PydanticUndefined:
        return "absent"
    if isinstance(info.default, bool):
        return f"`{str(info.default).lower()}`"
    if info.default == "":
        return "empty"
    return f"`{info.default}`"


_ESCAPED_BAR = "\\|"


def render() -> str:
    lines = [
        "# murmur.yaml",
        "",
        "<!-- Generated from the manifest's model by `python -m "
        "launcher.commands.manifest_reference --write-docs`. Do not edit by hand. -->",
        "",
        "Every key a capsule's `murmur.yaml` accepts; any other key, at any level, is "
        "refused (`E-MAN-001`, naming its dotted path). A key written with no value is the "
        "same as an absent key, except `network.authentication:`, which is refused (write "
        "`{}` or remove it). `[]` in a path means each item of a list.",
        "",
        "| Key | Type | Default | Meaning | Example |",
        "|---|---|---|---|---|",
    ]
    for path, info in keys():
        meaning, example = MEANINGS[path]
        meaning = meaning.replace("|", _ESCAPED_BAR)
        lines.append(f"| `{path}` | {_type_text(info.annotation)} | {_default_text(info)} | "
                     f"{meaning} | `{example}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return page_command("launcher.commands.manifest_reference", DOCS_PATH, render, argv)


if __name__ == "__main__":
    sys.exit(main())
