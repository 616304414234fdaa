"""The session's ``MURMUR.md``: what a member's agent is told about its work and itself.

The reference: a member learns "its roster name and formation id, in the Identity
section of its ``MURMUR.md``", and members running the same capsule are each told their
own roster name. The runtime writes the file into the session's ``home/`` (the agent's
``HOME``) for every kind of agent, once the capsule is unpacked, in this order:

1. the capsule's own ``MURMUR.md`` (at the capsule's root, or the file
   ``agent.model.instructions`` names), when it ships one, as it is;
2. an ``## Identity`` section: the capsule and its version; in a formation, the member's
   roster name and the formation id; the members it may call, by name (never a door
   address or a token: the runtime alone holds those).

A ``python`` agent reads the same text as ``task.instructions``; a ``command`` agent
finds it at ``$HOME/MURMUR.md``. docs/agent-api.md, "Instructions and identity".
"""

from __future__ import annotations

from pathlib import Path

from launcher.home.files import write_atomic

__all__ = ["CAPSULE_INSTRUCTIONS", "IDENTITY_HEADING", "identity_section",
           "write_session_instructions"]

#: The capsule's own instructions, at its root (``agent.model.instructions`` may name
#: another file of the capsule).
CAPSULE_INSTRUCTIONS = "MURMUR.md"
IDENTITY_HEADING = "## Identity"


def identity_section(*, capsule: str, version: str, member: str | None,
                     formation_id: str | None, callees: tuple[str, ...]) -> str:
    """The ``## Identity`` section (ends with a newline)."""
    lines = [IDENTITY_HEADING, "", f"- Capsule: {capsule}, version {version}"]
    if member is not None:
        lines.append(f"- Roster name: {member}")
    if formation_id is not None:
        lines.append(f"- Formation id: {formation_id}")
    if member is None and formation_id is None:
        lines.append("- Formation: none (this session runs on its own)")
    lines.append("- Members you may call: " + (", ".join(callees) if callees else "none"))
    return "\n".join(lines) + "\n"


def write_session_instructions(capsule_dir: Path, home: Path, *, capsule: str, version: str,
                               member: str | None, formation_id: str | None,
                               callees: tuple[str, ...],
                               source: str = CAPSULE_INSTRUCTIONS) -> str:
    """Write ``home/MURMUR.md`` (whole or not at all) and return its text; ``source`` is
    the capsule's instructions file (``agent.model.instructions``). Raises OSError naming
    the file that could not be read or written."""
    shipped = capsule_dir / source
    own = shipped.read_text(encoding="utf-8", errors="replace") if shipped.is_file() else ""
    identity = identity_section(capsule=capsule, version=version, member=member,
                                formation_id=formation_id, callees=callees)
    text = f"{own.rstrip()}\n\n{identity}" if own.strip() else identity
    write_atomic(home / CAPSULE_INSTRUCTIONS, text.encode("utf-8"))
    return text
