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

