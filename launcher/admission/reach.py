"""Whether each member that may call others can reach a door at all: the roster grants
a credential and a name, never network access, so a caller whose
``capabilities.network.allow`` reaches no loopback door fails every call it makes
(``W-RUN-008``, given by ``mur doctor`` and at launch)."""

from __future__ import annotations

from launcher.admission.roster import AdmittedRoster
from launcher.diagnostics import Diagnostic, diagnostic

__all__ = ["reach_warnings"]


def reach_warnings(admitted: AdmittedRoster) -> list[Diagnostic]:
    """``W-RUN-008`` for every member that may call others but whose network grant
    reaches no loopback door."""
    warnings = []
    for member in admitted.members:
        callees = admitted.callees(member.name)
        if not callees:
            continue
        from gateway.proxy.egress import egress_reaches_loopback  # only for a roster with edges

        try:
            reaches = egress_reaches_loopback(member.manifest.capabilities.network.allow)
        except ValueError:
            reaches = False
        if not reaches:
            warnings.append(diagnostic(
                "W-RUN-008", member.field("capsule"), member=member.name,
                callees=", ".join(f"`{name}`" for name in callees), capsule=member.capsule))
    return warnings
