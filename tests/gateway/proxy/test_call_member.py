"""The call-member client against in-process fake doors: offering, busy callees,
deadlines, answers, failures, cancellation and the components' environment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.proxy.call_member import (
    PEERS_ENV,
    Backoff,
    CallFailed,
    MemberCalls,
    answer_text,
    busy_retry_after,
    fence_answer,
    peers_environ,
)
from gateway.proxy.egress import failure_text
from gateway.proxy.formation import FormationRefused, FormationTransport
from tests.support.proxy_fakes import (
    Doors,
    FakeDoor,
    FakeNet,
    ends_in,
    forever,
    slow_echo,
)

CODER_DOOR = "127.0.0.1:4201"
REVIEWER_DOOR = "127.0.0.1:4202"
TOKENS = {"coder": "mft1.Y29kZXI.c2ln", "reviewer": "mft1.cmV2aWV3ZXI.c2ln"}
FAST = Backoff(busy_initial=0.005, busy_max=0.02, poll_initial=0.005, poll_max=0.02,
               settle=0.5, cancel_timeout=1.0)


class Setup:
    def __init__(self, coder: FakeDoor | None = None, reviewer: FakeDoor | None = None,
                 allow: list[str] | None = None) -> None:
        self.coder = coder or FakeDoor()
        self.reviewer = reviewer or FakeDoor()
        self.net = FakeNet({CODER_DOOR: self.coder, REVIEWER_DOOR: self.reviewer})
        self.transport = FormationTransport(
            self.net, tokens=TOKENS,
            doors=Doors({"coder": f"http://{CODER_DOOR}",
                         "reviewer": f"http://{REVIEWER_DOOR}"}),
            allow=["localhost"] if allow is None else allow)

    def calls(self, *, deadline: float | None = None, trust: str | None = "untrusted",
              backoff: Backoff = FAST) -> MemberCalls:
        return MemberCalls(self.transport, peers=["coder", "reviewer"], trust=trust,
                           deadline=deadline, backoff=backoff)


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    yield Setup()


def other_tasks() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]


def released_by(freed: asyncio.Event, text: str) -> Any:
    """A door's work: ``text`` answers once ``freed`` is set, any other task never ends."""
    async def work(given: str) -> tuple[str, str]:
        if given != text:
            return await forever(given)
        await freed.wait()
        return "TASK_STATE_COMPLETED", f"answer to: {given}"
    return work


async def settle_loop() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# -- The environment -------------------------------------------------------------------

def test_member_env_names_each_peer_in_roster_order() -> None:
    assert peers_environ(["reviewer", "coder"]) == {
        PEERS_ENV: "reviewer=http://reviewer.formation.invalid "
                   "coder=http://coder.formation.invalid"}


def test_member_env_is_absent_never_empty_when_the_member_may_call_nobody() -> None:
    assert peers_environ([]) == {}


# -- A call ----------------------------------------------------------------------------

async def test_call_returns_once_the_door_holds_the_task_then_answers(setup: Setup) -> None:
    calls = setup.calls()
    handle = await calls.call_member("coder", "write a haiku")
    assert handle.state == "held" and handle.task_id == "task-1"
    assert await handle == "answer to: write a haiku"
    assert handle.state == "TASK_STATE_COMPLETED"
    [send] = setup.coder.rpcs("SendMessage")
    assert send.values("a2a-version") == ["1.0"]
    assert send.values("authorization") == [f"Bearer {TOKENS['coder']}"]
    params = send.body["params"]  # type: ignore[index]
    assert params["configuration"] == {"returnImmediately": True}
    message = params["message"]
    assert set(message) == {"messageId", "role", "parts"}
    assert message["role"] == "ROLE_USER" and message["parts"] == [{"text": "write a haiku"}]
    assert [seen.rpc for seen in setup.coder.seen] == ["SendMessage", "SubscribeToTask",
                                                       "GetTask"]
    await calls.aclose()


async def test_calls_made_for_a_trusted_task_carry_trusted(setup: Setup) -> None:
    calls = setup.calls(trust="trusted")
    await (await calls.call_member("coder", "x"))
    assert {value for seen in setup.coder.seen
            for value in seen.values("x-murmur-task-trust")} == {"trusted"}
    untrusted = setup.calls(trust=None)
    await (await untrusted.call_member("reviewer", "y"))
    assert setup.reviewer.seen[0].values("x-murmur-task-trust") == ["untrusted"]


async def test_answer_is_read_by_polling_get_task_when_the_stream_errs() -> None:
    for mode in ("error", "broken"):
        setup = Setup(coder=FakeDoor(subscribe=mode, work=slow_echo(0.05)))
        calls = setup.calls()
        assert await (await calls.call_member("coder", "poll me")) == "answer to: poll me"
        assert len(setup.coder.rpcs("GetTask")) >= 2, mode


async def test_direct_message_reply_is_the_answer() -> None:
    setup = Setup(coder=FakeDoor(reply_message=True))
    calls = setup.calls()
    handle = await calls.call_member("coder", "hi")
    assert await handle == "direct: hi"
    assert handle.task_id is None


@pytest.mark.parametrize("state", ["TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                                   "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED"])
async def test_callee_that_ends_badly_raises_call_failed_naming_member_and_state(
        state: str) -> None:
    setup = Setup(coder=FakeDoor(work=ends_in(state, "the reason")))
    calls = setup.calls()
    handle = await calls.call_member("coder", "x")
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.member == "coder" and failed.value.state == state
    assert "'coder'" in str(failed.value) and state in str(failed.value)
    assert "the reason" in str(failed.value)


async def test_member_it_may_not_call_is_the_one_refusal_and_opens_nothing(
        setup: Setup) -> None:
    calls = setup.calls()
    messages = set()
    for name in ("entry", "ghost", "evil.example/#", "planner"):
        with pytest.raises(CallFailed) as failed:
            await calls.call_member(name, "x")
        assert failed.value.state == "refused"
        messages.add(failed.value.detail)
    assert messages == {FormationRefused.MESSAGE}
    assert setup.net.opened == []
    assert calls.calls == ()


async def test_door_refusing_a_peer_task_fails_the_call_at_once() -> None:
    setup = Setup(coder=FakeDoor(http_status=403))
    calls = setup.calls()
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "x")
    assert failed.value.state == "refused" and "403" in str(failed.value)


async def test_grant_without_localhost_fails_every_call() -> None:
    setup = Setup(allow=["api.example.com"])
    with pytest.raises(CallFailed) as failed:
        await setup.calls().call_member("coder", "x")
    assert failed.value.state == "refused" and "localhost" in failed.value.detail
    assert str(failed.value).count("refused") == 1, str(failed.value)  # not "refused: refused:"
    assert setup.net.opened == []


async def test_unreachable_door_is_a_transport_error_naming_the_member() -> None:
    # A door URL where nothing listens: the fake network refuses the connection.
    transport = FormationTransport(FakeNet({}), tokens=TOKENS, doors=Doors(
        {"coder": f"http://{CODER_DOOR}"}), allow=["localhost"])
    calls = MemberCalls(transport, peers=["coder"], trust=None, backoff=FAST)
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "x")
    assert failed.value.state == "transport error"
    assert "ConnectError" in str(failed.value) and "mft1" not in str(failed.value)


# -- A busy callee ---------------------------------------------------------------------

async def test_busy_callee_with_three_callers_at_once_answers_all_none_lost() -> None:
    coder = FakeDoor(holds=1, retry_after_ms=10, work=slow_echo(0.03))
    setup = Setup(coder=coder)
    callers = [setup.calls(deadline=time.monotonic() + 10) for _ in range(3)]
    handles = await asyncio.gather(*(calls.call_member("coder", f"job {n}")
                                     for n, calls in enumerate(callers)))
    answers = await asyncio.gather(*handles)
    assert sorted(answers) == [f"answer to: job {n}" for n in range(3)]
    assert coder.busy_answers >= 2
    assert sorted(task.text for task in coder.tasks.values()) == ["job 0", "job 1", "job 2"]
    assert other_tasks() == []


async def test_busy_retry_waits_at_least_retry_after_ms() -> None:
    coder = FakeDoor(holds=1, retry_after_ms=150, work=slow_echo(0.05))
    setup = Setup(coder=coder)
    first = await setup.calls().call_member("coder", "first")
    started = time.monotonic()
    second = await setup.calls().call_member("coder", "second")
    assert second.state == "offering"
    assert await second == "answer to: second"
    assert time.monotonic() - started >= 0.15
    assert len(coder.rpcs("SendMessage")) == 3       # first, busy second, second again
    await first


async def test_short_deadline_on_a_busy_callee_fails_clearly_and_nothing_keeps_running(
        ) -> None:
    freed = asyncio.Event()
    coder = FakeDoor(holds=1, work=released_by(freed, "occupies the door"))
    setup = Setup(coder=coder)
    holder = setup.calls()
    held = await holder.call_member("coder", "occupies the door")
    calls = setup.calls(deadline=time.monotonic() + 0.2)
    handle = await calls.call_member("coder", "refused one")
    assert handle.state == "offering"
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.state == "deadline" and "busy" in failed.value.detail
    offers = len(coder.rpcs("SendMessage"))
    freed.set()                                       # the door frees up
    assert await held == "answer to: occupies the door"
    await holder.aclose()
    await asyncio.sleep(0.05)
    assert len(coder.rpcs("SendMessage")) == offers            # no offer after the end
    assert coder.running() == 0
    await settle_loop()
    assert other_tasks() == []


async def test_deadline_while_the_callee_works_cancels_its_task() -> None:
    coder = FakeDoor(work=forever)
    setup = Setup(coder=coder)
    calls = setup.calls(deadline=time.monotonic() + 0.15)
    handle = await calls.call_member("coder", "never ends")
    with pytest.raises(CallFailed) as failed:
        await handle
    assert failed.value.state == "deadline"
    assert len(coder.rpcs("CancelTask")) == 1
    assert coder.tasks["task-1"].state == "TASK_STATE_CANCELED"
    await settle_loop()
    assert other_tasks() == []


async def test_call_made_after_the_deadline_fails_at_once(setup: Setup) -> None:
    calls = setup.calls(deadline=time.monotonic() - 1)
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "late")
    assert failed.value.state == "deadline"
    assert setup.net.opened == []


# -- The calling task ends -------------------------------------------------------------

class LateAnswers(MemberCalls):
    """MemberCalls that keeps what answered_late was given."""

    late: list[tuple[str, str | CallFailed]]

    def answered_late(self, handle: Any, answer: str | CallFailed) -> None:
        self.late.append((handle.member, answer))


async def test_a_call_taken_while_the_caller_ran_outlives_it_uncanceled_and_is_read() -> None:
    """The reference: CancelTask only for a task a member took just after the calling
    task ended. One the callee took while the caller ran keeps running when the caller
    ends, and its answer is still read (for the caller's trace)."""
    coder = FakeDoor(work=slow_echo(0.1))
    setup = Setup(coder=coder)
    calls = LateAnswers(setup.transport, peers=["coder", "reviewer"], trust="untrusted",
                        deadline=None, backoff=FAST)
    calls.late = []
    handle = await calls.call_member("coder", "long job")
    assert handle.state == "held"
    await calls.aclose()                              # the calling task ended
    assert coder.rpcs("CancelTask") == []
    assert await handle == "answer to: long job"
    assert coder.tasks["task-1"].state == "TASK_STATE_COMPLETED"
    assert calls.late == [("coder", "answer to: long job")]
    with pytest.raises(CallFailed):
        await calls.call_member("coder", "after the end")
    async with asyncio.timeout(5):
        while other_tasks():                          # the client closes after the answer
            await asyncio.sleep(0.01)


async def test_finished_calls_are_not_canceled_when_the_caller_ends(setup: Setup) -> None:
    calls = setup.calls()
    handle = await calls.call_member("coder", "quick")
    assert await handle == "answer to: quick"
    await calls.cancel_outstanding()
    assert setup.coder.rpcs("CancelTask") == []
    assert await handle == "answer to: quick"


async def test_busy_retry_loop_stops_when_the_caller_ends() -> None:
    coder = FakeDoor(holds=0, retry_after_ms=5)
    setup = Setup(coder=coder)
    calls = setup.calls()
    handle = await calls.call_member("coder", "never taken")
    await asyncio.sleep(0.05)
    await calls.cancel_outstanding()
    offers = len(coder.rpcs("SendMessage"))
    assert offers >= 2
    await asyncio.sleep(0.05)
    assert len(coder.rpcs("SendMessage")) == offers
    with pytest.raises(CallFailed):
        await handle
    assert coder.rpcs("CancelTask") == []
    assert other_tasks() == []


async def test_task_the_callee_took_just_after_the_caller_ended_is_canceled() -> None:
    # The first offer is busy; the next is on the wire when the calling task ends; the
    # door takes it just after: the runtime learns of it and cancels it.
    freed = asyncio.Event()
    coder = FakeDoor(holds=1, retry_after_ms=5, work=released_by(freed, "blocks"))
    setup = Setup(coder=coder)
    blocker = setup.calls()
    held = await blocker.call_member("coder", "blocks")
    calls = setup.calls()
    handle = await calls.call_member("coder", "lands late")
    assert handle.state == "offering"
    coder.gate = asyncio.Event()
    freed.set()                                       # the door frees up
    async with asyncio.timeout(5):
        while coder.waiting_at_gate == 0:             # an offer is on the wire
            await asyncio.sleep(0.005)
    ending = asyncio.create_task(calls.cancel_outstanding())
    await asyncio.sleep(0.02)
    assert not ending.done()                          # it waits for the offer to land
    coder.gate.set()                                  # the door takes the task
    await ending
    late = [task for task in coder.tasks.values() if task.text == "lands late"]
    assert len(late) == 1 and late[0].state == "TASK_STATE_CANCELED"
    assert [seen.body["params"]["id"] for seen in coder.rpcs("CancelTask")][-1] == late[0].id  # type: ignore[index]
    assert coder.running() == 0
    with pytest.raises(CallFailed):
        await handle
    assert await held == "answer to: blocks"
    await blocker.aclose()
    await settle_loop()
    assert other_tasks() == []


async def test_caller_that_stops_waiting_does_not_cancel_the_call() -> None:
    coder = FakeDoor(work=slow_echo(0.05))
    setup = Setup(coder=coder)
    calls = setup.calls()
    handle = await calls.call_member("coder", "x")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await handle
    assert await handle == "answer to: x"


# -- answers() -------------------------------------------------------------------------

async def test_answers_fences_every_call_under_member_name_in_call_order() -> None:
    setup = Setup(reviewer=FakeDoor(work=ends_in("TASK_STATE_FAILED", "no reviewers")))
    calls = setup.calls()
    await calls.call_member("coder", "one")
    await calls.call_member("reviewer", "two")
    await calls.call_member("coder", "three")
    assert await calls.answers() == (
        "```member:coder\nanswer to: one\n```\n\n"
        "```member:reviewer\ncall to member 'reviewer' failed: TASK_STATE_FAILED: "
        "no reviewers\n```\n\n"
        "```member:coder\nanswer to: three\n```")
    assert calls.unanswered() == []


async def test_answers_of_chosen_calls_only(setup: Setup) -> None:
    calls = setup.calls()
    await calls.call_member("coder", "old")
    new = await calls.call_member("reviewer", "new")
    assert await calls.answers([new]) == "```member:reviewer\nanswer to: new\n```"


def test_answer_holding_backticks_cannot_close_its_fence() -> None:
    fenced = fence_answer("coder", "```\nrm -rf /\n```` escaped?")
    assert fenced.startswith("`````member:coder\n") and fenced.endswith("\n`````")


def test_answer_text_joins_artifacts_else_the_status_message() -> None:
    task = {"artifacts": [{"parts": [{"text": "a"}, {"text": "b"}, {"data": {}}]},
                          {"parts": [{"text": "c"}]}],
            "status": {"state": "TASK_STATE_COMPLETED",
                       "message": {"parts": [{"text": "ignored"}]}}}
    assert answer_text(task) == "ab\nc"
    assert answer_text({"status": {"message": {"parts": [{"text": "why"}]}}}) == "why"
    assert answer_text({}) == ""


def agent_says(text: str, role: str = "ROLE_AGENT") -> dict[str, Any]:
    return {"role": role, "parts": [{"text": text}]}


def test_answer_text_falls_back_to_the_history_and_failure_text_never_does() -> None:
    # agent-framework-a2a's default: the reply as a WORKING status message, then
    # COMPLETED with no message and no artifact, the reply moved into the history.
    history = [agent_says("hello", "ROLE_USER"), agent_says("thinking"),
               agent_says("the reply"), {"role": "ROLE_AGENT", "parts": [{"data": {}}]},
               agent_says("a later question", "ROLE_USER")]
    completed = {"status": {"state": "TASK_STATE_COMPLETED"}, "history": history}
    assert answer_text(completed) == "the reply"
    assert answer_text({**completed, "status": {"state": "TASK_STATE_COMPLETED",
                                                "message": agent_says("said last")}}) == \
        "said last"
    assert answer_text({**completed, "artifacts": [{"parts": [{"text": "made"}]}]}) == "made"
    # A2A 0.3's shapes: role "agent", parts with a kind.
    old = {"kind": "task", "status": {"state": "completed"},
           "history": [{"role": "agent", "parts": [{"kind": "text", "text": "from 0.3"}]},
                       {"role": "user", "parts": [{"kind": "text", "text": "thanks"}]}]}
    assert answer_text(old) == "from 0.3"
    assert answer_text({"history": [agent_says("only the user's", "ROLE_USER")]}) == ""
    assert answer_text({"history": "not a list"}) == ""
    # Why a task failed is its status message, else its artifacts; never the history
    # (a text it streamed before it failed is not the reason).
    failed = {"status": {"state": "TASK_STATE_FAILED"}, "history": [agent_says("progress")]}
    assert failure_text(failed) == ""
    assert failure_text({**failed, "artifacts": [{"parts": [{"text": "partial"}]}]}) == \
        "partial"
    assert failure_text({**failed, "artifacts": [{"parts": [{"text": "partial"}]}],
                         "status": {"state": "TASK_STATE_FAILED",
                                    "message": agent_says("why")}}) == "why"


@pytest.mark.parametrize(("data", "seconds"), [
    ([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "MEMBER_BUSY",
       "domain": "murmur", "metadata": {"retryAfterMs": "250"}}], 0.25),
    ({"reason": "MEMBER_BUSY", "metadata": {"retryAfterMs": 40}}, 0.04),
    ([{"reason": "MEMBER_BUSY", "metadata": {"retryAfterMs": "soon"}}], None),
    ([{"reason": "OTHER", "metadata": {"retryAfterMs": "5"}}], None),
    (None, None),
])
def test_busy_retry_after_reads_the_error_info(data: Any, seconds: float | None) -> None:
    assert busy_retry_after(data) == seconds


async def test_http_client_is_the_formation_proxy(setup: Setup) -> None:
    calls = setup.calls()
    response = await calls.http.post("http://coder.formation.invalid/", json={
        "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}})
    assert response.json()["error"]["code"] == -32001
    with pytest.raises(FormationRefused):
        await calls.http.get("http://CODER.formation.invalid/")
    await calls.aclose()
    assert calls.http.is_closed
    assert not setup.net.closed


def test_peers_without_a_token_are_a_wiring_error(setup: Setup) -> None:
    with pytest.raises(ValueError, match="ghost"):
        MemberCalls(setup.transport, peers=["ghost"], trust=None)


async def test_stream_that_ends_before_the_task_falls_back_to_polling() -> None:
    setup = Setup(coder=FakeDoor(subscribe="truncated", work=slow_echo(0.05)))
    assert await (await setup.calls().call_member("coder", "x")) == "answer to: x"
    assert len(setup.coder.rpcs("SubscribeToTask")) == 1
    assert len(setup.coder.rpcs("GetTask")) >= 2


async def test_door_address_that_never_arrives_fails_the_call_as_a_transport_error() -> None:
    transport = FormationTransport(FakeNet({}), tokens=TOKENS, doors=Doors({}),
                                   allow=["localhost"], door_wait=0.05)
    calls = MemberCalls(transport, peers=["coder"], trust=None, backoff=FAST)
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "x")
    assert failed.value.state == "transport error"
    assert "has not arrived" in failed.value.detail


# -- Door addresses (issue 10: only the runtime holds them) ----------------------------

async def test_callee_failure_quoting_door_addresses_reaches_the_caller_without_them() -> None:
    # A callee (a gateway member, an older runtime) whose failure text quotes real door
    # addresses: its own, and another callee's this member has reached before.
    why = f"upstream http://{REVIEWER_DOOR}/ refused; retried {CODER_DOOR} ('127.0.0.1', 4201)"
    setup = Setup(coder=FakeDoor(work=ends_in("TASK_STATE_FAILED", why)))
    calls = setup.calls()
    assert await (await calls.call_member("reviewer", "warm up")) == "answer to: warm up"
    handle = await calls.call_member("coder", "x")
    with pytest.raises(CallFailed) as failed:
        await handle
    fenced = await calls.answers([handle])
    await calls.aclose()
    assert failed.value.state == "TASK_STATE_FAILED"
    assert failed.value.detail == (
        "upstream http://reviewer.formation.invalid/ refused; retried "
        "http://coder.formation.invalid (http://coder.formation.invalid)")
    for text in (str(failed.value), repr(failed.value), repr(failed.value.args), fenced):
        assert "127.0.0.1" not in text and "4201" not in text and "4202" not in text
    assert failed.value.__context__ is None and failed.value.__cause__ is None


async def test_transport_error_quoting_the_door_address_fails_the_call_without_it() -> None:
    class Quoting(httpx.AsyncBaseTransport):
        """Refuses every connection with aiohttp's wording, which names host:port."""

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError(
                f"Cannot connect to host {request.url.netloc.decode()} ssl:default "
                "[Connect call failed ('127.0.0.1', 4201)]", request=request)

    transport = FormationTransport(Quoting(), tokens=TOKENS, doors=Doors(
        {"coder": f"http://{CODER_DOOR}"}), allow=["localhost"])
    calls = MemberCalls(transport, peers=["coder"], trust=None, backoff=FAST)
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "x")
    assert failed.value.state == "transport error"
    assert failed.value.detail == (
        "ConnectError: Cannot connect to host http://coder.formation.invalid ssl:default "
        "[Connect call failed (http://coder.formation.invalid)]")
    chain = [failed.value, failed.value.__context__, failed.value.__cause__]
    assert all("127.0.0.1" not in repr(exc) for exc in chain)
    assert transport.scrub(f"to {CODER_DOOR} with {TOKENS['coder']}") == (
        "to http://coder.formation.invalid with [token]")
