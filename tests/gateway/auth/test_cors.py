"""CORS at a door (gateway/auth/cors.py): off by default; for the manifest's origins a
preflight is answered without a credential, and nothing else is."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.tasks import TaskRun
from tests.support.door import BASE_URL, card_info

PAGE = "http://127.0.0.1:5000"
OPERATOR = OperatorToken.generate()
PREFLIGHT = {"Origin": PAGE, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,a2a-version,content-type"}


async def answer(task: TaskRun) -> str:
    return f"answer to {task.text}"


def door(*origins: str, authenticated: bool = True) -> Door:
    policy = AuthPolicy(authenticated=authenticated, operator=OPERATOR if authenticated else None,
                        allow_origins=origins)
    return build_door(answer, DoorSettings(card=card_info()), policy=policy)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = door(PAGE).app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE_URL) as http:
        yield http


async def test_a_preflight_from_an_allowed_origin_is_answered_without_a_credential(
        client: httpx.AsyncClient) -> None:
    response = await client.options("/message:send", headers=PREFLIGHT)
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == PAGE
    allowed = {h.strip().lower()
               for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "a2a-version", "a2a-extensions", "content-type"} <= allowed
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "Origin" in response.headers["vary"]
    assert "access-control-allow-credentials" not in response.headers


async def test_private_network_access_is_granted_only_when_the_browser_asks(
        client: httpx.AsyncClient) -> None:
    plain = await client.options("/", headers=PREFLIGHT)
    asked = await client.options("/", headers={
        **PREFLIGHT, "Access-Control-Request-Private-Network": "true"})
    assert "access-control-allow-private-network" not in plain.headers
    assert asked.headers["access-control-allow-private-network"] == "true"


async def test_a_preflight_from_another_origin_gets_no_cors_answer(
        client: httpx.AsyncClient) -> None:
    response = await client.options("/message:send", headers={
        **PREFLIGHT, "Origin": "http://evil.example"})
    assert response.status_code == 401
    assert response.json()["error"] == "unauthenticated"
    assert "access-control-allow-origin" not in response.headers


async def test_cross_origin_call_without_credential_still_401_but_readable(
        client: httpx.AsyncClient) -> None:
    """The attack: a page of an allowed origin calls without a token. CORS lets it read
    the refusal, never skip it."""
    response = await client.get("/tasks", headers={"Origin": PAGE, "A2A-Version": "1.0"})
    assert response.status_code == 401
    assert response.headers["access-control-allow-origin"] == PAGE
    assert "WWW-Authenticate" in response.headers["access-control-expose-headers"]


async def test_an_options_request_without_the_preflight_header_is_not_a_preflight(
        client: httpx.AsyncClient) -> None:
    response = await client.options("/message:send", headers={"Origin": PAGE})
    assert response.status_code == 401


async def test_an_authenticated_cross_origin_call_is_served_and_marked(
        client: httpx.AsyncClient) -> None:
    headers = {"Origin": PAGE, "A2A-Version": "1.0", "Authorization": f"Bearer {OPERATOR.value}",
               "Content-Type": "application/json"}
    sent = await client.post("/message:send", headers=headers, json={
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
    assert sent.status_code == 200
    assert sent.json()["task"]["artifacts"][0]["parts"][0]["text"] == "answer to hi"
    assert sent.headers["access-control-allow-origin"] == PAGE
    assert sent.headers["vary"] == "Origin"


async def test_cors_is_off_by_default() -> None:
    app = door().app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE_URL) as http:
        response = await http.options("/message:send", headers=PREFLIGHT)
        served = await http.get("/healthz", headers={"Origin": PAGE})
    assert response.status_code == 401
    assert "access-control-allow-origin" not in response.headers
    assert "access-control-allow-origin" not in served.headers


async def test_a_star_allows_every_origin_naming_the_pages_own() -> None:
    app = door("*").app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE_URL) as http:
        response = await http.options("/", headers={**PREFLIGHT, "Origin": "http://a.test"})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "http://a.test"


async def test_a_public_door_with_cors_serves_pages_of_its_origins() -> None:
    app = door(PAGE, authenticated=False).app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url=BASE_URL) as http:
        card = await http.get("/.well-known/agent-card.json", headers={"Origin": PAGE})
    assert card.status_code == 200
    assert card.headers["access-control-allow-origin"] == PAGE
