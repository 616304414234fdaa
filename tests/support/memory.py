"""Reading another process's memory in a test (no tests here; root only)."""

from __future__ import annotations


def memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any writable mapping of ``pid`` holds ``needle`` (read as root)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms or "w" not in perms:
                continue
            low, high = (int(value, 16) for value in span.split("-"))
            try:
                memory.seek(low)
                if needle in memory.read(high - low):
                    return True
            except (OSError, OverflowError, ValueError):
                continue
    return False
