"""A real member (``mur run --capsule``) whose ``murmur.yaml`` asks for CORS and a public
card: both A2A bindings at its door, a preflight from the allowed origin answered
without a credential, standard discovery (a2a-sdk's ``A2ACardResolver``) reading the
public card, and the client then authenticating with the scheme the card declares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver

from tests.support import member as support
from tests.support.member import Project

pytestmark = pytest.mark.integration

PAGE = "http://127.0.0.1:5173"
#: The declared bearer's token, handed to the member in the variable its manifest names.
WEB_TOKEN = "declared-web-token-0123456789abcdef"
NETWORK = ("{bearer: [{name: web, env: WEB_DOOR_TOKEN}]}\n"
           "  public_card: true\n"
           f"  cors: {{allow_origins: ['{PAGE}']}}")


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def test_a_member_serves_both_bindings_cors_and_a_public_card(project: Project) -> None:
    project.capsule("web", authentication=NETWORK)
    member = project.run("web", env={"WEB_DOOR_TOKEN": WEB_TOKEN})
    web = {"Authorization": f"Bearer {WEB_TOKEN}", "A2A-Version": "1.0"}
    with httpx.Client(base_url=member.door, timeout=10.0) as client:
        anonymous = client.get("/.well-known/agent-card.json")
        preflight = client.options("/message:send", headers={
            "Origin": PAGE, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,a2a-version,content-type"})
        refused = client.options("/message:send", headers={
            "Origin": "http://127.0.0.1:1", "Access-Control-Request-Method": "POST"})
        sent = client.post("/message:send", headers={**web, "Origin": PAGE}, json={
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
        listed = client.get("/tasks", headers={"Authorization": f"Bearer {member.token}",
                                               "A2A-Version": "1.0"})
        no_token = client.get("/tasks", headers={"A2A-Version": "1.0"})
    card = anonymous.json()
    assert anonymous.status_code == 200
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == [
        "JSONRPC", "HTTP+JSON", "GRPC"]
    assert card["supportedInterfaces"][2]["url"] == member.ready["grpc_url"]
    assert "extensions" not in card["capabilities"]  # no session, member or formation named
    assert member.ready["session_id"] not in anonymous.text
    assert "bearer" in card["securitySchemes"]
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == PAGE
    assert refused.status_code == 401
    assert sent.status_code == 200, sent.text
    assert sent.headers["access-control-allow-origin"] == PAGE
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [t["id"] for t in listed.json()["tasks"]] == [task["id"]]
    assert no_token.status_code == 401
    member.signal()
    assert member.wait() == 0


async def test_standard_discovery_reads_the_public_card_then_authenticates(
        project: Project) -> None:
    project.capsule("web", authentication=NETWORK)
    member = project.run("web", env={"WEB_DOOR_TOKEN": WEB_TOKEN})
    async with httpx.AsyncClient(timeout=10.0) as anonymous:
        card = await A2ACardResolver(anonymous, member.door).get_agent_card()
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert {i.protocol_binding for i in card.supported_interfaces} == {
        "JSONRPC", "HTTP+JSON", "GRPC"}
    async with httpx.AsyncClient(timeout=10.0, headers={
            "Authorization": f"Bearer {WEB_TOKEN}", "A2A-Version": "1.0"}) as client:
        task = await client.get(member.door + "/tasks/unknown-task")
    assert task.status_code == 404
    assert task.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    member.signal()
    assert member.wait() == 0
