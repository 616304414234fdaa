"""The hint of a capsule installed in neither store (``E-ROS-007`` for a roster's member,
``E-REG-001`` for ``mur run --capsule``): what would install it, and what is installed.

In order: the first step that fits, most direct first (a source of that capsule and
version in the project: ``mur run --roster --rebuild``, or ``mur pack`` then
``mur install``; an artifact file of that name in the project: ``mur install`` it; else
``mur pack`` its source, then ``mur install``), then the versions of that capsule that
are installed, or, when none is, the installed capsule whose name is close to it.
Commands name paths as the user can type them from where ``mur`` runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from difflib import get_close_matches
from pathlib import Path

from launcher.admission.artifacts import artifact_name
from launcher.admission.source_dirs import project_sources

__all__ = ["install_fix"]


def install_fix(project_dir: Path, capsule: str, version: str, *, roster: bool,
                installed: Iterable[tuple[str, str]]) -> str:
    """The hint for ``capsule`` at ``version`` not installed, for a roster's member
    (``roster``) or a capsule run by ``mur run --capsule``; ``installed``: the (capsule,
    version) of every artifact in the project store, then the global one."""
    project_dir = Path(project_dir)
    name = capsule.rsplit("/", 1)[-1]
    artifact = artifact_name(name, version)
    source = _source_of(project_dir, capsule, version)
    packed = project_dir / artifact
    if source is not None and roster:
        fix = (f"its source is in {_typed(source)}: `{_rebuild(project_dir)}` packs and "
               f"installs it (or `mur pack {_typed(source)} && mur install {artifact}`)")
    elif source is not None:
        fix = f"its source is in {_typed(source)}: `mur pack {_typed(source)} && " \
              f"mur install {artifact}`"
    elif packed.is_file():
        fix = f"install it with `mur install {_typed(packed)}` (add `--global` for every " \
              "project)"
    else:
        fix = f"pack its source with `mur pack DIR`, then `mur install {artifact}` (add " \
              "`--global` for every project)"
    return fix + _installed(capsule, installed, roster=roster)


def _installed(capsule: str, installed: Iterable[tuple[str, str]], *, roster: bool) -> str:
    """The versions of ``capsule`` that are installed; else a close capsule name."""
    everything: dict[str, list[str]] = {}
    for found, version in installed:
        known = everything.setdefault(found, [])
        if version not in known:
            known.append(version)
    versions = everything.get(capsule)
    if versions:
        choose = "set the member's `version:` to one of them" if roster \
            else "run one with `--capsule-version V`"
        return f"; installed: {capsule} {', '.join(versions)} ({choose})"
    # Names are compared without their scope: "local/" alike in both would make any two
    # short names look close.
    by_name = {found.rsplit("/", 1)[-1]: found for found in reversed(everything)}
    close = get_close_matches(capsule.rsplit("/", 1)[-1], list(by_name), n=1, cutoff=0.6)
    return f"; did you mean `{by_name[close[0]]}`?" if close else ""


def _source_of(project_dir: Path, capsule: str, version: str) -> Path | None:
    """The project's source of ``capsule`` at ``version``, when it has one that reads."""
    try:
        source = project_sources(project_dir).get((capsule, version))
    except OSError:  # a project that cannot be listed has no source to name
        return None
    return source.path if source is not None else None


def _typed(path: Path) -> str:
    """``path`` as typed from the current directory: relative under it, else absolute."""
    try:
        relative = os.path.relpath(path)
    except (ValueError, OSError):  # another drive, or a current directory that is gone
        return str(path)
    return str(path) if relative.startswith("..") else relative


def _rebuild(project_dir: Path) -> str:
    here = _typed(project_dir)
    return "mur run --roster --rebuild" + ("" if here == "." else f" --project {here}")
