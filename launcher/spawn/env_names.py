"""Every ``MURMUR_*`` environment variable the ``mur`` commands, the launcher and the
member runtime read or set, defined once: the launcher and the member both import this
module and never each other's for a name.

In this order: the home, what the launcher hands a member (its formation id, the two
descriptors, how to print diagnostics, its work folder), what a member hands its agent,
what the launcher tells a member it already reported, and the hooks only tests set.
``MURMUR_FORMATION_PEERS`` and ``MURMUR_PROXY`` are wire names (``gateway.protocol``) and
are re-exported here.
"""

from __future__ import annotations

from typing import Final

from gateway.protocol import PEERS_ENV as PEERS_ENV
from gateway.protocol import PROXY_ENV as PROXY_ENV

#: The root of every store and record (default ``~/.murmur``).
HOME_ENV: Final = "MURMUR_HOME"

#: The formation a member belongs to (set by the launcher; inherited by delegated children).
FORMATION_ENV: Final = "MURMUR_FORMATION_ID"
#: The descriptor number of a member's formation channel (its credentials, then doors).
CHANNEL_ENV: Final = "MURMUR_FORMATION_CHANNEL"
#: The descriptor number of a member's lifeline (closed by the launcher to end it).
LIFELINE_ENV: Final = "MURMUR_FORMATION_LIFELINE"
#: The descriptor number of a delegated child's spawner lifeline (closed, however the
#: member that delegated to it ends, to end the child).
SPAWNER_LIFELINE_ENV: Final = "MURMUR_SPAWNER_LIFELINE"
#: A delegated child's lineage, set by the runtime that started it beside its spawner
#: lifeline (read only with one): the delegating session, its member or capsule name, how
#: deep the child is (1: a child of a session that was not delegated) and the deepest a
#: delegation below it may go (the smallest ``spawn.max_depth`` above it).
PARENT_SESSION_ENV: Final = "MURMUR_PARENT_SESSION"
DELEGATED_BY_ENV: Final = "MURMUR_DELEGATED_BY"
DELEGATION_DEPTH_ENV: Final = "MURMUR_DELEGATION_DEPTH"
DELEGATION_MAX_DEPTH_ENV: Final = "MURMUR_DELEGATION_MAX_DEPTH"
#: ``text`` or ``json``: how a member prints its diagnostics (the launcher's own format).
DIAGNOSTICS_ENV: Final = "MURMUR_DIAGNOSTICS"
#: A member's work folder: the project directory (entry member) or its own directory
#: under ``formations/`` (peers); its current directory stays the launcher's.
WORKDIR_ENV: Final = "MURMUR_WORKDIR"

#: The task id a ``command`` agent is running.
TASK_ID_ENV: Final = "MURMUR_TASK_ID"

#: ``auto``, ``required`` or ``off``: whether agent code runs confined (``--isolation``
#: wins; the launcher sets it for every member, so members inherit its choice).
ISOLATION_ENV: Final = "MURMUR_ISOLATION"

#: ``1`` when the launcher already printed the host warnings, so members do not repeat them.
HOST_WARNINGS_REPORTED_ENV: Final = "MURMUR_HOST_WARNINGS_REPORTED"

#: Tests only (docs/member-runtime.md, docs/launcher.md): a shorter lifeline grace in
#: seconds, a shorter readiness budget, and a command put in front of ``run ...`` in a
#: member's argv. None is ever passed on to a member's agent.
LIFELINE_GRACE_ENV: Final = "MURMUR_TEST_LIFELINE_GRACE"
READY_SECONDS_ENV: Final = "MURMUR_TEST_READY_SECONDS"
ARGV_PREFIX_ENV: Final = "MURMUR_TEST_MEMBER_ARGV_PREFIX"
#: Tests only: act as if the kernel's Landlock ABI were at most this (0: no Landlock),
#: so the warnings and refusals of an older kernel can be seen on a newer one.
LANDLOCK_ABI_ENV: Final = "MURMUR_TEST_LANDLOCK_ABI"
#: Tests only: ``0`` acts as if the host could not install the seccomp socket filter.
SECCOMP_ENV: Final = "MURMUR_TEST_SECCOMP"
