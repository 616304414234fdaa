"""While members take long to come up the launcher says which, instead of silence."""

from __future__ import annotations

import asyncio

import pytest

from launcher.formation import progress


def test_the_note_names_the_members_and_the_time() -> None:
    assert progress.waiting_note(["coder"], 3.2) == (
        "mur run: waiting for coder to come up (3 s so far)")
    many = [f"m{index}" for index in range(8)]
    assert progress.waiting_note(many, 9).endswith("m5 and 2 more to come up (9 s so far)")


def test_notes_come_after_the_first_wait_and_stop_when_nothing_is_pending(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "FIRST_NOTE", 0.05)
    monkeypatch.setattr(progress, "EVERY", 0.05)
    pending = ["coder", "reviewer"]
    said: list[str] = []

    async def wait() -> None:
        task = asyncio.create_task(progress.note_while_waiting(lambda: list(pending),
                                                               said.append))
        await asyncio.sleep(0.02)
        assert said == []                    # nothing before the first wait
        await asyncio.sleep(0.06)
        pending.remove("reviewer")
        await asyncio.sleep(0.05)
        pending.clear()
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(wait())
    assert said[0].startswith("mur run: waiting for coder, reviewer to come up")
    assert any(line.startswith("mur run: waiting for coder to come up") for line in said)
    assert len(said) <= 3
