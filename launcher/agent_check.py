"""A ``python`` agent checked without running any of its code: its module, read from the
installed artifact, compiles, and defines ``async def <callable>`` at its top level (or
imports that name, which only running it could check further). Admission refuses a
member whose agent fails this (``E-ROS-010``), so a syntax error is found by
``mur doctor`` and before a launch starts anything, not when the member starts.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

__all__ = ["python_agent_problem"]


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
