"""The finding "a formation token reads the extended card" (issue 53), on a real member:
``mur run --capsule`` of a capsule with ``agent.extended_skills`` and a public card,
handed a formation channel the way the launcher hands it, its door called by a member
``planner`` holding a formation token for it.

In order: a formation token is refused the extended card with ``403 insufficient_scope``
on JSON-RPC (DoorAuth's JSON body, as every refusal of it) and on HTTP+JSON, and with
``PERMISSION_DENIED`` and the ErrorInfo reason ``INSUFFICIENT_SCOPE`` on gRPC, while it
still lists its tasks and reads the agent card; the operator token reads the extended
card on all three bindings; the public card stays readable without a token and shows no
extended skill."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.support import member as support
from tests.support.grpc_clients import error_info
from tests.support.member import Channel, Member, Project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

AUTHENTICATION = "{}\n  public_card: true"
AGENT_KEYS = ("  skills: [{id: code, name: Code, description: Writes code}]\n"
              "  extended_skills: [{id: audit, name: Audit, description: Audits}]\n")
VERSION = {"A2A-Version": "1.0"}
EXTENDED_CALL = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}
REFUSAL = {"error": "insufficient_scope",
           "message": "The credential member:planner may not call GetExtendedAgentCard."}


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def coder_capsule(project: Project) -> None:
    """Capsule ``coder``: takes peer tasks, has extended skills and a public card."""
    source = support.write_capsule(project.path.parent / "src" / "coder", "coder",
                                   authentication=AUTHENTICATION, peer_tasks=True)
    manifest = source / "murmur.yaml"
    entry = "  python: coder_agent:run\n"
    text = manifest.read_text()
    assert entry in text
    manifest.write_text(text.replace(entry, entry + AGENT_KEYS))
    support.install_capsule(project.path, source)


def in_formation(project: Project) -> tuple[Member, Channel, str]:
    """The coder as a formation member, and a formation token planner -> coder."""
    formation_id, key = support.new_formation()
    channel = Channel(formation_id, key, "coder")
    channel.send_credentials()
    member = project.run("coder", channel=channel)
    return member, channel, key.mint(formation=formation_id, caller="planner", callee="coder")


async def grpc_extended_card(grpc_url: str, token: str) -> a2a_pb2.AgentCard:
    async with grpc.aio.insecure_channel(grpc_url) as channel:
        service = a2a_pb2_grpc.A2AServiceStub(channel)
        card: a2a_pb2.AgentCard = await service.GetExtendedAgentCard(
            a2a_pb2.GetExtendedAgentCardRequest(),
            metadata=[("a2a-version", "1.0"), ("authorization", f"Bearer {token}")])
        return card


async def test_a_formation_token_for_this_door_is_refused_the_extended_card(
        project: Project) -> None:
    coder_capsule(project)
    member, channel, token = in_formation(project)
    formation = {**VERSION, "Authorization": f"Bearer {token}"}
    operator = {**VERSION, "Authorization": f"Bearer {member.token}"}
    async with httpx.AsyncClient(base_url=member.door, timeout=20.0) as http:
        refused_rpc = await http.post("/", json=EXTENDED_CALL, headers=formation)
        refused_rest = await http.get("/extendedAgentCard", headers=formation)
        listed = await http.post("/", headers=formation, json={
            "jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}})
        member_card = await http.get("/.well-known/agent-card.json", headers=formation)
        operator_rpc = await http.post("/", json=EXTENDED_CALL, headers=operator)
        operator_rest = await http.get("/extendedAgentCard", headers=operator)
        public = await http.get("/.well-known/agent-card.json")
    grpc_url = member.ready["grpc_url"]
    with pytest.raises(grpc.aio.AioRpcError) as refused_grpc:
        await grpc_extended_card(grpc_url, token)
    operator_grpc = await grpc_extended_card(grpc_url, member.token)

    for refused in (refused_rpc, refused_rest):
        assert refused.status_code == 403, refused.text
        assert refused.json() == REFUSAL
        assert refused.headers["www-authenticate"] == (
            'Bearer realm="murmur", error="insufficient_scope"')
        assert "audit" not in refused.text
    assert refused_grpc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    info = error_info(refused_grpc.value)
    assert info.reason == "INSUFFICIENT_SCOPE"
    assert dict(info.metadata) == {"credential": "member:planner",
                                   "method": "GetExtendedAgentCard"}
    # Within its five scopes it is served, and it reads the agent card.
    assert listed.status_code == 200 and listed.json()["result"]["tasks"] == [], listed.text
    assert member_card.status_code == 200
    assert [skill["id"] for skill in member_card.json()["skills"]] == ["code"]

    assert operator_rpc.status_code == 200 and operator_rest.status_code == 200
    assert operator_rest.json() == operator_rpc.json()["result"]
    assert [skill["id"] for skill in operator_rest.json()["skills"]] == ["code", "audit"]
    assert [skill.id for skill in operator_grpc.skills] == ["code", "audit"]

    assert public.status_code == 200
    card = public.json()
    assert card["capabilities"]["extendedAgentCard"] is True
    assert [skill["id"] for skill in card["skills"]] == ["code"]
    assert "extensions" not in card["capabilities"], "the public card names no session"

    channel.close_lifeline()
    assert member.wait() == 0
