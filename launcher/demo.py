"""``make demo``: a real formation end to end, in a temporary project and MURMUR_HOME.

Runs the same commands a user would type, showing each one: ``mur new --roster``,
``mur doctor``, then ``mur run --roster --json --task ...``, whose formation line and
answer it prints. Everything lives in one temporary folder, removed at the end unless
``--keep`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TASK = "Outline a haiku about doors that check credentials. Then write it."


def _mur(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``mur ARGS`` as a user would, showing the command and its output."""
    print(f"\n$ mur {shlex.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "launcher.cli", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, text=True, check=False, timeout=300)
    print(done.stdout, end="", flush=True)
    return done.returncode, done.stdout


def _formation_id(stdout: str) -> str | None:
    """The id on the ``--json`` formation line of ``mur run --roster``."""
    for line in stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "formation":
                return str(event["formation_id"])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--task", default=TASK, help="the task for the formation")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="murmur-demo-"))
    env = dict(os.environ, MURMUR_HOME=str(root / "home"))
    project = root / "demo"
    print(f"demo folder: {root} (MURMUR_HOME={env['MURMUR_HOME']})")
    try:
        for step in (["new", "--roster", str(project)],
                     ["doctor", "--project", str(project)],
                     ["run", "--roster", "--json", "--task", args.task]):
            status, stdout = _mur(step, cwd=project if step[0] == "run" else root, env=env)
            if status != 0:
                print(f"\ndemo: `mur {step[0]}` exited with {status}", file=sys.stderr)
                return status
        formation_id = _formation_id(stdout)
        if formation_id is not None:
            _mur(["trace", "show", formation_id], cwd=project, env=env)
        return _mur(["ps"], cwd=project, env=env)[0]
    finally:
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
