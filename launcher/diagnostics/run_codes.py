"""The table's rows for running, one tuple a family, in the order ``mur explain`` lists
them: ``RUN`` (a member or a formation at run time) and ``SEC`` (conditions of the host
that weaken isolation). ``table.py`` joins them with the rest into the one table.
"""

from __future__ import annotations

from launcher.diagnostics.entry import CodeEntry

#: ``RUN``: members and formations at run time.
RUN_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "E-RUN-040", "error",
        "The session was stopped by SIGTERM while a task was running",
        "session {session} was stopped by SIGTERM while task {task} was running; the task "
        "ended canceled",
        "the session was stopped on purpose (`mur stop` or a signal); send the task again "
        "to have it done",
        "A member ending on a `SIGTERM` (a first `SIGTERM`, or `mur stop` of the session) "
        "while it runs a task ends the session `canceled`, exits with status 1 and gives "
        "this code. A member whose formation lifeline closed first reports no error of its "
        "own, so a launch whose entry member completed prints no `E-RUN-040`.",
        "reference",
    ),
    CodeEntry(
        "E-RUN-041", "error",
        "The session's --task task did not complete",
        "task {task} of session {session} ended {state}: {detail}",
        "its result is in {result}; send the task again, or look at the session's "
        "trace.jsonl for what happened",
        "`mur run --task` (and so `mur run --roster --task`) exits 1 when its one task "
        "ends failed, canceled or rejected; `out/result.txt` holds the `<state>: <why>` line.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-042", "error",
        "The door's declared credentials cannot be set up",
        "the door of {capsule} {version} cannot be set up: {problem}",
        "provide what `network.authentication` in its murmur.yaml names (the environment "
        "variables of `bearer`, the key files of `jwt`), then run it again",
        "A declared bearer token's environment variable is missing or empty, or a JWT "
        "issuer's key file cannot be read; the member starts no door rather than a door "
        "that accepts less (or more) than its manifest says.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-043", "error",
        "The capsule cannot be run",
        "{capsule} {version} cannot be run: {problem}",
        "correct the capsule's murmur.yaml or agent, pack and install it again",
        "The capsule's python agent does not import or is not an async callable, its "
        "command is not found, or a `capabilities.network.allow` entry is not a host.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-044", "error",
        "The session cannot be staged, served or resumed",
        "the session cannot be {action}: {problem}",
        "{fix}",
        "The door cannot be bound on loopback or does not answer, the current directory is "
        "gone, or `--resume` names a session that does not exist here, still runs, or ran "
        "another capsule or version. A file the session cannot write is `E-RUN-048`.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-045", "error",
        "A member did not come up, so the formation was not launched",
        "member `{member}` did not become ready: {problem}",
        "nothing else was started or kept running; the lines behind `[{member}]` above, or "
        "the member's logs/bootstrap.log, say why",
        "`mur run --roster`: a peer refuses the whole launch when it exits before it "
        "reports, prints a first line that is not a readiness line, reports no door, reports "
        "another formation, does not report within 180 seconds of its start (or the "
        "`--deadline`), exits after reporting before its door answers, or reports a door that "
        "does not answer as its session in time; and when a member's directory under "
        "`$MURMUR_HOME/formations/` already exists. Every member already started is stopped "
        "and the entry member is never started.",
        "reference",
    ),
    CodeEntry(
        "E-RUN-046", "error",
        "The formation environment or channel is refused",
        "formation refused: {problem}",
        "formation variables and channels are set by `mur run --roster` only: unset "
        "MURMUR_FORMATION_ID, MURMUR_FORMATION_CHANNEL and MURMUR_FORMATION_PEERS, or launch "
        "the formation with `mur run --roster`",
        "`mur run` refuses to stage a session when `MURMUR_FORMATION_CHANNEL` is set without "
        "`MURMUR_FORMATION_ID`; the channel's descriptor is not open or is not a pipe or a "
        "file; no first line arrives within 10 seconds; the first line is not a member's "
        "credentials, or holds a token not issued to this member; the first line names "
        "another formation than `MURMUR_FORMATION_ID`; or `MURMUR_FORMATION_PEERS` is set in "
        "its own environment. A process that already carries `MURMUR_FORMATION_ID` is a "
        "formation member and refuses `mur run --roster` with this code too.",
        "reference",
    ),
    CodeEntry(
        "E-RUN-047", "error",
        "The installed artifact changed since admission",
        "{capsule} {version} changed since admission: its installed bytes have sha256 "
        "{found}, the launch bound {expected}",
        "something installed other bytes at this version while the formation launched; "
        "launch the formation again to admit what is installed now",
        "A member runs exactly the bytes admission bound it to (`--capsule-sha256`). A "
        "member whose installed artifact changed since admission refuses to start.",
        "reference",
    ),
    CodeEntry(
        "E-RUN-048", "error",
        "A file of the session cannot be written (the disk may be full)",
        "{what} cannot be written to {file}: {problem}",
        "{fix}",
        "A member could not write one of its session's files: the records directory, "
        "`operator.token`, the running record, `trace.jsonl`, the unpacked capsule, or "
        "`out/result.txt`. A full disk or an exceeded quota is said as such (`no space left "
        "on the device (disk full)`); any other error is named. Nothing half-written is left: "
        "a replaced file is written to a temporary file beside it and renamed, and the "
        "temporary file is removed on failure. When `out/result.txt` cannot be written the "
        "previous `result.txt` is removed too, so it never passes for the new task's answer. "
        "Before the door is ready this ends the session `failed`; after, the session keeps "
        "serving and prints the code once per file until a write of it succeeds again, and "
        "a `--task` session whose final result cannot be written exits 1 with this code "
        "(its answer is still printed on stdout).",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-049", "error",
        "A gateway member's A2A server did not come up",
        "the A2A server of {capsule} {version} did not come up: {problem}",
        "{fix}",
        "A gateway member (`agent.a2a`) prints its readiness line only once its upstream "
        "serves an agent card with a JSONRPC or HTTP+JSON interface for A2A 1.0 (the door "
        "serves both bindings to its callers whichever one the upstream speaks). This code "
        "says what "
        "happened instead: `agent.a2a.command` cannot be started, it exited before it "
        "served its card (with its exit status), the card was not served within 120 "
        "seconds, the card is not a card or offers neither interface for A2A 1.0 (naming the "
        "interfaces it offers), or a `${VAR}` of `agent.a2a.headers` is not set.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-067", "error",
        "A session's tasks.db cannot be read",
        "{problem}",
        "restore the file from a copy and run again, or run again with --discard-tasks "
        "to start without the earlier tasks (the file is kept aside, never deleted)",
        "Each session keeps its door's tasks in `tasks.db` in its records directory "
        "(docs/durable-tasks.md). A file there that is not a task database this version "
        "reads (corrupt, another program's, a newer schema) is refused before the door "
        "starts, naming the file and never its contents: its tasks are never silently "
        "dropped.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-050", "error",
        "A gateway member's A2A server exited",
        "the A2A server of {capsule} {version} exited on its own ({status}); the member "
        "ended",
        "its output above, behind the member's name, says why it stopped; run it again",
        "An upstream started with `agent.a2a.command` that exits while the member serves "
        "ends the member `failed` with this code and its exit status (a formation then "
        "ends as it does when any member fails). Its tasks end with it.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-053", "error",
        "The deadline was reached",
        "{subject} reached its deadline ({deadline}){work}",
        "give a later `--deadline`, or less work",
        "A member that reaches the formation's `--deadline` ends with status 1, writes "
        "`deadline_reached` and gives this code; the launcher exits with the entry member's "
        "status. A deadline that falls before the entry member started stops every member "
        "and the launcher exits with this code.",
        "reference",
    ),
    CodeEntry(
        "E-RUN-054", "error",
        "The capsule needs a Python distribution that is not installed",
        "{capsule} {version} needs {missing} (agent.requires)",
        "install it into the Python mur runs with: `{install}`",
        "`mur run --capsule` checks, before it stages anything, that every requirement of "
        "the capsule's `agent.requires` is installed where `mur` runs, at a version it "
        "allows (a formation's members are checked at admission, `E-ROS-011`).",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-055", "error",
        "--isolation required, and this host cannot confine agent code fully",
        "--isolation required: this host cannot confine agent code fully (missing: "
        "{missing}; it offers {offered})",
        "run on a kernel with Landlock ABI 6 or later (Linux 6.12+, Landlock enabled in "
        "the boot's lsm= list) and seccomp filters (x86_64 or aarch64), or use "
        "--isolation auto to run with what it offers",
        "`mur run --isolation required` (or `MURMUR_ISOLATION=required`) refuses to start "
        "anything unless every agent process can be confined with Landlock's file rules, "
        "TCP rules (ABI 4) and signal and abstract-socket scoping (ABI 6), and the seccomp "
        "socket filter (no MPTCP, SCTP, raw, packet, vsock or io_uring). Checked by the "
        "launcher before any member starts, and by a standalone `mur run --capsule`. "
        "`mur doctor` says what this host offers.",
        "murmur-door",
    ),
    CodeEntry(
        "E-RUN-056", "error",
        "A door's listener beyond loopback cannot be set up",
        "{flag} {value}: {problem}",
        "{fix}",
        "`mur run --capsule --listen HOST:PORT` (or `mur run --roster --publish HOST:PORT`, "
        "checked by the launcher before any member starts) names an address that cannot "
        "be bound here (a port in use, an address of no interface of this host, a name "
        "that does not resolve), or `--tls-cert`/`--tls-key` name files that cannot be "
        "read or do not make a certificate and its key. Nothing was started.",
        "murmur-door",
    ),
    CodeEntry(
        "W-RUN-007", "warning",
        "A formation member started by hand: nothing winds it down",
        "this mur run carries MURMUR_FORMATION_ID {formation} but no formation lifeline; "
        "nothing winds it down when its formation ends",
        "end it with `mur stop {session}`; members started by `mur run --roster` hold a "
        "lifeline and wind down with their formation",
        "Printed once at launch by a `mur run` whose environment carries "
        "`MURMUR_FORMATION_ID` but no lifeline and which is not a delegated child. It runs as "
        "any other `mur run` does. A resumed session never prints it.",
        "reference",
    ),
    CodeEntry(
        "W-RUN-008", "warning",
        "A member may call others, but its network grant reaches no door",
        "member `{member}` may call {callees}, but its `capabilities.network.allow` "
        "reaches no loopback door; every call it makes will fail",
        "add `localhost` to `capabilities.network.allow` in the murmur.yaml of {capsule}, "
        "then pack and install it again",
        "Given by `mur doctor` and at launch for a member the roster lets call others whose "
        "`capabilities.network.allow` does not reach a door served on loopback `http`. The "
        "roster grants a credential and a name, never network access.",
        "reference",
    ),
)

#: ``SEC``: the host.
HOST_CODES: tuple[CodeEntry, ...] = (
    CodeEntry(
        "W-SEC-013", "warning",
        "The host weakens the isolation murmur relies on",
        "host: {problem}",
        "{fix}",
        "A condition of the host weakens what separates sessions and formations, such as "
        "`MURMUR_HOME` or a records directory that other users can read or write. Printed "
        "once at launch; the launcher of a formation prints it for every member and sets "
        "`MURMUR_HOST_WARNINGS_REPORTED=1`, so the members do not print it again.",
        "reference",
    ),
    CodeEntry(
        "W-SEC-014", "warning",
        "Agent code runs with less confinement than murmur promises",
        "agent code is not fully confined on this host (missing: {missing}; it offers "
        "{offered})",
        "run on a kernel with Landlock ABI 6 or later (Linux 6.12+, Landlock enabled in the "
        "boot's lsm= list) and seccomp filters (x86_64 or aarch64); --isolation required "
        "refuses to run without them",
        "With `--isolation auto` (the default) every agent process is confined with what "
        "the kernel offers; where that is less than Landlock's file rules, TCP rules (ABI 4) "
        "and scoping (ABI 6) and the seccomp socket filter, this warning names what is "
        "missing, once per launch (the launcher prints it, its members do not). Without TCP "
        "rules an agent can open sockets anywhere, so `capabilities.network.allow` binds "
        "only its HTTP clients; without the socket filter an agent can reach any host with "
        "an MPTCP socket, which Landlock's TCP rules do not govern; without Landlock at "
        "all, agent code can read what its user can read.",
        "murmur-door",
    ),
)
