"""Which failed peer the launcher starts again, and what it says (docs/restarts.md).

A peer whose ``restart`` is ``on-failure`` (launcher/admission/restart_policy.py) and
that ends while the formation runs with a failure (a non-zero status or a signal) is
started again, as long as :class:`RestartBook` counts fewer than ``count`` restarts of
it within the last ``within`` seconds; otherwise it stays down. Every outcome is one
launcher line (:func:`restarted_line`, :func:`stays_down_line`); the restart itself is
:meth:`launcher.formation.launch.Launch._restart`'s.
"""

from __future__ import annotations

from collections import deque

from launcher.admission.restart_policy import RestartPolicy

__all__ = ["RestartBook", "restarted_line", "stays_down_line"]


class RestartBook:
    """The times each member was restarted, within its policy's window."""

    def __init__(self) -> None:
        self._times: dict[str, deque[float]] = {}
        #: Restarts of each member over the formation's life.
        self.counts: dict[str, int] = {}

    def take(self, member: str, policy: RestartPolicy, now: float) -> int | None:
        """Count one more restart of ``member`` at ``now`` and return how many there
        were in the window, this one included; None (nothing counted) past the limit."""
        times = self._times.setdefault(member, deque())
        while times and times[0] <= now - policy.within:
            times.popleft()
        if len(times) >= policy.count:
            return None
        times.append(now)
        self.counts[member] = self.counts.get(member, 0) + 1
        return len(times)


def restarted_line(member: str, how: str, policy: RestartPolicy, within_window: int,
                   session_id: str) -> str:
    return (f"[mur run] member `{member}` ended with {how}; restarted it as session "
            f"{session_id} (restart {within_window} of {policy.count} within "
            f"{_window(policy)}); its callers have its new door")


def stays_down_line(member: str, how: str, policy: RestartPolicy | None,
                    problem: str | None = None) -> str:
    """The line for a peer that stays down: no restart asked for, the limit reached,
    or a restart that failed (``problem``)."""
    if problem is not None:
        why = f"it was started again but {problem}"
    elif policy is None or not policy.on_failure:
        why = "its restart is `never`"
    else:
        why = (f"it was restarted {policy.count} times within {_window(policy)}, its "
               "restart_limit")
    return (f"[mur run] warning: member `{member}` ended with {how} while the formation "
            f"runs; {why}: it stays down and calls to it fail")


def _window(policy: RestartPolicy) -> str:
    return policy.describe().rsplit(" within ", 1)[-1]
