"""Starting one member of a formation: its argv, its environment, its two pipes.

Every member is ``mur run --capsule C --capsule-version V --capsule-sha256 H --project P
--json`` (plus ``--deadline`` and, for the entry member, the lifecycle the launch sets),
started with exactly two inherited descriptors besides 0, 1 and 2: the read end of its
formation channel, which already holds its credentials, and the read end of its
lifeline. Both numbers are in its environment; no token ever is, nor in its argv.

``MURMUR_TEST_MEMBER_ARGV_PREFIX`` is a test-only hook: when set (a shell-quoted
command), it replaces ``python -m launcher.cli`` in front of ``run ...``, so tests can put
a misbehaving member in a formation. It is never passed on to a member.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.auth.tokens import FormationKey
from launcher.admission.roster import AdmittedMember
from launcher.formation.early_template import template_env
from launcher.formation.ready import Ready
from launcher.home.paths import home
from launcher.sandbox.hostcheck import mark_reported
from launcher.spawn.channel import ChannelWriter
from launcher.spawn.env_names import (
    ARGV_PREFIX_ENV,
    CHANNEL_ENV,
    FORMATION_ENV,
    HOME_ENV,
    LIFELINE_ENV,
    WORKDIR_ENV,
)
from launcher.spawn.process import (
    DEVNULL,
    PIPE,
    ChildPipe,
    ManagedProcess,
    make_channel_pipe,
    make_lifeline_pipe,
)

if TYPE_CHECKING:
    from launcher.formation.template import MemberTemplate

def mur_command(environ: Mapping[str, str]) -> list[str]:
    """How a member's ``mur`` is run: this interpreter's ``-m launcher.cli``, or the
    test-only prefix."""
    prefix = environ.get(ARGV_PREFIX_ENV)
    if prefix:
        return shlex.split(prefix)
    return [sys.executable, "-m", "launcher.cli"]


def member_argv(member: AdmittedMember, *, project_dir: Path, deadline: str | None,
                extra: Sequence[str] = (), environ: Mapping[str, str]) -> list[str]:
    argv = [*mur_command(environ), "run", "--capsule", member.capsule,
            "--capsule-version", member.version, "--capsule-sha256", member.sha256,
            "--project", str(project_dir), "--json"]
    if deadline is not None:
        argv += ["--deadline", deadline]
    return argv + list(extra)


def member_env(base: Mapping[str, str], *, formation_id: str, channel_fd: int,
               lifeline_fd: int) -> dict[str, str]:
    env = template_env(base)
    # Members run in other directories: a relative MURMUR_HOME would name another home.
    env[HOME_ENV] = str(home())
    env[FORMATION_ENV] = formation_id
    env[CHANNEL_ENV] = str(channel_fd)
    env[LIFELINE_ENV] = str(lifeline_fd)
    mark_reported(env)
    return env


def mint_tokens(key: FormationKey, *, formation_id: str, caller: str,
                callees: Sequence[str]) -> dict[str, str]:
    """One formation token for each member ``caller`` may call, in roster order."""
    return {callee: key.mint(formation=formation_id, caller=caller, callee=callee)
            for callee in callees}


@dataclass(eq=False)
class LaunchedMember:
    """A started member and the launcher's ends of its pipes."""

    spec: AdmittedMember
    workdir: Path
    process: ManagedProcess
    lifeline: ChildPipe
    channel: ChannelWriter
    started_at: float
    ready: Ready | None = None
    #: The card its door served the readiness probe, which the launcher signs.
    card: dict[str, Any] | None = None
    lifeline_closed_at: float | None = None
    helpers: list[object] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def entry(self) -> bool:
        return self.spec.entry

    def close_lifeline(self, now: float) -> None:
        """End the formation for this member (idempotent; the first close counts)."""
        if self.lifeline_closed_at is None:
            self.lifeline_closed_at = now
        self.lifeline.close_parent_end()

    def close_channel(self) -> None:
        self.channel.close()


def start_member(member: AdmittedMember, *, key: FormationKey, formation_id: str,
                 callees: Sequence[str], doors: Mapping[str, str] | None, workdir: Path,
                 project_dir: Path, deadline: str | None, extra: Sequence[str],
                 environ: Mapping[str, str], own_group: bool, started_at: float,
                 stderr: int | None, template: MemberTemplate | None = None,
                 bounds: Mapping[str, Any] | None = None) -> LaunchedMember:
    """Write ``member``'s credentials (and ``doors``, for the entry member) on a fresh
    channel, then start it in ``workdir``. Raises OSError when it cannot be started; its
    pipes are closed then."""
    channel = make_channel_pipe()
    lifeline = make_lifeline_pipe()
    writer = ChannelWriter(channel.parent_fd)
    channel.parent_fd = -1  # the writer owns it now
    try:
        tokens = mint_tokens(key, formation_id=formation_id, caller=member.name,
                             callees=callees)
        writer.write_credentials(formation_id=formation_id, member=member.name,
                                 key=key.public_bytes, tokens=tokens, entry=member.entry,
                                 bounds=bounds)
        del tokens
        if doors:
            writer.write_doors(doors)
        argv = member_argv(member, project_dir=project_dir, deadline=deadline, extra=extra,
                           environ=environ)
        env = {**member_env(environ, formation_id=formation_id,
                            channel_fd=channel.child_fd, lifeline_fd=lifeline.child_fd),
               WORKDIR_ENV: str(workdir)}
        if template is not None and not environ.get(ARGV_PREFIX_ENV):
            process = _forked(template, argv[len(mur_command(environ)):], env=env,
                              channel=channel.child_fd, lifeline=lifeline.child_fd,
                              own_group=own_group, stderr=stderr, name=member.name)
        else:
            process = ManagedProcess.start(
                argv,
                # The launcher's current directory, as docs/launcher.md says; the work
                # folder goes by MURMUR_WORKDIR.
                cwd=os.getcwd(), env=env,
                pass_fds=(channel.child_fd, lifeline.child_fd),
                new_process_group=own_group,
                stdin=DEVNULL, stdout=PIPE, stderr=stderr,
                name=member.name, close_passed_fds=False,
            )
    except BaseException:
        writer.close()
        lifeline.close()
        raise
    finally:
        channel.close_child_end()
        lifeline.close_child_end()
    return LaunchedMember(spec=member, workdir=workdir, process=process, lifeline=lifeline,
                          channel=writer, started_at=started_at)


def _forked(template: MemberTemplate, args: Sequence[str], *, env: Mapping[str, str],
            channel: int, lifeline: int, own_group: bool, stderr: int | None,
            name: str) -> ManagedProcess:
    """A member forked by the member template, with the descriptors ``ManagedProcess.start``
    would give it: stdin from /dev/null, stdout a pipe, stderr a pipe or the launcher's."""
    stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    out_read, out_write = os.pipe2(os.O_CLOEXEC)
    err_read, err_write = os.pipe2(os.O_CLOEXEC) if stderr == PIPE else (-1, os.dup(2))
    try:
        forked = template.spawn(
            args, cwd=os.getcwd(), env=env, own_group=own_group, stdin=stdin,
            stdout=out_write, stderr=err_write, channel=channel, lifeline=lifeline,
            channel_env=CHANNEL_ENV, lifeline_env=LIFELINE_ENV)
    except BaseException:
        for fd in (out_read, err_read):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (stdin, out_write, err_write):
            os.close(fd)
    forked.stdout = open(out_read, "rb")  # noqa: SIM115 - ManagedProcess closes it
    forked.stderr = open(err_read, "rb") if err_read >= 0 else None  # noqa: SIM115
    return ManagedProcess(popen=forked, name=name, own_group=own_group)


def close_quietly(member: LaunchedMember) -> None:
    """Close the launcher's pipes of a member that is gone."""
    member.close_channel()
    with contextlib.suppress(OSError):
        member.lifeline.close_parent_end()
    member.process.close_pipes()
