"""What a model reads when its ``call_member`` is placed (launcher/member/model/tools.py):
the state of the call in words, never an id it does not have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from launcher.member.model.tools import Toolbox


@dataclass
class Handle:
    state: str
    task_id: str | None


class Task:
    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def call_member(self, member: str, text: str) -> Any:
        return self.handle


@pytest.mark.parametrize(("handle", "says"), [
    (Handle("offering", None), "researcher is busy: the task is offered to it again until "
                               "it takes it; its answer arrives"),
    (Handle("held", None), "researcher answered at once; its answer arrives"),
    (Handle("held", "t-123"), "researcher holds the task (id t-123); its answer arrives"),
])
async def test_a_placed_call_reads_as_its_state_and_never_as_id_none(
        handle: Handle, says: str) -> None:
    toolbox = Toolbox(Task(handle), [], callees=("researcher",))
    outcome = await toolbox.run("call_member", '{"member": "researcher", "task": "look"}')
    assert outcome.outcome == "ok"
    assert outcome.text.startswith(says), outcome.text
    assert "None" not in outcome.text
    assert toolbox.started == 1
