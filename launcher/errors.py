"""The launcher's exceptions: one root, and the tree (the gateway's is in
``gateway/errors.py``):

    LauncherError
    ├── DiagnosticError ............. diagnostics.report: a refusal carrying its coded
    │   │                             Diagnostic
    │   ├── ChannelRefused .......... spawn.channel: E-RUN-046, one of the channel's cases
    │   └── ModelError .............. member.model.endpoint: a model member's task cannot
    │                                 go on (E-RUN-057 to E-RUN-065)
    ├── YamlFault ................... admission.yaml_files: a document that does not read
    ├── UpstreamHeaderError ......... admission.a2a_agent: an agent.a2a header cannot be
    │                                 sent (a ValueError)
    ├── UsageError .................. spawn.run_flags: a flag mur run cannot use (exit 2)
    ├── CapsuleError ................ member.capsule: the capsule's agent cannot be loaded
    ├── CommandFailed ............... member.capsule: a command agent exited non-zero
    ├── LandlockError ............... sandbox.landlock, privileges: a confinement cannot
    │   │                             be applied (an OSError)
    │   └── SeccompError ............ sandbox.seccomp: the socket filter cannot be installed
    ├── AgentProcessError ........... member.agent_process: the agent process ...
    │   ├── AgentStartFailed ........ ... could not confine itself or load the agent
    │   └── AgentProcessEnded ....... ... ended while a task ran
    ├── AgentRaised ................. member.agent_process: agent code raised (the task
    │                                 fails with its message)
    ├── ProtocolError ............... member.agent.protocol: a line that is not the agent
    │                                 protocol's
    ├── StartFailed ................. member.session_start: the session could not start
    ├── DelegationRefused ........... member.delegation.refused: task.delegate refused
    │                                 before a child ran (a RuntimeError)
    ├── TemplateFailed .............. formation.template: the member template did not
    │                                 start or answer (an OSError; members are exec'd)
    ├── NotReady .................... formation.ready: a member did not come up
    ├── DeadlineFell ................ formation.ready: --deadline fell during start-up
    ├── SendError ................... commands.send: mur send cannot reach or use a door
    │   └── MemberBusy .............. commands.send: -32050, offer again after retryAfterMs
    ├── LineTooLong ................. spawn.process: a child's line past the bound
    │                                 (a ValueError)
    ├── DoorAddressMissing .......... spawn.channel: no door address for a callee in
    │                                 time (a TimeoutError, as the proxy's directory
    │                                 expects)
    ├── RunningRecordsUnreadable .... home.running_records: running/ cannot be listed
    │                                 (an OSError)
    ├── TaskDbUnreadable ............ home.task_db: a session's tasks.db is not a task
    │                                 database this version reads (an OSError)
    ├── RebuildRefused .............. admission.sources: member sources that do not pack
    │                                 (each one's E-ROS-013; nothing installed)
    ├── AmbiguousId ................. home.id_prefixes: an id prefix starts several ids
    │                                 (a ValueError; exit 2)
    ├── RosterEditRefused ........... admission.roster_edit: mur add cannot add the member
    │                                 as asked (exit 2)
    ├── AuditRefused ................ commands.audit: no edges recorded to check a formation's
    │                                 calls against (exit 2)
    └── PeerDirectoryExists ......... home.formations: a peer's work folder is there already
                                      (a FileExistsError)

Each is defined in the module that raises it; the standard exception a caller may also
catch it as is its second base. Where a refusal reaches a user it is a
``DiagnosticError`` with a code from the one table in ``launcher/diagnostics/``.
"""

from __future__ import annotations


class LauncherError(Exception):
    """The root of every exception the launcher raises on purpose."""
