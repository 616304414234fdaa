"""``mur doctor`` (admit the project's roster and report it) and ``mur explain CODE``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.commands import missing_project
from launcher.diagnostics import DiagnosticError, emit, failure_json

if TYPE_CHECKING:
    from launcher.admission.roster import AdmittedRoster
    from launcher.diagnostics.entry import CodeEntry


def register(subparsers: Any) -> None:
    doctor = subparsers.add_parser(
        "doctor", help="admit the project's roster.yaml and report the result",
        description="Admit roster.yaml as `mur run --roster` would, and report it, then "
                    "what this host offers to confine agent code (Landlock ABI, TCP rules, "
                    "scoping): exit 0 when admitted (warnings included), 1 when refused.")
    doctor.add_argument("--project", type=Path, default=None, metavar="DIR",
                        help="the roster's project directory (default: the current one, "
                             "or the nearest parent holding roster.yaml, as git finds .git)")
    doctor.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout instead")
    doctor.set_defaults(handler=_doctor)

    explain = subparsers.add_parser(
        "explain", help="explain a diagnostic code, such as E-ROS-004",
        description="Print what a diagnostic code means and what fixes it; with no CODE, "
                    "list every code.")
    explain.add_argument("code", nargs="?", metavar="CODE",
                         help="a diagnostic code such as E-ROS-004 (any case); none: list "
                              "every code")
    explain.add_argument("--json", action="store_true",
                         help="print JSON on stdout: one object for CODE (code, severity, "
                              "title, meaning, message, hint, named_by), or {\"codes\": [...]}")
    explain.set_defaults(handler=_explain)


def summary(admitted: AdmittedRoster) -> str:
    """The one line ``mur doctor`` prints for an admitted roster."""
    count = len(admitted.members)
    edges = admitted.ordered_edges()
    line = (f"admitted {admitted.project_dir / 'roster.yaml'}: {count} member"
            f"{'s' if count != 1 else ''} (entry {admitted.entry.name}), {len(edges)} edge"
            f"{'s' if len(edges) != 1 else ''}")
    if edges:
        line += ": " + ", ".join(f"{caller} -> {callee}" for caller, callee in edges)
    return line


def _doctor(args: argparse.Namespace) -> int:
    from launcher.admission.roster import admit
    from launcher.admission.roster_lookup import project_for
    from launcher.sandbox.isolation import host_report, report_line

    project, found = project_for(args.project)
    if found is not None and not args.json:  # --json names it: project_dir
        print(f"mur doctor: using {found}", file=sys.stderr)
    if args.json and not project.is_dir():  # the one object --json promises, then exit 2
        print(json.dumps({**failure_json(
            "mur doctor", 2, f"--project {project} is not a directory",
            hint="name the directory that holds roster.yaml", path="--project"),
            "admitted": False, "project_dir": str(project), "warnings": []}))
        return 2
    if missing_project("doctor", project):
        return 2
    from launcher.admission.sources import source_faults

    faults = source_faults(project)   # before admission: they explain its E-ROS-007
    try:
        admitted = admit(project)
    except DiagnosticError as refusal:
        if args.json:  # the diagnostic once, under "error" (docs/admission.md)
            print(json.dumps({**failure_json("mur doctor", 1, refusal.diagnostic),
                              "admitted": False, "project_dir": str(project.resolve()),
                              "warnings": [fault.to_json() for fault in faults]}))
        else:
            for fault in faults:
                emit(fault, sys.stderr)
            emit(refusal.diagnostic, sys.stderr)
        return 1
    from launcher.admission.model_report import model_line, model_rows, model_warnings
    from launcher.admission.reach import reach_warnings
    from launcher.admission.sources import source_warnings

    admitted.warnings[:0] = faults
    admitted.warnings.extend(source_warnings(admitted))
    admitted.warnings.extend(reach_warnings(admitted))
    admitted.warnings.extend(model_warnings(admitted, os.environ))
    report = host_report(os.environ)
    models = model_rows(admitted, os.environ)
    if args.json:
        print(json.dumps({**admitted.to_json(), "models": models, "isolation": report}))
        return 0
    for warning in admitted.warnings:
        emit(warning, sys.stderr)
    print(summary(admitted))
    for line in admitted.bounds.lines():
        print(line)
    for member in admitted.members:
        if member.restart.on_failure and not member.entry:
            print(f"restart {member.name}: {member.restart.describe()}")
    for row in models:
        print(model_line(row))
    print(report_line(report))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from launcher.diagnostics import TABLE, explain
    from launcher.diagnostics.table import lookup

    if args.code is None:
        if args.json:
            print(json.dumps({"codes": [_entry_json(entry) for entry in TABLE]}))
            return 0
        for entry in TABLE:
            print(f"{entry.code}  {entry.severity:<7}  {entry.title}")
        return 0
    try:
        text = explain(args.code)
    except KeyError:
        message = (f"`{args.code}` is not a diagnostic code; `mur explain` lists every code "
                   "(they look like E-ROS-004)")
        if args.json:   # the one error shape of every --json command
            print(json.dumps(failure_json("mur explain", 2, message,
                                          hint="mur explain --json", path="CODE")))
        else:
            print(f"mur explain: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_entry_json(lookup(args.code))))
        return 0
    sys.stdout.write(text)
    return 0


def _entry_json(entry: CodeEntry) -> dict[str, str]:
    return {"code": entry.code, "severity": entry.severity, "title": entry.title,
            "meaning": entry.meaning, "message": entry.message, "hint": entry.hint,
            "named_by": entry.named_by}
