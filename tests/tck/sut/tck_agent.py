"""The murmur-door System Under Test for the A2A TCK (branch 1.0-dev).

Each behaviour is chosen by the prefix of the message's ``messageId``, as the TCK's
Gherkin scenarios (``scenarios/*.feature``) say; unknown prefixes complete the task.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

#: "wait for 2x streaming timeout": the TCK's streaming timeout is 2 s (its reference SUT
#: sleeps 4 s).
_LONG_RUNNING_S = 4.0

_FILE_PART = {"raw": base64.b64encode(b"tck").decode("ascii"),
              "mediaType": "text/plain", "filename": "output.txt"}


async def _ask(task: Any, text: str) -> dict[str, Any]:
    """Wait in TASK_STATE_INPUT_REQUIRED; return the follow-up message.

    ``task.input_required`` returns the follow-up's text only, and the TCK steers a
    follow-up by its ``messageId``, so the agent asks the task's run (the same call
    ``task.input_required`` makes) for the whole message when it offers it.
    """
    run = getattr(task, "_run", None)
    if run is not None and hasattr(run, "input_required"):
        message = await run.input_required(text)
        if isinstance(message, dict):
            return message
    answer = await task.input_required(text)
    return {"messageId": "", "parts": [{"text": answer}]}


async def _act(task: Any, message_id: str) -> str | None:
    """Do what the scenario of ``message_id``'s prefix says; the return is run's."""
    p = message_id.startswith
    # --- streaming scenarios (streaming.feature) --------------------------------------
    if p("tck-stream-artifact-chunked"):
        first = await task.artifact("chunk-1 ")
        await task.artifact("chunk-2", append=True, artifact_id=first, last_chunk=True)
        return None
    if p("test-resubscribe-message-id"):
        await task.status("working")
        await asyncio.sleep(_LONG_RUNNING_S)
        return None
    if p("tck-stream-artifact-text"):
        await task.artifact("Streamed text content")
        return None
    if p("tck-stream-artifact-file"):
        await task.artifact(dict(_FILE_PART))
        return None
    if p("tck-stream-ordering-001"):
        await task.artifact("Ordered output")
        return None
    if p("tck-stream-001"):
        await task.artifact("Stream hello from TCK")
        return None
    if p("tck-stream-002"):
        return None
    if p("tck-stream-003"):
        await task.artifact("Stream task lifecycle")
        return None
    # --- core scenarios (core_operations.feature) -------------------------------------
    if p("tck-artifact-file-url"):
        await task.artifact({"url": "https://example.com/output.txt",
                             "mediaType": "text/plain", "filename": "output.txt"})
        return None
    if p("tck-artifact-file"):
        await task.artifact(dict(_FILE_PART))
        return None
    if p("tck-artifact-text"):
        await task.artifact("Generated text content")
        return None
    if p("tck-artifact-data"):
        await task.artifact({"data": {"key": "value", "count": 42}})
        return None
    if p("tck-message-response"):
        await task.reply("Direct message response")
        return None
    if p("tck-reject-task"):
        await task.reject("rejected")
        return None
    if p("tck-complete-task"):
        return "Hello from TCK"
    return f"Unhandled messageId prefix: {message_id}"


async def run(task: Any) -> str | None:
    message_id = task.message_id
    # "update the task status to input_required": every follow-up is steered by its own
    # messageId again (another tck-input-required asks again; tck-complete-task ends it).
    while message_id.startswith("tck-input-required"):
        follow_up = await _ask(task, "TCK needs input")
        message_id = str(follow_up.get("messageId", ""))
    return await _act(task, message_id)
