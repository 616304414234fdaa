"""``mur audit <formation-id>``: every formation-token call in a formation's traces,
checked against the roster edges admitted at launch (docs/audit.md).

In this order:

1. the edges come from the formation's ``formation.json``, written by the launcher
   before any member started and never rewritten; a formation without them cannot be
   audited (:class:`AuditRefused`, exit 2);
2. every member's trace is read line by line (``launcher.home.trace.find_formation_traces``);
3. each formation-token call found is checked: an ``a2a_task_received`` whose caller is
   a formation member (its ``formation_member``, or a ``credential`` ``member:<name>``
   when that field is missing) is the call caller → the trace's member; a
   ``member_call`` is the call the trace's member → ``callee``. Both sides are
   checked, so a record forged on either side, or a call one side did not record,
   still shows;
4. a call along no admitted edge is a :class:`Violation`, and so is an
   ``a2a_task_received`` whose two caller fields disagree (a door writes both from the
   one verified token, so only an edited trace holds such a record); the report lists
   each one;
5. the bounds of a version 2 roster (docs/bounds.md) are reported as they held: each
   ``limit_reached`` record (a door's refusal or slowing of a call, or a member's own
   ``limits.calls``) and each decided ``approval`` (who decided, when, after how long);
   and so is each call a member's own proxy refused (``member_call_refused``: an agent
   that tried a member the roster does not let it call), which is the roster holding,
   not a violation;
6. the sealed record (when ``formation.json`` holds the formation's public key): every
   trace's hash chain (launcher/home/trace_chain.py), then every seal in
   ``seals.jsonl`` and every member's trace against them (launcher/home/seals.py). A
   break or a seal that does not hold is a :class:`Violation` (``tampered``) with its
   file and line. Once the launcher has ended (the pid and start time in
   ``formation.json`` no longer run), the record must end with the final seal: a
   missing ``seals.jsonl``, or a last seal not marked final, is a :class:`Violation`
   (``incomplete``), since the launcher writes that seal as its last act and only a
   kill or a cut removes it. Records after the last seal of a launcher still running,
   or beside the ``incomplete`` finding, are reported as unsealed;
7. a ``formation.json`` without the key, when the traces are hash-chained or
   ``seals.jsonl`` is there: the launcher that wrote them sealed, so the key was
   removed, and that is a :class:`Violation` (``tampered``) naming ``formation.json``;
   without either, the formation was launched by a ``mur`` that did not seal, and its
   edges alone are checked;
8. ``--expect HEAD``: the final seal's head (:func:`launcher.home.seals.seal_head`) must
   start with HEAD, the head the launcher printed as it ended; any other head, or none,
   is a :class:`Violation` (``unexpected_head``) saying both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.errors import LauncherError
from launcher.home.formations import formation_dir, read_formation_marker
from launcher.home.seals import SEALS_FILE, SHORT_HEAD, check_seals, seal_head
from launcher.home.trace import find_formation_traces, numbered_records
from launcher.home.trace_chain import TraceLine, trace_lines, verify_chain

__all__ = ["AuditRefused", "AuditReport", "BoundHeld", "Unsealed", "Violation", "audit",
           "normal_head", "render_report"]

Edge = tuple[str, str]

#: Why a call is a violation, as the report's line says it after "caller → callee".
NO_EDGE = "is no admitted edge"
MEMBER_PREFIX = "member:"
MARKER_FILE = "formation.json"
#: ``--expect`` takes the head as the launcher prints it (:data:`SHORT_HEAD` hex digits)
#: up to the full 64; fewer would let a record made to match pass too easily.
HEAD_DIGITS = range(SHORT_HEAD, 65)


class AuditRefused(LauncherError):
    """The formation cannot be audited: no ``formation.json``, or one without edges."""


@dataclass(frozen=True)
class Violation:
    """One call along no admitted edge, where the trace holds it."""

    trace: str
    line: int
    ts: str
    event: str
    caller: str
    callee: str
    task_id: str
    problem: str = NO_EDGE


@dataclass(frozen=True)
class Unsealed:
    """Records of a trace after the last seal (a launcher killed, or still running)."""

    trace: str
    line: int
    problem: str


@dataclass(frozen=True)
class BoundHeld:
    """A bound that held: a ``limit_reached`` record, or an ``approval`` decided."""

    trace: str
    line: int
    ts: str
    event: str
    caller: str
    callee: str
    #: ``limit_reached``: the limit (``calls``, ``depth``, ``member.calls``, ...) and the
    #: refusal (``limit_reached``, ``depth_exceeded``, ``rate_limited``); ``approval``:
    #: the decision and who made it.
    what: str
    detail: str
    task_id: str = ""


@dataclass(frozen=True)
class AuditReport:
    formation_id: str
    edges: tuple[Edge, ...]
    #: Member traces read: 0 means no record of the formation is left to check, which
    #: the summary says rather than letting "0 calls checked" pass for clean.
    traces_read: int
    #: Call records checked: each call is recorded by its caller (``member_call``) and
    #: its callee (``a2a_task_received``), so one call is two records.
    calls_checked: int
    violations: tuple[Violation, ...]
    limits_reached: tuple[BoundHeld, ...] = ()
    approvals: tuple[BoundHeld, ...] = ()
    #: Calls a member's own proxy refused (no edge): the roster held, and the operator
    #: sees who tried (``member_call_refused``).
    refused: tuple[BoundHeld, ...] = ()
    #: Whether the record could be checked against seals (a formation.json with the key).
    sealed: bool = False
    seals_read: int = 0
    #: Records after the last seal, by trace: (file, first line, how many).
    unsealed: tuple[Unsealed, ...] = ()
    #: Calls, as ``mur trace show --tree`` counts them: the more of the callers'
    #: ``member_call`` and the callees' ``a2a_task_received`` records (the two are equal
    #: when every call was recorded at both ends).
    calls: int = 0
    #: The final seal's head (64 hex digits), when a final seal verified.
    head: str | None = None
    #: ``--expect``'s HEAD, as given (lowercased).
    expected_head: str | None = None
    #: Whether the launcher still runs: its record may not end with a final seal yet.
    launcher_running: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"formation_id": self.formation_id, "ok": not self.violations,
                "edges": [{"from": caller, "to": callee} for caller, callee in self.edges],
                "traces_read": self.traces_read, "calls": self.calls,
                "calls_checked": self.calls_checked,
                "violations": [asdict(violation) for violation in self.violations],
                "limits_reached": [asdict(held) for held in self.limits_reached],
                "approvals": [asdict(held) for held in self.approvals],
                "refused": [asdict(held) for held in self.refused],
                "sealed": self.sealed, "seals_read": self.seals_read,
                "unsealed": [asdict(tail) for tail in self.unsealed],
                "head": self.head, "expected_head": self.expected_head,
                "launcher_running": self.launcher_running}


def normal_head(text: str) -> str | None:
    """``--expect``'s HEAD in lowercase, or None when it is not 12 to 64 hex digits."""
    head = text.strip().lower()
    if len(head) not in HEAD_DIGITS or any(c not in "0123456789abcdef" for c in head):
        return None
    return head


def audit(formation_id: str, expect: str | None = None) -> AuditReport:
    """Check every formation-token call of ``formation_id``'s traces against its edges,
    and its sealed record; ``expect``: the head its final seal must start with (see
    :func:`normal_head`). Raises AuditRefused when the edges admitted at launch are not
    known."""
    marker = read_formation_marker(formation_id)
    if marker is None:
        raise AuditRefused(f"formation {formation_id} has no readable formation.json in "
                           "this MURMUR_HOME (its records were removed, or it ran under "
                           "another MURMUR_HOME; a formation of one member has none, and "
                           "no calls to check)")
    if marker.edges is None:
        raise AuditRefused(f"the formation.json of {formation_id} records no edges (it was "
                           "launched by a mur that did not write them): nothing to check "
                           "its calls against")
    allowed = set(marker.edges)
    traces = find_formation_traces(formation_id)
    checked = 0
    sides = {"member_call": 0, "a2a_task_received": 0}
    violations: list[Violation] = []
    held: dict[str, list[BoundHeld]] = {"limit_reached": [], "approval": [],
                                        "member_call_refused": []}
    #: The first chained record (its trace and line): the launcher that ran this sealed.
    chained: tuple[Path, int] | None = None
    for member, path in traces:
        for line, record in _numbered_records(path):
            if chained is None and "prev" in record:
                chained = (path, line)
            bound = _bound_of(member, path, line, record)
            if bound is not None:
                held[bound.event].append(bound)
            call = _call_of(member, record)
            if call is None:
                continue
            checked += 1
            sides[str(record.get("event"))] += 1
            problem = _problem(call, record, allowed)
            if problem is not None:
                violations.append(Violation(
                    trace=str(path), line=line, ts=str(record.get("ts", "")),
                    event=str(record.get("event")), caller=call[0], callee=call[1],
                    task_id=str(record.get("task_id") or ""), problem=problem))
    unsealed: list[Unsealed] = []
    seals_read, head = 0, None
    running = marker.launcher_alive()
    if marker.public_key is not None:
        seals_read, head = _check_record(formation_id, marker.public_key, traces,
                                         violations, unsealed, ended=not running)
    else:
        _key_removed(formation_id, chained, violations)
    expected = None if expect is None else expect.strip().lower()
    if expected is not None:
        _check_head(formation_id, expected, head, running, violations)
    return AuditReport(formation_id, marker.edges, len(traces), checked, tuple(violations),
                       tuple(sorted(held["limit_reached"], key=lambda b: b.ts)),
                       tuple(sorted(held["approval"], key=lambda b: b.ts)),
                       refused=tuple(sorted(held["member_call_refused"], key=lambda b: b.ts)),
                       sealed=marker.public_key is not None, seals_read=seals_read,
                       unsealed=tuple(unsealed), calls=max(sides.values()), head=head,
                       expected_head=expected, launcher_running=running)


def _check_record(formation_id: str, public_key: bytes, traces: list[tuple[str, Path]],
                  violations: list[Violation], unsealed: list[Unsealed], *,
                  ended: bool) -> tuple[int, str | None]:
    """Step 6: each trace's chain, then the seals (and, once the launcher has ended, the
    final one); how many seal lines were read, and the final seal's head."""
    sealed: dict[str, tuple[str, list[TraceLine]]] = {}
    for member, path in traces:
        try:
            lines = trace_lines(path.read_bytes())
        except FileNotFoundError:
            continue
        for broken in verify_chain(lines, None):
            violations.append(_tampered(str(path), broken.line, broken.problem))
        if not member.startswith("child:"):    # a delegated child's record is chained only
            sealed[member] = (str(path), lines)
    seals_path = formation_dir(formation_id) / SEALS_FILE
    check = check_seals(seals_path, public_key, formation_id, sealed, ended=ended)
    blamed = {(v.trace, v.line) for v in violations if v.event == "tampered"}
    for finding in check.findings:
        if finding.kind == "tampered" and (finding.file, finding.line) in blamed:
            continue    # a line the chain already blamed (one added after the final seal)
        if finding.kind == "unsealed":
            unsealed.append(Unsealed(finding.file, finding.line, finding.problem))
        else:
            violations.append(_tampered(finding.file, finding.line, finding.problem,
                                        finding.kind))
    return check.read, None if check.final is None else seal_head(check.final[1])


def _key_removed(formation_id: str, chained: tuple[Path, int] | None,
                 violations: list[Violation]) -> None:
    """Step 7: a formation.json without the key, beside what only a sealing launcher
    leaves (chained traces, a seals.jsonl), had it removed."""
    folder = formation_dir(formation_id)
    seals = (folder / SEALS_FILE).exists()
    if chained is None and not seals:
        return  # launched by a mur before the sealed record: its edges alone are checked
    evidence = [f"its traces are hash-chained ({chained[0]}:{chained[1]} carries prev)"
                ] if chained is not None else []
    if seals:
        evidence.append(f"{folder / SEALS_FILE} holds seals")
    violations.append(_tampered(
        str(folder / MARKER_FILE), 0,
        f"formation.json names no public_key, yet {' and '.join(evidence)}: the launcher "
        "of this formation sealed its record, and the key its seals are checked with was "
        "removed"))


def _check_head(formation_id: str, expected: str, head: str | None, running: bool,
                violations: list[Violation]) -> None:
    """Step 8: the final seal's head against ``--expect``."""
    where = str(formation_dir(formation_id) / SEALS_FILE)
    if head is None:
        why = ("the launcher still runs, and has not sealed the end yet" if running
               else "no final seal verified")
        problem = f"expected head {expected} (--expect), but {why}"
    elif not head.startswith(expected):
        problem = (f"the final seal's head is {head[:max(SHORT_HEAD, len(expected))]}, not "
                   f"the {expected} expected (--expect): this is not the record the "
                   "launcher sealed as it ended (its key and seals were replaced, or it is "
                   "another formation's head)")
    else:
        return
    violations.append(_tampered(where, 0, problem, "unexpected_head"))


def _tampered(file: str, line: int, problem: str, event: str = "tampered") -> Violation:
    return Violation(trace=file, line=line, ts="", event=event, caller="-",
                     callee="-", task_id="", problem=problem)


def _bound_of(member: str, path: Path, line: int,
              record: dict[str, Any]) -> BoundHeld | None:
    """A ``limit_reached`` record, or an ``approval`` that was decided, as the report
    lists it; None for any other record."""
    event = record.get("event")
    text = {key: str(record.get(key) or "") for key in (
        "caller", "limit", "value", "error", "decision", "by", "reason", "waited_ms")}
    if event == "limit_reached":
        own = text["limit"].startswith("member.")   # the member's own limit: no callee
        return BoundHeld(str(path), line, str(record.get("ts", "")), event,
                         member if own else text["caller"], "-" if own else member,
                         f"{text['limit']} {text['value']}", text["error"],
                         str(record.get("task_id") or ""))
    if event == "member_call_refused":
        return BoundHeld(str(path), line, str(record.get("ts", "")), event, member,
                         str(record.get("callee") or "-"), "refused",
                         f"{record.get('via') or '-'}: {record.get('reason') or ''}",
                         str(record.get("task_id") or ""))
    if event == "approval" and text["decision"] not in ("", "waiting"):
        detail = f"by {text['by']} after {text['waited_ms'] or '?'} ms"
        if text["reason"]:
            detail += f": {text['reason']}"
        return BoundHeld(str(path), line, str(record.get("ts", "")), event, text["caller"],
                         member, text["decision"], detail, str(record.get("task_id") or ""))
    return None


def _numbered_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of each record of a trace; a missing trace has none (a
    member that never started writing)."""
    try:
        return numbered_records(path)
    except FileNotFoundError:
        return []


def _call_of(member: str, record: dict[str, Any]) -> Edge | None:
    """The edge a record says a formation token crossed, or None for any other record."""
    event = record.get("event")
    if event == "a2a_task_received":
        caller = _task_caller(record)
        return (caller, member) if caller is not None else None
    if event == "member_call":
        callee = record.get("callee")
        return (member, callee) if isinstance(callee, str) else None
    return None


def _task_caller(record: dict[str, Any]) -> str | None:
    """The member a received task came from: ``formation_member``, else the name in a
    ``member:<name>`` credential (so a forged record that leaves out the first field is
    still a call); None for the operator, a declared credential or a JWT."""
    named = record.get("formation_member")
    if isinstance(named, str):
        return named
    return _credential_member(record)


def _credential_member(record: dict[str, Any]) -> str | None:
    credential = record.get("credential")
    if isinstance(credential, str) and credential.startswith(MEMBER_PREFIX):
        return credential.removeprefix(MEMBER_PREFIX)
    return None


def _problem(call: Edge, record: dict[str, Any], allowed: set[Edge]) -> str | None:
    """Why ``call`` is a violation, or None when it is along an admitted edge."""
    if call not in allowed:
        return NO_EDGE
    credited = _credential_member(record)
    if record.get("event") == "a2a_task_received" and credited not in (None, call[0]):
        return f"is named by a record whose credential is {MEMBER_PREFIX}{credited}"
    return None


#: The findings of the sealed record, each a line of its own: ``<word>: FILE[:LINE]: …``.
RECORD_FINDINGS = {"tampered": "tampered", "incomplete": "incomplete",
                   "unexpected_head": "unexpected head"}


def _violation_line(v: Violation) -> str:
    from launcher.spawn.process import escape_control

    if v.event in RECORD_FINDINGS:
        place = escape_control(v.trace) + (f":{v.line}" if v.line else "")
        return f"{RECORD_FINDINGS[v.event]}: {place}: {escape_control(v.problem)}"
    return (f"violation: {escape_control(v.caller)} → {escape_control(v.callee)} "
            f"{escape_control(v.problem)}  ({escape_control(v.event)} "
            f"{escape_control(v.task_id) or '-'} at {escape_control(v.ts)}, "
            f"{escape_control(v.trace)}:{v.line})")


def render_report(report: AuditReport) -> str:
    """The report for people: each violation, then one summary line."""
    from launcher.spawn.process import escape_control

    lines = [_violation_line(v) for v in report.violations]
    lines += [f"unsealed: {escape_control(tail.trace)}:{tail.line}: "
              f"{escape_control(tail.problem)}" for tail in report.unsealed]
    lines += [f"limit: {escape_control(b.caller)} → {escape_control(b.callee)} "
              f"{escape_control(b.what)}: {escape_control(b.detail)}  (at "
              f"{escape_control(b.ts)}, {escape_control(b.trace)}:{b.line})"
              for b in report.limits_reached]
    lines += [f"approval: {escape_control(b.caller)} → {escape_control(b.callee)} task "
              f"{escape_control(b.task_id) or '-'} {escape_control(b.what)} "
              f"{escape_control(b.detail)}  (at {escape_control(b.ts)})"
              for b in report.approvals]
    lines += [f"refused: {escape_control(b.caller)} → {escape_control(b.callee)} task "
              f"{escape_control(b.task_id) or '-'} ({escape_control(b.detail)})  (at "
              f"{escape_control(b.ts)}, {escape_control(b.trace)}:{b.line})"
              for b in report.refused]
    edges = len(report.edges)
    traces = report.traces_read
    calls = (f"{report.calls} call{'s' * (report.calls != 1)} checked "
             f"({report.calls_checked} record{'s' * (report.calls_checked != 1)}, callers' "
             f"and callees') in {traces} trace{'s' * (traces != 1)}")
    if report.violations:
        count = len(report.violations)
        lines.append(f"mur audit: {report.formation_id}: {count} "
                     f"violation{'s' * (count != 1)}; {calls}")
    else:
        lines.append(f"mur audit: {report.formation_id}: {calls}, all along the {edges} "
                     f"admitted edge{'s' * (edges != 1)}")
    if report.sealed:
        notes = [f"{report.seals_read} seal{'s' * (report.seals_read != 1)}"]
        if report.head is not None:
            notes.append(f"final head {report.head[:SHORT_HEAD]}")
        elif report.launcher_running:
            notes.append("the launcher still running")
        else:
            notes.append("no final seal")
        if report.unsealed:
            notes.append("with an unsealed tail")
        lines[-1] += f"; record sealed ({', '.join(notes)})"
    held = [(len(report.limits_reached), "limit reached", "limits reached"),
            (len(report.approvals), "approval decided", "approvals decided"),
            (len(report.refused), "call refused by its caller's proxy (no edge)",
             "calls refused by their callers' proxies (no edge)")]
    said = [f"{count} {one if count == 1 else many}" for count, one, many in held if count]
    if said:
        lines[-1] += "; " + ", ".join(said)
    return "\n".join(lines) + "\n"
