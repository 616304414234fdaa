"""``mur graph``: a picture of a roster, or of a formation that ran (docs/graph.md).

In order: the graph itself (:class:`Graph`: members in roster order, the entry, the
edges; for a formation, tasks per member and calls per edge), read from an admitted
roster (:func:`roster_graph`) or from a formation's traces (:func:`formation_graph`:
each member's ``session_start`` names its callees, ``a2a_task_received`` counts its
tasks, ``member_call`` its calls, ``delegation`` its children, each a node
``child:<capsule-name>``); then the three renderings, DOT (Graphviz), Mermaid,
and SVG drawn here (members in layers by their distance from the entry member, each
edge an arrow, no layout engine needed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from gateway.auth.edge_limits import EdgeLimits
from launcher.admission.bounds import edge_label
from launcher.admission.roster import AdmittedRoster
from launcher.home.formations import read_formation_marker
from launcher.home.paths import records_root
from launcher.home.trace import read_trace, session_label

FORMATS = ("svg", "dot", "mermaid")


@dataclass
class Graph:
    members: list[str]
    entry: str | None
    edges: list[tuple[str, str]]
    #: For a formation that ran: tasks each member received, calls along each edge.
    tasks: Counter[str] | None = None
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Delegations along an edge from a member to its ``child:<capsule-name>``.
    delegations: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: A version 2 roster's bounds on an edge, as doctor words them (docs/bounds.md).
    limits: dict[tuple[str, str], str] = field(default_factory=dict)

    def label(self, member: str) -> str:
        text = member + (" (entry)" if member == self.entry else "")
        if self.tasks is not None:
            count = self.tasks[member]
            text += f" · {count} task{'s' if count != 1 else ''}"
        return text

    def edge_label(self, edge: tuple[str, str]) -> str:
        limits = self.limits.get(edge, "")
        if self.tasks is None:
            return limits
        if edge in self.delegations:
            count = self.delegations[edge]
            return f"{count} delegation{'s' if count != 1 else ''}"
        count = self.calls[edge]
        calls = f"{count} call{'s' if count != 1 else ''}"
        return f"{calls} · {limits}" if limits else calls


def roster_graph(admitted: AdmittedRoster) -> Graph:
    return Graph(members=[member.name for member in admitted.members],
                 entry=admitted.entry.name, edges=admitted.ordered_edges(),
                 limits={edge: edge_label(limits)
                         for edge, limits in admitted.bounds.edges.items()})


def _marker_limits(formation_id: str) -> dict[tuple[str, str], str]:
    """The edges' bounds that formation.json recorded at launch (version 2 only)."""
    marker = read_formation_marker(formation_id)
    edges = (marker.bounds or {}).get("edges") if marker is not None else None
    labels: dict[tuple[str, str], str] = {}
    for edge in edges if isinstance(edges, list) else ():
        if not isinstance(edge, dict):
            continue
        try:
            limits = EdgeLimits.from_wire({key: value for key, value in edge.items()
                                           if key not in ("from", "to")})
        except ValueError:
            continue
        labels[(str(edge.get("from")), str(edge.get("to")))] = edge_label(limits)
    return labels


def formation_graph(formation_id: str) -> Graph | None:
    """The formation's picture from its members' traces; None when none is found."""
    starts: dict[str, dict[str, object]] = {}
    tasks: Counter[str] = Counter()
    calls: Counter[tuple[str, str]] = Counter()
    delegations: Counter[tuple[str, str]] = Counter()
    root = records_root()
    for path in sorted(root.rglob("trace.jsonl")) if root.is_dir() else ():
        try:
            records = read_trace(path)
        except OSError:
            continue
        if not records or records[0].get("formation_id") != formation_id:
            continue
        first = records[0]
        member = session_label(first)
        if member is None:
            continue
        starts[member] = first
        for record in records:
            if record.get("event") == "a2a_task_received":
                tasks[member] += 1
            elif record.get("event") == "member_call" and isinstance(record.get("callee"), str):
                calls[(member, str(record["callee"]))] += 1
            elif record.get("event") == "delegation":
                capsule = str(record.get("capsule") or "-")
                delegations[(member, f"child:{capsule.rsplit('/', 1)[-1]}")] += 1
    if not starts:
        return None
    members = sorted(starts)
    edges = sorted({(member, str(callee)) for member, first in starts.items()
                    for callee in _callees(first)} | set(delegations))
    members += sorted({child for _, child in delegations} - set(members))
    # Peers work in formations/<id>/<name> under MURMUR_HOME; the entry member in the
    # project directory.
    entry = next((member for member, first in starts.items()
                  if f"formations/{formation_id}/" not in f"{first.get('workdir', '')}/"
                  and not first.get("parent_session")), None)
    return Graph(members=members, entry=entry, edges=edges, tasks=tasks, calls=calls,
                 delegations=delegations, limits=_marker_limits(formation_id))


def _callees(first: dict[str, object]) -> Iterable[object]:
    value = first.get("formation_callees")
    return value if isinstance(value, list) else ()


# --------------------------------------------------------------------------- renderings


def to_dot(graph: Graph) -> str:
    lines = ["digraph roster {", "  rankdir=TB;", '  node [shape=box, fontname="sans-serif"];']
    for member in graph.members:
        style = ", style=bold" if member == graph.entry else ""
        lines.append(f'  "{member}" [label="{_dot(graph.label(member))}"{style}];')
    for edge in graph.edges:
        label = graph.edge_label(edge)
        extra = f' [label="{_dot(label)}"]' if label else ""
        lines.append(f'  "{edge[0]}" -> "{edge[1]}"{extra};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def to_mermaid(graph: Graph) -> str:
    ids = {member: f"m{index}" for index, member in enumerate(graph.members)}
    lines = ["flowchart TD"]
    for member in graph.members:
        text = graph.label(member).replace('"', "'")
        lines.append(f'  {ids[member]}["{text}"]')
    for edge in graph.edges:
        label = graph.edge_label(edge)
        arrow = f" -->|{label}| " if label else " --> "
        lines.append(f"  {ids[edge[0]]}{arrow}{ids[edge[1]]}")
    if graph.entry is not None:
        lines.append(f"  style {ids[graph.entry]} stroke-width:3px")
    return "\n".join(lines) + "\n"


# SVG: boxes in layers, arrows between them.
_CHAR = 7.5
_BOX_H = 34
_LAYER_GAP = 90
_GAP = 30
_MARGIN = 20


def _layers(graph: Graph) -> list[list[str]]:
    """Members by their distance from the entry member along edges; the rest last."""
    depth: dict[str, int] = {}
    if graph.entry is not None:
        depth[graph.entry] = 0
        frontier = [graph.entry]
        while frontier:
            following = []
            for caller in frontier:
                for source, callee in graph.edges:
                    if source == caller and callee not in depth:
                        depth[callee] = depth[caller] + 1
                        following.append(callee)
            frontier = following
    last = max(depth.values(), default=-1) + 1
    layers: dict[int, list[str]] = {}
    for member in graph.members:
        layers.setdefault(depth.get(member, last), []).append(member)
    return [layers[index] for index in sorted(layers)]


def to_svg(graph: Graph) -> str:
    layers = _layers(graph)
    widths = {member: max(90.0, len(graph.label(member)) * _CHAR + 24)
              for member in graph.members}
    row_widths = [sum(widths[m] for m in row) + _GAP * (len(row) - 1) for row in layers]
    width = max(row_widths, default=100) + 2 * _MARGIN
    height = len(layers) * _BOX_H + (len(layers) - 1) * _LAYER_GAP + 2 * _MARGIN
    place: dict[str, tuple[float, float]] = {}
    for index, row in enumerate(layers):
        x = _MARGIN + (width - 2 * _MARGIN - row_widths[index]) / 2
        y = float(_MARGIN + index * (_BOX_H + _LAYER_GAP))
        for member in row:
            place[member] = (x, y)
            x += widths[member] + _GAP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
             'font-family="sans-serif" font-size="13">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
             'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
             '<path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>',
             f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>']
    for edge in graph.edges:
        (x1, y1), (x2, y2) = place[edge[0]], place[edge[1]]
        start = (x1 + widths[edge[0]] / 2, y1 + _BOX_H)
        end = (x2 + widths[edge[1]] / 2, y2)
        if y2 <= y1:  # a call back up (or across): leave from the box's top
            start = (start[0], y1)
            end = (end[0], y2 + _BOX_H)
        parts.append(f'<line class="edge" data-from="{escape(edge[0])}" '
                     f'data-to="{escape(edge[1])}" x1="{start[0]:.1f}" y1="{start[1]:.1f}" '
                     f'x2="{end[0]:.1f}" y2="{end[1]:.1f}" stroke="#444" '
                     'stroke-width="1.5" marker-end="url(#arrow)"/>')
        label = graph.edge_label(edge)
        if label:
            parts.append(f'<text class="edge-label" x="{(start[0] + end[0]) / 2 + 6:.1f}" '
                         f'y="{(start[1] + end[1]) / 2:.1f}" fill="#444">{escape(label)}</text>')
    for member in graph.members:
        left, top = place[member]
        entry = member == graph.entry
        parts.append(f'<g class="member" data-name="{escape(member)}">'
                     f'<rect x="{left:.1f}" y="{top:.1f}" width="{widths[member]:.1f}" '
                     f'height="{_BOX_H}" rx="6" fill="{"#e8f0fe" if entry else "#f6f6f6"}" '
                     f'stroke="#333" stroke-width="{2.5 if entry else 1.2}"/>'
                     f'<text x="{left + widths[member] / 2:.1f}" y="{top + _BOX_H / 2 + 4.5:.1f}" '
                     f'text-anchor="middle">{escape(graph.label(member))}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def render(graph: Graph, form: str) -> str:
    return {"svg": to_svg, "dot": to_dot, "mermaid": to_mermaid}[form](graph)
