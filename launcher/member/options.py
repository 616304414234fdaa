"""``mur run --capsule``'s flags, checked: the usage errors (exit 2) of the member runtime.

The parser (``launcher/commands/running.py``) only collects strings; this module turns
them into a :class:`MemberOptions` or refuses with :class:`UsageError`, whose text names
the flag and what it accepts. Nothing here touches a store, a record or a descriptor.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from launcher import durations
from launcher.ids import is_session_id
from launcher.sandbox.isolation import isolation_mode
from launcher.spawn.env_names import DIAGNOSTICS_ENV, WORKDIR_ENV
from launcher.spawn.listen_flags import Listener, listener_from
from launcher.spawn.run_flags import UsageError, read_task

if TYPE_CHECKING:
    from launcher.member.card_key import CardKey

_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Set by the launcher for its members: ``text`` or ``json`` (see diagnostics_as_json).
#: Set by the launcher: the member's work folder. A member's current directory is the
#: launcher's (so a relative --task path names the same file), while its work folder is
#: the project directory (entry member) or its own directory under formations/ (peers).


def work_folder(environ: Mapping[str, str]) -> Path:
    """The member's work folder: the launcher's ``MURMUR_WORKDIR``, else the current
    directory (raises OSError when that is gone)."""
    given = environ.get(WORKDIR_ENV)
    return Path(given).resolve() if given else Path(os.getcwd())


@dataclass(frozen=True)
class MemberOptions:
    """Everything the member runtime reads from its command line."""

    capsule: str
    version: str
    sha256: str | None
    project: Path
    task: str | None
    deadline: datetime | None
    task_acceptance: Literal["single", "queue"] | None
    after_task: Literal["exit", "sleep"] | None
    resume: str | None
    json: bool
    #: ``auto``, ``required`` or ``off`` (``--isolation``, else ``MURMUR_ISOLATION``).
    isolation: str = "auto"
    #: ``--listen`` (with ``--tls-*`` and ``--public-host``): the door beyond loopback.
    listener: Listener | None = None
    #: ``--card-signing-key``: the key a standalone door signs its card with.
    card_key: CardKey | None = None
    #: ``--discard-tasks`` (with ``--resume``): start without the earlier tasks, their
    #: ``tasks.db`` kept aside.
    discard_tasks: bool = False
    #: Set by the launcher when it starts a failed peer again: the session it follows
    #: (whose tasks it loads) and how many restarts this one makes (docs/restarts.md).
    restarted_from: str | None = None
    restart_count: int = 0

    @property
    def diagnostics_json(self) -> bool:
        """Whether diagnostics print as JSON: see :func:`diagnostics_as_json`."""
        return diagnostics_as_json(self.json, os.environ)


def diagnostics_as_json(json_flag: bool, environ: Mapping[str, str]) -> bool:
    """``--json`` prints the readiness line and diagnostics as JSON; a launcher that
    runs without ``--json`` sets ``MURMUR_DIAGNOSTICS=text`` so that its members (started
    with ``--json`` for their readiness line) print diagnostics as text on its stderr."""
    return json_flag and environ.get(DIAGNOSTICS_ENV) != "text"


def parse_deadline(value: str, *, now: datetime | None = None) -> datetime:
    """The moment ``--deadline`` names, in UTC (:func:`launcher.durations.parse_deadline`,
    counted from ``now``, the member's start); a :class:`UsageError` for anything else."""
    try:
        return durations.parse_deadline(value, now or datetime.now(UTC))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def options_from(args: argparse.Namespace, *, now: datetime | None = None) -> MemberOptions:
    """Check the parsed flags of ``mur run --capsule``; :class:`UsageError` otherwise."""
    capsule: str = args.capsule
    version: str | None = getattr(args, "capsule_version", None)
    if not version:
        raise UsageError(f"--capsule {capsule} needs --capsule-version V, the exact installed "
                         "version to run")
    sha256: str | None = getattr(args, "capsule_sha256", None)
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA256.fullmatch(sha256):
            raise UsageError("--capsule-sha256 must be 64 hex digits, the sha256 of the "
                             "installed .mur.zip")
    project = Path(getattr(args, "project", None) or ".")
    if not project.is_dir():
        raise UsageError(f"--project {project} is not a directory")
    task_value: str | None = getattr(args, "task", None)
    deadline_value: str | None = getattr(args, "deadline", None)
    if getattr(args, "rebuild", False):
        raise UsageError("--rebuild is taken with --roster only: it rebuilds a formation's "
                         "members from their sources in the project; for one capsule, "
                         "`mur pack` and `mur install --force` it")
    resume: str | None = getattr(args, "resume", None)
    discard_tasks = bool(getattr(args, "discard_tasks", False))
    if discard_tasks and resume is None:
        raise UsageError("--discard-tasks is taken with --resume only: a new session has no "
                         "earlier tasks to discard")
    restarted_from: str | None = getattr(args, "restarted_from", None)
    if restarted_from is not None and (not is_session_id(restarted_from) or resume):
        raise UsageError("--restarted-from is the launcher's own: it names the session a "
                         "restarted member follows, never with --resume")
    if resume is not None and not is_session_id(resume):
        raise UsageError(f"--resume `{resume[:40]}` is not a session id (ses_ followed by "
                         "32 lowercase hex digits); `mur ps` and `mur trace show` name them")
    try:
        isolation = isolation_mode(getattr(args, "isolation", None), os.environ)
    except ValueError as problem:
        raise UsageError(str(problem)) from None
    if getattr(args, "publish", None):
        raise UsageError("--publish is taken with --roster (the entry member's door); for "
                         "one capsule, --listen HOST:PORT")
    key_file: Path | None = getattr(args, "card_signing_key", None)
    card_key = None
    if key_file is not None:
        from launcher.member.card_key import read_card_key

        card_key = read_card_key(key_file)
    return MemberOptions(
        isolation=isolation,
        listener=listener_from(args, "--listen"),
        capsule=capsule,
        version=version,
        sha256=sha256,
        project=project,
        task=read_task(task_value) if task_value is not None else None,
        deadline=parse_deadline(deadline_value, now=now) if deadline_value else None,
        task_acceptance=getattr(args, "lifecycle_task_acceptance", None),
        after_task=getattr(args, "lifecycle_after_task", None),
        resume=resume,
        discard_tasks=discard_tasks,
        restarted_from=restarted_from,
        restart_count=max(0, int(getattr(args, "restart_count", 0) or 0)),
        json=bool(getattr(args, "json", False)),
        card_key=card_key,
    )
