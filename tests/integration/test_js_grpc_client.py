"""@a2a-js/sdk's gRPC client (``@a2a-js/sdk/client/grpc`` over @grpc/grpc-js) end to end
at a door serving its gRPC binding, on real sockets: ``tests/agents/js/grpc_client.mjs``,
the token on its stdin.

The script gets only the door's HTTP URL: the SDK's ``ClientFactory``, with the gRPC
transport alone and ``preferredTransports: ['GRPC']``, reads the card there and picks its
``GRPC`` interface (``127.0.0.1:PORT``, the door's own loopback port); every call after the
card goes over gRPC, the token in the call's metadata. A recorder in front of the door's
HTTP app proves it: the card is the only HTTP request.

1. each of the door's three kinds of credential (the operator token, a declared bearer, a
   formation token minted for this door): send (blocking), get, list in pages, a streaming
   send (PERMISSION_DENIED for the formation token: its five scopes have no
   SendStreamingMessage), subscribe to a live task, cancel a held task and cancel it again
   (TaskNotCancelableError), input-required then the reply, an unknown id
   (TaskNotFoundError), each A2A error recognised by the SDK from the status details;
2. at a door with ``public_card``: the card read with no credential, then every call with
   none or with a wrong token is UNAUTHENTICATED and starts nothing.

Skipped, with the reason, where node, the node_modules or the gRPC peers (@grpc/grpc-js,
@bufbuild/protobuf) are missing, or the door has no ``grpc`` extra.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.door.app import OPERATOR_CALLER
from tests.support import third_party
from tests.support.rest_clients import (
    JS_GRPC_CLIENT,
    WHO,
    JsRun,
    ServedDoor,
    run_js_client,
    served_door,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

GRPC = "GRPC"
CARD = ("GET", "/.well-known/agent-card.json")
#: gRPC status codes (as @grpc/grpc-js reports them on the SDK's errors).
NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION, UNAUTHENTICATED = 5, 7, 9, 16
FULL_STEPS = ["card", "send", "get", "list", "stream", "subscribe", "cancel", "cancel_again",
              "ask", "resume", "unknown"]
REFUSED_STEPS = ["card", "send", "get", "list", "stream"]


@pytest.fixture
def node() -> None:
    third_party.require_node_grpc()


def grpc_door(served: ServedDoor) -> ServedDoor:
    if not served.grpc_url:
        pytest.skip("the door serves no gRPC: the grpc extra (grpcio, protobuf) is missing")
    return served


@pytest.fixture
async def served() -> AsyncIterator[ServedDoor]:
    async with served_door(grpc=True) as door:
        yield grpc_door(door)


@pytest.fixture
async def public_served() -> AsyncIterator[ServedDoor]:
    async with served_door(grpc=True, public_card=True) as door:
        yield grpc_door(door)


async def run_grpc_client(served: ServedDoor, scenario: str, token: str | None) -> JsRun:
    return await run_js_client(served.url, scenario, token, script=JS_GRPC_CLIENT)


def texts(task: dict[str, Any]) -> list[str]:
    return [part["text"] for artifact in task.get("artifacts", ())
            for part in artifact["parts"]]


def assert_card_chose_grpc(run: JsRun, served: ServedDoor) -> None:
    card = run.steps["card"]
    assert "error" not in card, card
    assert (card["protocol"], card["version"], card["name"]) == (GRPC, "1.0", "coder")
    assert card["interfaces"] == ["JSONRPC", "HTTP+JSON", GRPC]
    assert card["grpcUrl"] == served.grpc_url


def assert_only_the_card_over_http(served: ServedDoor) -> None:
    """Every call after the card went over gRPC: the HTTP app saw the card alone."""
    assert served.recorder.routes() == {CARD}, served.recorder.hits


# --------------------------------------------------------------------- 1. each credential


@pytest.mark.parametrize("who", WHO)
async def test_the_js_sdk_grpc_client(node: None, served: ServedDoor, who: str) -> None:
    token = served.tokens[who]
    run = await run_grpc_client(served, "full", token)
    assert run.returncode == 0, run.stderr
    assert run.order == FULL_STEPS, run.stderr
    steps = run.steps
    assert token not in run.stderr + repr(steps), "the token was echoed"
    assert_card_chose_grpc(run, served)

    # send (blocking), then get, then list in pages
    sent = steps["send"]["task"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(sent) == ["part one ", "part two", "echo: hello from js"]
    assert sent["artifacts"][0]["name"] == "essay"
    expected_owner = {"operator": "operator", "bearer": "bearer:ci",
                      "formation": "member:planner"}[who]
    assert served.door.store.visible(sent["id"], OPERATOR_CALLER).owner == expected_owner, \
        "the token in the gRPC metadata reached the door"
    got = steps["get"]["task"]
    assert (got["id"], got["contextId"]) == (sent["id"], sent["contextId"])
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(got) == texts(sent)
    assert len(got["history"]) == 1, "historyLength 1 travelled"
    listed = steps["list"]
    assert [len(page) for page in listed["pages"]] == [2, 1]
    assert [task_id for page in listed["pages"] for task_id in page] == \
        list(reversed(listed["sent"])), "newest first, each once"
    assert (listed["totalSize"], listed["pageSize"]) == (3, 2)

    # a streaming send: the task, then each update, over SendStreamingMessage
    if who == "formation":
        refused = steps["stream"]["error"]
        assert refused["status"] == PERMISSION_DENIED, refused
        assert "SendStreamingMessage" in refused["message"]
    else:
        events = steps["stream"]["events"]
        kinds = [next(iter(event)) for event in events]
        assert kinds == ["task", "statusUpdate", "artifactUpdate", "artifactUpdate",
                         "artifactUpdate", "statusUpdate"]
        assert events[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        assert events[3]["artifactUpdate"]["append"] is True
        assert events[4]["artifactUpdate"]["artifact"]["parts"][0]["text"] == \
            "echo: stream me"
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    # subscribe to a live task until its end
    subscribed = steps["subscribe"]["events"]
    assert subscribed[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    followed = subscribed[0]["task"]["id"]
    artifacts = [event["artifactUpdate"]["artifact"]["parts"][0]["text"]
                 for event in subscribed if "artifactUpdate" in event]
    assert artifacts == ["released js-sub"]
    assert subscribed[-1]["statusUpdate"]["taskId"] == followed
    assert subscribed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    # cancel a held task, then again
    cancel = steps["cancel"]
    assert cancel["held"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert cancel["task"]["id"] == cancel["held"]["id"]
    assert cancel["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    await asyncio.wait_for(served.door.drained(), 5)
    assert served.agent.cancelled == [cancel["task"]["id"]], "the agent's task was cancelled"
    again = steps["cancel_again"]["error"]
    assert (again["name"], again["reason"], again["status"], again["transport"]) == \
        ("TaskNotCancelableError", "TASK_NOT_CANCELABLE", FAILED_PRECONDITION, "grpc")
    assert again["isTaskNotCancelableError"] is True

    # input-required, then the reply on the same task
    asked = steps["ask"]["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert asked["status"]["message"]["parts"][0]["text"] == "which language?"
    resumed = steps["resume"]["task"]
    assert (resumed["id"], resumed["contextId"]) == (asked["id"], asked["contextId"])
    assert resumed["status"]["state"] == "TASK_STATE_COMPLETED"
    assert texts(resumed) == ["writing typescript"]

    unknown = steps["unknown"]["error"]
    assert (unknown["name"], unknown["reason"], unknown["status"]) == \
        ("TaskNotFoundError", "TASK_NOT_FOUND", NOT_FOUND)
    assert unknown["isTaskNotFoundError"] is True

    assert_only_the_card_over_http(served)
    assert all(hit.authorized for hit in served.recorder.hits)


# --------------------------------------------------------------------- 2. no credential


@pytest.mark.parametrize("token", [None, "not-a-token-at-all"], ids=["none", "wrong"])
async def test_the_js_sdk_grpc_client_unauthenticated(node: None, public_served: ServedDoor,
                                                      token: str | None) -> None:
    run = await run_grpc_client(public_served, "unauthenticated", token)
    assert run.returncode == 0, run.stderr
    assert run.order == REFUSED_STEPS, run.stderr
    assert_card_chose_grpc(run, public_served)
    for name in REFUSED_STEPS[1:]:
        refused = run.steps[name].get("error")
        assert refused is not None, run.steps[name]
        assert (refused["status"], refused["transport"]) == (UNAUTHENTICATED, "grpc"), \
            (name, refused)
        if token is None:
            assert "Authorization: Bearer" in refused["message"], refused
        else:
            assert token not in refused["message"], "a token is never echoed"
    assert public_served.door.store.state_counts() == {}, "a refused send started nothing"
    (hit,) = public_served.recorder.hits
    assert ((hit.method, hit.path), hit.authorized) == (CARD, False)
