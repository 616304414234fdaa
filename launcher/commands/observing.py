"""``mur graph`` and ``mur audit``: parsing only; the drawing is ``launcher.commands.graph``, the
checking ``launcher.commands.audit``."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    graph = subparsers.add_parser(
        "graph", help="draw the roster, or a formation that ran, as SVG, DOT or Mermaid",
        description="Draw the project's admitted roster (members, the entry member, the "
                    "edges), or, given a formation id, the formation as it ran (its "
                    "members and edges from their traces, with the tasks each member "
                    "received and the calls along each edge).")
    graph.add_argument("formation", nargs="?", metavar="FORMATION_ID",
                       help="a formation that ran (frm_...); none: the roster of --project")
    graph.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                       help="the roster's project directory (default: the current one)")
    graph.add_argument("--format", choices=("svg", "dot", "mermaid"), default="svg",
                       help="svg (default; drawn by mur), dot (Graphviz) or mermaid")
    graph.add_argument("-o", "--output", type=Path, metavar="FILE",
                       help="write it to FILE instead of standard output")
    graph.set_defaults(handler=_graph)
    _register_audit(subparsers)


def _register_audit(subparsers: Any) -> None:
    audit = subparsers.add_parser(
        "audit", help="check that every call of a formation crossed an admitted roster edge",
        description="Check every formation-token call in a formation's traces (each task "
                    "a member's door received from another member, each call a member "
                    "recorded making) against the roster edges admitted at launch, which "
                    "the launcher recorded in the formation's formation.json. Prints each "
                    "call along no admitted edge, with the trace file and line that holds "
                    "it. Then checks the sealed record: every trace's hash chain, every "
                    "seal against the key in formation.json, and, once the launcher has "
                    "ended, that the record ends with its final seal. Exit 0: every call "
                    "along an admitted edge and the record whole; 1: violations (a call "
                    "along no edge; a record, seal or key changed or removed; no final "
                    "seal; a head other than --expect's); 2: the formation cannot be "
                    "audited.")
    audit.add_argument("formation", metavar="FORMATION_ID",
                       help="the formation (frm_...); `mur ps` and `mur trace show` name them")
    audit.add_argument("--expect", metavar="HEAD",
                       help="the head the launcher printed as it ended (`[mur run] sealed: "
                            "head HEAD`; 12 to 64 hex digits): exit 1 unless the final "
                            "seal's head starts with it")
    audit.add_argument("--json", action="store_true",
                       help="print one JSON object: formation_id, ok, edges, traces_read, "
                            "calls, calls_checked, violations, limits_reached, approvals, "
                            "refused, sealed, seals_read, unsealed, head, expected_head, "
                            "launcher_running")
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    import json

    from launcher.commands.audit import AuditRefused, audit, normal_head, render_report
    from launcher.commands.common import failer
    from launcher.ids import is_formation_id

    fail = partial(failer("audit", args), code=2)
    if not is_formation_id(args.formation):
        return fail(f"{args.formation!r} is not a formation id (frm_ followed by 32 "
                    "lowercase hex digits)")
    expect = None if args.expect is None else normal_head(args.expect)
    if args.expect is not None and expect is None:
        return fail(f"--expect {args.expect!r} is not a head: 12 to 64 hex digits, as "
                    "`[mur run] sealed: head …` printed it")
    try:
        report = audit(args.formation, expect)
    except AuditRefused as refused:
        return fail(str(refused))
    except OSError as exc:
        return fail(f"the traces of {args.formation} cannot be read ({exc.strerror or exc})")
    sys.stdout.write(json.dumps(report.to_json()) + "\n" if args.json
                     else render_report(report))
    return 1 if report.violations else 0


def _graph(args: argparse.Namespace) -> int:
    from launcher.commands.graph import formation_graph, render, roster_graph
    from launcher.diagnostics import DiagnosticError, emit
    from launcher.ids import is_formation_id

    if args.formation is not None:
        if not is_formation_id(args.formation):
            print(f"mur graph: {args.formation!r} is not a formation id (frm_ followed by "
                  "32 lowercase hex digits); `mur ps` and `mur trace show` name them",
                  file=sys.stderr)
            return 2
        graph = formation_graph(args.formation)
        if graph is None:
            print(f"mur graph: no trace of formation {args.formation} in this MURMUR_HOME",
                  file=sys.stderr)
            return 1
    else:
        from launcher.admission.roster import admit

        try:
            graph = roster_graph(admit(args.project))
        except DiagnosticError as refusal:
            emit(refusal.diagnostic, sys.stderr)
            return 1
    text = render(graph, args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0
