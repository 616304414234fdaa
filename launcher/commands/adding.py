"""``mur add NAME``: a new member in the project's roster in one command
(docs/growing-a-team.md).

In order: the roster read (it must admit names, not be admitted); the member's source
written from a ``mur new`` template into ``PROJECT/NAME``, granted what its edges need;
each existing member on a new edge whose source is in the project granted what the
edge needs of it (a caller reaches loopback doors, a callee takes peer tasks), or told
what to change where its manifest is not one this edits; the roster written with the
member and its edges; every member's source packed and installed (``--rebuild``'s
rule: all pack or none is installed); then ``mur doctor``'s admission, whose warnings
name whatever is still missing. Nothing is written before the checks pass.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from launcher.commands.capsules import TEMPLATES, VERSION, write_capsule_source
from launcher.diagnostics import DiagnosticError, emit


def register(subparsers: Any) -> None:
    add = subparsers.add_parser(
        "add", help="add a member to the project's roster, with its source and its edges",
        description="Add member NAME to the project's roster.yaml in one command: write its "
                    "capsule source into PROJECT/NAME (as `mur new` does), add its edges "
                    "(by default the entry member may call it), grant what those edges need "
                    "in the murmur.yaml of every member on them (`localhost` in a caller's "
                    "capabilities.network.allow, peer_tasks.accept in a callee's), pack and "
                    "install the sources, and check the roster as `mur doctor` does.")
    add.add_argument("name", metavar="NAME",
                     help="the member's name, also its capsule's (local/NAME) and folder's")
    add.add_argument("--calls", nargs="+", default=[], metavar="MEMBER",
                     help="members the new one may call")
    add.add_argument("--called-by", nargs="+", default=None, metavar="MEMBER",
                     help="members that may call the new one (default: the entry member, "
                          "unless --calls is given)")
    add.add_argument("--template", choices=tuple(TEMPLATES), default="python",
                     help="the agent, as for `mur new` (default: python)")
    add.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                     help="the project holding roster.yaml (default: the current directory)")
    add.set_defaults(handler=_add)


def _fail(message: str, status: int = 1) -> int:
    print(f"mur add: {message}", file=sys.stderr)
    return status


def _add(args: argparse.Namespace) -> int:
    from launcher.admission.manifest import name_problem
    from launcher.admission.roster_edit import RosterEditRefused, added_member

    project: Path = args.project
    roster = project / "roster.yaml"
    if not roster.is_file():
        return _fail(f"{roster} does not exist; `mur new --roster {project}` writes a "
                     "roster to grow", 2)
    problem = name_problem(args.name)
    if problem is not None:
        return _fail(f"NAME {problem}", 2)
    text = roster.read_text(encoding="utf-8")
    called_by = args.called_by if args.called_by is not None else (
        [] if args.calls else [_entry_of(text)])
    try:
        new_text = added_member(text, name=args.name, capsule=f"local/{args.name}",
                                version=VERSION, calls=args.calls, called_by=called_by)
    except RosterEditRefused as refused:
        return _fail(str(refused), 2)
    source = project / args.name
    if source.exists():
        return _fail(f"{source} already exists; choose another name, or add it to "
                     "roster.yaml by hand", 2)
    edits, manual = _grants(project, calls=args.calls, called_by=called_by)
    template = TEMPLATES[args.template]
    try:
        write_capsule_source(source, args.name, template)
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    own = _granted_text(source / "murmur.yaml", calls=bool(args.calls),
                        called=bool(called_by))
    if own is not None:
        (source / "murmur.yaml").write_text(own, encoding="utf-8")
    for path, granted_text in edits.items():
        path.write_text(granted_text, encoding="utf-8")
        print(f"granted {path.relative_to(project)} what its new edge needs")
    roster.write_text(new_text, encoding="utf-8")
    edges = [f"{caller} -> {args.name}" for caller in called_by] + [
        f"{args.name} -> {callee}" for callee in args.calls]
    print(f"added member {args.name} (local/{args.name} {VERSION}, its source in {source})"
          + (f" with {', '.join(edges)}" if edges else ""))
    for line in manual:
        print(f"mur add: {line}", file=sys.stderr)
    return _install_and_check(project)


def _entry_of(text: str) -> str:
    import yaml

    document = yaml.safe_load(text)
    members = document.get("members") if isinstance(document, dict) else None
    for member in members if isinstance(members, list) else []:
        if isinstance(member, dict) and member.get("entry") is True:
            return str(member.get("name"))
    return ""


def _granted_text(path: Path, *, calls: bool, called: bool) -> str | None:
    from launcher.admission.roster_edit import granted

    text = path.read_text(encoding="utf-8")
    new = granted(text, calls=calls, called=called)
    return new if new is not None and new != text else None


def _grants(project: Path, *, calls: list[str], called_by: list[str]
            ) -> tuple[dict[Path, str], list[str]]:
    """The new text of each existing member's manifest its new edge needs changed, and
    a line for each that must be changed by hand."""
    from launcher.admission.roster import read_roster
    from launcher.admission.roster_edit import granted
    from launcher.admission.sources import project_sources

    try:
        members = {m.name: m for m in read_roster(project).members}
    except DiagnosticError:
        return {}, []
    sources = project_sources(project)
    edits: dict[Path, str] = {}
    manual = []
    for name, calls_new, called_new in [*((n, True, False) for n in called_by),
                                        *((n, False, True) for n in calls)]:
        member = members.get(name)
        found = sources.get((member.capsule, member.version)) if member else None
        need = "`localhost` in capabilities.network.allow" if calls_new else \
            "`exports.peer_tasks.accept: true`"
        if found is None:
            manual.append(f"member `{name}`'s source is not in the project: give its "
                          f"capsule {need}, then pack and install it again")
            continue
        path = found.path / "murmur.yaml"
        text = edits.get(path) or path.read_text(encoding="utf-8")
        new = granted(text, calls=calls_new, called=called_new)
        if new is None:
            manual.append(f"{path.relative_to(project)}: add {need} (its manifest writes "
                          "that section in a shape `mur add` does not edit)")
        elif new != text:
            edits[path] = new
    return edits, manual


def _install_and_check(project: Path) -> int:
    from launcher.admission.sources import RebuildRefused, rebuild
    from launcher.cli import main as mur

    try:
        for name, found, changed in rebuild(project):
            if changed:
                print(f"installed {found.capsule} {found.version} for member {name}")
    except RebuildRefused as refused:
        for fault in refused.diagnostics:
            emit(fault, sys.stderr)
        return 1
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    status = mur(["doctor", "--project", str(project)])
    if status == 0:
        print(f"next: edit {project.name}/<member>/ and run `mur run --roster --rebuild "
              "--task ...`")
    return status
