"""Real A2A clients over the door's HTTP+JSON binding, on a real uvicorn socket:

1. a2a-sdk's client with ``supported_protocol_bindings=["HTTP+JSON"]``, with each of the
   door's three kinds of credential (the operator token, a declared bearer, a formation
   token minted for this door), every task method, and the error mapping; a recorder in
   front of the door proves the REST paths were used and ``POST /`` never was;
2. standard discovery: a2a-sdk's ``A2ACardResolver`` and ``create_from_url`` at a door
   with ``public_card`` (no credential for the card, then the card's bearer scheme), and
   the 401 at a door without it;
3. @a2a-js/sdk's REST client (``tests/agents/js/rest_client.mjs``), the token on its
   stdin; skipped, with the reason, where node or its node_modules are missing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AgentCardResolutionError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientCallInterceptor,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from gateway.door.app import OPERATOR_CALLER
from gateway.protocol import SESSION_EXTENSION_URI
from tests.support import third_party
from tests.support.rest_clients import WHO, ServedDoor, run_js_client, served_door

pytestmark = pytest.mark.integration

REST = "HTTP+JSON"
JSONRPC = "JSONRPC"
COMPLETED = TaskState.TASK_STATE_COMPLETED


# --------------------------------------------------------------------- helpers


class SchemeTokens(CredentialService):
    """The token for each security scheme name of the card (for a2a-sdk's AuthInterceptor)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._tokens = tokens

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self._tokens.get(security_scheme_name)


@pytest.fixture
async def served() -> AsyncIterator[ServedDoor]:
    async with served_door() as door:
        yield door


@asynccontextmanager
async def rest_client(served: ServedDoor, who: str, *,
                      streaming: bool = False) -> AsyncIterator[Client]:
    """a2a-sdk's HTTP+JSON client for the door, from its card, as ``who``. The operator and
    the formation peer put their token on the httpx client; the declared bearer is added
    by a2a-sdk's AuthInterceptor for the card's ``bearer`` scheme (its card is fetched
    with the token given to the resolver)."""
    interceptors: list[ClientCallInterceptor] = []
    if who == "bearer":
        http = httpx.AsyncClient(timeout=20.0)
        interceptors = [AuthInterceptor(SchemeTokens({"bearer": served.tokens[who]}))]
        resolver: dict[str, Any] | None = {"headers": served.headers(who)}
    else:
        http = httpx.AsyncClient(timeout=20.0, headers=served.headers(who))
        resolver = None
    async with http:
        config = ClientConfig(streaming=streaming, httpx_client=http,
                              supported_protocol_bindings=[REST])
        client = await ClientFactory(config).create_from_url(
            served.url, interceptors=interceptors, resolver_http_kwargs=resolver)
        try:
            yield client
        finally:
            await client.close()


def request(text: str, *, task: Task | None = None, context_id: str = "",
            return_immediately: bool = False) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    elif context_id:
        message.context_id = context_id
    return SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(return_immediately=return_immediately))


async def events_of(client: Client, sent: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(sent)]


async def one_task(client: Client, sent: SendMessageRequest) -> Task:
    (event,) = await events_of(client, sent)
    assert event.HasField("task"), event
    return event.task


def texts(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts]


def owner_of(served: ServedDoor, task_id: str) -> str:
    return served.door.store.visible(task_id, OPERATOR_CALLER).owner


# --------------------------------------------------------------------- 1. a2a-sdk over REST


@pytest.mark.parametrize("who", WHO)
async def test_send_blocking_returns_the_finished_task(served: ServedDoor, who: str) -> None:
    async with rest_client(served, who) as client:
        task = await one_task(client, request("hello"))
    assert task.status.state == COMPLETED
    assert texts(task) == ["part one ", "part two", "echo: hello"]
    assert task.artifacts[0].name == "essay"
    expected_owner = {"operator": "operator", "bearer": "bearer:ci",
                      "formation": "member:planner"}[who]
    assert owner_of(served, task.id) == expected_owner, "the token reached the door"
    served.recorder.assert_rest_only(("GET", "/.well-known/agent-card.json"),
                                     ("POST", "/message:send"))


@pytest.mark.parametrize("who", WHO)
async def test_send_return_immediately_then_get(served: ServedDoor, who: str) -> None:
    async with rest_client(served, who) as client:
        task = await one_task(client, request("hold:later", return_immediately=True))
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED,
                                     TaskState.TASK_STATE_WORKING)
        running = await client.get_task(GetTaskRequest(id=task.id))
        assert running.status.state == TaskState.TASK_STATE_WORKING
        served.agent.release("later")
        await asyncio.wait_for(served.door.result(task.id), 5)
        final = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert final.id == task.id
    assert final.status.state == COMPLETED
    assert texts(final) == ["released later"]
    assert len(final.history) == 1
    served.recorder.assert_rest_only(("POST", "/message:send"), ("GET", f"/tasks/{task.id}"))
    assert any(hit.query == "historyLength=1" for hit in served.recorder.hits)


@pytest.mark.parametrize("who", ["operator", "bearer"])
async def test_streaming_send_sends_the_task_then_each_update(served: ServedDoor,
                                                              who: str) -> None:
    async with rest_client(served, who, streaming=True) as client:
        events = await events_of(client, request("stream me"))
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds == ["task", "status_update", "artifact_update", "artifact_update",
                     "artifact_update", "status_update"]
    assert events[1].status_update.status.message.parts[0].text == "thinking"
    assert events[2].artifact_update.artifact.name == "essay"
    assert events[3].artifact_update.append and events[3].artifact_update.last_chunk
    assert events[4].artifact_update.artifact.parts[0].text == "echo: stream me"
    assert events[-1].status_update.status.state == COMPLETED
    assert {event.status_update.task_id for event in events[1:] if
            event.HasField("status_update")} == {events[0].task.id}
    served.recorder.assert_rest_only(("POST", "/message:stream"))


async def test_a_formation_token_may_not_stream_a_send(served: ServedDoor) -> None:
    """A formation token carries exactly SendMessage, GetTask, CancelTask, ListTasks and
    SubscribeToTask (docs/door-auth.md): DoorAuth refuses ``POST /message:stream`` as
    SendStreamingMessage (403 insufficient_scope) and the client says so; a blocking send
    with the same token works."""
    async with rest_client(served, "formation", streaming=True) as client:
        with pytest.raises(A2AClientError, match="403"):
            await events_of(client, request("stream me"))
    async with rest_client(served, "formation") as client:
        task = await one_task(client, request("then blocking"))
    assert task.status.state == COMPLETED
    served.recorder.assert_rest_only(("POST", "/message:stream"), ("POST", "/message:send"))


@pytest.mark.parametrize("who", WHO)
async def test_list_tasks_pages_of_two_over_three(served: ServedDoor, who: str) -> None:
    context = uuid.uuid4().hex
    async with rest_client(served, who) as client:
        sent = [(await one_task(client, request(f"task {i}", context_id=context))).id
                for i in range(3)]
        pages: list[list[str]] = []
        token = ""
        while True:
            page = await client.list_tasks(ListTasksRequest(context_id=context, page_size=2,
                                                            page_token=token))
            assert page.total_size == 3 and page.page_size == 2
            pages.append([task.id for task in page.tasks])
            token = page.next_page_token
            if not token:
                break
            assert len(pages) < 3, "the pages never end"
    assert [len(page) for page in pages] == [2, 1]
    assert [task_id for page in pages for task_id in page] == list(reversed(sent)), \
        "newest first, each once"
    served.recorder.assert_rest_only(("GET", "/tasks"))
    queries = [hit.query for hit in served.recorder.hits if hit.path == "/tasks"]
    assert len(queries) == 2 and all("pageSize=2" in query for query in queries)
    assert "pageToken=" in queries[1]


@pytest.mark.parametrize("who", WHO)
async def test_subscribe_to_a_live_task(served: ServedDoor, who: str) -> None:
    async with rest_client(served, who) as starter, \
            rest_client(served, who, streaming=True) as client:
        task = await one_task(starter, request("hold:sub", return_immediately=True))
        received: list[StreamResponse] = []

        async def follow() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                received.append(event)
                if len(received) == 1:
                    served.agent.release("sub")

        await asyncio.wait_for(follow(), 10)
    assert received[0].task.id == task.id
    assert received[0].task.status.state == TaskState.TASK_STATE_WORKING
    artifacts = [event.artifact_update.artifact.parts[0].text for event in received
                 if event.HasField("artifact_update")]
    assert artifacts == ["released sub"]
    assert received[-1].status_update.status.state == COMPLETED
    served.recorder.assert_rest_only(("POST", f"/tasks/{task.id}:subscribe"))


@pytest.mark.parametrize("who", WHO)
async def test_cancel_then_the_error_mapping(served: ServedDoor, who: str) -> None:
    async with rest_client(served, who) as client:
        task = await one_task(client, request("hold:forever", return_immediately=True))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.id == task.id
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(served.door.drained(), 5)
        assert served.agent.cancelled == [task.id]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id="no-such-task"))
    served.recorder.assert_rest_only(("POST", f"/tasks/{task.id}:cancel"),
                                     ("GET", "/tasks/no-such-task"),
                                     ("POST", "/tasks/no-such-task:cancel"))


@pytest.mark.parametrize("who", WHO)
async def test_input_required_then_resume_with_the_task_id(served: ServedDoor,
                                                           who: str) -> None:
    async with rest_client(served, who) as client:
        asked = await one_task(client, request("ask"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.parts[0].text == "which language?"
        answered = await one_task(client, request("rust", task=asked))
    assert answered.id == asked.id and answered.context_id == asked.context_id
    assert answered.status.state == COMPLETED
    assert texts(answered) == ["writing rust"]
    sends = [hit for hit in served.recorder.hits if hit.path == "/message:send"]
    assert len(sends) == 2
    served.recorder.assert_rest_only(("POST", "/message:send"))


async def test_each_credential_sees_only_its_own_tasks(served: ServedDoor) -> None:
    """The operator sees every task; a declared bearer and a formation peer each see the
    tasks they started, and another's task is the unknown id's TaskNotFoundError."""
    context = uuid.uuid4().hex
    started: dict[str, str] = {}
    for who in WHO:
        async with rest_client(served, who) as client:
            started[who] = (await one_task(client, request(f"by {who}",
                                                           context_id=context))).id
    for who in WHO:
        async with rest_client(served, who) as client:
            listed = await client.list_tasks(ListTasksRequest(context_id=context))
            seen = {task.id for task in listed.tasks}
            if who == "operator":
                assert seen == set(started.values())
                continue
            assert seen == {started[who]}
            assert listed.total_size == 1
            assert (await client.get_task(GetTaskRequest(id=started[who]))).id == started[who]
            for other in WHO:
                if other == who:
                    continue
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=started[other]))
                with pytest.raises(TaskNotFoundError):
                    await client.cancel_task(CancelTaskRequest(id=started[other]))
    served.recorder.assert_rest_only(("GET", "/tasks"), ("POST", "/message:send"))


# --------------------------------------------------------------------- 2. discovery


@pytest.fixture
async def public_served() -> AsyncIterator[ServedDoor]:
    async with served_door(public_card=True) as door:
        yield door


def session_extensions(card: Any) -> list[Any]:
    return [ext for ext in card.capabilities.extensions if ext.uri == SESSION_EXTENSION_URI]


async def test_the_resolver_reads_the_public_card_without_a_credential(
        public_served: ServedDoor) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:
        card = await A2ACardResolver(http, public_served.url).get_agent_card()
    assert card.name == "coder"
    assert [(i.protocol_binding, i.url, i.protocol_version)
            for i in card.supported_interfaces] == [(JSONRPC, public_served.url, "1.0"),
                                                   (REST, public_served.url, "1.0")]
    assert session_extensions(card) == [], "the public card names no session"
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [list(requirement.schemes) for requirement in card.security_requirements] == \
        [["bearer"]]
    (hit,) = public_served.recorder.hits
    assert (hit.method, hit.path, hit.authorized) == ("GET", "/.well-known/agent-card.json",
                                                      False)


@pytest.mark.parametrize("binding", [JSONRPC, REST])
@pytest.mark.parametrize("who", ["operator", "bearer"])
async def test_create_from_url_then_the_cards_bearer_scheme(public_served: ServedDoor,
                                                            binding: str, who: str) -> None:
    """``create_from_url`` works unchanged at a public-card door; the calls then carry the
    token for the card's ``bearer`` scheme: the operator's on the httpx client, the
    declared bearer's through a2a-sdk's AuthInterceptor."""
    served = public_served
    token = served.tokens[who]
    headers = served.headers(who) if who == "operator" else {}
    interceptors: list[ClientCallInterceptor] = (
        [AuthInterceptor(SchemeTokens({"bearer": token}))] if who == "bearer" else [])
    async with httpx.AsyncClient(timeout=20.0, headers=headers) as http:
        factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http,
                                             supported_protocol_bindings=[binding]))
        client = await factory.create_from_url(served.url, interceptors=interceptors)
        try:
            task = await one_task(client, request("discovered"))
            fetched = await client.get_task(GetTaskRequest(id=task.id))
        finally:
            await client.close()
        anonymous = await ClientFactory(ClientConfig(
            streaming=False, httpx_client=httpx.AsyncClient(timeout=10.0),
            supported_protocol_bindings=[binding])).create_from_url(served.url)
        try:
            with pytest.raises(A2AClientError, match="401"):
                await one_task(anonymous, request("no token"))
        finally:
            await anonymous.close()
    assert task.status.state == COMPLETED and fetched.id == task.id
    assert texts(task)[-1] == "echo: discovered"
    card_hits = [hit for hit in served.recorder.hits
                 if hit.path == "/.well-known/agent-card.json"]
    assert len(card_hits) == 2
    if who == "bearer":
        assert not any(hit.authorized for hit in card_hits), "the card was read anonymously"
    calls = [hit for hit in served.recorder.hits if hit.path != "/.well-known/agent-card.json"]
    assert [hit.authorized for hit in calls] == [True, True, False]
    if binding == REST:
        served.recorder.assert_rest_only(("POST", "/message:send"),
                                         ("GET", f"/tasks/{task.id}"))
    else:
        assert {(hit.method, hit.path) for hit in calls} == {("POST", "/")}


async def test_without_public_card_the_card_needs_a_credential(served: ServedDoor) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:
        resolver = A2ACardResolver(http, served.url)
        with pytest.raises(AgentCardResolutionError) as refused:
            await resolver.get_agent_card()
        card = await resolver.get_agent_card(http_kwargs={"headers": served.headers("bearer")})
    assert refused.value.status_code == 401
    assert card.name == "coder"
    (extension,) = session_extensions(card)
    assert extension.params["member"] == "coder"


# --------------------------------------------------------------------- 3. @a2a-js/sdk


@pytest.fixture
def node() -> None:
    third_party.require_node()


JS_STEPS = ["card", "send", "send_immediately", "get", "stream", "list", "subscribe",
            "cancel", "cancel_again", "ask", "resume", "unknown"]


@pytest.mark.parametrize("who", WHO)
async def test_the_js_sdk_jsonrpc_client(node: None, served: ServedDoor, who: str) -> None:
    """The same scenario over @a2a-js/sdk's JSON-RPC transport: every step, POST / only."""
    run = await run_js_client(served.url, "full", served.tokens[who], binding=JSONRPC)
    assert run.returncode == 0, run.stderr
    assert run.order == JS_STEPS, run.stderr
    steps = run.steps
    assert served.tokens[who] not in run.stderr + repr(steps), "the token was echoed"
    assert steps["card"]["protocol"] == JSONRPC
    assert steps["send"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert steps["get"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [len(page) for page in steps["list"]["pages"]] == [2, 1]
    assert steps["subscribe"]["events"][-1]["statusUpdate"]["status"]["state"] == \
        "TASK_STATE_COMPLETED"
    assert steps["cancel"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert steps["cancel_again"]["error"]["name"] == "TaskNotCancelableError"
    assert steps["unknown"]["error"]["name"] == "TaskNotFoundError"
    if who == "formation":
        assert "error" in steps["stream"], "no streaming send in a formation token's scopes"
    else:
        assert steps["stream"]["events"][-1]["statusUpdate"]["status"]["state"] == \
            "TASK_STATE_COMPLETED"
    rest = [hit for hit in served.recorder.hits
            if hit.path.strip("/") and hit.path != "/.well-known/agent-card.json"]
    assert rest == [], f"only JSON-RPC (POST /) was used: {rest}"


@pytest.mark.parametrize("who", WHO)
async def test_the_js_sdk_rest_client(node: None, served: ServedDoor, who: str) -> None:
    run = await run_js_client(served.url, "full", served.tokens[who])
    assert run.returncode == 0, run.stderr
    assert run.order == JS_STEPS, run.stderr
    steps = run.steps
    assert served.tokens[who] not in run.stderr + repr(steps), "the token was echoed"

    assert steps["card"]["protocol"] == REST
    assert steps["card"]["name"] == "coder"

    send = steps["send"]["task"]
    assert send["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [p["text"] for a in send["artifacts"] for p in a["parts"]] == \
        ["part one ", "part two", "echo: hello from js"]

    immediately = steps["send_immediately"]["task"]
    assert immediately["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    got = steps["get"]["task"]
    assert got["id"] == immediately["id"]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [p["text"] for a in got["artifacts"] for p in a["parts"]] == ["released js-get"]

    if who == "formation":
        assert steps["stream"]["error"]["statusCode"] == 403, steps["stream"]
    else:
        kinds = [next(iter(event)) for event in steps["stream"]["events"]]
        assert kinds == ["task", "statusUpdate", "artifactUpdate", "artifactUpdate",
                         "artifactUpdate", "statusUpdate"]
        last = steps["stream"]["events"][-1]["statusUpdate"]
        assert last["status"]["state"] == "TASK_STATE_COMPLETED"

    listed = steps["list"]
    assert [len(page) for page in listed["pages"]] == [2, 1]
    assert [task_id for page in listed["pages"] for task_id in page] == \
        list(reversed(listed["sent"]))
    assert listed["totalSize"] == 3

    subscribed = steps["subscribe"]["events"]
    assert subscribed[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert subscribed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    cancel = steps["cancel"]["task"]
    assert cancel["status"]["state"] == "TASK_STATE_CANCELED"
    await asyncio.wait_for(served.door.drained(), 5)
    assert served.agent.cancelled == [cancel["id"]]
    again = steps["cancel_again"]["error"]
    assert (again["name"], again["reason"], again["statusCode"]) == \
        ("TaskNotCancelableError", "TASK_NOT_CANCELABLE", 400)

    assert steps["ask"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    resumed = steps["resume"]["task"]
    assert resumed["id"] == steps["ask"]["task"]["id"]
    assert resumed["status"]["state"] == "TASK_STATE_COMPLETED"
    assert resumed["artifacts"][-1]["parts"][0]["text"] == "writing typescript"

    unknown = steps["unknown"]["error"]
    assert (unknown["name"], unknown["reason"], unknown["statusCode"]) == \
        ("TaskNotFoundError", "TASK_NOT_FOUND", 404)
    assert unknown["isTaskNotFoundError"] is True

    served.recorder.assert_rest_only(
        ("GET", "/.well-known/agent-card.json"), ("POST", "/message:send"),
        ("POST", "/message:stream"), ("GET", "/tasks"), ("GET", f"/tasks/{got['id']}"),
        ("POST", f"/tasks/{subscribed[0]['task']['id']}:subscribe"),
        ("POST", f"/tasks/{cancel['id']}:cancel"), ("GET", "/tasks/no-such-task"))
    assert all(hit.authorized for hit in served.recorder.hits)


async def test_the_js_sdk_reads_a_public_card_then_sends_with_the_token(
        node: None, public_served: ServedDoor) -> None:
    run = await run_js_client(public_served.url, "public-card", public_served.tokens["bearer"])
    assert run.returncode == 0, run.stderr
    assert run.order == ["card", "send"], run.stderr
    assert run.steps["card"]["protocol"] == REST
    assert run.steps["card"]["interfaces"] == [JSONRPC, REST]
    assert run.steps["send"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    (card_hit, send_hit) = public_served.recorder.hits
    assert (card_hit.path, card_hit.authorized) == ("/.well-known/agent-card.json", False)
    assert (send_hit.method, send_hit.path, send_hit.authorized) == \
        ("POST", "/message:send", True)
    task_id = run.steps["send"]["task"]["id"]
    assert public_served.door.store.visible(task_id, OPERATOR_CALLER).owner == "bearer:ci"
