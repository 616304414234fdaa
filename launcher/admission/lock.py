"""``murmur.lock``: the project's pins of capsules to a version and a sha256
(docs/admission.md). ``mur lock`` writes it, nothing else does; admission and every
lookup read it and never change it.

In order: where it is, its refusals (``E-REG-004``), reading one pin and the whole file,
then writing it (sorted, versions always quoted). That an installed artifact agrees
with its pin (``E-REG-005``) is checked by ``store.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.admission.artifacts import capsule_problem, write_atomically
from launcher.admission.manifest_fields import version_problem
from launcher.admission.yaml_files import (
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
)
from launcher.diagnostics import DiagnosticError

LOCK_FILE = "murmur.lock"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class LockPin:
    version: str
    sha256: str


def lock_path(project_dir: Path) -> Path:
    return Path(project_dir) / LOCK_FILE


def _lock_refusal(path: Path, location: tuple[str | int, ...], problem: str,
                  fix: str = "correct it by hand, or write it again with `mur lock`"
                  ) -> DiagnosticError:
    return DiagnosticError("E-REG-004", dotted(location) or str(path), file=str(path),
                           problem=problem, fix=fix)


def _pin_of(path: Path, capsule: str, value: Any) -> LockPin:
    where = ("artifacts", capsule)
    if not isinstance(value, dict):
        raise _lock_refusal(path, where, f"`{dotted(where)}` must be a mapping with "
                            f"`version` and `sha256`, not {describe_value(value)}")
    for key in value:
        if key not in ("version", "sha256"):
            raise _lock_refusal(path, (*where, key), f"`{dotted((*where, key))}` is not a key "
                                "murmur.lock accepts", "keep only `version` and `sha256`")
    version, digest = value.get("version"), value.get("sha256")
    if not isinstance(version, str) or version_problem(version) is not None:
        raise _lock_refusal(path, (*where, "version"), f"`{dotted((*where, 'version'))}` must "
                            f"be an exact version, not {describe_value(version)}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise _lock_refusal(path, (*where, "sha256"), f"`{dotted((*where, 'sha256'))}` must "
                            f"be 64 lower-case hex digits, not {describe_value(digest)}")
    return LockPin(version=version, sha256=digest)


def parse_lock(text: bytes | str, path: Path) -> dict[str, LockPin]:
    """The pins in a lock's ``text``; ``E-REG-004`` when it does not have the lock's shape."""
    try:
        data = read_yaml(text, text_paths=(("artifacts", "*", "version"),
                                           ("artifacts", "*", "sha256")))
    except YamlFault as fault:
        raise _lock_refusal(path, fault.location, fault.problem, fault.fix) from None
    if not isinstance(data, dict):
        raise _lock_refusal(path, (), f"must hold a mapping with `lock_version: 1` and "
                            f"`artifacts`, not {describe_value(data)}")
    for key in data:
        if key not in ("lock_version", "artifacts"):
            raise _lock_refusal(path, (key,), f"`{key}` is not a key murmur.lock accepts",
                                "keep only `lock_version` and `artifacts`")
    version = data.get("lock_version")
    if type(version) is not int or version != 1:
        raise _lock_refusal(path, ("lock_version",), f"`lock_version` must be 1, not "
                            f"{describe_value(version)}")
    artifacts = data.get("artifacts")
    if artifacts is None:
        return {}
    if not isinstance(artifacts, dict):
        raise _lock_refusal(path, ("artifacts",), f"`artifacts` must be a mapping, not "
                            f"{describe_value(artifacts)}")
    pins: dict[str, LockPin] = {}
    for capsule, value in artifacts.items():
        problem = capsule_problem(capsule)
        if problem is not None:
            raise _lock_refusal(path, ("artifacts", capsule), f"`{capsule}` is not a capsule "
                                f"name: {problem}", "pin capsules as `<scope>/<name>`")
        pins[capsule] = _pin_of(path, capsule, value)
    return pins


def read_lock(project_dir: Path) -> dict[str, LockPin] | None:
    """The project's pins, or ``None`` when it has no ``murmur.lock``."""
    path = lock_path(project_dir)
    try:
        data = read_text_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _lock_refusal(path, (), f"cannot be read ({exc.strerror})",
                            "make it a readable file") from None
    return parse_lock(data, path)


def render_lock(pins: Mapping[str, LockPin]) -> str:
    """The text of a ``murmur.lock`` holding ``pins``, sorted, versions always quoted."""
    lines = ["# murmur.lock: written by `mur lock`. Admission reads it and never changes it.",
             "lock_version: 1"]
    if not pins:
        return "\n".join([*lines, "artifacts: {}"]) + "\n"
    lines.append("artifacts:")
    for capsule in sorted(pins):
        pin = pins[capsule]
        lines += [f"  {capsule}:", f"    version: {_quoted(pin.version)}",
                  f"    sha256: {_quoted(pin.sha256)}"]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    dumped: str = yaml.safe_dump(text, default_style='"', explicit_end=False)
    return dumped.strip().removesuffix("...").strip()


def write_lock(project_dir: Path, pins: Mapping[str, LockPin]) -> Path:
    path = lock_path(project_dir)
    write_atomically(path, render_lock(pins).encode("utf-8"))
    return path
