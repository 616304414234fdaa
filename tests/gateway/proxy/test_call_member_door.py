"""call-member and the formation proxy against the project's real door (build_door +
DoorAuth), in-process: real formation tokens minted with a real key, each door behind
httpx.ASGITransport at its own loopback address."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationKey, FormationVerifier
from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.card import CardInfo
from gateway.door.tasks import GateConfig
from gateway.proxy.call_member import CallFailed, MemberCalls
from gateway.proxy.formation import FormationClient, FormationTransport
from tests.support.proxy_fakes import Doors, FakeNet

FORMATION = "frm_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b"
CODER_DOOR = "127.0.0.1:4301"
REVIEWER_DOOR = "127.0.0.1:4302"
ENTRY_DOOR = "127.0.0.1:4300"


async def answering(task: Any) -> str:
    """The callee's agent: says who called, with which trust, about what."""
    if task.text == "fail":
        raise RuntimeError("the agent gave up")
    if task.text == "forever":
        await asyncio.Event().wait()
    if task.text.startswith("slow"):
        await asyncio.sleep(0.05)
    return f"{task.caller.credential.name}|{task.caller.origin}|{task.caller.trust}|{task.text}"


def door(key: FormationKey, member: str, *, concurrency: int = 4, queue_depth: int = 16,
         accept_peer_tasks: bool = True) -> Door:
    settings = DoorSettings(
        card=CardInfo(name=member, description="test", version="1.0.0", member=member,
                      formation_id=FORMATION),
        gate=GateConfig(concurrency=concurrency, queue_depth=queue_depth, retry_after_ms=10))
    policy = AuthPolicy(authenticated=True,
                        verifier=FormationVerifier(key.public_bytes, FORMATION),
                        member=member, accept_peer_tasks=accept_peer_tasks)
    return build_door(answering, settings, policy=policy)


class Formation:
    """planner may call coder and reviewer; entry exists and planner may not call it."""

    def __init__(self, *, coder_concurrency: int = 4, coder_queue: int = 16,
                 reviewer_accepts: bool = True) -> None:
        self.key = FormationKey.generate()
        self.coder = door(self.key, "coder", concurrency=coder_concurrency,
                          queue_depth=coder_queue)
        self.reviewer = door(self.key, "reviewer", accept_peer_tasks=reviewer_accepts)
        self.entry = door(self.key, "entry")
        self.net = FakeNet({CODER_DOOR: self.coder.app, REVIEWER_DOOR: self.reviewer.app,
                            ENTRY_DOOR: self.entry.app})
        tokens = {callee: self.key.mint(formation=FORMATION, caller="planner", callee=callee)
                  for callee in ("coder", "reviewer")}
        self.transport = FormationTransport(
            self.net, tokens=tokens,
            doors=Doors({"coder": f"http://{CODER_DOOR}", "reviewer": f"http://{REVIEWER_DOOR}",
                         "entry": f"http://{ENTRY_DOOR}"}),
            allow=["localhost"])

    def calls(self, *, trust: str | None = "untrusted",
              deadline: float | None = None) -> MemberCalls:
        return MemberCalls(self.transport, peers=["coder", "reviewer"], trust=trust,
                           deadline=deadline)


@pytest.fixture
async def formation() -> AsyncIterator[Formation]:
    yield Formation()


async def test_call_reaches_the_real_door_as_member_planner_and_answers(
        formation: Formation) -> None:
    calls = formation.calls()
    handle = await calls.call_member("coder", "write it")
    assert handle.task_id
    assert await handle == "member:planner|peer|untrusted|write it"
    assert await calls.answers() == (
        "```member:coder\nmember:planner|peer|untrusted|write it\n```")
    await calls.aclose()


async def test_trusted_task_calls_arrive_trusted_and_untrusted_stay_untrusted(
        formation: Formation) -> None:
    trusted = await (await formation.calls(trust="trusted").call_member("coder", "t"))
    untrusted = await (await formation.calls(trust=None).call_member("reviewer", "u"))
    assert trusted == "member:planner|peer|trusted|t"
    assert untrusted == "member:planner|peer|untrusted|u"


async def test_busy_real_door_with_three_callers_answers_all() -> None:
    formation = Formation(coder_concurrency=1, coder_queue=0)
    callers = [formation.calls(deadline=time.monotonic() + 20) for _ in range(3)]
    handles = await asyncio.gather(*(calls.call_member("coder", f"slow {n}")
                                     for n, calls in enumerate(callers)))
    answers = await asyncio.gather(*handles)
    assert sorted(answers) == [f"member:planner|peer|untrusted|slow {n}" for n in range(3)]
    busy = [r for r in formation.net.to(CODER_DOOR) if b"SendMessage" in r.content]
    assert len(busy) > 3                        # some offers were answered -32050


async def test_agent_failure_reaches_the_caller_naming_member_and_state(
        formation: Formation) -> None:
    handle = await formation.calls().call_member("coder", "fail")
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.member == "coder" and failed.value.state == "TASK_STATE_FAILED"
    assert "the agent gave up" in str(failed.value)


async def test_door_that_takes_no_peer_tasks_refuses_the_call() -> None:
    formation = Formation(reviewer_accepts=False)
    with pytest.raises(CallFailed) as failed:
        await formation.calls().call_member("reviewer", "x")
    assert failed.value.state == "refused" and "peer_not_accepted" in str(failed.value)


async def test_deadline_cancels_the_callees_task_at_the_real_door(
        formation: Formation) -> None:
    calls = formation.calls(deadline=time.monotonic() + 0.3)
    handle = await calls.call_member("coder", "forever")
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.state == "deadline"
    state = await formation.calls().http.post(
        "http://coder.formation.invalid/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": handle.task_id}},
        headers={"A2A-Version": "1.0"})
    assert state.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_caller_ending_leaves_a_call_the_callee_took_running_at_the_real_door(
        formation: Formation) -> None:
    """CancelTask goes only to a task taken just after the caller ended: one the callee
    took while the caller ran keeps running, and the call still reads its answer."""
    calls = formation.calls()
    handle = await calls.call_member("coder", "forever")
    await calls.cancel_outstanding()
    get_task = {"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                "params": {"id": handle.task_id}}
    response = await calls.http.post("http://coder.formation.invalid/", json=get_task,
                                     headers={"A2A-Version": "1.0"})
    assert response.json()["result"]["status"]["state"] == "TASK_STATE_WORKING"
    assert not handle.done(), "the call still follows its task"
    await calls.http.post("http://coder.formation.invalid/", headers={"A2A-Version": "1.0"},
                          json={**get_task, "method": "CancelTask"})   # ended from outside
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.state == "TASK_STATE_CANCELED"


async def test_token_never_reaches_a_door_it_was_not_minted_for(formation: Formation) -> None:
    async with FormationClient(transport=formation.transport) as client:
        await client.post("http://coder.formation.invalid/", json={})
        await client.post("http://reviewer.formation.invalid/", json={})
        await client.post(f"http://{ENTRY_DOOR}/", json={})     # no token: 401
    for request in formation.net.opened:
        netloc = request.url.netloc.decode()
        tokens = request.headers.get_list("authorization")
        if netloc == ENTRY_DOOR:
            assert tokens == []
        else:
            [value] = tokens
            token = value.removeprefix("Bearer ")
            callee = "coder" if netloc == CODER_DOOR else "reviewer"
            verified = FormationVerifier(formation.key.public_bytes, FORMATION).verify(token)
            assert (verified.caller, verified.callee) == ("planner", callee)
