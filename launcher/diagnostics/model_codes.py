"""The table's ``RUN`` rows for model members: what ends a model member's task, each
naming the variable, the host or the bound to change (docs/llm.md, "When it fails").
They follow ``run_codes.py``'s rows in the table.

A model member's driver fails the task with one of these as the task's status message;
the key itself never appears in any of them.
"""

from __future__ import annotations

from launcher.diagnostics.entry import CodeEntry

MODEL_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "E-RUN-057", "error",
        "The model endpoint's key is not set",
        "{member}: the variable {variable} (inference.api_key_env) is not set, so the model "
        "endpoint at {host} cannot be called",
        "set {variable} in the environment `mur run` starts with (it is granted by "
        "capabilities.env.allow), or remove inference.api_key_env for an endpoint that "
        "needs no key",
        "A model member's `inference.api_key_env` names a variable that is not set (or is "
        "empty) where the member runs. The key is read by the member runtime and attached "
        "at its egress to requests to the endpoint alone; agent code never holds it.",
    ),
    CodeEntry(
        "E-RUN-058", "error",
        "The model endpoint's host is outside the member's network grant",
        "{member}: the model endpoint's host {host} is not in capabilities.network.allow",
        "add {host} to capabilities.network.allow in the capsule's murmur.yaml, or point "
        "inference.base_url at a host it grants",
        "The host of `inference.base_url` (after `${VAR}` is read) is one the member's "
        "forward proxy refuses, so no request was sent.",
    ),
    CodeEntry(
        "E-RUN-059", "error",
        "The model endpoint refused the key",
        "{member}: the model endpoint at {host} answered {status}: the key in {variable} "
        "was refused",
        "check the key in {variable}, and that it is for the endpoint inference.base_url "
        "names",
        "The endpoint answered `401` or `403`. The key is never shown; the variable that "
        "holds it is named.",
    ),
    CodeEntry(
        "E-RUN-060", "error",
        "The model endpoint cannot be reached",
        "{member}: the model endpoint at {host} cannot be reached ({reason})",
        "start the endpoint (for a local server, such as Ollama or llama.cpp, check that it "
        "listens on that port), or correct inference.base_url",
        "No connection to the endpoint could be made, or it broke before an answer came, "
        "within the task's deadline.",
    ),
    CodeEntry(
        "E-RUN-061", "error",
        "The model endpoint answered with an error",
        "{member}: the model endpoint at {host} answered {status} to POST {url}: {detail}",
        "check inference.base_url (the endpoint's base URL, often ending in /v1: a 404 or "
        "an answer that is not a chat completion means another server answered) and "
        "inference.model; a 429 or 5xx that lasts past the retries means the endpoint is "
        "overloaded or down",
        "The endpoint answered an error other than a refused key, or a `429` or `5xx` that "
        "persisted through the retries (with backoff, within the task's deadline), or an "
        "answer that is not a chat completion.",
    ),
    CodeEntry(
        "E-RUN-062", "error",
        "The model used every turn without answering",
        "{member}: the model made {turns} requests (inference.max_turns) and was still "
        "calling tools",
        "raise inference.max_turns in the capsule's murmur.yaml, or tell the model in its "
        "instructions to answer sooner",
        "For a model member one turn is one request to the endpoint. The task ends "
        "`failed` when the last turn's answer still asks for tools.",
    ),
    CodeEntry(
        "E-RUN-063", "error",
        "The task spent its token budget",
        "{member}: the task spent {spent} tokens, past inference.budget.tokens ({budget})",
        "raise inference.budget.tokens, or lower inference.max_tokens",
        "The input and output tokens the endpoint reported for one task's requests, added "
        "up, passed `inference.budget.tokens`; the task ends `failed`.",
    ),
    CodeEntry(
        "E-RUN-064", "error",
        "A model member's tool could not be started",
        "{member}: the tool {tool} could not be started: {reason}",
        "run the tool's command by hand in the capsule's directory to see why, and check "
        "agent.model.tools in its murmur.yaml",
        "An MCP server of `agent.model.tools` did not start or did not list its tools.",
    ),
    CodeEntry(
        "E-RUN-065", "error",
        "The model endpoint's address or model name is not set",
        "{member}: the variable {variable} ({field}) is not set to a usable value",
        "set {variable} where mur runs (for inference.base_url, the endpoint's base URL "
        "such as https://api.openai.com/v1), or give the reference a default: `:-` and a "
        "value after the variable's name",
        "`inference.base_url` or `inference.model` is `${VAR}` with no default, and the "
        "variable is unset, empty, or (for the base URL) not a URL.",
    ),
    CodeEntry(
        "E-RUN-066", "error",
        "A model member spent the tokens its roster allows it",
        "{member}: the member has spent {spent} tokens, past its limits.tokens ({limit}) in "
        "roster.yaml",
        "raise the member's `limits.tokens` in roster.yaml (a version 2 roster), or make its "
        "tasks spend less (inference.max_tokens, inference.budget.tokens)",
        "A version 2 roster's `members[].limits.tokens` bounds what one model member may "
        "spend across all its tasks while the formation runs (docs/bounds.md). The request "
        "that passed it ends its task `failed`; every later task of the member fails at "
        "once, with no request to the endpoint.",
    ),
    CodeEntry(
        "E-RUN-068", "error",
        "The model endpoint's answer was too large",
        "{member}: the model endpoint at {host} sent an answer of more than {limit} bytes "
        "(inference.max_answer_bytes)",
        "raise inference.max_answer_bytes in the capsule's murmur.yaml if the endpoint "
        "means it, or lower inference.max_tokens",
        "An answer is read up to `inference.max_answer_bytes` (default 8 MiB); past it the "
        "request is dropped and the task ends `failed`, so an endpoint cannot fill the "
        "member's memory.",
    ),
    CodeEntry(
        "E-RUN-069", "error",
        "The model endpoint's answer took too long",
        "{member}: the model endpoint at {host} did not finish its answer within {seconds} "
        "s (inference.timeout)",
        "raise inference.timeout in the capsule's murmur.yaml for a slow model, or lower "
        "inference.max_tokens",
        "`inference.timeout` (default 600 s) bounds one whole answer, from the request to "
        "its last byte, not each read: a stream that never ends ends the task.",
    ),
    CodeEntry(
        "E-RUN-070", "error",
        "The model endpoint's stream went silent",
        "{member}: the model endpoint at {host} sent nothing for {seconds} s "
        "(inference.idle_timeout)",
        "raise inference.idle_timeout in the capsule's murmur.yaml for a model that pauses "
        "long between tokens, or check the endpoint",
        "Once an answer has begun, each part of it must come within "
        "`inference.idle_timeout` (default 60 s) of the one before.",
    ),
)
