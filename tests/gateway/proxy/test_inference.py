"""`InferenceEgress`: a model member's key attached and its counts kept on the runtime's
side, against the OpenAI-compatible fake on loopback (docs/llm.md, "The key")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.proxy.inference import InferenceBounds, InferenceEgress
from gateway.proxy.proxy_errors import EgressRefused, ModelBoundReached
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, error, text

KEY = "sk-egress-0123456789-abcdef"
TASK = "task-1"


def replies(*answers: Reply) -> Any:
    queue: Iterator[Reply] = iter(answers)

    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        return next(queue)
    return script


def chat(base_url: str, *, stream: bool = True, **headers: str) -> httpx.Request:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "stream": stream}).encode()
    return httpx.Request("POST", f"{base_url}/chat/completions", headers=headers,
                         content=body)


async def answer(egress: InferenceEgress, request: httpx.Request,
                 task: str | None = TASK) -> tuple[int, bytes]:
    response = await egress.send(request, task)
    try:
        return response.status_code, b"".join([chunk async for chunk in response.aiter_raw()])
    finally:
        await response.aclose()


async def test_the_key_is_attached_at_egress_and_the_agents_own_header_replaced() -> None:
    with FakeOpenAI(replies(text("hello"))) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K")
        status, _ = await answer(egress, chat(fake.base_url, Authorization="Bearer forged"))
        await egress.aclose()
    assert status == 200
    [seen] = fake.requests
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert "forged" not in json.dumps(seen.headers)
    assert seen.headers["Accept-Encoding"] == "identity"


async def test_a_named_header_carries_the_bare_key() -> None:
    with FakeOpenAI(replies(text("hello"))) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K", header="x-api-key")
        await answer(egress, chat(fake.base_url, **{"X-Api-Key": "forged"}))
        await egress.aclose()
    [seen] = fake.requests
    assert seen.headers["x-api-key"] == KEY
    assert "Authorization" not in seen.headers


def test_only_the_endpoints_origin_matches() -> None:
    egress = InferenceEgress("http://127.0.0.1:8080/v1", key=KEY, variable="K")
    assert egress.matches(httpx.URL("http://127.0.0.1:8080/other"))
    assert egress.matches(httpx.URL("http://127.0.0.1:8080/v1/chat/completions"))
    assert not egress.matches(httpx.URL("http://127.0.0.1:8081/v1/chat/completions"))
    assert not egress.matches(httpx.URL("https://127.0.0.1:8080/v1"))
    assert not egress.matches(httpx.URL("http://localhost:8080/v1"))
    assert KEY not in repr(egress)


async def test_usage_from_a_stream_and_from_a_whole_answer_is_counted() -> None:
    with FakeOpenAI(replies(text("a b", usage=(30, 7)), text("c", usage=(40, 3))),
                    streaming=True) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K")
        await answer(egress, chat(fake.base_url))
        assert egress.spent(TASK) == 37
        await answer(egress, chat(fake.base_url, stream=False), task="task-2")
        await egress.aclose()
    assert (egress.spent(TASK), egress.spent("task-2"), egress.spent()) == (37, 43, 80)


async def test_an_answer_without_usage_is_counted_by_its_bytes() -> None:
    body = b'{"choices":[{"message":{"content":"' + b"x" * 4000 + b'"}}]}'

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "application/json"},
                              content=body)

    egress = InferenceEgress("http://model.test/v1", key=KEY, variable="K",
                             inner=httpx.MockTransport(handler))
    request = chat("http://model.test/v1")
    sent = int(request.headers["Content-Length"])
    await answer(egress, request)
    assert egress.spent(TASK) == -(-(sent + len(body)) // 4)


async def test_the_members_tokens_refuse_the_next_request_with_its_code() -> None:
    limits: list[tuple[str | None, str, int, int]] = []
    with FakeOpenAI(replies(text("a", usage=(60, 50)), text("b"))) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K",
                                 bounds=InferenceBounds(member_tokens=100),
                                 on_limit=lambda *fields: limits.append(fields))
        await answer(egress, chat(fake.base_url))
        with pytest.raises(ModelBoundReached) as refused:
            await answer(egress, chat(fake.base_url), task="another-task")
        await egress.aclose()
    assert (refused.value.code, refused.value.key) == ("E-RUN-066", "limits.tokens")
    assert refused.value.fields == {"spent": 110, "limit": 100}
    assert limits == [("another-task", "member.tokens", 100, 110)]
    assert len(fake.requests) == 1          # the refused request was never sent


async def test_a_tasks_budget_and_its_requests_are_bounded_per_task() -> None:
    with FakeOpenAI(replies(*[text("a", usage=(20, 5))] * 4)) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K",
                                 bounds=InferenceBounds(task_tokens=40, task_requests=3))
        await answer(egress, chat(fake.base_url))
        await answer(egress, chat(fake.base_url))
        with pytest.raises(ModelBoundReached) as budget:
            await answer(egress, chat(fake.base_url))
        await answer(egress, chat(fake.base_url), task="task-2")
        await egress.aclose()
    assert budget.value.code == "E-RUN-063"
    assert budget.value.fields == {"spent": 50, "budget": 40}
    turns = InferenceEgress("http://model.test/v1", key=None, variable=None,
                            bounds=InferenceBounds(task_requests=1),
                            inner=httpx.MockTransport(lambda request: httpx.Response(200)))
    await answer(turns, chat("http://model.test/v1"))
    with pytest.raises(ModelBoundReached) as max_turns:
        await answer(turns, chat("http://model.test/v1"))
    assert (max_turns.value.code, max_turns.value.fields) == ("E-RUN-062", {"turns": 1})


async def test_an_unset_key_and_a_request_for_no_task_are_refused_unsent() -> None:
    with FakeOpenAI(replies(text("a"))) as fake:
        unset = InferenceEgress(fake.base_url, key="", variable="K")
        with pytest.raises(ModelBoundReached) as refused:
            await answer(unset, chat(fake.base_url))
        keyed = InferenceEgress(fake.base_url, key=KEY, variable="K")
        with pytest.raises(EgressRefused):
            await answer(keyed, chat(fake.base_url), task=None)
    assert refused.value.code == "E-RUN-057"
    assert refused.value.fields == {"variable": "K", "host": "127.0.0.1"}
    assert fake.requests == []


@pytest.mark.parametrize("size", [1, 3, 7, 64])
async def test_an_endpoint_that_echoes_the_key_shows_it_as_a_placeholder(size: int) -> None:
    """The key is masked wherever the answer's chunks cut it."""
    echoed = b'{"error":{"message":"bad key ' + KEY.encode() + b' here"}}'

    async def chunks() -> Any:
        for start in range(0, len(echoed), size):
            yield echoed[start:start + size]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, headers={"Content-Type": "application/json",
                                            "Content-Length": str(len(echoed))},
                              content=chunks())

    egress = InferenceEgress("http://model.test/v1", key=KEY, variable="K",
                             inner=httpx.MockTransport(handler))
    response = await egress.send(chat("http://model.test/v1"), TASK)
    body = b"".join([chunk async for chunk in response.aiter_raw()])
    await response.aclose()
    assert body == b'{"error":{"message":"bad key [key] here"}}'
    assert "content-length" not in response.headers


async def test_an_error_answer_passes_and_counts_nothing_it_did_not_spend() -> None:
    with FakeOpenAI(replies(error(429, "slow down"))) as fake:
        egress = InferenceEgress(fake.base_url, key=KEY, variable="K")
        status, body = await answer(egress, chat(fake.base_url))
        await egress.aclose()
    assert status == 429 and b"slow down" in body
    assert egress.spent(TASK) <= 64          # its bytes, no usage: a few tokens


@pytest.mark.parametrize("size", [1, 5, 4096])
async def test_a_streams_usage_is_counted_wherever_the_reads_cut_it(size: int) -> None:
    events = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":21,"completion_tokens":4}}\n\n'
              b"data: [DONE]\n\n")

    async def chunks() -> Any:
        for start in range(0, len(events), size):
            yield events[start:start + size]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              content=chunks())

    egress = InferenceEgress("http://model.test/v1", key=KEY, variable="K",
                             inner=httpx.MockTransport(handler))
    status, body = await answer(egress, chat("http://model.test/v1"))
    assert (status, body) == (200, events)
    assert egress.spent(TASK) == 25
