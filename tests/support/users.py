"""Who runs a test's formation (no tests here): this test's own user, or an ordinary user
made for the test, whose commands run in a mount namespace where this checkout's Python is
reachable; and a scratch folder such a user can enter."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.formation import REPO


@dataclass
class Owner:
    """Who runs the formation: this test's own user, or an ordinary user made for the
    test, whose commands run in a mount namespace where this checkout's Python is
    reachable (``/root``, where pyenv keeps it, is root's alone: a tmpfs of mode 0755 is
    put over it there, holding only ``.pyenv``)."""

    uid: int
    gid: int
    holder: subprocess.Popen[bytes] | None = None

    def argv(self, argv: list[str]) -> list[str]:
        if self.holder is None:
            return argv
        return ["nsenter", f"--target={self.holder.pid}", "--mount", "--",
                "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--", *argv]

    def chown(self, root: Path) -> None:
        if self.holder is None:
            return
        for folder, dirs, files in os.walk(root):
            os.chown(folder, self.uid, self.gid)
            for name in (*dirs, *files):
                os.lchown(os.path.join(folder, name), self.uid, self.gid)


MOUNTS = """set -e
mkdir -p "$SAVE"
mount --bind /root "$SAVE"
mount -t tmpfs -o mode=755 tmpfs /root
if [ -d "$SAVE/.pyenv" ]; then mkdir /root/.pyenv; mount --bind "$SAVE/.pyenv" /root/.pyenv; fi
echo ready
exec sleep 900
"""


@contextmanager
def ordinary_user(scratch: Path) -> Iterator[Owner]:
    """An ordinary user (made when missing) and the namespace its commands run in."""
    if os.getuid() != 0:
        yield Owner(os.getuid(), os.getgid())
        return
    for tool in ("useradd", "unshare", "nsenter", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: the ordinary user cannot be set up")
    name = "murmurtest"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", name], capture_output=True, text=True,
                              check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot create an ordinary user: {made.stderr.strip()}")
        entry = pwd.getpwnam(name)
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", MOUNTS],
        env={"SAVE": str(scratch / "root-view"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        if holder.stdout.readline() != b"ready\n":
            holder.wait(timeout=10)
            pytest.skip("a mount namespace cannot be made here: "
                        f"{holder.stderr.read().decode().strip() if holder.stderr else ''}")
        owner = Owner(entry.pw_uid, entry.pw_gid, holder)
        problem = reachable_by(owner)
        if problem is not None:
            pytest.skip(f"the ordinary user cannot run this checkout: {problem}")
        yield owner
    finally:
        holder.kill()
        holder.wait(timeout=10)


def reachable_by(owner: Owner) -> str | None:
    """Why ``owner`` cannot run this checkout's Python, or None."""
    probe = subprocess.run(owner.argv([sys.executable, "-c", "import launcher, gateway, a2a"]),
                           cwd="/", capture_output=True, text=True, check=False,
                           env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                "PYTHONDONTWRITEBYTECODE": "1"})
    return None if probe.returncode == 0 else probe.stderr.strip()[-300:]


@contextmanager
def scratch_folder() -> Iterator[Path]:
    """A folder an ordinary user can enter (pytest's own are root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="murmur-hostile-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
