"""The media types a door takes (gateway/door/media_types.py, docs/door.md "Media types"):
each part's media type, matching (case, parameters, wildcards), and a message with a part
outside the card's ``defaultInputModes`` refused ``-32005`` on both bindings before any
task starts. A gateway member's refusal is in tests/gateway/relay/test_relay_media_types.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.media_types import (
    AcceptedModes,
    media_type_problem,
    parse_media_type,
    part_media_type,
)
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.door import A2A_HEADERS, BASE_URL, card_info

JSON = {"Content-Type": "application/json"}
IMAGE = {"raw": "iVBORw0KGgo=", "mediaType": "image/png", "filename": "a.png"}
DATA = {"data": {"rows": [1, 2]}}


async def echo(run: TaskRun) -> str:
    return f"echo: {run.text}"


def door_taking(*modes: str) -> Door:
    """A public door whose card accepts ``modes`` (none given: the default, plain text)."""
    card = card_info(input_modes=modes) if modes else card_info()
    return build_door(echo, DoorSettings(card=card, gate=GateConfig(concurrency=4)),
                      policy=AuthPolicy())


def message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"messageId": f"m-{id(parts)}", "role": "ROLE_USER",
                        "parts": list(parts)}}


async def send_rpc(client: httpx.AsyncClient, params: dict[str, Any],
                   method: str = "SendMessage") -> dict[str, Any]:
    response = await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": params})
    assert response.status_code == 200, response.text
    if method == "SendStreamingMessage" and response.headers["content-type"].startswith(
            "text/event-stream"):
        first = next(line for line in response.text.splitlines() if line.startswith("data:"))
        body: dict[str, Any] = json.loads(first[5:])
        return body
    answer: dict[str, Any] = response.json()
    return answer


def client_for(door: Door) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app), base_url=BASE_URL,
                             headers=A2A_HEADERS)


async def task_count(client: httpx.AsyncClient) -> int:
    listed = await client.get("/tasks")
    return int(listed.json()["totalSize"])


# --- reading media types -------------------------------------------------------------


@pytest.mark.parametrize("kind, given, media_type", [
    ("text", None, "text/plain"), ("data", None, "application/json"),
    ("raw", None, "application/octet-stream"), ("url", None, "application/octet-stream"),
    ("text", "", "text/plain"), ("text", "text/markdown", "text/markdown"),
    ("data", "application/vnd.acme+json", "application/vnd.acme+json"),
    ("raw", "image/png", "image/png"), ("url", "application/pdf", "application/pdf"),
])
def test_each_part_kind_has_a_media_type_and_its_own_wins(kind: str, given: str | None,
                                                          media_type: str) -> None:
    assert part_media_type(kind, given) == media_type


@pytest.mark.parametrize("value, parsed", [
    ("text/plain", ("text", "plain")), ("TEXT/Plain", ("text", "plain")),
    ("text/plain; charset=utf-8", ("text", "plain")), (" image/* ", ("image", "*")),
    ("application/vnd.a2a+json", ("application", "vnd.a2a+json")),
    ("text", None), ("text/", None), ("/plain", None), ("text/plain/x", None), ("", None),
])
def test_a_media_type_is_read_as_type_and_subtype_in_lower_case(
        value: str, parsed: tuple[str, str] | None) -> None:
    assert parse_media_type(value) == parsed


def test_a_wildcard_type_must_be_the_whole_wildcard() -> None:
    assert media_type_problem("*/*") is None and media_type_problem("image/*") is None
    assert "`*/*`, not `*/png`" in str(media_type_problem("*/png"))
    assert "such as `text/plain`" in str(media_type_problem("png"))


def test_matching_is_exact_type_and_subtype_or_a_wildcard() -> None:
    modes = AcceptedModes(["text/plain", "image/*", "Application/JSON; charset=utf-8"])
    assert modes.enforced
    taken = ["text/plain", "TEXT/PLAIN", "text/plain;charset=latin-1", "image/png",
             "IMAGE/webp", "application/json"]
    refused = ["text/markdown", "application/octet-stream", "audio/ogg", "images/png",
               "application/json-seq", "not a type", ""]
    assert [modes.takes(media_type) for media_type in taken] == [True] * len(taken)
    assert [modes.takes(media_type) for media_type in refused] == [False] * len(refused)
    assert modes.refused(["text/plain", "image/gif", "audio/ogg", "text/x"]) == (2, "audio/ogg")
    every = AcceptedModes(["text/plain", "*/*"])
    assert not every.enforced and every.takes("anything at all")


@pytest.mark.parametrize("card, enforced", [
    ({"defaultInputModes": ["text/plain"]}, True),
    ({"defaultInputModes": ["text", "text/plain"]}, False),   # an SDK sample's words
    ({"defaultInputModes": []}, False),
    ({}, False),
    ({"defaultInputModes": ["text/plain", 5]}, False),
    ({"defaultInputModes": "text/plain"}, False),
])
def test_a_card_whose_modes_are_not_all_media_types_is_not_enforced(
        card: dict[str, Any], enforced: bool) -> None:
    assert AcceptedModes.of_card(card).enforced is enforced


def test_a_skills_input_modes_are_accepted_beside_the_defaults() -> None:
    card = {"defaultInputModes": ["text/plain"],
            "skills": [{"id": "see", "inputModes": ["image/png"]}, {"id": "plain"}]}
    modes = AcceptedModes.of_card(card)
    assert modes.takes("image/png") and modes.takes("text/plain")
    assert not modes.takes("image/gif")


# --- the door refuses, on both bindings ----------------------------------------------


@pytest.mark.parametrize("part, media_type", [(IMAGE, "image/png"),
                                              (DATA, "application/json"),
                                              ({"text": "# hi", "mediaType": "text/markdown"},
                                               "text/markdown"),
                                              ({"url": "https://x.example/f"},
                                               "application/octet-stream")])
async def test_a_plain_text_door_refuses_any_other_part_on_json_rpc(
        part: dict[str, Any], media_type: str) -> None:
    door = door_taking()
    async with client_for(door) as client:
        answers = [await send_rpc(client, message({"text": "look"}, part), method)
                   for method in ("SendMessage", "SendStreamingMessage")]
        started = await task_count(client)
    for answer in answers:
        error = answer["error"]
        assert error["code"] == -32005
        assert f"message.parts[1] is {media_type}; this agent takes text/plain" in \
            error["message"]
        info = error["data"][0]
        assert info["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        assert info["metadata"] == {"mediaType": media_type, "supportedMediaTypes": "text/plain"}
    assert started == 0, "nothing started"


async def test_a_plain_text_door_refuses_any_other_part_on_http_json() -> None:
    door = door_taking()
    async with client_for(door) as client:
        answers = [await client.post(path, content=json.dumps(message(part)), headers=JSON)
                   for path in ("/message:send", "/message:stream") for part in (IMAGE, DATA)]
        started = await task_count(client)
    for response in answers:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
        assert error["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        assert error["details"][0]["metadata"]["supportedMediaTypes"] == "text/plain"
    assert started == 0


async def test_plain_text_in_any_case_or_with_parameters_is_taken() -> None:
    door = door_taking()
    async with client_for(door) as client:
        answer = await send_rpc(client, message(
            {"text": "a"}, {"text": "b", "mediaType": "Text/Plain; charset=utf-8"},
            {"raw": "aGk=", "mediaType": "TEXT/PLAIN"}))
    assert "error" not in answer, answer
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_wildcards_in_the_accepted_modes_are_honoured() -> None:
    door = door_taking("text/plain", "image/*")
    everything = door_taking("*/*")
    pdf = {"url": "https://x.example/a.pdf", "mediaType": "application/pdf"}
    async with client_for(door) as client, client_for(everything) as anything:
        image = await send_rpc(client, message({"text": "see"}, IMAGE,
                                               {"raw": "aGk=", "mediaType": "image/webp"}))
        refused = await send_rpc(client, message({"text": "read"}, pdf))
        rest = await client.post("/message:send", content=json.dumps(message(DATA)),
                                 headers=JSON)
        taken = [await send_rpc(anything, message(part)) for part in (IMAGE, DATA, pdf)]
    assert "result" in image, image
    assert refused["error"]["code"] == -32005
    assert "text/plain, image/*" in refused["error"]["message"]
    assert rest.status_code == 400
    assert all("result" in answer for answer in taken), taken
    assert door.card["defaultInputModes"] == ["text/plain", "image/*"]


async def test_a_follow_up_message_is_checked_too() -> None:
    async def ask(run: TaskRun) -> str:
        answer = await run.input_required("which file?")
        return f"got {answer['parts'][0].get('text')}"

    door = build_door(ask, DoorSettings(card=card_info(), gate=GateConfig()),
                      policy=AuthPolicy())
    async with client_for(door) as client:
        first = await send_rpc(client, message({"text": "start"}))
        task = first["result"]["task"]
        follow = message(IMAGE)
        follow["message"]["taskId"] = task["id"]
        refused = await send_rpc(client, follow)
        state = (await client.get(f"/tasks/{task['id']}")).json()["status"]["state"]
        door.cancel(task["id"])
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert refused["error"]["code"] == -32005
    assert state == "TASK_STATE_INPUT_REQUIRED", "the refused answer reached no one"


async def test_a_media_type_echoed_in_a_refusal_is_bounded() -> None:
    door = door_taking()
    long_type = "image/" + "x" * 500
    async with client_for(door) as client:
        answer = await send_rpc(client, message({"raw": "aGk=", "mediaType": long_type}))
    error = answer["error"]
    assert error["code"] == -32005
    assert len(error["data"][0]["metadata"]["mediaType"]) == 67
    assert long_type not in error["message"]
