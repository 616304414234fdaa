"""``mur graph``: parsing only; the drawing is ``launcher.graph``."""

from __future__ import annotations

import argparse
import sys
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


def _graph(args: argparse.Namespace) -> int:
    from launcher.diagnostics import DiagnosticError, emit
    from launcher.graph import formation_graph, render, roster_graph
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
        from launcher.roster import admit

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
