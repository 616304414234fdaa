"""The house rules of docs/architecture.md, read from the source (no module is imported):
which part may import which, and which modules stay light."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _reaching(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{path.relative_to(ROOT)} imports {name}"
                  for path in paths for name in _imports(path)
                  if any(name == f or name.startswith(f + ".") for f in forbidden))


def test_the_wire_never_imports_files_and_processes() -> None:
    assert _reaching(_modules("gateway"), ("launcher",)) == []


def test_the_member_runtime_knows_nothing_of_its_launcher() -> None:
    assert _reaching(_modules("launcher/member"),
                     ("launcher.formation", "launcher.commands", "launcher.cli")) == []


def test_the_launcher_never_imports_the_member_runtime() -> None:
    assert _reaching(_modules("launcher/formation"), ("launcher.member",)) == []


def test_shared_launcher_modules_import_neither_program() -> None:
    # The entry points: mur itself, the demo, and the member template (a warm mur that
    # forks member runtimes).
    shared = [path for path in (ROOT / "launcher").glob("*.py")
              if path.name not in ("cli.py", "demo.py", "template.py")]
    # the families of shared modules
    for family in ("sandbox", "admission", "home", "spawn", "diagnostics"):
        shared += _modules(f"launcher/{family}")
    assert len(shared) > 10
    assert _reaching(shared, ("launcher.member", "launcher.formation",
                              "launcher.commands", "launcher.cli")) == []


@pytest.mark.parametrize("module", [
    "gateway/protocol.py", "gateway/types.py", "gateway/errors.py", "gateway/redaction.py",
    "launcher/spawn/env_names.py",
])
def test_shared_names_import_only_the_standard_library(module: str) -> None:
    own = {"gateway.protocol", "gateway.protocol.PEERS_ENV", "gateway.protocol.PROXY_ENV"}
    heavy = [name for name in _imports(ROOT / module)
             if name.split(".")[0] not in sys.stdlib_module_names and name not in own]
    assert heavy == []


def test_no_test_module_imports_another() -> None:
    """Helpers live in tests/support/ (and fixtures in a conftest): a test module that
    imports another runs that module's tests' set-up for nothing, and ties the two."""
    tests = [path for path in _modules("tests") if path.name.startswith("test_")]
    assert len(tests) > 50
    reaching = [f"{path.relative_to(ROOT)} imports {name}" for path in tests
                for name in _imports(path)
                if name.startswith("tests.")
                and any(part.startswith("test_") for part in name.split(".")[1:])]
    assert reaching == []



def _runtime_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` imports when it runs: at any depth, but not
    under ``if TYPE_CHECKING:`` (an annotation may name a module that imports this one)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for statement in block.body for node in ast.walk(statement)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name in known}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = [stack.pop()]
            while group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    known: dict[str, Path] = {}
    for package in ("gateway", "launcher"):
        for path in _modules(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            known[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {module: _runtime_imports(path, known) - {module} for module, path in known.items()}
    assert len(graph) > 100
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
