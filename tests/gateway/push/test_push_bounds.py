"""Push notifications under attack, at a door in this process and webhooks on loopback:

1. a receiver that hangs (accepts, never answers) holds back only its own
   configuration's events: another caller's webhook gets its first event at once;
2. the slots: at most so many tries in flight per receiver host, per caller and per
   door; a configuration's queue past its bound drops its oldest event, counted;
3. configurations per caller: one caller filling its slots is refused past the bound on
   every binding, naming the bound, while another caller still sets one; its
   configurations of ended tasks make room;
4. the webhook-token guard: a door credential behind a scheme word or space is refused,
   whichever credential it is, and never echoed;
5. ``GET /metrics``: push events by outcome, and those pending.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier
from gateway.caller import PUSH_METHODS, TASK_METHODS
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import GateConfig
from gateway.metrics import DoorMetrics
from gateway.proxy.egress import AllowList
from gateway.push.configs import MAX_PER_CALLER, MAX_PER_TASK, PushConfig, PushConfigs
from gateway.push.delivery import DeliveryPolicy, PushDelivery
from gateway.trace.bus import TraceBus
from tests.support.auth import CI_TOKEN, FORMATION, KEY, corp_jwt, jwt_issuer, mint
from tests.support.door import card_info
from tests.support.push_door import OTHER_TOKEN, Agent, PushDoor, call, push_door
from tests.support.webhooks import hanging, webhook

pytestmark = pytest.mark.timeout(60)


def held(url: str | None = None) -> dict[str, Any]:
    """SendMessage params of a task that waits for the agent's release, with a
    configuration for ``url`` when given."""
    configuration: dict[str, Any] = {"returnImmediately": True}
    if url is not None:
        configuration["taskPushNotificationConfig"] = {"url": url}
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": "hold"}]}, "configuration": configuration}


async def close(push: PushDoor) -> None:
    push.agent.release.set()
    assert push.door.tasks.push is not None
    await push.door.tasks.push.aclose(0)


# ------------------------------------------------------------ 1. a hanging receiver


async def test_three_hanging_receivers_do_not_hold_back_another_callers_webhook() -> None:
    async with webhook() as good, hanging() as first, hanging() as second, \
            hanging() as third:
        push = push_door("127.0.0.1")
        try:
            async with push.client(OTHER_TOKEN) as other, \
                    push.client(push.operator.value) as operator:
                for hook in (first, second, third):
                    sent = await call(other, "SendMessage", held(f"{hook.url}/hook"))
                    assert "result" in sent, sent
                await first.accepted(1, 5)
                mine = await call(operator, "SendMessage", held(f"{good.url}/hook"))
                await good.until(lambda bodies: len(bodies) >= 1, 1.0)
                for hook in (first, second, third):
                    await hook.accepted(1, 5)
        finally:
            await close(push)
    assert good.bodies[0]["task"]["id"] == mine["result"]["task"]["id"]


# ------------------------------------------------------------ 2. slots and queues


class GatedPosts:
    """Stands in for a delivery's POST: counts the tries in flight (at the door, by
    host, by owner), keeps the most seen, and answers 200 once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()

    async def post(self, _target: Any, config: PushConfig, body: bytes) -> int:
        keys = ("door", f"host:{urlsplit(config.url).hostname}", f"owner:{config.owner}")
        for key in keys:
            self.now[key] += 1
            self.most[key] = max(self.most[key], self.now[key])
        async with self._changed:
            self._changed.notify_all()
        try:
            await self.gate.wait()
            self.bodies.append(json.loads(body))
            return 200
        finally:
            for key in keys:
                self.now[key] -= 1

    async def in_flight(self, count: int) -> None:
        async with asyncio.timeout(5), self._changed:
            await self._changed.wait_for(lambda: self.now["door"] >= count)


def gated(policy: DeliveryPolicy) -> tuple[PushDelivery, GatedPosts, list[dict[str, Any]],
                                           DoorMetrics]:
    trace = TraceBus()
    records: list[dict[str, Any]] = []
    trace.add_sink(records.append)
    metrics = DoorMetrics()
    delivery = PushDelivery(AllowList(["*"]), trace, policy, metrics=metrics)
    posts = GatedPosts()
    delivery._post = posts.post  # type: ignore[method-assign]
    return delivery, posts, records, metrics


def config(number: int, host: str, owner: str) -> PushConfig:
    return PushConfig(f"c{number}", f"t{number}", f"http://{host}:8099/hook", owner)


@pytest.mark.parametrize(("bound", "policy", "configs", "spare"), [
    # five configurations to one host, each of its own owner; a sixth elsewhere
    ("host:127.0.0.2", {"per_host": 2, "per_owner": 99, "in_flight": 99},
     [config(n, "127.0.0.2", f"o{n}") for n in range(5)], config(9, "127.0.0.3", "o9")),
    # five of one owner, each to its own host; a sixth of another owner
    ("owner:a", {"per_host": 99, "per_owner": 2, "in_flight": 99},
     [config(n, f"127.0.1.{n}", "a") for n in range(5)], config(9, "127.0.0.9", "b")),
    # five of their own host and owner: the door's bound alone
    ("door", {"per_host": 99, "per_owner": 99, "in_flight": 2},
     [config(n, f"127.0.2.{n}", f"o{n}") for n in range(5)], None),
])
async def test_tries_in_flight_are_bounded_per_host_per_caller_and_per_door(
        bound: str, policy: dict[str, int], configs: list[PushConfig],
        spare: PushConfig | None) -> None:
    delivery, posts, _records, _metrics = gated(DeliveryPolicy(**policy))
    for each in configs:
        delivery.send(each, {"task": {"id": each.task_id}})
    if spare is not None:
        delivery.send(spare, {"task": {"id": spare.task_id}})
    # Two of the bounded five are in flight, and the spare beside them: it waits for
    # no slot the five hold.
    await posts.in_flight(3 if spare is not None else 2)
    posts.gate.set()
    await asyncio.wait_for(delivery.drained(), 10)
    assert posts.most[bound] == 2
    assert len(posts.bodies) == len(configs) + (spare is not None)


async def test_a_full_queue_drops_its_oldest_event_so_the_last_one_still_goes_out() -> None:
    delivery, posts, records, metrics = gated(DeliveryPolicy(queue=3))
    posts.gate.set()
    hook = config(1, "127.0.0.2", "a")
    other = config(2, "127.0.0.2", "a")
    for number in range(6):
        delivery.send(hook, {"statusUpdate": {"n": number}})
    delivery.send(other, {"statusUpdate": {"n": 99}})
    await asyncio.wait_for(delivery.drained(), 10)
    mine = [body["statusUpdate"]["n"] for body in posts.bodies if body["statusUpdate"]["n"] < 99]
    assert mine == [3, 4, 5], "the newest three, in order"
    assert {"statusUpdate": {"n": 99}} in posts.bodies, "another configuration lost nothing"
    dropped = [r for r in records if r["outcome"] == "dropped"]
    assert [(r["config_id"], r["attempt"]) for r in dropped] == [("c1", 0)] * 3
    assert metrics.push_events == {"queued": 7, "delivered": 4, "failed": 0, "refused": 0,
                                   "dropped": 3}
    assert delivery.pending == 0


# ------------------------------------------------------------ 3. configurations per caller


def test_an_owner_at_its_bound_is_refused_naming_it_and_gives_up_ended_tasks_first() -> None:
    configs = PushConfigs(max_per_caller=2)
    live = {"t1", "t2", "t3"}
    for number in (1, 2):
        configs.add(PushConfig(f"c{number}", f"t{number}", "http://h/x", "a"),
                    followed=live.__contains__)
    with pytest.raises(RpcError) as refused:
        configs.add(PushConfig("c3", "t3", "http://h/x", "a"), followed=live.__contains__)
    assert refused.value.name == "INVALID_PARAMS"
    assert "this caller holds 2 push notification configurations" in refused.value.message
    assert refused.value.metadata == {"limit": "push_configs_per_caller", "max": "2"}
    configs.add(PushConfig("c1", "t3", "http://h/x", "b"), followed=live.__contains__)
    configs.add(PushConfig("c2", "t2", "http://h/other", "a"), followed=live.__contains__)
    assert configs.held_by("a") == 2, "replacing one's own is no new place"
    live.discard("t1")
    configs.add(PushConfig("c3", "t3", "http://h/x", "a"), followed=live.__contains__)
    with pytest.raises(RpcError):
        configs.get("t1", "c1", "a")
    assert [c.id for c in configs.of_task("t3")] == ["c1", "c3"]
    assert configs.get("t3", "c1", "b").owner == "b", "two owners' ids never meet"
    configs.delete("t3", "c1", "a")
    assert configs.get("t3", "c1", "b").owner == "b"


async def test_one_caller_filling_its_config_slots_is_refused_on_every_binding() -> None:
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    tasks_needed = MAX_PER_CALLER // MAX_PER_TASK
    async with webhook() as good:
        push = push_door("127.0.0.1")
        grpc_url = await push.door.serve_grpc()
        assert grpc_url is not None
        try:
            async with push.client(CI_TOKEN) as ci, push.client(OTHER_TOKEN) as other:
                task_ids = [(await call(ci, "SendMessage", held()))["result"]["task"]["id"]
                            for _ in range(tasks_needed + 1)]
                for task_id in task_ids[:tasks_needed]:
                    for number in range(MAX_PER_TASK):
                        made = await call(ci, "CreateTaskPushNotificationConfig", {
                            "taskId": task_id, "url": f"{good.url}/{number}"})
                        assert "result" in made, made
                spare = task_ids[-1]
                config = {"taskId": spare, "url": f"{good.url}/one-more"}
                rpc = await call(ci, "CreateTaskPushNotificationConfig", config)
                rest = await ci.post(f"/tasks/{spare}/pushNotificationConfigs",
                                     json={"url": f"{good.url}/one-more"})
                auth = [("a2a-version", "1.0"), ("authorization", f"Bearer {CI_TOKEN}")]
                async with grpc.aio.insecure_channel(grpc_url) as channel:
                    door = a2a_pb2_grpc.A2AServiceStub(channel)
                    with pytest.raises(grpc.aio.AioRpcError) as on_grpc:
                        await door.CreateTaskPushNotificationConfig(
                            a2a_pb2.TaskPushNotificationConfig(
                                task_id=spare, url=f"{good.url}/one-more"), metadata=auth)
                theirs = await call(other, "SendMessage", held(f"{good.url}/theirs"))
                # One of the caller's tasks ends: its configurations make room.
                ended = task_ids[0]
                await call(ci, "CancelTask", {"id": ended})
                await good.until(lambda _bodies: good.ended(ended), 10)
                after = await call(ci, "CreateTaskPushNotificationConfig", config)
        finally:
            await push.door.stop_grpc(0.5)
            await close(push)
    bound = f"this caller holds {MAX_PER_CALLER} push notification configurations"
    assert rpc["error"]["code"] == -32602 and bound in rpc["error"]["message"]
    assert rpc["error"]["data"][0]["metadata"] == {"limit": "push_configs_per_caller",
                                                   "max": str(MAX_PER_CALLER)}
    assert rest.status_code == 400 and bound in rest.json()["error"]["message"]
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert on_grpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bound in (on_grpc.value.details() or "")
    assert "result" in theirs, "another caller still sets one"
    assert after["result"]["taskId"] == spare


# ------------------------------------------------------------ 4. the webhook-token guard


def guarded_door() -> tuple[PushDoor, dict[str, str]]:
    """A door accepting every kind of credential; the credentials by kind."""
    operator = OperatorToken.generate()
    scopes = TASK_METHODS | PUSH_METHODS
    policy = AuthPolicy(authenticated=True, operator=operator,
                        bearers=(DeclaredBearer("ci", CI_TOKEN, scopes),
                                 DeclaredBearer("other", OTHER_TOKEN, scopes)),
                        jwt_issuers=(jwt_issuer(),),
                        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
                        member="coder", accept_peer_tasks=True)
    agent = Agent()
    door = build_door(agent, DoorSettings(card=card_info(formation_id=FORMATION),
                                          gate=GateConfig(concurrency=8),
                                          push_allow=("127.0.0.1:9",)), policy=policy)
    records: list[dict[str, Any]] = []
    door.trace.add_sink(records.append)
    return PushDoor(door, agent, operator, records), {
        "operator": operator.value, "bearer": OTHER_TOKEN, "jwt": corp_jwt(),
        "formation": mint(caller="planner", callee="coder")}


FORMS = ["Bearer {}", "{} ", "bearer  {}", "\t{}", "Token {}", "BASIC {}", " Bearer {} "]


@pytest.mark.parametrize("kind", ["operator", "bearer", "jwt", "formation"])
@pytest.mark.parametrize("where", ["token", "credentials"])
async def test_a_door_credential_behind_a_scheme_word_or_space_is_refused(
        kind: str, where: str) -> None:
    push, secrets = guarded_door()
    secret = secrets[kind]

    def configured(text: str) -> dict[str, Any]:
        params: dict[str, Any] = {"url": "http://127.0.0.1:9/hook"}
        if where == "token":
            params["token"] = text
        else:
            params["authentication"] = {"scheme": "Bearer", "credentials": text}
        return params

    answers = {}
    async with push.client(CI_TOKEN) as client:
        for form in ["{}", *FORMS]:
            answers[form] = await call(client, "SendMessage", {
                "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                            "parts": [{"text": "x"}]},
                "configuration": {"taskPushNotificationConfig": configured(
                    form.format(secret))}})
        listed = await call(client, "ListTasks", {})
        # The receiver's own secret behind a scheme word is no door credential: kept.
        task_id = (await call(client, "SendMessage", held()))["result"]["task"]["id"]
        own = await call(client, "CreateTaskPushNotificationConfig", {
            "taskId": task_id, **configured("Bearer the-receivers-own-secret-0123")})
    await close(push)
    assert [form for form, answer in answers.items() if "error" not in answer] == [], \
        f"forms of the {kind} credential accepted"
    field = "token" if where == "token" else "authentication.credentials"
    for answer in answers.values():
        assert answer["error"]["code"] == -32602
        assert answer["error"]["message"].startswith(f"Invalid parameters: {field}: a push "
                                                     "notification never carries")
        assert secret not in json.dumps(answer), "the credential is never echoed"
    assert listed["result"]["tasks"] == [], "a refused configuration starts no task"
    assert "result" in own, own


# ------------------------------------------------------------ 5. metrics


async def test_metrics_count_push_events_by_outcome() -> None:
    async with webhook() as good:
        push = push_door("127.0.0.1")
        try:
            async with push.client(push.operator.value) as operator:
                sent = await call(operator, "SendMessage", held(f"{good.url}/hook"))
                await good.until(lambda bodies: len(bodies) >= 1, 5)
                assert push.door.tasks.push is not None
                await asyncio.wait_for(push.door.tasks.push.delivery.drained(), 5)
                scraped = (await operator.get("/metrics")).text
        finally:
            await close(push)
    assert sent["result"]["task"]["id"]
    assert 'murmur_push_events_total{outcome="queued"} 1.0' in scraped
    assert 'murmur_push_events_total{outcome="delivered"} 1.0' in scraped
    assert 'murmur_push_events_total{outcome="dropped"} 0.0' in scraped
    assert "murmur_push_events_pending 0.0" in scraped
