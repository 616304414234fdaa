"""A model member's system prompt: the ``[Capsule]`` block, then the session's ``MURMUR.md``.

The reference: a member on ``transport: http`` finds its roster name "in the
``[Capsule]`` block at the head of its system prompt". The block (docs/llm.md, "The
system prompt") names, one fact a line: the capsule and its version; in a formation, the
member's roster name and the formation id; the members it may call, each with its card's
description, and the capsules it may delegate to. Never a door's address, a virtual
address or a token: the model names a member, the runtime reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["BLOCK_END", "BLOCK_START", "capsule_block", "system_prompt"]

BLOCK_START = "[Capsule]"
BLOCK_END = "[/Capsule]"


def capsule_block(*, capsule: str, version: str, member: str | None,
                  formation_id: str | None, callees: Mapping[str, str],
                  delegates: Sequence[str] = ()) -> str:
    """The block; ``callees`` maps each member it may call to its card's description."""
    lines = [BLOCK_START, f"capsule: {capsule} {version}"]
    if member is not None:
        lines.append(f"member: {member}")
    if formation_id is not None:
        lines.append(f"formation: {formation_id}")
    if callees:
        lines.append("may call (with the call_member tool):")
        lines.extend(f"- {name}: {_one_line(text)}" if text.strip() else f"- {name}"
                     for name, text in callees.items())
    if delegates:
        lines.append("may delegate to (with the delegate tool): " + ", ".join(delegates))
    lines.append(BLOCK_END)
    return "\n".join(lines)


def system_prompt(block: str, instructions: str) -> str:
    """The block, then the session's ``MURMUR.md`` (its Identity section included)."""
    return f"{block}\n\n{instructions.strip()}\n" if instructions.strip() else block + "\n"


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
