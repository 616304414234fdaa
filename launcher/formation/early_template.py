"""The member template, begun before the launcher imports what a launch needs.

A member template (``template.py``) takes about 0.6 s to import a member runtime's
modules, and ``mur run --roster`` takes about 0.3 s to import the launcher's and admit
the roster. They took turns; now ``mur run`` begins the template first, from its
command line alone, and the two overlap (docs/launcher.md, "The member template").

In order: :func:`launch_environment`, the environment a launch gives its members (the
launcher's own, with its isolation choice and diagnostics format); :func:`template_env`,
the template's share of it; :class:`EarlyTemplate`, the template begun with it, taken by
the launch when the launch's own environment turns out the same, and closed when nobody
took it (a refused launch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from launcher.formation.template import MemberTemplate, TemplateFailed
from launcher.sandbox.isolation import isolation_mode
from launcher.spawn.env_names import (
    ARGV_PREFIX_ENV,
    CHANNEL_ENV,
    DIAGNOSTICS_ENV,
    FORMATION_ENV,
    ISOLATION_ENV,
    LIFELINE_ENV,
    PEERS_ENV,
    READY_SECONDS_ENV,
)

#: Variables of the launcher's own environment a member never inherits: the formation's
#: are set afresh for each member, the test hooks stay with the launcher.
NOT_INHERITED: Final = (FORMATION_ENV, CHANNEL_ENV, LIFELINE_ENV, PEERS_ENV, ARGV_PREFIX_ENV,
                        READY_SECONDS_ENV)


def launch_environment(base: Mapping[str, str], *, isolation: str,
                       json_mode: bool) -> dict[str, str]:
    """What a launch gives its members: ``base`` with the launcher's isolation choice
    (members take it, and do not repeat its warning) and its diagnostics format (members
    print their readiness line as JSON for the launcher to read; their diagnostics follow
    the launch's own ``--json``, docs/diagnostics.md)."""
    return {**base, ISOLATION_ENV: isolation, DIAGNOSTICS_ENV: "json" if json_mode else "text"}


def template_env(base: Mapping[str, str]) -> dict[str, str]:
    """The member template's own environment: what every member inherits, without the
    formation's variables (each member's come with its spawn)."""
    return {name: value for name, value in base.items() if name not in NOT_INHERITED}


class EarlyTemplate:
    """A member template begun before the launch (see the module text); a context
    manager that closes it unless a launch took it."""

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self._environ = None if environ is None else template_env(environ)
        self._template: MemberTemplate | TemplateFailed | None = None
        if environ is None or environ.get(ARGV_PREFIX_ENV):
            return                          # a test's command before each member: exec'd
        try:
            self._template = MemberTemplate.begin(self._environ or {})
        except TemplateFailed as exc:
            self._template = exc            # said where the launch waits for it

    @classmethod
    def for_launch(cls, isolation_flag: str | None, json_mode: bool) -> EarlyTemplate:
        """Begun from ``mur run``'s own flags and environment; none when the isolation
        flag does not read (the launch refuses it)."""
        try:
            isolation = isolation_mode(isolation_flag, os.environ)
        except ValueError:
            return cls(None)
        return cls(launch_environment(os.environ, isolation=isolation, json_mode=json_mode))

    def __enter__(self) -> EarlyTemplate:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if isinstance(self._template, MemberTemplate):
            self._template.abandon()
        self._template = None

    def take(self, environ: Mapping[str, str]) -> MemberTemplate | TemplateFailed | None:
        """The template, for a launch whose members get ``environ``: ``None`` when none
        was begun, or when it was begun with another environment (closed then: the
        launch starts its own)."""
        taken, self._template = self._template, None
        if isinstance(taken, MemberTemplate) and template_env(environ) != self._environ:
            taken.abandon()
            return None
        return taken
