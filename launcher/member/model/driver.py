"""The turns of a model member's task: :class:`ModelDriver`, the agent's ``run(task)``.

The runtime calls it once per turn, as it calls a ``python`` agent's ``run``
(launcher/member/agent_process.py decides the turns). On the first turn of a task the
conversation starts with the system prompt (prompt.py), the context's earlier exchange
(``task.history``: a follow-up in an earlier ``contextId``, after a resume too, as user
and assistant messages) and the task's text; on a later
turn it continues with ``task.replies``, the answers to the calls of the turn before,
fenced under ``member:<name>`` (or ``child:<name>``). Within a turn, in order:

1. one request to the endpoint (endpoint.py), its text streamed into the task's
   ``result`` artifact as it arrives, a ``model_call`` trace record, the tokens added
   to the task's count and checked against ``inference.budget.tokens`` (``E-RUN-063``),
   and to the member's, against a version 2 roster's ``limits.tokens`` (``E-RUN-066``,
   which also refuses every later request before it is sent);
2. when the answer asks for tools: each run (tools.py), a ``tool_call`` record each, the
   results added to the conversation, and back to 1, unless that request was the
   task's last (``inference.max_turns``: ``E-RUN-062``);
3. when the answer is text: the turn ends. If ``call_member`` or ``delegate`` started
   something this turn and a turn is left, the runtime waits for every answer and calls
   again; otherwise the text is the task's result.

For a model member one turn is one request: ``task.turns_used`` tells the runtime how
many the task has made, so ``max_turns`` bounds requests, and the runtime does not wait
for answers when none is left.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from gateway import message_text
from launcher.member.model.endpoint import ChatEndpoint, Completion, ModelError
from launcher.member.model.prompt import capsule_block, system_prompt
from launcher.member.model.settings import ModelSettings
from launcher.member.model.tools import Toolbox, ToolOutcome, ToolSource

__all__ = ["ModelDriver", "Record"]

#: Sends one trace record of a task to the runtime: ``(task_id, event, fields)``.
Record = Callable[[str, str, dict[str, Any]], Awaitable[None]]
CARD_PATH = "/.well-known/agent-card.json"


@dataclass
class _Conversation:
    messages: list[dict[str, Any]]
    requests: int = 0
    tokens: int = 0
    #: The ``result`` artifact the text streams into, once it has its first chunk.
    artifact_id: str | None = None
    #: Where the messages new since the last request start (for ``trace.content``).
    sent: int = 0
    tools_run: list[str] = field(default_factory=list)


class ModelDriver:
    """A model member's agent: one per agent process, its tasks' conversations kept
    while their ``TaskContext`` lives (across the turns of each)."""

    def __init__(self, settings: ModelSettings, environment: Any, *, record: Record,
                 callees: Sequence[str] = (), capsules: Sequence[str] = (),
                 sources: Sequence[ToolSource] = (),
                 endpoint_pool: httpx.AsyncBaseTransport | None = None) -> None:
        self._settings = settings
        #: The way to the endpoint: the forward proxy in absolute form (https:// too),
        #: where the runtime attaches the key; None: each task's ``task.http``.
        self._pool = endpoint_pool
        self._environment = environment
        self._record = record
        self._callees = tuple(callees)
        self._capsules = tuple(capsules)
        self._sources = list(sources)
        self._conversations: weakref.WeakKeyDictionary[Any, _Conversation] = (
            weakref.WeakKeyDictionary())
        self._descriptions: dict[str, str] | None = None
        #: Tokens every task of this member spent (for ``limits.tokens``).
        self._spent = 0

    async def aclose(self) -> None:
        """The agent process ends: its tool servers with it."""
        for source in self._sources:
            await source.aclose()
        if self._pool is not None:
            await self._pool.aclose()

    @property
    def member(self) -> str:
        return self._environment.member or self._settings.capsule

    async def __call__(self, task: Any) -> str | None:
        conversation = self._conversations.get(task)
        if conversation is None:
            conversation = _Conversation(await self._opening(task))
            self._conversations[task] = conversation
        elif task.replies:
            conversation.messages.append({"role": "user", "content": task.replies})
        endpoint = ChatEndpoint(self._settings, self._client(task), member=self.member,
                                deadline=self._environment.deadline)
        for source in self._sources:
            await source.start()
        toolbox = Toolbox(task, self._sources, callees=self._callees,
                          capsules=self._capsules)
        while True:
            completion = await self._request(task, conversation, endpoint, toolbox)
            conversation.messages.append(completion.assistant_message())
            if not completion.tool_requests:
                return await self._answer(task, conversation, completion, toolbox)
            if conversation.requests >= self._settings.max_turns:
                raise ModelError("E-RUN-062", "inference.max_turns", member=self.member,
                                 turns=conversation.requests)
            for request in completion.tool_requests:
                outcome = await toolbox.run(request.name, request.arguments)
                await self._tool_record(task, request.name, request.arguments, outcome)
                conversation.messages.append({"role": "tool", "tool_call_id": request.id,
                                              "content": outcome.text})

    def _client(self, task: Any) -> httpx.AsyncClient:
        """The client of one task's requests to the endpoint: they name the task to the
        egress, which counts them against it."""
        if self._pool is None:
            return task.http  # type: ignore[no-any-return]
        from launcher.member.agent.http import RefusalTransport

        return httpx.AsyncClient(transport=RefusalTransport(self._pool, task.id),
                                 trust_env=False)

    # --- the conversation ----------------------------------------------------------------

    async def _opening(self, task: Any) -> list[dict[str, Any]]:
        descriptions = await self._callee_descriptions(task)
        block = capsule_block(
            capsule=self._settings.capsule, version=self._settings.version,
            member=self._environment.member, formation_id=self._environment.formation_id,
            callees=descriptions, delegates=self._capsules)
        return [{"role": "system", "content": system_prompt(block, task.instructions)},
                *earlier_turns(getattr(task, "history", ())),
                {"role": "user", "content": task.text}]

    async def _callee_descriptions(self, task: Any) -> dict[str, str]:
        """Each callee's card description, read once through the formation proxy (a card
        that cannot be read leaves the name alone)."""
        if self._descriptions is None:
            from gateway.proxy.egress import virtual_address

            found: dict[str, str] = {}
            for name in self._callees:
                found[name] = ""
                try:
                    response = await task.http.get(virtual_address(name) + CARD_PATH,
                                                   timeout=5.0)
                    card = response.json() if response.status_code == 200 else {}
                except Exception:  # noqa: BLE001,S112 - the name alone is enough to call it
                    continue
                if isinstance(card, dict) and isinstance(card.get("description"), str):
                    found[name] = card["description"]
            self._descriptions = found
        return dict(self._descriptions)

    async def _request(self, task: Any, conversation: _Conversation, endpoint: ChatEndpoint,
                       toolbox: Toolbox) -> Completion:
        """Step 1."""
        await self._check_member_tokens(task, before=True)
        conversation.requests += 1
        task.turns_used = conversation.requests

        async def stream(text: str) -> None:
            conversation.artifact_id = await task.artifact(
                text, name="result", append=conversation.artifact_id is not None,
                artifact_id=conversation.artifact_id)

        fresh = conversation.messages[conversation.sent:]
        completion = await endpoint.complete(conversation.messages, toolbox.specs(), stream)
        conversation.sent = len(conversation.messages) + 1
        spent = completion.input_tokens + completion.output_tokens
        conversation.tokens += spent
        self._spent += spent
        await self._model_record(task, conversation, completion, fresh, endpoint.model)
        await self._check_member_tokens(task)
        budget = self._settings.budget_tokens
        if budget is not None and conversation.tokens > budget:
            raise ModelError("E-RUN-063", "inference.budget.tokens", member=self.member,
                             spent=conversation.tokens, budget=budget)
        return completion

    async def _answer(self, task: Any, conversation: _Conversation, completion: Completion,
                      toolbox: Toolbox) -> str | None:
        """Step 3: the text, unless it was streamed into the ``result`` artifact (then
        that artifact is the result, closed when no further turn follows)."""
        waits = toolbox.started > 0 and conversation.requests < self._settings.max_turns
        if conversation.artifact_id is None:
            return completion.text
        if waits:
            await task.artifact("\n\n", append=True, artifact_id=conversation.artifact_id)
        else:
            await task.artifact("", append=True, last_chunk=True,
                                artifact_id=conversation.artifact_id)
        return None

    async def _check_member_tokens(self, task: Any, *, before: bool = False) -> None:
        """``E-RUN-066`` once the member's tasks spent its ``limits.tokens``: past it
        after a request, or all of it before one."""
        limit = self._settings.member_tokens
        if limit is None or self._spent < limit or (self._spent == limit and not before):
            return
        await self._record(task.id, "limit_reached", {
            "limit": "member.tokens", "value": limit, "spent": self._spent,
            "error": "limit_reached"})
        raise ModelError("E-RUN-066", "limits.tokens", member=self.member, spent=self._spent,
                         limit=limit)

    # --- trace records -------------------------------------------------------------------

    async def _model_record(self, task: Any, conversation: _Conversation,
                            completion: Completion, fresh: list[dict[str, Any]],
                            model: str) -> None:
        fields: dict[str, Any] = {
            "model": model, "turn": conversation.requests,
            "input_tokens": completion.input_tokens, "output_tokens": completion.output_tokens,
            "latency_ms": round(completion.latency * 1000, 1),
            "finish_reason": completion.finish_reason, "attempts": completion.attempts,
            "tools": [request.name for request in completion.tool_requests]}
        if self._settings.content:
            fields["prompt"] = json.dumps(fresh, ensure_ascii=False)
            fields["output"] = completion.text
        await self._record(task.id, "model_call", fields)

    async def _tool_record(self, task: Any, name: str, arguments: str,
                           outcome: ToolOutcome) -> None:
        fields: dict[str, Any] = {"tool": name, "outcome": outcome.outcome,
                                  "duration_ms": round(outcome.seconds * 1000, 1)}
        if self._settings.content:
            fields["arguments"] = arguments
            fields["result"] = outcome.text
        await self._record(task.id, "tool_call", fields)


def earlier_turns(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A context's earlier A2A messages as chat messages: a user's as ``user``, an
    agent's as ``assistant``, each its text parts (a message with none is left out)."""
    turns: list[dict[str, Any]] = []
    for message in history:
        text = message_text(message)
        if text:
            role = "user" if message.get("role") == "ROLE_USER" else "assistant"
            turns.append({"role": role, "content": text})
    return turns
