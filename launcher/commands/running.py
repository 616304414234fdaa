"""``mur run``, ``stop``, ``ps``, ``send``, ``cancel``, ``logs`` and ``trace show``: parsing
only.

The work is in ``launcher.member`` (one member), ``launcher.formation`` (a roster),
and one module of ``launcher.commands`` each for stop, ps, send, cancel, logs and trace,
imported when its command runs (``mur`` starts without them: a formation starts one
``mur`` per member).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    _register_run(subparsers)
    _register_stop(subparsers)
    _register_ps(subparsers)
    _register_send(subparsers)
    _register_cancel(subparsers)
    _register_logs(subparsers)
    _register_trace(subparsers)


def _register_run(subparsers: Any) -> None:
    run = subparsers.add_parser(
        "run",
        help="run one capsule as a member (--capsule) or a whole formation (--roster)",
        description=(
            "Run one installed capsule behind its A2A door (--capsule NAME "
            "--capsule-version V), or admit the project's roster.yaml and launch the "
            "whole formation (--roster). With --task the run does that one task, prints "
            "its result and exits with its status; without it, the door takes tasks "
            "until `mur stop`, a signal or --deadline."
        ),
    )
    mode = run.add_mutually_exclusive_group(required=True)
    mode.add_argument("--roster", action="store_true",
                      help="launch the formation declared by roster.yaml in --project")
    mode.add_argument("--capsule", metavar="NAME",
                      help="the installed capsule to run, e.g. local/coder")
    run.add_argument("--capsule-version", metavar="V",
                     help="the exact installed version of --capsule")
    run.add_argument("--capsule-sha256", metavar="HEX",
                     help="refuse (E-RUN-047) unless the installed artifact has this sha256")
    run.add_argument("--project", metavar="DIR", default=None,
                     help="the project whose stores, lock and roster are read (default: "
                          "the current folder; with --roster, the nearest parent holding "
                          "roster.yaml when the current folder has none)")
    run.add_argument("--task", metavar="TEXT|FILE",
                     help="run this one task (a path to an existing file is read) and exit")
    run.add_argument("--deadline", metavar="WHEN",
                     help="end by this moment: a duration from now (90s, 10m, 2h) or an "
                          "ISO-8601 UTC time")
    run.add_argument("--lifecycle-task-acceptance", choices=("single", "queue"),
                     help="override the manifest's lifecycle.task_acceptance")
    run.add_argument("--lifecycle-after-task", choices=("exit", "sleep"),
                     help="override the manifest's lifecycle.after_task")
    run.add_argument("--resume", metavar="SESSION",
                     help="continue an earlier session's conversation (not with --roster): "
                          "its tasks answer their owners again, a live one FAILED")
    run.add_argument("--discard-tasks", action="store_true",
                     help="with --resume: start without the session's earlier tasks; its "
                          "tasks.db (readable or not) is kept aside as "
                          "tasks.db.discarded-<time>, never deleted")
    # The launcher's own, when it starts a failed peer again (docs/restarts.md): the
    # session it follows and how many restarts this one makes.
    run.add_argument("--restarted-from", metavar="SESSION", help=argparse.SUPPRESS)
    run.add_argument("--restart-count", type=int, default=0, help=argparse.SUPPRESS)
    run.add_argument("--rebuild", action="store_true",
                     help="with --roster: pack and install (replacing) every member whose "
                          "capsule source is in the project before admission, so edits run")
    run.add_argument("--listen", metavar="HOST:PORT",
                     help="with --capsule: serve the door on this address too, beyond "
                          "loopback (0.0.0.0:8443, [::]:8443); the same credentials apply")
    run.add_argument("--publish", metavar="HOST:PORT",
                     help="with --roster: serve the entry member's door on this address too "
                          "(its peers stay on loopback)")
    run.add_argument("--tls-cert", metavar="FILE",
                     help="with --listen/--publish: serve it over TLS with this PEM "
                          "certificate chain")
    run.add_argument("--tls-key", metavar="FILE",
                     help="with --tls-cert: the certificate's private key (PEM)")
    run.add_argument("--public-host", metavar="NAME", action="append",
                     help="a name clients use to reach the --listen/--publish address: "
                          "accepted as Host and named on that listener's card (repeat for "
                          "more; default: the address given)")
    run.add_argument("--card-signing-key", metavar="FILE", type=Path,
                     help="with --capsule: sign the door's agent card with this Ed25519 "
                          "private key (PEM, as `openssl genpkey -algorithm ed25519` writes "
                          "it); a formation's cards are signed with its own key")
    run.add_argument("--isolation", choices=("auto", "required", "off"), default=None,
                     help="confine agent code (Landlock): auto (default; warn W-SEC-014 "
                          "where the host offers less), required (refuse to start without "
                          "it, E-RUN-055) or off (debugging only); also MURMUR_ISOLATION. "
                          "A formation's members take the launcher's choice")
    run.add_argument("--json", action="store_true",
                     help="print the readiness / formation line as one JSON object")
    run.add_argument("--detach", "-d", action="store_true",
                     help="with --roster: start the formation in the background and print "
                          "its id once every member is ready (--json: the formation line); "
                          "it serves until `mur stop`; the launcher's own lines go to "
                          "records/detached/<id>.log under MURMUR_HOME")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.roster and args.detach:
        from launcher.formation.detach import detach
        return detach(args)
    if args.roster:
        # The member template imports a member's modules while this process imports the
        # launcher's and admits the roster (launcher/formation/early_template.py).
        from launcher.formation.early_template import EarlyTemplate
        with EarlyTemplate.for_launch(args.isolation, bool(args.json)) as early:
            from launcher.formation import launch
            return launch.main(args, early)
    if args.detach:
        print("mur run: --detach is taken with --roster (a member runs in the foreground; "
              "start a formation of one to run it in the background)", file=sys.stderr)
        return 2
    from launcher.member import main as member_main
    return member_main.main(args)


def _register_stop(subparsers: Any) -> None:
    stop = subparsers.add_parser(
        "stop", help="stop a formation (its launcher) or one session",
        description="Stop a running formation by its frm_ id (its launcher ends every "
                    "member) or one session by its ses_ id. Any unique prefix of an id "
                    "will do (frm_01a2); with no ID, the one formation running in this "
                    "project (--project, default: the current directory).")
    stop.add_argument("id", metavar="ID", nargs="?",
                      help="a formation id (frm_...) or session id (ses_...), or a unique "
                           "prefix of one")
    stop.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                      help="with no ID: the project whose formation to stop")
    stop.add_argument("--json", action="store_true", help="print the result as JSON")
    stop.set_defaults(handler=_operator("stop"))


def _register_ps(subparsers: Any) -> None:
    ps = subparsers.add_parser(
        "ps", help="list running formations and sessions",
        description="List running formations with their members, and standalone sessions, "
                    "from the running records (stale records are pruned).")
    ps.add_argument("--json", action="store_true", help="print one JSON document")
    ps.add_argument("-a", "--all", action="store_true",
                    help="also the formations that ended and whose records are still kept "
                         "(newest first), for `mur trace show`, `mur audit` and `mur logs`")
    ps.set_defaults(handler=_operator("ps"))


def _register_send(subparsers: Any) -> None:
    send = subparsers.add_parser(
        "send", help="send a task to a formation's entry door or a session's door",
        description="The operator's client: send TEXT as a task to the entry member's door "
                    "of a formation (frm_...), a session (ses_...) or a door URL, with "
                    "that session's operator token; stream its status and print the answer.")
    send.add_argument("target", metavar="TARGET", help="frm_..., ses_... or http://127.0.0.1:PORT")
    send.add_argument("text", metavar="TEXT", help="the task")
    send.add_argument("--task-id", metavar="ID",
                      help="send TEXT to this task (one that asks for input) instead of "
                           "starting a new one")
    send.add_argument("--reply", metavar="TEXT", action="append",
                      help="the answer when the task asks for input (repeat for each "
                           "question; on a terminal you are asked instead)")
    send.add_argument("--timeout", metavar="DURATION", default="5m",
                      help="how long to keep offering the task to a busy member, waiting "
                           "the retryAfterMs its door names (default 5m)")
    send.add_argument("--json", action="store_true", help="print the final task as JSON")
    send.set_defaults(handler=_operator("send"))


def _register_cancel(subparsers: Any) -> None:
    cancel = subparsers.add_parser(
        "cancel", help="cancel a task at a formation's entry door or a session's door",
        description="The operator's CancelTask: cancel task TASK_ID at the entry member's "
                    "door of a formation (frm_...), at a session's door (ses_...) or at a "
                    "door URL, with that session's operator token. Exit 1 when there is no "
                    "such task or it has already ended.")
    cancel.add_argument("target", metavar="TARGET",
                        help="frm_..., ses_... or http://127.0.0.1:PORT")
    cancel.add_argument("task_id", metavar="TASK_ID",
                        help="the task's id, as mur send --json or ListTasks shows it")
    cancel.add_argument("--json", action="store_true", help="print the canceled task as JSON")
    cancel.set_defaults(handler=_operator("cancel"))


def _register_logs(subparsers: Any) -> None:
    logs = subparsers.add_parser(
        "logs", help="print what a formation's members printed and logged",
        description="Print the logs of every member of a formation (frm_...), or of one "
                    "session (ses_...), merged in time order, each line behind its "
                    "member's name: what its agent or its upstream printed (stdout and "
                    "stderr, kept in logs/output.log), the runtime's warnings and errors "
                    "(logs/member.log, an agent's exception with its traceback) and what "
                    "it said after its launcher was gone (logs/bootstrap.log). The logs "
                    "stay after the formation ends, as long as its records are kept.")
    logs.add_argument("id", metavar="ID", help="a formation id (frm_...) or session id (ses_...)")
    logs.add_argument("members", metavar="MEMBER", nargs="*",
                      help="only these members of the formation (all when none is named)")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new lines until the formation or session ends")
    logs.add_argument("--since", metavar="WHEN",
                      help="only lines from then on: a duration before now (30s, 10m, 2h) "
                           "or an ISO-8601 time (UTC when it names no zone)")
    logs.add_argument("--tail", metavar="N", type=int,
                      help="only the last N lines (then new ones with --follow)")
    logs.add_argument("--timestamps", "-t", action="store_true",
                      help="print each line's time (UTC) after the member's name")
    logs.add_argument("--json", action="store_true",
                      help="one JSON object a line: time, member, session, source "
                           "(agent, upstream or runtime) and text")
    logs.set_defaults(handler=_operator("logs"))


def _register_trace(subparsers: Any) -> None:
    trace = subparsers.add_parser("trace", help="read trace records")
    trace_sub = trace.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    show = trace_sub.add_parser(
        "show", help="print a formation's or a session's trace",
        description="Print the trace records of every member of a formation, merged in "
                    "time order, or of one session. --tree prints the call tree instead: "
                    "each task a member received, with the calls it made to other members "
                    "and their tasks under it (linked by W3C trace context), how long each "
                    "took and how it ended. --follow prints the records of a running "
                    "formation or session as they happen (murmur.WatchSession at each "
                    "member's door) until it ends or you press Ctrl-C.")
    show.add_argument("id", metavar="ID", help="a formation id (frm_...) or session id (ses_...)")
    show.add_argument("--json", action="store_true",
                      help="print the raw records, one a line (with --tree: the tree as JSON)")
    mode = show.add_mutually_exclusive_group()
    mode.add_argument("--tree", action="store_true",
                      help="print the call tree: who called whom, for which task, how long, "
                           "how it ended")
    mode.add_argument("--follow", "-f", action="store_true",
                      help="keep printing records as they happen, until the formation or "
                           "session ends")
    show.set_defaults(handler=_operator("trace_show"))


def _operator(name: str) -> Any:
    """The handler of ``mur <name>``: its module, imported when it runs."""
    module, function = _COMMANDS[name]

    def handler(args: argparse.Namespace) -> int:
        import importlib

        result: int = getattr(importlib.import_module(module), function)(args)
        return result
    return handler


#: Each operator command's module and function.
_COMMANDS = {
    "stop": ("launcher.commands.stop", "stop"), "ps": ("launcher.commands.ps", "ps"),
    "send": ("launcher.commands.send", "send"),
    "cancel": ("launcher.commands.cancel", "cancel"),
    "logs": ("launcher.commands.logs", "logs"),
    "trace_show": ("launcher.commands.trace", "trace_show"),
}
