"""Where a ``mur run --capsule`` stands in a formation, read from its own environment.

The cases of docs/member-runtime.md ("Before anything is staged", "A member started by
hand", "A resumed session") and docs/runtime-files.md ("The formation channel"):

* ``MURMUR_FORMATION_PEERS`` in ``mur run``'s own environment: refused, ``E-RUN-046``;
* ``MURMUR_FORMATION_CHANNEL``: the first line is read before anything is staged, and
  every refused case is ``E-RUN-046`` (:func:`launcher.spawn.channel.read_credentials`);
* ``MURMUR_FORMATION_LIFELINE``: adopted (made non-inheritable); one that is not an open
  pipe is ``E-RUN-046`` too;
* ``MURMUR_SPAWNER_LIFELINE``: a delegated child (docs/delegation.md): its spawner
  lifeline is adopted as its lifeline (``E-RUN-046`` when it is not an open pipe, or
  beside a formation channel or lifeline, which a child never holds); it keeps an
  inherited ``MURMUR_FORMATION_ID`` and nothing else of the formation, its door is in no
  formation, and it prints no ``W-RUN-007``;
* ``MURMUR_FORMATION_ID`` with no lifeline: a member started by hand, ``W-RUN-007`` once;
* ``--resume``: no formation part at all, whatever the environment carries (the
  ``MURMUR_FORMATION_PEERS`` refusal still holds).

Afterwards the channel and lifeline variables (the spawner's too) are removed from this process's
environment: their descriptors are not inherited, so a process the agent starts must not
be told about them. ``MURMUR_FORMATION_ID`` stays, as a delegated child inherits it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from launcher.diagnostics import Diagnostic, diagnostic
from launcher.ids import is_formation_id
from launcher.member.delegation.lineage import Lineage, forget_lineage, read_lineage
from launcher.spawn.channel import ChannelCredentials, ChannelRefused, read_credentials
from launcher.spawn.env_names import (
    CHANNEL_ENV,
    FORMATION_ENV,
    LIFELINE_ENV,
    PEERS_ENV,
    SPAWNER_LIFELINE_ENV,
)
from launcher.spawn.process import lifeline_from_env


@dataclass(frozen=True)
class FormationPlace:
    """This member's formation parts. All empty for a session in no formation."""

    formation_id: str | None = None
    member: str | None = None
    credentials: ChannelCredentials | None = None
    lifeline: int | None = None
    entry: bool = False
    warnings: tuple[Diagnostic, ...] = field(default=())
    #: A delegated child: ``lifeline`` is its spawner lifeline, and ``formation_id`` the
    #: one it inherited (its door belongs to no formation).
    delegated: bool = False
    #: A delegated child's parent session, delegating member and depth (None: not a child).
    lineage: Lineage | None = None

    @property
    def callees(self) -> tuple[str, ...]:
        """The members this one may call, in roster order (empty: nobody)."""
        return self.credentials.callees if self.credentials is not None else ()

    @property
    def tokens(self) -> Mapping[str, str]:
        return self.credentials.tokens if self.credentials is not None else {}

    @property
    def key(self) -> bytes | None:
        return self.credentials.key if self.credentials is not None else None

    @property
    def verifies_tokens(self) -> bool:
        """Whether its door verifies formation tokens: only a member handed a channel."""
        return self.credentials is not None

    def __repr__(self) -> str:
        return (f"FormationPlace(formation_id={self.formation_id!r}, member={self.member!r}, "
                f"callees={list(self.callees)!r}, lifeline={self.lifeline}, "
                f"entry={self.entry})")


def _refuse_peers(environ: Mapping[str, str]) -> None:
    if PEERS_ENV in environ:
        raise ChannelRefused("peers_in_environment", f"{PEERS_ENV} is set in mur run's own "
                             "environment; the runtime sets it for components only",
                             path=PEERS_ENV)


def _lifeline(environ: Mapping[str, str], name: str = LIFELINE_ENV) -> int | None:
    try:
        return lifeline_from_env(environ, name)
    except ValueError as exc:
        raise ChannelRefused("not_open", str(exc), path=name) from None


def _delegated_child(environ: Mapping[str, str]) -> FormationPlace | None:
    """A delegated child's place: its spawner lifeline, the formation id it inherited
    (kept for its records, never for its door), nothing else; None when not a child."""
    spawner = _lifeline(environ, SPAWNER_LIFELINE_ENV)
    if spawner is None:
        return None
    for held in (CHANNEL_ENV, LIFELINE_ENV):
        if held in environ:
            os.close(spawner)
            raise ChannelRefused("spawner_beside_formation",
                                 f"{SPAWNER_LIFELINE_ENV} is set beside {held}: a "
                                 "delegated child holds no formation channel or lifeline",
                                 path=held)
    formation_id = environ.get(FORMATION_ENV) or None
    return FormationPlace(formation_id=formation_id if is_formation_id(formation_id) else None,
                          lifeline=spawner, delegated=True, lineage=read_lineage(environ))


def read_place(environ: Mapping[str, str], *, session_id: str, resume: bool = False,
               channel_timeout: float = 10.0) -> FormationPlace:
    """This member's formation parts; raises :class:`ChannelRefused` (``E-RUN-046``).

    ``session_id`` names the session in ``W-RUN-007``'s hint.
    """
    _refuse_peers(environ)
    if resume:
        return FormationPlace()
    child = _delegated_child(environ)
    if child is not None:
        return child
    credentials = read_credentials(environ, timeout=channel_timeout)
    formation_id = environ.get(FORMATION_ENV) or None
    if credentials is None and formation_id is None:
        return FormationPlace()
    lifeline = _lifeline(environ)
    warnings: tuple[Diagnostic, ...] = ()
    if lifeline is None:
        # Started by hand: nothing winds it down when its formation ends.
        shown = formation_id if formation_id is not None else ""
        warnings = (diagnostic("W-RUN-007", FORMATION_ENV, formation=shown[:40],
                               session=session_id),)
    if credentials is not None:
        return FormationPlace(formation_id=credentials.formation_id,
                              member=credentials.member, credentials=credentials,
                              lifeline=lifeline, entry=credentials.entry, warnings=warnings)
    return FormationPlace(formation_id=formation_id if is_formation_id(formation_id) else None,
                          lifeline=lifeline, warnings=warnings)


def forget_descriptors(environ: MutableMapping[str, str]) -> None:
    """Remove the channel and lifeline variables (and a child's lineage), once read, from
    ``environ``."""
    for name in (CHANNEL_ENV, LIFELINE_ENV, SPAWNER_LIFELINE_ENV):
        with contextlib.suppress(KeyError):
            del environ[name]
    forget_lineage(environ)


def close_place(place: FormationPlace) -> None:
    """Close the lifeline (the channel belongs to the door directory once it runs)."""
    if place.lifeline is not None:
        with contextlib.suppress(OSError):
            os.close(place.lifeline)
