"""Every diagnostic ``mur`` can print, in one table, and the one way to print them.

A diagnostic is a code (``E-ROS-004``), a severity, a message naming the field or path at
fault, and a hint saying what would be accepted. Codes of the roster format
(``named_by="reference"``, shown as "part of the roster format") keep that meaning;
codes this project adds extend the same families:

- ``ROS`` the roster (``roster.yaml``) and its admission;
- ``REG`` the artifact stores, ``.mur.zip`` artifacts and ``murmur.lock``;
- ``MAN`` a capsule's ``murmur.yaml``;
- ``RUN`` running a member or a formation;
- ``SEC`` conditions of the host that weaken isolation.

``docs/diagnostics.md`` is generated from :data:`TABLE` (``python -m launcher.diagnostics
--write-docs``) and ``mur explain CODE`` prints an entry of it. This module imports only
the standard library: every ``mur`` process loads it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from gateway.redaction import redact
from launcher.errors import LauncherError

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CodeEntry:
    """One row of the table.

    ``message`` and ``hint`` are ``str.format`` templates over the keyword arguments a
    diagnostic is made with (``{{`` and ``}}`` for literal braces). ``meaning`` says when the
    code is given; ``named_by`` says whether the code belongs to the roster format
    (``"reference"``) or this project added it.
    """

    code: str
    severity: Severity
    title: str
    message: str
    hint: str
    meaning: str
    named_by: Literal["reference", "murmur-door"] = "murmur-door"


_CODE_PATTERN = re.compile(r"^(E|W)-(ROS|REG|MAN|RUN|SEC)-[0-9]{3}$")

TABLE: tuple[CodeEntry, ...] = (
    # --- ROS: roster.yaml and admission -------------------------------------------------
    CodeEntry(
        "E-ROS-001", "error",
        "roster.yaml does not read, or does not have the roster's shape",
        "{file}: {problem}",
        "{fix}",
        "Admission check 1. `roster.yaml` is missing or unreadable, is not UTF-8 YAML (tabs "
        "used for indentation, anchors or aliases, more than one document, over 256 KiB), or "
        "does not have the roster's shape: a key the roster format does not "
        "list, at any level; a required key missing; a value of the wrong type; "
        "`roster_version` other than `1`; no members; a member name outside "
        "`^[a-z][a-z0-9-]{0,31}$`; a bare capsule name (the hint names its scoped forms, "
        "such as `local/<name>`); a blank version or one of `latest`, `stable`, `edge`; a "
        "rule whose `to` is empty or names its own `from`.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-002", "error",
        "Not exactly one member has `entry: true`",
        "{file}: {found} `entry: true`; exactly one member must",
        "set `entry: true` on the one member that receives the formation's task, and on no "
        "other member",
        "Admission check 3. No member, or more than one, is the entry member.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-003", "error",
        "Two members have the same name",
        "{file}: {field}: member name `{name}` is already used by {first}",
        "give each member a name of its own; two members may still run the same capsule",
        "Admission check 2. Member names are unique within a roster.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-004", "error",
        "A reachability rule names no member",
        "{file}: `{field}` is `{name}`, which names no member of this roster",
        "name a member of this roster ({members}){suggestion}",
        "Admission check 4. Every rule's `from` and every name in its `to` must be the name "
        "of a member.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-005", "error",
        "A member a rule calls does not serve peers",
        "{file}: `{field}` lets `{caller}` call `{member}`, but {capsule} {version} does not "
        "declare `exports.peer_tasks.accept: true`",
        "declare `exports: {{peer_tasks: {{accept: true}}}}` in the murmur.yaml of {capsule}, "
        "then pack and install it again; or remove `{member}` from the rule",
        "Admission check 7. Every member a rule lists in `to` must declare "
        "`exports.peer_tasks.accept: true`. A caller need not. `reachability: all` only pairs "
        "members that serve peers, so it never gives this code.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-006", "error",
        "The roster has edges and a member's door requires no authentication",
        "{file}: {field}: the roster has edges, and member `{member}` ({capsule} {version}) "
        "does not declare `network.authentication`, so its door would take a task from any "
        "caller",
        "declare `network: {{authentication: {{}}}}` (or its bearer and jwt credentials) in "
        "the murmur.yaml of {capsule}, then pack and install it again; once a roster has an "
        "edge every member needs it, members on no edge included",
        "Admission check 8. With at least one edge, every member must declare "
        "`network.authentication`, because a member's door is where the roster is enforced. A "
        "roster with one member, no `reachability`, or an `all` that pairs no members has no "
        "edges and needs none.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-007", "error",
        "A member is not installed at its version, or its packed murmur.yaml does not parse",
        "{file}: {field}: member `{member}`: {problem}",
        "{fix}",
        "Admission check 6, first row. The member's capsule is looked up at its exact "
        "version in the project store (`.murmur/artifacts/`) and then the global store "
        "(`$MURMUR_HOME/artifacts/`). It is refused when it is in neither, when the artifact "
        "found is not a readable capsule artifact or its bytes no longer match the sha256 "
        "recorded at install, or when the `murmur.yaml` packed in it does not parse (the "
        "message quotes that manifest's own code).",
        "reference",
    ),
    CodeEntry(
        "E-ROS-008", "error",
        "A rule lets a member call the entry member",
        "{file}: `{field}` lists the entry member `{member}`; no member may call the entry "
        "member",
        "remove `{member}` from the rule; to hear from a member, let `{member}` call it "
        "(a rule `from: {member}` with that member in `to`): the answer comes back into "
        "its own task",
        "Admission check 5. The entry member is never called by a peer: no member holds a "
        "credential for its door.",
        "reference",
    ),
    CodeEntry(
        "E-ROS-009", "error",
        "`mur new --roster` would overwrite files",
        "mur new --roster: {target} already exists",
        "choose a directory that does not exist yet, or one without roster.yaml and the "
        "member directories `mur new --roster` writes",
        "`mur new --roster DIR` never overwrites a file: DIR must not already hold "
        "`roster.yaml` or the member source directories it writes.",
    ),
    CodeEntry(
        "E-ROS-010", "error",
        "A member's python agent does not compile or define its async function",
        "{file}: {field}: the agent of {capsule} {version} ({entry}) cannot run: {problem}",
        "fix the agent's source, then pack and install it again (or `mur run --roster "
        "--rebuild` when its source is in the project)",
        "Checked after the roster's own checks, member by member, without running any of "
        "the agent's code: the `agent.python` module in the installed artifact compiles, "
        "and defines `async def` of the callable it names (or imports that name). A "
        "syntax error is named with its file and line, so `mur doctor` finds it and a "
        "launch refuses before it starts anything.",
        "murmur-door",
    ),
    CodeEntry(
        "E-ROS-011", "error",
        "A member's capsule needs a Python distribution that is not installed",
        "{file}: {field}: {capsule} {version} needs {missing} (agent.requires)",
        "install it into the Python mur runs with: `{install}`",
        "Checked after the roster's own checks, member by member: every requirement of a "
        "capsule's `agent.requires` (pip requirement strings) is installed where `mur` runs, "
        "at a version it allows. The hint is the `pip install` that fixes it.",
        "murmur-door",
    ),
    CodeEntry(
        "W-ROS-001", "warning",
        "More members may call a member than it holds tasks at once",
        "{file}: {field}: {callers} members may call `{member}` ({names}), but it holds "
        "{holds} at once (lifecycle.concurrency {concurrency} + lifecycle.queue_depth "
        "{queue_depth})",
        "set `lifecycle.queue_depth: {needed}` in the murmur.yaml of {capsule} so that it "
        "holds every caller, then pack and install it again; until then a caller that finds "
        "it full is told it is busy and offers the task again until its deadline",
        "Given after a roster is admitted, once for every called member whose callers "
        "outnumber the tasks it holds at once (`concurrency + queue_depth`). It names the "
        "`lifecycle.queue_depth` that would hold every caller. The roster is still admitted.",
        "reference",
    ),
    CodeEntry(
        "W-ROS-002", "warning",
        "`reachability: all` lets the entry member call nobody",
        "{file}: {field}: `all` lets the entry member `{entry}` call no other member: {why}",
        "{fix}",
        "Given after a roster with `reachability: all` and more than one member is admitted, "
        "when the entry member gets no edge: under `all` it calls the other members that "
        "serve peers only if its own capsule serves peers too "
        "(`exports.peer_tasks.accept: true`), and none of the others may call it. The "
        "roster is still admitted; the formation runs, but its entry member can hand no "
        "work to anyone.",
        "murmur-door",
    ),
    # --- REG: stores, artifacts, murmur.lock ---------------------------------------------
    CodeEntry(
        "W-ROS-003", "warning",
        "A member's capsule source in the project differs from what is installed",
        "{file}: {field}: the source of {capsule} {version} in `{source}` differs from the "
        "installed artifact member `{member}` runs: your edits are not what runs",
        "run `mur run --roster --rebuild`, which packs and installs every member's source "
        "in the project before it launches, or `mur pack {source}` and `mur install --force` "
        "the file it writes",
        "Given by `mur doctor` and at launch for each member whose capsule (`local/<name>` "
        "at the roster's version) has its source in the project (the project directory or "
        "a directory directly under it holding a murmur.yaml) and whose source packs to "
        "other bytes than the installed artifact. Packing is reproducible, so this is "
        "exact. The roster is still admitted, with what is installed.",
        "murmur-door",
    ),
    CodeEntry(
        "E-REG-001", "error",
        "A capsule is not installed at that version",
        "{capsule} {version} is not installed in the project store ({project_store}) or the "
        "global store ({global_store})",
        "install it with `mur install {artifact}` in the project, or add `--global` to "
        "install it for every project",
        "A capsule is looked up at its exact version in the project store, then the global "
        "store, and was in neither. (Admission reports the same fault for a member as "
        "`E-ROS-007`.)",
    ),
    CodeEntry(
        "E-REG-002", "error",
        "That version is already installed with other bytes",
        "{capsule} {version} is already installed in {store} with sha256 {installed}; "
        "{file} has sha256 {offered}",
        "a version names one artifact: raise `version` in murmur.yaml and pack again, or "
        "replace the installed artifact with `mur install --force {file}`",
        "`mur install` refuses to replace an installed artifact with different bytes at the "
        "same version, because admission and `murmur.lock` bind members to those bytes. "
        "Installing the same bytes again changes nothing.",
    ),
    CodeEntry(
        "E-REG-003", "error",
        "A file is not a usable capsule artifact",
        "{file}: {problem}",
        "{fix}",
        "A `.mur.zip` being installed or unpacked, or an installed artifact being read, is "
        "not a zip file, holds an unsafe entry (an absolute path, `..`, a symbolic link, a "
        "device), is larger than murmur unpacks, has no `murmur.yaml` at its top, names "
        "another capsule than its place in the store, or its bytes differ from the sha256 "
        "recorded when it was installed.",
    ),
    CodeEntry(
        "E-REG-004", "error",
        "murmur.lock does not read, or does not have the lock's shape",
        "{file}: {problem}",
        "{fix}",
        "`murmur.lock` must be YAML holding `lock_version: 1` and `artifacts`, a mapping "
        "from `<scope>/<name>` to `{version, sha256}`. `mur lock` writes it.",
    ),
    CodeEntry(
        "E-REG-005", "error",
        "murmur.lock pins a capsule at another version or hash",
        "{file} pins {capsule} at {pinned_version} (sha256 {pinned_sha256}), but {subject} "
        "resolved {version} (sha256 {sha256})",
        "install the artifact the lock pins, or run `mur lock` to pin what the roster "
        "resolves to now",
        "Admission check 6, second row, and every lookup `mur run` makes: when the "
        "project's `murmur.lock` pins a capsule, the version and the sha256 resolved must "
        "both match the pin. A capsule the lock does not pin is taken at the version asked "
        "for. Admission never creates or changes `murmur.lock`.",
        "reference",
    ),
    CodeEntry(
        "E-REG-006", "error",
        "Two members run one capsule at different versions, and a lock pins one version",
        "{file}: members `{first}` and `{second}` run {capsule} at {first_version} and "
        "{second_version}; murmur.lock pins one version of a capsule",
        "run both members at one version of {capsule}, then run `mur lock` again",
        "`mur lock` pins one version and one sha256 per capsule, so it refuses a roster "
        "whose members run the same capsule at two versions.",
    ),
    CodeEntry(
        "E-REG-007", "error",
        "A capsule source directory cannot be packed",
        "{source}: {problem}",
        "{fix}",
        "`mur pack` packs regular files only: it refuses a symbolic link, a device or a "
        "socket in the source, an unreadable file, a file name an archive cannot carry "
        "safely, and a source over the size murmur packs.",
    ),
    CodeEntry(
        "E-REG-008", "error",
        "Not a capsule reference",
        "`{capsule}` at version `{version}` is not a capsule reference: {problem}",
        "name a capsule as `<scope>/<name>` (`local/<name>` for one installed from its "
        ".mur.zip file) and give its exact version, such as 1.2.0",
        "A capsule is named `<scope>/<name>`, each part matching `^[a-z][a-z0-9-]{0,31}$`, "
        "at an exact version made of letters, digits, `.`, `_`, `+` and `-`.",
    ),
    # --- MAN: murmur.yaml ----------------------------------------------------------------
    CodeEntry(
        "E-MAN-001", "error",
        "murmur.yaml has a key or a value its schema refuses",
        "{file}: {problem}",
        "{fix}",
        "Any key `murmur.yaml` does not list, at any level, is refused and named by its "
        "dotted path (such as `lifecycle.concurency`); so is a missing required key, a value "
        "of the wrong type or out of range, an agent with other than exactly one of "
        "`python`, `command` and `a2a`, an `agent.a2a` with other than exactly one of "
        "`command` and `url` or a header that uses a `${VAR}` `capabilities.env.allow` does "
        "not name, a duration that is not a whole number followed by `s`, `m`, `h`, `d` or "
        "`w`, and `network.authentication:` written with no value.",
    ),
    CodeEntry(
        "E-MAN-002", "error",
        "murmur.yaml is missing or does not read as YAML",
        "{file}: {problem}",
        "{fix}",
        "The capsule has no `murmur.yaml`, or it cannot be read, is not UTF-8, is not YAML "
        "(tabs used for indentation, anchors or aliases, more than one document), is over "
        "256 KiB, or does not hold a mapping at its top.",
    ),
    CodeEntry(
        "E-MAN-003", "error",
        "`network.authentication` beside a non-empty `capabilities.spawn.allow`",
        "{file}: `network.authentication` is declared beside a non-empty "
        "`capabilities.spawn.allow` ({spawn})",
        "a capsule whose door requires authentication cannot delegate to child capsules: "
        "remove `capabilities.spawn.allow`, or remove `network.authentication` (which "
        "leaves a public door, refused in any roster with edges)",
        "`murmur.yaml` refuses `network.authentication` beside a non-empty "
        "`capabilities.spawn.allow`, so a member of a roster with edges cannot also delegate "
        "to child capsules.",
        "reference",
    ),
    CodeEntry(
        "E-MAN-004", "error",
        "murmur.yaml names a file the capsule does not hold",
        "{file}: `{field}` names {target}, which is not in the capsule",
        "add {target} to the capsule directory, or correct `{field}` (paths are relative to "
        "the directory holding murmur.yaml)",
        "Checked by `mur pack` and `mur install`: the module of `agent.python`, and each "
        "`jwks_file` or `pem_file` of `network.authentication.jwt`, must be a file inside "
        "the capsule.",
    ),
    CodeEntry(
        "E-MAN-005", "error",
        "`mur new` would overwrite files",
        "mur new: {target} already exists",
        "choose a directory that does not exist yet, or an empty one",
        "`mur new DIR` never overwrites a file: DIR must not already hold a `murmur.yaml` "
        "or the agent module it writes.",
    ),
    # --- RUN: members and formations at run time -----------------------------------------
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
        "{subject} reached its deadline ({deadline}); work in flight was canceled",
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
        "Printed at launch by a member the roster lets call others whose "
        "`capabilities.network.allow` does not reach a door served on loopback `http`. The "
        "roster grants a credential and a name, never network access.",
        "reference",
    ),
    # --- SEC: the host ---------------------------------------------------------------------
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

CODES: dict[str, CodeEntry] = {entry.code: entry for entry in TABLE}

class _Placeholders(dict[str, str]):
    """Formatting values; a placeholder the caller did not give renders as ``<name>``."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def _fill(template: str, values: Mapping[str, object]) -> str:
    return redact(template.format_map(_Placeholders({k: str(v) for k, v in values.items()})))


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One diagnostic as printed: ``path`` is the field (``members[1].capsule``) or file at
    fault, when there is one."""

    code: str
    severity: Severity
    message: str
    hint: str
    path: str | None = None

    def render(self) -> str:
        """``error E-ROS-004: <message>`` and, on the next line, ``  hint: <hint>``."""
        return f"{self.severity} {self.code}: {self.message}\n  hint: {self.hint}"

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "hint": self.hint, "path": self.path}


def lookup(code: str) -> CodeEntry:
    """The table's entry for ``code`` (any case); ``KeyError`` for a code not in it."""
    return CODES[code.strip().upper()]


def diagnostic(code: str, path: str | None = None, **values: object) -> Diagnostic:
    """A :class:`Diagnostic` for ``code`` with its templates filled from ``values``."""
    entry = lookup(code)
    return Diagnostic(code=entry.code, severity=entry.severity,
                      message=_fill(entry.message, values), hint=_fill(entry.hint, values),
                      path=redact(path) if path is not None else None)


class DiagnosticError(LauncherError):
    """A refusal carrying its :class:`Diagnostic`; ``str()`` is the rendered diagnostic."""

    def __init__(self, code: str | Diagnostic, path: str | None = None,
                 **values: object) -> None:
        self.diagnostic = code if isinstance(code, Diagnostic) else diagnostic(
            code, path, **values)
        super().__init__(self.diagnostic.render())

    @property
    def code(self) -> str:
        return self.diagnostic.code

    @property
    def path(self) -> str | None:
        return self.diagnostic.path


def emit(diag: Diagnostic, stream: TextIO | None = None, json_mode: bool = False) -> None:
    """Print ``diag`` on ``stream`` (stderr by default): rendered, or one JSON object a line."""
    out = sys.stderr if stream is None else stream
    if json_mode:
        out.write(json.dumps(diag.to_json(), ensure_ascii=False) + "\n")
    else:
        out.write(diag.render() + "\n")
    out.flush()


def explain(code: str) -> str:
    """The text ``mur explain CODE`` prints for one table entry."""
    entry = lookup(code)
    origin = ("part of the roster format" if entry.named_by == "reference"
              else "added by murmur-door")
    return "\n".join((
        f"{entry.code} ({entry.severity}, {origin}): {entry.title}",
        "",
        entry.meaning,
        "",
        f"message: {entry.severity} {entry.code}: {_readable(entry.message)}",
        f"hint:    {_readable_hint(entry.hint)}",
    )) + "\n"


_PLACEHOLDER = re.compile(r"(?<!\{)\{([a-z_]+)\}(?!\})")


def _readable(template: str) -> str:
    """A template as ``mur explain`` shows it: each value to fill as ``<name>`` (the
    form the docs use), literal braces single."""
    return _shown(_PLACEHOLDER.sub(lambda match: f"<{match.group(1).replace('_', ' ')}>",
                                   template))


def _readable_hint(template: str) -> str:
    """A hint that is only a value to fill says so in words: it depends on the case."""
    if _PLACEHOLDER.fullmatch(template.strip()):
        return "given with each case: the diagnostic names the fix for what went wrong"
    return _readable(template)


# --- docs/diagnostics.md ----------------------------------------------------------------

DOCS_PATH = Path(__file__).resolve().parent.parent / "docs" / "diagnostics.md"

_FAMILIES = (
    ("ROS", "Rosters and admission"),
    ("REG", "Stores, artifacts and murmur.lock"),
    ("MAN", "murmur.yaml"),
    ("RUN", "Running members and formations"),
    ("SEC", "The host"),
)


def _family(code: str) -> str:
    return code.split("-")[1]


def _by_family(entries: Iterable[CodeEntry], family: str) -> list[CodeEntry]:
    chosen = [entry for entry in entries if _family(entry.code) == family]
    return sorted(chosen, key=lambda entry: (entry.code[0] != "E", entry.code))


def _shown(template: str) -> str:
    """A template as people read it: literal braces single, placeholders in braces."""
    return template.replace("{{", "{").replace("}}", "}")


def render_docs() -> str:
    """The whole of ``docs/diagnostics.md``, generated from :data:`TABLE`."""
    lines = [
        "# Diagnostics",
        "",
        "<!-- Generated from launcher/diagnostics.py by "
        "`python -m launcher.diagnostics --write-docs`. Do not edit by hand. -->",
        "",
        "Every refusal and warning `mur` prints is one of the codes below. On stderr a "
        "diagnostic is two lines:",
        "",
        "```text",
        _EXAMPLE.render(),
        "```",
        "",
        "With `--json` it is one object: `{\"code\", \"severity\", \"message\", \"hint\", "
        "\"path\"}`, where `path` is the field or file at fault (or null). `mur explain CODE` "
        "prints one entry of this page. Placeholders in braces are filled in when the "
        "diagnostic is given.",
        "",
        "## Index",
        "",
        "| Code | Severity | Summary |",
        "|---|---|---|",
    ]
    for family, _title in _FAMILIES:
        for entry in _by_family(TABLE, family):
            anchor = entry.code.lower()
            lines.append(f"| [{entry.code}](#{anchor}) | {entry.severity} | {entry.title} |")
    for family, title in _FAMILIES:
        lines += ["", f"## {title}"]
        for entry in _by_family(TABLE, family):
            origin = ("Part of the roster format (docs/roster.md)." if entry.named_by == "reference"
                      else "Added by murmur-door.")
            lines += [
                "",
                f"### {entry.code}",
                "",
                f"**{entry.severity}**: {entry.title}. {origin}",
                "",
                entry.meaning,
                "",
                f"- Message: `` {entry.severity} {entry.code}: {_shown(entry.message)} ``",
                f"- Hint: `` {_shown(entry.hint)} ``",
            ]
    return "\n".join(lines) + "\n"


_EXAMPLE = diagnostic("E-ROS-004", "reachability[0].to[1]", file="roster.yaml",
                      field="reachability[0].to[1]", name="revewer",
                      members="planner, coder, reviewer", suggestion="; did you mean `reviewer`?")


def main(argv: list[str] | None = None) -> int:
    from launcher.generated_pages import page_command  # only when the page is written

    return page_command("launcher.diagnostics", DOCS_PATH, render_docs, argv)


def _check_table() -> None:
    # A malformed row is a programming error; fail at import, not when it is first given.
    for entry in TABLE:
        if not _CODE_PATTERN.match(entry.code) or (entry.code[0] == "E") != (
                entry.severity == "error"):
            raise AssertionError(f"bad diagnostic table row {entry.code}")
    if len(CODES) != len(TABLE):
        raise AssertionError("a code appears twice in the diagnostic table")


_check_table()

if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CODES", "TABLE", "CodeEntry", "Diagnostic", "DiagnosticError", "Severity",
           "diagnostic", "emit", "explain", "lookup", "redact", "render_docs"]

