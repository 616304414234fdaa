"""A capsule's agent checked without running any of its code, in this order: the Python
distributions its ``agent.requires`` names are installed where ``mur`` runs, at versions
that satisfy it (:func:`missing_requirements`: ``E-ROS-011`` at admission, ``E-RUN-054``
at a member's start); its ``python`` module, read from the installed artifact, compiles
and defines ``async def <callable>`` at its top level, or imports that name
(:func:`python_agent_problem`: ``E-ROS-010``). So ``mur doctor`` finds these, and a launch
refuses before it starts anything, not when the member starts.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

__all__ = ["missing_requirements", "python_agent_problem"]


def python_agent_problem(artifact: Path, entry: str) -> str | None:
    """Why the agent ``module:callable`` in ``artifact`` (a ``.mur.zip``) cannot run, or
    None. The text names the file and line at fault."""
    module, _, function = entry.partition(":")
    parts = module.split(".")
    candidates = ["/".join(parts) + ".py", "/".join(parts) + "/__init__.py"]
    try:
        with zipfile.ZipFile(artifact) as archive:
            names = set(archive.namelist())
            name = next((candidate for candidate in candidates if candidate in names), None)
            if name is None:
                return f"the capsule has no {candidates[0]} or {candidates[1]}"
            source = archive.read(name)
    except (OSError, zipfile.BadZipFile) as exc:
        return f"the artifact cannot be read ({exc})"
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as exc:
        where = f"{name}, line {exc.lineno}" if exc.lineno else name
        return f"{where}: {exc.msg}"
    except ValueError as exc:  # a NUL byte in the source
        return f"{name}: {exc}"
    return _defines_async(tree, name, function)


def _defines_async(tree: ast.Module, name: str, function: str) -> str | None:
    defined: ast.stmt | None = None
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef | ast.ClassDef) and (
                node.name == function):
            defined = node
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
                (alias.asname or alias.name.split(".")[0]) == function
                for alias in node.names):
            defined = node
        elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == function
                for target in node.targets):
            defined = node
    if defined is None:
        return f"{name} defines no {function!r} at its top level: write " \
               f"`async def {function}(task):`"
    if isinstance(defined, ast.FunctionDef):
        return f"{name}, line {defined.lineno}: {function} is not async: write " \
               f"`async def {function}(task):`"
    return None


def missing_requirements(requires: list[str]) -> list[str]:
    """Each requirement of ``requires`` that the running Python does not satisfy, as a
    phrase naming it and what is installed (if anything)."""
    if not requires:
        return []  # the common case imports nothing (a member's start pays for it)
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    missing = []
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # not for this Python or platform
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            missing.append(f"`{text}` (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(installed,
                                                                        prereleases=True):
            missing.append(f"`{text}` ({requirement.name} {installed} is installed)")
    return missing


def pip_install(requires: list[str]) -> str:
    """The command that installs ``requires`` into the Python ``mur`` runs with."""
    import shlex
    import sys

    return " ".join([shlex.quote(sys.executable), "-m", "pip", "install",
                     *(shlex.quote(text) for text in requires)])
