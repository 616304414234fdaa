"""gateway/__init__.py, the wire's public face: every name it lists is the object its
module defines, loading the package pulls in nothing heavy, and the launcher imports
nothing of the wire that is not listed."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import gateway
from tests.support.formation import REPO


def test_every_listed_name_is_its_modules_own() -> None:
    assert len(gateway.__all__) == len(set(gateway.__all__)) > 40
    for name in gateway.__all__:
        module = importlib.import_module(gateway._EXPORTS[name])
        assert getattr(gateway, name) is getattr(module, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        gateway.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as refused:
        assert "no_such_name" in str(refused)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_the_shared_names_loads_nothing_heavy() -> None:
    probe = ("import sys, gateway, gateway.protocol; "
             "print(sorted(m for m in ('pydantic', 'aiohttp', 'httpx', 'starlette', "
             "'cryptography', 'nacl') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_agent_process_using_task_http_does_not_load_aiohttp() -> None:
    """The agent process imports the formation proxy's module for ``task.http``; aiohttp
    (80 ms of imports) belongs to the member runtime's pool only."""
    probe = ("import sys, launcher.member.agent.http; "
             "print('aiohttp' in sys.modules, 'gateway.proxy.formation' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_the_launcher_imports_only_what_the_face_lists() -> None:
    outside = []
    for path in sorted((REPO / "launcher").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.startswith("gateway"):
                outside += [f"{path.relative_to(REPO)}: {node.module}.{alias.name}"
                            for alias in node.names if alias.name not in gateway.__all__]
    assert outside == []
