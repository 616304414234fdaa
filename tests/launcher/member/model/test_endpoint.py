"""`ChatEndpoint` against a real OpenAI-compatible fake on loopback (its retries, its
answers read streamed and whole, its failures by code), and the `[Capsule]` block."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from launcher.member.model.endpoint import ChatEndpoint, ModelError
from launcher.member.model.prompt import capsule_block, system_prompt
from launcher.member.model.settings import ModelSettings
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, error, text, tools

KEY = "sk-secret-123456"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOL = [{"type": "function", "function": {"name": "word_count", "description": "Counts.",
                                          "parameters": {"type": "object"}}}]


class Pauses(list[float]):
    """The `sleep` the endpoint is given: it records each pause and returns at once."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def scripted(*replies: Reply) -> Any:
    """A script answering `replies` in turn."""
    queue: Iterator[Reply] = iter(replies)

    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        return next(queue)
    return script


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as http:
        yield http


@pytest.fixture
def pauses() -> Pauses:
    return Pauses()


def endpoint(base_url: str, client: httpx.AsyncClient, pauses: Pauses, *,
             environ: dict[str, str] | None = None, deadline: datetime | None = None,
             **settings: Any) -> ChatEndpoint:
    fields: dict[str, Any] = {"model": "m", "api_key_env": "K",
                              "network_allow": ("127.0.0.1",), "capsule": "local/x",
                              "version": "1.0.0", **settings}
    return ChatEndpoint(ModelSettings(base_url=base_url, **fields), client, member="x",
                        deadline=deadline, environ={"K": KEY} if environ is None else environ,
                        sleep=pauses)


async def failure(chat: ChatEndpoint) -> ModelError:
    with pytest.raises(ModelError) as failed:
        await chat.complete(MESSAGES, [])
    return failed.value


# --- answers ------------------------------------------------------------------------------


async def test_a_streamed_text_answer_is_read_and_handed_over_piece_by_piece(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    with FakeOpenAI(scripted(text("Hello big world", usage=(12, 3)))) as fake:
        answer = await endpoint(fake.base_url, client, pauses).complete(MESSAGES, [], on_text)
    assert answer.text == "Hello big world"
    assert pieces == ["Hello", " big", " world"]
    assert (answer.input_tokens, answer.output_tokens) == (12, 3)
    assert (answer.finish_reason, answer.attempts, answer.tool_requests) == ("stop", 1, [])
    assert answer.assistant_message() == {"role": "assistant", "content": "Hello big world"}
    [seen] = fake.requests
    assert "Authorization" not in seen.headers      # the runtime's egress attaches it
    assert (seen.body["stream"], seen.model, seen.body["messages"]) == (True, "m", MESSAGES)
    assert "tools" not in seen.body and pauses == []


async def test_a_whole_json_answer_is_read_as_a_streamed_one(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    with FakeOpenAI(scripted(text("Hello world", usage=(7, 2))), streaming=False) as fake:
        chat = endpoint(fake.base_url, client, pauses, max_tokens=64, temperature=0.5)
        answer = await chat.complete(MESSAGES, [], on_text)
    assert (answer.text, answer.input_tokens, answer.output_tokens) == ("Hello world", 7, 2)
    assert (answer.finish_reason, answer.attempts) == ("stop", 1)
    assert pieces == []  # a whole answer is not handed over in pieces
    [seen] = fake.requests
    assert "Authorization" not in seen.headers      # the runtime's egress attaches it
    assert (seen.body["max_tokens"], seen.body["temperature"]) == (64, 0.5)


@pytest.mark.parametrize("streaming", [True, False])
async def test_tool_calls_are_put_together_from_their_fragments(
        client: httpx.AsyncClient, pauses: Pauses, streaming: bool) -> None:
    reply = tools(("word_count", {"text": "a b c"}), ("lookup", {"q": "murmur"}))
    with FakeOpenAI(scripted(reply), streaming=streaming) as fake:
        answer = await endpoint(fake.base_url, client, pauses).complete(MESSAGES, TOOL)
    assert [(r.id, r.name, json.loads(r.arguments)) for r in answer.tool_requests] == [
        ("call_0", "word_count", {"text": "a b c"}), ("call_1", "lookup", {"q": "murmur"})]
    assert answer.finish_reason == "tool_calls"
    message = answer.assistant_message()
    assert message["content"] is None
    assert [call["function"]["name"] for call in message["tool_calls"]] == [
        "word_count", "lookup"]
    assert message["tool_calls"][0] == {"id": "call_0", "type": "function", "function": {
        "name": "word_count", "arguments": json.dumps({"text": "a b c"})}}
    assert fake.requests[0].body["tools"] == TOOL


# --- retries ------------------------------------------------------------------------------


async def test_a_429_is_retried_after_its_retry_after(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(error(429, "slow down", retry_after=0.25), text("ok"))) as fake:
        answer = await endpoint(fake.base_url, client, pauses).complete(MESSAGES, [])
    assert (answer.text, answer.attempts) == ("ok", 2)
    assert pauses == [0.25]
    assert len(fake.requests) == 2


async def test_a_5xx_is_retried_with_doubling_backoff(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(error(500), error(500), text("ok"))) as fake:
        answer = await endpoint(fake.base_url, client, pauses).complete(MESSAGES, [])
    assert (answer.text, answer.attempts) == ("ok", 3)
    assert pauses == [0.5, 1.0]
    assert len(fake.requests) == 3


async def test_a_5xx_that_lasts_five_attempts_fails_naming_host_and_status(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(*[error(503, "overloaded")] * 6)) as fake:
        failed = await failure(endpoint(fake.base_url, client, pauses))
    assert failed.code == "E-RUN-061"
    assert "127.0.0.1" in failed.diagnostic.message
    assert "503" in failed.diagnostic.message and "overloaded" in failed.diagnostic.message
    assert len(fake.requests) == 5
    assert pauses == [0.5, 1.0, 2.0, 4.0]


async def test_a_retry_after_past_the_deadline_is_not_waited_out(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    deadline = datetime.now(UTC) + timedelta(seconds=1)
    with FakeOpenAI(scripted(error(429, retry_after=5), text("ok"))) as fake:
        failed = await failure(endpoint(fake.base_url, client, pauses, deadline=deadline))
    assert failed.code == "E-RUN-061"
    assert "429" in failed.diagnostic.message
    assert len(fake.requests) == 1 and pauses == []


async def test_a_4xx_other_than_429_is_not_retried(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(error(404, "no such model"), text("ok"))) as fake:
        failed = await failure(endpoint(fake.base_url, client, pauses))
    assert failed.code == "E-RUN-061"
    assert "404" in failed.diagnostic.message and "no such model" in failed.diagnostic.message
    assert len(fake.requests) == 1 and pauses == []


async def test_a_base_url_that_reaches_another_http_server_names_the_url_and_base_url(
        pauses: Pauses) -> None:
    """A web server that is not the endpoint (a wrong port, a base URL without /v1)."""
    def other_server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, headers={"Content-Type": "text/html"},
                              text="<html><body>Not Found</body></html>")

    async with httpx.AsyncClient(transport=httpx.MockTransport(other_server)) as client:
        failed = await failure(endpoint("http://127.0.0.1:8080", client, pauses))
    assert failed.code == "E-RUN-061"
    assert "answered 404 to POST http://127.0.0.1:8080/chat/completions" in \
        failed.diagnostic.message
    assert "check inference.base_url" in failed.diagnostic.hint, failed.diagnostic


# --- the key ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_names_its_variable_and_never_the_key(
        client: httpx.AsyncClient, pauses: Pauses, status: int) -> None:
    with FakeOpenAI(scripted(error(status, f"invalid key {KEY}"))) as fake:
        failed = await failure(endpoint(fake.base_url, client, pauses))
    assert failed.code == "E-RUN-059"
    assert f"answered {status}: the key in K was refused" in failed.diagnostic.message
    assert KEY not in str(failed)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("code", "key", "fields", "says"), [
    ("E-RUN-057", "inference.api_key_env", {"variable": "K", "host": "h"},
     "the variable K (inference.api_key_env) is not set"),
    ("E-RUN-066", "limits.tokens", {"spent": 120, "limit": 100},
     "the member has spent 120 tokens, past its limits.tokens (100)"),
    ("E-RUN-063", "inference.budget.tokens", {"spent": 50, "budget": 40},
     "the task spent 50 tokens, past inference.budget.tokens (40)"),
    ("E-RUN-062", "inference.max_turns", {"turns": 3}, "the model made 3 requests"),
])
async def test_a_refusal_of_the_runtimes_egress_fails_the_task_with_its_code(
        pauses: Pauses, code: str, key: str, fields: dict[str, Any], says: str) -> None:
    """The egress (gateway.proxy.inference) refuses before sending; the driver gives
    the task the code it names, with its counts."""
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, headers={"Proxy-Status": "murmur; error=model_refused"},
                              json={"error": "model_refused", "message": code,
                                    "detail": {"code": code, "key": key, "fields": fields}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as refusing:
        failed = await failure(endpoint("http://127.0.0.1:9/v1", refusing, pauses))
    assert failed.code == code
    assert says in failed.diagnostic.message
    assert pauses == []                 # never retried


async def test_an_endpoint_without_a_key_variable_sends_no_authorization(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(text("ok"))) as fake:
        chat = endpoint(fake.base_url, client, pauses, environ={}, api_key_env=None)
        assert (await chat.complete(MESSAGES, [])).text == "ok"
    assert "Authorization" not in fake.requests[0].headers


# --- the address --------------------------------------------------------------------------


async def test_a_host_outside_the_grant_fails_before_any_request(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(text("ok"))) as fake:
        with pytest.raises(ModelError) as failed:
            endpoint(fake.base_url, client, pauses, network_allow=("api.example.com",))
    assert failed.value.code == "E-RUN-058"
    assert "127.0.0.1" in failed.value.diagnostic.message
    assert fake.requests == []


@pytest.mark.parametrize("base_url", ["${U}", "${U:-not a url}"])
async def test_a_variable_base_url_that_is_unset_or_not_a_url_names_the_variable(
        client: httpx.AsyncClient, pauses: Pauses, base_url: str) -> None:
    with pytest.raises(ModelError) as failed:
        endpoint(base_url, client, pauses)
    assert failed.value.code == "E-RUN-065"
    assert "the variable U (inference.base_url)" in failed.value.diagnostic.message


async def test_a_variable_base_url_and_model_are_read_from_the_environment(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    with FakeOpenAI(scripted(text("one"), text("two"))) as fake:
        default = endpoint("${U:-" + fake.base_url + "}", client, pauses, model="${M:-m2}")
        assert (await default.complete(MESSAGES, [])).text == "one"
        chosen = endpoint("${U}", client, pauses, model="${M:-m2}",
                          environ={"K": KEY, "U": fake.base_url + "/", "M": "m3"})
        assert (await chosen.complete(MESSAGES, [])).text == "two"
    assert default.url == fake.base_url and chosen.url == fake.base_url
    assert [seen.model for seen in fake.requests] == ["m2", "m3"]


async def test_an_unreachable_endpoint_names_its_host(
        client: httpx.AsyncClient, pauses: Pauses) -> None:
    failed = await failure(endpoint("http://127.0.0.1:9/v1", client, pauses))
    assert failed.code == "E-RUN-060"
    assert "127.0.0.1" in failed.diagnostic.message
    assert pauses == []


# An answer that is not JSON, or has no choices (E-RUN-061): the fake always sends a
# well-formed chat completion, so that case is not tested here.


# --- the system prompt --------------------------------------------------------------------


def test_the_capsule_block_of_a_formation_member_names_it_its_callees_and_delegates() -> None:
    block = capsule_block(capsule="local/planner", version="0.1.0", member="planner",
                          formation_id="f-123",
                          callees={"worker": "Does the work.\n  Carefully,\tand well.",
                                   "critic": "  "},
                          delegates=["local/helper", "local/coder"])
    assert block == (
        "[Capsule]\n"
        "capsule: local/planner 0.1.0\n"
        "member: planner\n"
        "formation: f-123\n"
        "may call (with the call_member tool):\n"
        "- worker: Does the work. Carefully, and well.\n"
        "- critic\n"
        "may delegate to (with the delegate tool): local/helper, local/coder\n"
        "[/Capsule]")
    assert block.startswith("[Capsule]") and block.endswith("[/Capsule]")


def test_a_long_callee_description_is_cut_to_one_bounded_line() -> None:
    block = capsule_block(capsule="c", version="1", member=None, formation_id=None,
                          callees={"w": "word " * 100})
    line = next(line for line in block.splitlines() if line.startswith("- w: "))
    assert len(line) == len("- w: ") + 300 and line.endswith("…")


def test_a_standalone_capsule_block_names_only_the_capsule() -> None:
    block = capsule_block(capsule="local/x", version="1.0.0", member=None,
                          formation_id=None, callees={})
    assert block == "[Capsule]\ncapsule: local/x 1.0.0\n[/Capsule]"
    assert "member:" not in block and "formation:" not in block and "may " not in block


def test_the_system_prompt_is_the_block_then_the_instructions() -> None:
    block = capsule_block(capsule="local/x", version="1.0.0", member=None,
                          formation_id=None, callees={})
    assert system_prompt(block, "") == block + "\n"
    assert system_prompt(block, "  \n") == block + "\n"
    assert system_prompt(block, "\n# Planner\nPlan.\n\n") == f"{block}\n\n# Planner\nPlan.\n"


# --- a hostile endpoint's bounds ----------------------------------------------------------


def hostile(chunks: Any) -> httpx.AsyncClient:
    """A client whose endpoint streams ``chunks()`` (an async generator) as its answer."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              content=chunks())
    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def test_an_answer_past_max_answer_bytes_ends_the_task_naming_the_key(
        pauses: Pauses) -> None:
    sent = []

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(10_000):         # 640 MB were it read whole; bounded all the same
            sent.append(1)
            yield b": " + b"x" * 65_533 + b"\n"

    async with hostile(endless) as client:
        failed = await failure(endpoint("http://127.0.0.1:9/v1", client, pauses,
                                        max_answer_bytes=200_000))
    assert failed.code == "E-RUN-068"
    assert "more than 200000 bytes (inference.max_answer_bytes)" in failed.diagnostic.message
    assert len(sent) <= 5


async def test_a_silent_stream_ends_the_task_after_idle_timeout(pauses: Pauses) -> None:
    silence = asyncio.Event()

    async def silent() -> AsyncIterator[bytes]:
        yield b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
        await silence.wait()            # never set: the endpoint says nothing more
        yield b""

    async with hostile(silent) as client:
        failed = await failure(endpoint("http://127.0.0.1:9/v1", client, pauses,
                                        idle_timeout=0.2))
    assert failed.code == "E-RUN-070"
    assert "sent nothing for 0.2 s (inference.idle_timeout)" in failed.diagnostic.message


async def test_a_stream_that_never_ends_ends_the_task_after_the_whole_timeout(
        pauses: Pauses) -> None:
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(100_000):        # bounded; the timeout ends it long before
            await asyncio.sleep(0.01)   # never silent for idle_timeout
            yield b'data: {"choices":[{"delta":{"content":"."}}]}\n\n'

    async with hostile(trickle) as client:
        failed = await failure(endpoint("http://127.0.0.1:9/v1", client, pauses,
                                        timeout=0.5, idle_timeout=5.0))
    assert failed.code == "E-RUN-069"
    assert "within 0.5 s (inference.timeout)" in failed.diagnostic.message
