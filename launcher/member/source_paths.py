"""An agent's traceback as its author knows its files: the runtime runs a copy of the
capsule, unpacked into the session's records (``capsule/``), so the traceback the agent
process sends names that copy; ``logs/member.log`` names the project's own source file
instead wherever that file is the copy's byte for byte (its line numbers then hold too).

In order: :class:`SourcePaths`, made once a session from the copy's folder and the
project's source of the capsule at its version (:func:`launcher.admission.source_dirs.
project_sources`: the project directory or a folder directly under it), then
:meth:`SourcePaths.rewrite`, which maps each ``File "..."`` line of a traceback and, when
a line of the copy is left (no source in the project, or a file edited since the
install), ends the traceback saying which capsule version the copy is.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.admission.source_dirs import project_sources

__all__ = ["SourcePaths"]

#: A frame's line of a Python traceback: ``  File "<path>", line N, in f``.
_FRAME = re.compile(r'^(\s*File ")([^"\n]+)(")', re.MULTILINE)


@dataclass(frozen=True, slots=True)
class SourcePaths:
    """Where the copy of one capsule (``copy``) came from: ``source``, the project's
    folder of that capsule at that version, or None; ``label`` names the capsule."""

    copy: Path
    source: Path | None
    label: str

    @classmethod
    def of(cls, copy: Path, project: Path, capsule: str, version: str) -> SourcePaths:
        try:
            found = project_sources(Path(project).resolve()).get((capsule, version))
        except OSError:  # a project that cannot be listed names no source
            found = None
        return cls(Path(os.path.realpath(copy)), found.path if found is not None else None,
                   f"{capsule} {version}")

    def rewrite(self, traceback: str) -> str:
        """``traceback`` with each file of the copy named as the project's source file
        when that file is the copy's byte for byte; a note at the end when any is not."""
        left: list[bool] = []

        def frame(match: re.Match[str]) -> str:
            relative = self._in_copy(match.group(2))
            if relative is None:
                return match.group(0)
            original = self._original(relative)
            if original is None:
                left.append(True)
                return match.group(0)
            return f"{match.group(1)}{original}{match.group(3)}"

        rewritten = _FRAME.sub(frame, traceback)
        if not left:
            return rewritten
        why = ("the project holds no source of it" if self.source is None
               else f"the file differs from the project's source in {self.source}, edited "
                    "since it was installed: pack and install it again to run the edited code")
        return (f"{rewritten}\n(files under {self.copy} are the installed {self.label}; "
                f"{why})")

    def _in_copy(self, path: str) -> Path | None:
        try:
            relative = Path(os.path.realpath(path)).relative_to(self.copy)
        except ValueError:
            return None
        return relative

    def _original(self, relative: Path) -> Path | None:
        if self.source is None:
            return None
        original = self.source / relative
        try:
            same = original.read_bytes() == (self.copy / relative).read_bytes()
        except OSError:  # gone, or never there: the copy stays named
            return None
        return original if same else None
