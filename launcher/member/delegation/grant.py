"""``capabilities.spawn.allow`` read once, and the version of a child to run.

An entry is ``local/<name>`` (any installed version) or ``local/<name>@<version>``
(pinned). The version run, in order: the one the agent asked for (it must match a pin),
else the entry's pin, else the project's ``murmur.lock`` pin, else the newest version
installed in the project store, then the global store (versions compared number by
number, so ``1.10`` is newer than ``1.9``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.admission.lock import read_lock
from launcher.admission.store import installed_capsules
from launcher.errors import LauncherError
from launcher.home.paths import store_search_order
from launcher.member.delegation.refused import DelegationRefused


@dataclass(frozen=True)
class SpawnGrant:
    """The capsules a member may delegate to: capsule -> pinned version (None: any)."""

    pins: dict[str, str | None]

    @classmethod
    def of(cls, allow: Iterable[str]) -> SpawnGrant:
        pins: dict[str, str | None] = {}
        for entry in allow:
            capsule, _, version = entry.strip().partition("@")
            pins[capsule] = version or None
        return cls(pins)

    @property
    def capsules(self) -> tuple[str, ...]:
        return tuple(self.pins)

    def version_for(self, project_dir: Path, capsule: str, asked: str | None) -> str:
        """The version of ``capsule`` a child runs; :class:`DelegationRefused` when the
        capsule is not granted, or no such version is installed."""
        if capsule not in self.pins:
            granted = ", ".join(self.pins) or "nothing"
            raise DelegationRefused(capsule, "not_allowed", f"this member may delegate to "
                                    f"{granted}; add {capsule} to capabilities.spawn.allow")
        pinned = self.pins[capsule]
        if asked is not None and pinned is not None and asked != pinned:
            raise DelegationRefused(capsule, "not_allowed", f"capabilities.spawn.allow pins "
                                    f"{capsule}@{pinned}, not {asked}")
        installed = installed_versions(project_dir, capsule)
        wanted = asked or pinned or _locked(project_dir, capsule)
        if wanted is not None:
            if wanted not in installed:
                raise DelegationRefused(capsule, "not_installed", f"{capsule} {wanted} is "
                                        "not installed; `mur install` it")
            return wanted
        if not installed:
            raise DelegationRefused(capsule, "not_installed", f"no version of {capsule} is "
                                    "installed; `mur pack` and `mur install` it")
        return max(installed, key=version_order)


def installed_versions(project_dir: Path, capsule: str) -> list[str]:
    """Every installed version of ``capsule`` in the project and global stores."""
    found: list[str] = []
    for store in store_search_order(project_dir):
        found += [version for name, version, _ in installed_capsules(store)
                  if name == capsule and version not in found]
    return found


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key comparing numbers as numbers: ``1.10`` after ``1.9``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"[._+-]", version))


def _locked(project_dir: Path, capsule: str) -> str | None:
    try:
        pins = read_lock(project_dir)
    except LauncherError:
        return None   # the child's own admission refuses a bad lock, with its code
    pin = None if pins is None else pins.get(capsule)
    return None if pin is None else pin.version
