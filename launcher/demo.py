"""``make demo``: a real formation end to end, in a temporary project and MURMUR_HOME.

Runs the same commands a user would type, showing each one: ``mur new --roster``,
``mur doctor``, ``mur run --roster --task ...`` (its formation table and answer),
then what an operator reads afterwards: ``mur trace show --tree`` (who called whom, how
long each task took), ``mur logs`` and ``mur audit``, and ``mur ps`` (nothing left
running). Everything lives in one temporary folder, which is kept for exploring, with
the commands to go on printed last; ``--clean`` removes it instead.
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


def _last_formation(cwd: Path, env: dict[str, str]) -> str | None:
    """The formation that just ended, as ``mur ps -a --json`` lists it (newest first)."""
    done = subprocess.run([sys.executable, "-m", "launcher.cli", "ps", "-a", "--json"],
                          cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=60)
    try:
        ended = json.loads(done.stdout)["ended"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(ended[0]["formation_id"]) if ended else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clean", action="store_true",
                        help="remove the demo's folder at the end (it is kept by default)")
    parser.add_argument("--task", default=TASK, help="the task for the formation")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="murmur-demo-"))
    env = dict(os.environ, MURMUR_HOME=str(root / "home"))
    project = root / "demo"
    print(f"demo folder: {root} (MURMUR_HOME={env['MURMUR_HOME']})")
    try:
        for step in (["new", "--roster", str(project)],
                     ["doctor", "--project", str(project)],
                     ["run", "--roster", "--task", args.task]):
            status, _ = _mur(step, cwd=project if step[0] == "run" else root, env=env)
            if status != 0:
                print(f"\ndemo: `mur {step[0]}` exited with {status}", file=sys.stderr)
                return status
        formation_id = _last_formation(project, env)
        if formation_id is not None:
            for step in (["trace", "show", formation_id, "--tree"], ["logs", formation_id],
                         ["audit", formation_id]):
                _mur(step, cwd=project, env=env)
        status = _mur(["ps"], cwd=project, env=env)[0]
        if not args.clean:
            _go_on(root, project, env["MURMUR_HOME"], formation_id)
        return status
    finally:
        if args.clean:
            shutil.rmtree(root, ignore_errors=True)


def _go_on(root: Path, project: Path, home: str, formation_id: str | None) -> None:
    """The demo's folder is kept: how to look around in it, and how to remove it."""
    shown = formation_id or "FRM"
    print(f"""
The demo's folder is kept: {root}
To go on from here:
  export MURMUR_HOME={shlex.quote(home)}
  cd {shlex.quote(str(project))}
  mur run --roster --task "your own task"     # or edit planner/ and add --rebuild
  mur trace show {shown}           # every record, in time order
  mur add reviewer --calls worker             # grow the team (docs/growing-a-team.md)
To remove it: rm -rf {shlex.quote(str(root))}""")


if __name__ == "__main__":
    sys.exit(main())
