"""``--isolation auto|required|off`` (and ``MURMUR_ISOLATION``): whether agent code runs
confined, and what is said about it (docs/isolation.md).

In this order: the mode (the flag, else the variable, else ``auto``; anything else is a
usage error naming both), what full confinement needs of the host (Landlock with TCP
rules and scoping, ABI 6, and the seccomp socket filter), then the one diagnostic of a
launch: ``E-RUN-055`` when
``required`` cannot be had, ``W-SEC-014`` when ``auto`` runs with less than full
confinement (once: the launcher prints it and its members do not), nothing for ``off``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from launcher.diagnostics import Diagnostic, DiagnosticError, diagnostic
from launcher.sandbox.landlock import HostSupport, host_support
from launcher.sandbox.seccomp import SeccompSupport, seccomp_support
from launcher.spawn.env_names import HOST_WARNINGS_REPORTED_ENV, ISOLATION_ENV

AUTO: Final = "auto"
REQUIRED: Final = "required"
OFF: Final = "off"
MODES: Final = (AUTO, REQUIRED, OFF)


def isolation_mode(flag: str | None, environ: Mapping[str, str]) -> str:
    """The mode in force; ``ValueError`` (a usage error) for a value not in MODES."""
    if flag is not None:
        value, source = flag, "--isolation"
    else:
        value, source = environ.get(ISOLATION_ENV, "") or AUTO, ISOLATION_ENV
    if value not in MODES:
        raise ValueError(f"{source} must be one of auto, required, off (not {value!r})")
    return value


def missing(support: HostSupport, seccomp: SeccompSupport) -> tuple[str, ...]:
    """What this host lacks for full confinement, in words (empty: nothing)."""
    gaps = support.missing()
    if not seccomp.available:
        gaps += (f"the seccomp socket filter ({seccomp.reason})",)
    return gaps


def offered(support: HostSupport, seccomp: SeccompSupport) -> str:
    """What this host offers, in words: Landlock's part, then the filter's."""
    return f"{support.describe()}; {seccomp.describe()}"


def isolation_diagnostics(mode: str, environ: Mapping[str, str],
                          support: HostSupport | None = None,
                          seccomp: SeccompSupport | None = None) -> list[Diagnostic]:
    """The warning of this launch, if any; raises ``DiagnosticError`` (``E-RUN-055``)
    for ``required`` on a host that cannot confine fully."""
    if mode == OFF:
        return []
    support = support if support is not None else host_support()
    seccomp = seccomp if seccomp is not None else seccomp_support()
    gaps = missing(support, seccomp)
    if not gaps:
        return []
    if mode == REQUIRED:
        raise DiagnosticError("E-RUN-055", "--isolation", missing="; ".join(gaps),
                              offered=offered(support, seccomp))
    if environ.get(HOST_WARNINGS_REPORTED_ENV) == "1":
        return []
    return [diagnostic("W-SEC-014", missing="; ".join(gaps),
                       offered=offered(support, seccomp))]


def host_report(environ: Mapping[str, str], support: HostSupport | None = None,
                seccomp: SeccompSupport | None = None) -> dict[str, object]:
    """What ``mur doctor`` says of this host's isolation (its ``--json`` shape)."""
    support = support if support is not None else host_support()
    seccomp = seccomp if seccomp is not None else seccomp_support()
    try:
        mode = isolation_mode(None, environ)
    except ValueError:
        mode = environ.get(ISOLATION_ENV, "")
    return {"mode": mode, "landlock_abi": support.abi, "files": support.files,
            "tcp": support.tcp, "scoped": support.scopes, "seccomp": seccomp.available,
            "missing": list(missing(support, seccomp)),
            "offered": offered(support, seccomp)}


def report_line(report: Mapping[str, object]) -> str:
    """The line ``mur doctor`` prints for :func:`host_report`."""
    gaps = report["missing"]
    verdict = ("agent code runs fully confined" if not gaps else
               "agent code runs partly confined (missing: "
               + "; ".join(str(gap) for gap in gaps or ()) + ")")  # type: ignore[attr-defined]
    if report["mode"] == OFF:
        verdict = "MURMUR_ISOLATION=off: agent code runs unconfined"
    return f"isolation: {report['offered']}; {verdict}"
