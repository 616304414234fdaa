"""``make demo``: a real formation end to end, in a temporary project and MURMUR_HOME.

Runs the same commands a user would type, showing each one: ``mur new --roster``,
``mur doctor``, then ``mur run --roster --json --task ...``, whose formation line and
answer it prints. Everything lives in one temporary folder, removed at the end unless
``--keep`` is given.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TASK = "Write a haiku about doors that check credentials."


def _mur(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> int:
    print(f"\n$ mur {shlex.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "launcher.cli", *args], cwd=cwd, env=env,
                          check=False, timeout=300)
    return done.returncode


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
            status = _mur(step, cwd=project if step[0] == "run" else root, env=env)
            if status != 0:
                print(f"\ndemo: `mur {step[0]}` exited with {status}", file=sys.stderr)
                return status
        return _mur(["ps", "--json"], cwd=project, env=env)
    finally:
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
