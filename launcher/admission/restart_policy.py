"""Whether the launcher starts a failed peer again (docs/restarts.md): a version 2
roster's ``restart`` and ``restart_limit`` on the member, else the capsule's
``lifecycle.restart`` and ``lifecycle.restart_limit``, else never."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.admission.manifest import Manifest
from launcher.admission.roster_structure import MemberSpec

__all__ = ["RestartPolicy", "restart_policy"]


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """``on_failure``: start the member again when it fails while the formation runs, at
    most ``count`` times within ``within`` seconds."""

    on_failure: bool = False
    count: int = 3
    within: int = 600

    def to_json(self) -> dict[str, object]:
        return {"policy": "on-failure" if self.on_failure else "never", "count": self.count,
                "within_seconds": self.within}

    def describe(self) -> str:
        """How the roster or manifest would write it (for ``mur doctor`` and errors)."""
        if not self.on_failure:
            return "never"
        return f"on-failure, at most {self.count} within {_duration(self.within)}"


def restart_policy(spec: MemberSpec, manifest: Manifest) -> RestartPolicy:
    lifecycle = manifest.lifecycle
    restart = spec.restart if spec.restart is not None else lifecycle.restart
    count, within = spec.restart_limit if spec.restart_limit is not None else (
        lifecycle.restart_limit.count, lifecycle.restart_limit.within)
    return RestartPolicy(on_failure=restart == "on-failure", count=count, within=within)


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
