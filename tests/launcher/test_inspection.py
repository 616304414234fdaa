"""``forbid_inspection`` (PR_SET_DUMPABLE 0), which the launcher and every member runtime
call first: a process that called it is not dumpable, so no other process of its user
may ptrace it or read its memory or environment."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = textwrap.dedent("""
    import ctypes, sys
    from launcher.spawn.process import forbid_inspection
    libc = ctypes.CDLL(None)
    before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    set_ = forbid_inspection()
    print(before, set_, libc.prctl(3, 0, 0, 0, 0))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_a_process_that_forbids_inspection_is_no_longer_dumpable() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, check=True)
    assert done.stdout.split() == ["1", "True", "0"]


@pytest.mark.parametrize("module", ["launcher/member/main.py", "launcher/formation/launch.py"])
def test_the_launcher_and_the_member_runtime_forbid_inspection_first(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text())
    main = next(node for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name == "main")
    statements = [node for node in main.body
                  if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    first = statements[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
    assert ast.unparse(first.value.func) == "forbid_inspection"
