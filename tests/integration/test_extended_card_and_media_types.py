"""A real standalone door (``mur run --capsule``) whose ``murmur.yaml`` declares
``agent.input_modes`` and ``agent.extended_skills`` (docs/door.md), read with a2a-sdk's
own client on both bindings: discovery sees the public card (``extendedAgentCard: true``,
no extended skill), a declared bearer reads the extended card with
``get_extended_agent_card``, and a part outside the accepted media types is the SDK's
``ContentTypeNotSupportedError`` while one inside them is served."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    GetExtendedAgentCardRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError
from google.protobuf.json_format import ParseDict

from tests.support import member as support
from tests.support.member import Project

pytestmark = pytest.mark.integration

#: The declared bearer's token (it may only send messages, and still reads the cards).
WEB_TOKEN = "declared-web-token-0123456789abcdef"
NETWORK = ("{bearer: [{name: web, env: WEB_DOOR_TOKEN, scopes: [SendMessage]}]}\n"
           "  public_card: true")
AGENT_KEYS = ("  input_modes: [text/plain, application/json]\n"
              "  skills: [{id: code, name: Code, description: Writes code}]\n"
              "  extended_skills: [{id: audit, name: Audit, description: Audits, tags: [sec]}]\n")


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def cards_capsule(project: Project) -> None:
    """The ``cards`` capsule: the test agent, with the agent keys under test."""
    source = support.write_capsule(project.path.parent / "src" / "cards", "cards",
                                   authentication=NETWORK)
    manifest = source / "murmur.yaml"
    entry = "  python: cards_agent:run\n"
    text = manifest.read_text()
    assert entry in text
    manifest.write_text(text.replace(entry, entry + AGENT_KEYS))
    support.install_capsule(project.path, source)


def message(*parts: dict[str, Any]) -> SendMessageRequest:
    return SendMessageRequest(message=Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
        parts=[ParseDict(part, Part()) for part in parts]))


async def exercise(door: str, binding: str) -> tuple[Any, Any, Any, Exception | None]:
    """On ``binding``, with the declared bearer: the card, the extended card, the answer
    to a text and JSON message, and the error of one holding a PNG."""
    async with httpx.AsyncClient(timeout=20.0, headers={
            "Authorization": f"Bearer {WEB_TOKEN}"}) as http:
        card = await A2ACardResolver(http, door).get_agent_card()
        client = ClientFactory(ClientConfig(
            streaming=False, httpx_client=http,
            supported_protocol_bindings=[binding])).create(card)
        try:
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            events = [event async for event in client.send_message(
                message({"text": "rows"}, {"data": {"rows": [1, 2]}}))]
            refused: Exception | None = None
            try:
                [_ async for _ in client.send_message(message(
                    {"text": "look"}, {"raw": "iVBORw0KGgo=", "mediaType": "image/png"}))]
            except ContentTypeNotSupportedError as exc:
                refused = exc
        finally:
            await client.close()
    return card, extended, events, refused


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_the_sdk_reads_the_extended_card_and_meets_the_media_types(
        project: Project, binding: str) -> None:
    cards_capsule(project)
    member = project.run("cards", env={"WEB_DOOR_TOKEN": WEB_TOKEN})
    async with httpx.AsyncClient(timeout=10.0) as anonymous:
        public = await A2ACardResolver(anonymous, member.door).get_agent_card()
    card, extended, events, refused = await exercise(member.door, binding)
    assert public.capabilities.extended_agent_card
    assert [skill.id for skill in public.skills] == ["code"], "no extended skill in public"
    assert list(public.default_input_modes) == ["text/plain", "application/json"]
    assert card.capabilities.extended_agent_card
    assert [skill.id for skill in card.skills] == ["code"]
    assert [skill.id for skill in extended.skills] == ["code", "audit"]
    assert list(extended.skills[1].tags) == ["sec"]
    assert extended.name == card.name and extended.capabilities.extensions, \
        "the same card, with the session extension"
    (event,) = events
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, event
    assert isinstance(refused, ContentTypeNotSupportedError), refused
    assert "image/png" in str(refused)
    listed = member.rpc("ListTasks", {})["result"]
    assert listed["totalSize"] == 1, "the refused message started nothing"
    member.signal()
    assert member.wait() == 0
