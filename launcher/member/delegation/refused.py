"""Why a delegation was refused: one exception, one table of cases.

``task.delegate`` raises :class:`DelegationRefused` (a ``RuntimeError``, so an agent that
catches ``RuntimeError`` sees it) before any child starts; its text names the capsule,
the case and the fix. A child that started and then failed is not a refusal: its handle
answers with the failure (docs/delegation.md).
"""

from __future__ import annotations

from typing import Final, Literal

from launcher.errors import LauncherError

RefusalCase = Literal["not_allowed", "not_installed", "max_children", "max_depth",
                      "session_ending", "not_started"]

#: What each case means, for the docs and the error text.
CASES: Final[dict[str, str]] = {
    "not_allowed": "the capsule is not in capabilities.spawn.allow",
    "not_installed": "the capsule is not installed in the project or global store",
    "max_children": "capabilities.spawn.max_children children are already alive",
    "max_depth": "a child would be deeper than capabilities.spawn.max_depth allows",
    "session_ending": "the session is ending",
    "not_started": "the child's mur run did not start",
}


class DelegationRefused(LauncherError, RuntimeError):
    """``task.delegate`` refused before a child held the task. ``case``: see CASES."""

    def __init__(self, capsule: str, case: RefusalCase, detail: str) -> None:
        super().__init__(f"delegation to {capsule} refused ({case}): {detail}")
        self.capsule = capsule
        self.case = case
        self.detail = detail
