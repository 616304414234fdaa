"""``mur run --roster``: the launcher's seven steps and how a formation ends (docs/launcher.md).

1. Admit ``roster.yaml`` (a refusal starts nothing).
2. Mint the formation id and its Ed25519 signing key; the key lives only in this
   process's memory and is dropped when the formation ends.
3. Make ``formations/<id>/`` with its ``formation.json`` marker, then every peer's own
   directory (an existing one is ``E-RUN-045`` and nothing starts), then start every peer
   at once, each in a process group of its own, its channel already holding its
   credentials.
4. Wait for each peer's door (:mod:`launcher.formation.ready`).
5. Send each calling peer its callees' door URLs.
6. Start the entry member last, in the launcher's process group and the project
   directory, with the lifecycle the launch sets; print the formation line.
7. End: when the entry member ends, on SIGINT/SIGTERM/SIGHUP, when a peer does not come
   up, or at ``--deadline``, close the lifelines (never SIGTERM a member), SIGKILL the
   group of any member still running 25 s later, end whatever is left below the launcher
   (it is a child subreaper: a daemon of a member killed with SIGKILL comes to it), seal
   the record a last time, drop the key, run retention, remove the running record, and
   say the final seal's head as the launcher's last line (docs/audit.md).

This module holds the command (:func:`main`: its refusals before anything starts, then
admission and the warnings) and :class:`Launch`, which drives the steps in order. Beside
it: step 4 in ``waiting.py``, step 7 and the exit status in ``ending.py``, the running
record in ``record.py``, what the launcher prints in ``printing.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.auth.tokens import FormationKey
from gateway.door.card_signing import card_signature
from gateway.redaction import redact
from launcher.admission.model_report import model_warnings
from launcher.admission.reach import reach_warnings
from launcher.admission.roster import AdmittedRoster, admit
from launcher.admission.roster_lookup import project_for
from launcher.admission.sources import (
    RebuildRefused,
    rebuild,
    source_faults,
    source_warnings,
)
from launcher.diagnostics import DiagnosticError, diagnostic
from launcher.durations import format_deadline, parse_deadline
from launcher.formation import printing
from launcher.formation.early_template import EarlyTemplate, launch_environment, template_env
from launcher.formation.ending import FormationEnd, end_members, exit_code, run_retention
from launcher.formation.members import LaunchedMember, close_quietly, start_member
from launcher.formation.output import formation_line
from launcher.formation.printing import copy_result, refuse, report, say, show_formation_line
from launcher.formation.progress import note_while_waiting
from launcher.formation.ready import (
    PROBE_TIMEOUT,
    DeadlineFell,
    NotReady,
    describe_exit,
    new_probe_client,
    probe_card,
    read_ready_line,
    ready_seconds,
)
from launcher.formation.record import LauncherRecord
from launcher.formation.restarts import RestartBook, restarted_line, stays_down_line
from launcher.formation.sealing import FormationSeals, sealed_line
from launcher.formation.template import MemberTemplate, TemplateFailed
from launcher.formation.waiting import ReadyBounds, await_peers
from launcher.home.formations import (
    PeerDirectoryExists,
    format_no_marker_warning,
    make_formation_dir,
    make_peer_dir,
    peer_workdir,
    write_formation_marker,
)
from launcher.home.records import read_operator_token
from launcher.ids import new_formation_id
from launcher.sandbox import descendants
from launcher.sandbox.agent_cgroup import end_left_over
from launcher.sandbox.hostcheck import host_diagnostics
from launcher.sandbox.isolation import isolation_diagnostics, isolation_mode
from launcher.spawn.channel import ChannelRefused, refuse_roster_inside_formation
from launcher.spawn.env_names import ARGV_PREFIX_ENV, DIAGNOSTICS_ENV, ISOLATION_ENV, PEERS_ENV
from launcher.spawn.listen_flags import Listener, check_listener, listener_args, listener_from
from launcher.spawn.process import PIPE, forbid_inspection, forward_lines, process_start_time
from launcher.spawn.process_title import launcher_title, name_process
from launcher.spawn.run_flags import UsageError, read_task

#: After the deadline, members end themselves; the launcher closes what is left this
#: much later, so that none of them mistakes the deadline for the formation's end.
DEADLINE_GRACE = 1.0

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _usage(message: str) -> int:
    refuse(message)
    return 2


def resolve_task(task: str) -> str:
    """A ``--task`` naming a file relative to the launcher's directory names the same
    file for the entry member, which runs in the project directory."""
    if os.path.isfile(task) and not os.path.isabs(task):
        return os.path.abspath(task)
    return task


def main(args: argparse.Namespace, early: EarlyTemplate | None = None) -> int:
    """``mur run --roster``; the exit status. With ``--json``, a launch refused before
    its formation line prints the one JSON failure object on stdout. ``early``: the
    member template ``mur run`` began before it imported this module."""
    forbid_inspection()  # before the key is minted (docs/isolation.md)
    printing.begin()
    status = _launch(args, early)
    if args.json:
        printing.show_failure(status)
    return status


def _launch(args: argparse.Namespace, early: EarlyTemplate | None) -> int:
    if args.resume:
        return _usage("--roster cannot --resume a session: a formation is never resumed; "
                      "launch it again, as a new formation")
    for flag in ("capsule_version", "capsule_sha256", "lifecycle_task_acceptance",
                 "lifecycle_after_task"):
        if getattr(args, flag, None):
            return _usage(f"--{flag.replace('_', '-')} is not taken with --roster: the "
                          "launcher sets it for each member")
    try:
        refuse_roster_inside_formation(os.environ)
        if PEERS_ENV in os.environ:
            raise ChannelRefused("peers_in_environment", f"{PEERS_ENV} is set in mur run's "
                                 "own environment; the runtime sets it for components only",
                                 path=PEERS_ENV)
    except DiagnosticError as refusal:
        report(refusal.diagnostic)
        return 1
    project, found = project_for(args.project)
    if found is not None:
        say(f"mur run: using {found}")
    if not project.is_dir():
        return _usage(f"--project {project} is not a directory")
    try:
        isolation = isolation_mode(getattr(args, "isolation", None), os.environ)
        if getattr(args, "card_signing_key", None):
            raise UsageError("--card-signing-key is taken with --capsule; a formation signs "
                             "every member's card with its own key (docs/audit.md)")
        if getattr(args, "listen", None):
            raise UsageError("--listen is taken with --capsule; a formation publishes its "
                             "entry member's door with --publish HOST:PORT")
        publish = listener_from(args, "--publish")
    except (ValueError, UsageError) as problem:
        return _usage(str(problem))
    if args.task is not None:
        try:
            read_task(args.task)  # an empty or unreadable task starts no member
        except UsageError as problem:
            return _usage(str(problem))
    started = datetime.now(UTC)
    deadline = None
    if args.deadline is not None:
        try:
            deadline = parse_deadline(args.deadline, started)
        except ValueError as exc:
            return _usage(str(exc))
    environ = launch_environment(os.environ, isolation=isolation, json_mode=bool(args.json))
    if early is None:                   # begun here, later than `mur run` begins it
        with EarlyTemplate(environ) as begun:
            return _admit_and_run(args, project, environ, publish, deadline, begun)
    return _admit_and_run(args, project, environ, publish, deadline, early)


def _admit_and_run(args: argparse.Namespace, project: Path, environ: dict[str, str],
                   publish: Listener | None, deadline: datetime | None,
                   early: EarlyTemplate) -> int:
    """Admit the roster, then run the formation (the template is starting meanwhile)."""
    isolation = environ[ISOLATION_ENV]
    try:
        if getattr(args, "rebuild", False):
            for name, source, changed in rebuild(project):
                say(f"mur run: rebuilt {source.capsule} {source.version} from {source.path} "
                    f"for member {name}" + ("" if changed else " (unchanged)"))
        else:   # a source that does not read: said before the E-ROS-007 it may cause
            for fault in source_faults(project):
                report(fault)
        admitted = admit(project)
    except RebuildRefused as refused:
        for fault in refused.diagnostics:
            report(fault)
        return 1
    except DiagnosticError as refusal:
        report(refusal.diagnostic)
        return 1
    try:
        isolation_warnings = isolation_diagnostics(isolation, os.environ)
        if publish is not None:
            check_listener(publish)  # a port in use, a certificate unreadable: E-RUN-056
    except DiagnosticError as refusal:  # or --isolation required on a host without it
        report(refusal.diagnostic)
        return 1
    for warning in [*admitted.warnings, *source_warnings(admitted),
                    *model_warnings(admitted, os.environ),
                    *host_diagnostics(os.environ), *isolation_warnings,
                    *reach_warnings(admitted)]:
        report(warning)
    launch = Launch(admitted, task=None if args.task is None else resolve_task(args.task),
                    deadline=deadline, json_mode=bool(args.json), environ=environ,
                    publish=publish, template=early.take(environ))
    name_process(launcher_title(args.roster, launch.formation_id), "mur:launcher")
    try:
        return asyncio.run(launch.run())
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user
        say(f"mur run: the launcher failed ({type(exc).__name__}: {redact(str(exc))})")
        return 1


class Launch:
    """One launch of an admitted roster: a new formation."""

    def __init__(self, admitted: AdmittedRoster, *, task: str | None,
                 deadline: datetime | None, json_mode: bool,
                 environ: Mapping[str, str], publish: Listener | None = None,
                 template: MemberTemplate | TemplateFailed | None = None) -> None:
        self.admitted = admitted
        #: ``--publish``: the entry member's listener beyond loopback.
        self.publish = publish
        self.task = task
        self.deadline = deadline
        self.json_mode = json_mode
        self.environ = dict(environ)
        # Members print their readiness line as JSON for the launcher to read; their
        # diagnostics follow the launch's own --json (docs/diagnostics.md).
        self.environ[DIAGNOSTICS_ENV] = "json" if json_mode else "text"
        self.formation_id = new_formation_id()
        self._key: FormationKey | None = FormationKey.generate()
        self.members: dict[str, LaunchedMember] = {}
        self.signal: int | None = None
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self._bounds = ReadyBounds(ready_seconds(self.environ))
        self._record = LauncherRecord(self.formation_id, admitted)
        self._template: MemberTemplate | None = None
        #: A template begun before the launch (``EarlyTemplate``), until it is waited for.
        self._early = template
        #: The traces' seals, once the formation directory exists (docs/audit.md).
        self._seals: FormationSeals | None = None
        #: Restarts of failed peers (docs/restarts.md), and the sessions they ended.
        self._restarts = RestartBook()
        self._ended_sessions: list[str] = []
        self._ending = False

    # --- the whole launch ---------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in _SIGNALS:
            loop.add_signal_handler(signum, self._on_signal, signum)
        if self.deadline is not None:
            left = (self.deadline - datetime.now(UTC)).total_seconds()
            self._bounds.deadline_at = loop.time() + left
        self._record.write()
        # What outlives a member runtime killed with SIGKILL (its agent's daemon) comes
        # here while the formation runs, and is ended once every member has stopped.
        try:
            with descendants.owning_descendants():
                outcome = await self._run_members()
        finally:
            self._key = None  # the formation is over: no token can be minted again
            run_retention(self.admitted, self.formation_id)
            self._record.remove()
            for signum in _SIGNALS:
                loop.remove_signal_handler(signum)
            # Last of all, so the operator finds the head where they look first.
            line = None if self._seals is None else sealed_line(self._seals,
                                                                json_mode=self.json_mode)
            if line is not None:
                say(line)
        return exit_code(outcome, self.members.get(self.admitted.entry.name),
                         signalled=self.signal, task=self.task)

    async def _run_members(self) -> FormationEnd:
        outcome = FormationEnd.REFUSED
        try:
            self._template = await self._start_template()
            outcome = await self._launch()
        finally:
            self._ending = True     # a restart under way starts nothing more
            await end_members(self.members.values(), self._hurry)
            if self._seals is not None:     # every member stopped: the last seal
                await self._seals.final(self.members.values())
            if self._template is not None:
                await asyncio.to_thread(self._template.close)
            # A member killed with SIGKILL left its agent side's cgroup: end it whole.
            await asyncio.to_thread(end_left_over, [
                *self._ended_sessions, *(member.ready.session_id
                                         for member in self.members.values()
                                         if member.ready is not None)])
        return outcome

    def _on_signal(self, signum: int) -> None:
        if self.signal is None:
            self.signal = signum
            self._stop.set()
        else:  # a second signal: stop waiting for members to wind down
            self._hurry.set()

    async def _launch(self) -> FormationEnd:
        peers = self.admitted.peers
        if self._bounds.deadline_passed():
            self._deadline_diagnostic()
            return FormationEnd.DEADLINE_BEFORE_ENTRY
        if peers:
            refused = self._make_directories()
            if refused is not None:
                report(diagnostic("E-RUN-045", refused.member, member=refused.member,
                                  problem=refused.problem))
                return FormationEnd.REFUSED
            outcome = await self._start_peers()
            if outcome is not None:
                return outcome
        return await self._run_entry()

    # --- step 3: directories and peers --------------------------------------------------

    def _make_directories(self) -> NotReady | None:
        """The formation directory, its marker, then every peer's directory, all before
        any peer starts. A refusal names the peer whose directory could not be made."""
        first = self.admitted.peers[0].name
        try:
            make_formation_dir(self.formation_id)
        except OSError as exc:
            return NotReady(first, f"the formation directory could not be made "
                                   f"({exc.strerror or exc})")
        assert self._key is not None
        try:
            write_formation_marker(self.formation_id,
                                   project_dir=self.admitted.project_dir,
                                   launcher_pid=os.getpid(),
                                   launcher_start=process_start_time(os.getpid()),
                                   edges=self.admitted.ordered_edges(),
                                   bounds=self.admitted.bounds.to_json()
                                   if self.admitted.bounds.version == 2 else None,
                                   public_key=self._key.public_bytes)
        except OSError as exc:
            say(format_no_marker_warning(exc.strerror or str(exc)))
        else:
            self._seals = FormationSeals(self.formation_id, self._key, say,
                                         on_seal=self._record.sealed)
            self._seals.start(self.members.values)
        for peer in self.admitted.peers:
            try:
                make_peer_dir(self.formation_id, peer.name)
            except PeerDirectoryExists as exc:
                return NotReady(peer.name, f"its directory {exc.path} already exists, and a "
                                           "formation never reuses a directory")
            except OSError as exc:
                return NotReady(peer.name, f"its directory "
                                           f"{peer_workdir(self.formation_id, peer.name)} "
                                           f"could not be made ({exc.strerror or exc})")
        return None

    def _start(self, name: str, *, doors: Mapping[str, str] | None, extra: list[str],
               workdir: Path, own_group: bool) -> LaunchedMember:
        assert self._key is not None
        member = start_member(
            self.admitted.member(name), key=self._key, formation_id=self.formation_id,
            callees=self.admitted.callees(name), doors=doors, workdir=workdir,
            project_dir=self.admitted.project_dir,
            deadline=None if self.deadline is None else format_deadline(self.deadline),
            extra=extra, environ=self.environ, own_group=own_group,
            started_at=asyncio.get_running_loop().time(), template=self._template,
            stderr=PIPE if own_group else None,
            bounds=self.admitted.bounds.for_member(name))
        self.members[name] = member
        return member

    async def _start_peers(self) -> FormationEnd | None:
        failures: list[NotReady] = []
        for peer in self.admitted.peers:
            try:
                member = self._start(peer.name, doors=None, extra=[], own_group=True,
                                     workdir=peer_workdir(self.formation_id, peer.name))
            except OSError as exc:
                failures.append(NotReady(peer.name, f"it could not be started "
                                                    f"({exc.strerror or exc})"))
                break
            reader = await member.process.stderr_reader()
            member.helpers.append(asyncio.create_task(
                forward_lines(reader, member.name, sys.stderr)))
        if not failures:
            outcome = await await_peers(self.members.values(), self._stop, failures,
                                        formation_id=self.formation_id, bounds=self._bounds)
            if outcome is FormationEnd.DEADLINE_BEFORE_ENTRY:
                self._deadline_diagnostic()
            if outcome is not None:
                return outcome
        if failures:
            for failure in failures:
                report(diagnostic("E-RUN-045", failure.member, member=failure.member,
                                  problem=failure.problem))
            return FormationEnd.REFUSED
        self._hand_out_doors()
        return None

    # --- the deadline that fell (E-RUN-053) ---------------------------------------------

    def _deadline_diagnostic(self) -> None:
        assert self.deadline is not None
        report(diagnostic("E-RUN-053", None, subject=f"formation {self.formation_id}",
                          deadline=format_deadline(self.deadline),
                          work="; every member started was stopped"))

    # --- step 5: addresses --------------------------------------------------------------

    def _doors_of(self, name: str) -> dict[str, str]:
        doors = {}
        for callee in self.admitted.callees(name):
            ready = self.members[callee].ready
            assert ready is not None
            doors[callee] = ready.door_url
        return doors

    async def _watch_peer(self, member: LaunchedMember) -> None:
        """When a ready peer ends while the formation still runs: start it again when
        its restart policy allows (docs/restarts.md), else say that calls to it fail
        from then on (the lines behind its name above say why)."""
        while True:
            code = await member.process.wait_async()
            if (member.lifeline_closed_at is not None or self._ending
                    or self._bounds.deadline_passed()):  # it ended as every member does
                return
            how, policy = describe_exit(code), member.spec.restart
            if code == 0 or not policy.on_failure:
                say(stays_down_line(member.name, how, None))
                return
            within = self._restarts.take(member.name, policy,
                                         asyncio.get_running_loop().time())
            if within is None:
                say(stays_down_line(member.name, how, policy))
                return
            again = await self._restart(member, how, within)
            if again is None:
                return
            member = again

    async def _restart(self, old: LaunchedMember, how: str, within: int
                       ) -> LaunchedMember | None:
        """Start the failed peer ``old`` again as the same member: its earlier session's
        tasks loaded, its callees' doors on its channel; once its door answers, its card
        signed and its new door sent to every caller. None when it stays down."""
        name, policy = old.name, old.spec.restart
        earlier = old.ready.session_id if old.ready is not None else None
        close_quietly(old)
        if earlier is not None:
            self._ended_sessions.append(earlier)
        extra = ["--restart-count", str(self._restarts.counts[name])]
        if earlier is not None:
            extra += ["--restarted-from", earlier]
        try:
            member = self._start(name, doors=self._doors_of(name), extra=extra,
                                 own_group=True, workdir=old.workdir)
        except OSError as exc:
            say(stays_down_line(name, how, policy, f"could not be started "
                                                   f"({exc.strerror or exc})"))
            return None
        if self._ending:
            member.close_lifeline(asyncio.get_running_loop().time())
            return None
        reader = await member.process.stderr_reader()
        member.helpers.append(asyncio.create_task(forward_lines(reader, name, sys.stderr)))
        failures: list[NotReady] = []
        outcome = await await_peers([member], self._stop, failures,
                                    formation_id=self.formation_id, bounds=self._bounds)
        if failures or outcome is not None or member.ready is None or self._ending:
            member.close_lifeline(asyncio.get_running_loop().time())
            if failures:
                say(stays_down_line(name, how, policy, f"did not come up: "
                                                       f"{failures[0].problem}"))
            return None
        self._sign_card(member)
        if not self._expects_doors(name):
            member.close_channel()
        for caller in self.admitted.callers(name):
            calling = self.members.get(caller)
            if calling is not None and not calling.channel.closed:
                with contextlib.suppress(OSError, ValueError):  # it already exited
                    calling.channel.write_doors({name: member.ready.door_url})
        say(restarted_line(name, how, policy, within, member.ready.session_id))
        return member

    def _expects_doors(self, name: str) -> bool:
        """Whether ``name`` calls a member that may be restarted, whose new door would
        come on its channel: that channel stays open while the formation runs."""
        return any(self.admitted.member(callee).restart.on_failure
                   and not self.admitted.member(callee).entry
                   for callee in self.admitted.callees(name))

    def _hand_out_doors(self) -> None:
        for member in self.members.values():
            member.helpers.append(asyncio.create_task(self._watch_peer(member)))
            self._sign_card(member)
            doors = self._doors_of(member.name)
            if doors:
                with contextlib.suppress(OSError, ValueError):  # it already exited
                    member.channel.write_doors(doors)
            if not self._expects_doors(member.name):
                member.close_channel()

    def _sign_card(self, member: LaunchedMember) -> None:
        """Sign the card ``member``'s door served the readiness probe and send the
        signature on its channel (docs/audit.md, "Signed agent cards")."""
        if member.card is None or self._key is None:
            return
        signature = card_signature(member.card, self._key.sign, self.formation_id)
        with contextlib.suppress(OSError, ValueError):  # it already exited
            member.channel.write_card_signature(signature)

    async def _sign_entry_card(self, member: LaunchedMember) -> None:
        """The entry member is not probed before it runs: its card is read once now,
        signed, and the channel closed."""
        try:
            ready = member.ready
            if ready is not None and self._key is not None:
                token = read_operator_token(ready.operator_token_path)
                async with new_probe_client() as client:
                    member.card = await probe_card(client, ready, token, PROBE_TIMEOUT)
                self._sign_card(member)
        except (OSError, UnicodeDecodeError):
            pass                            # unsigned: its card is served as it is
        finally:
            if not self._expects_doors(member.name):
                member.close_channel()

    # --- step 6: the entry member -------------------------------------------------------

    def _entry_flags(self) -> list[str]:
        published = listener_args(self.publish) if self.publish is not None else []
        if self.task is not None:
            return ["--lifecycle-task-acceptance", "single", "--lifecycle-after-task", "exit",
                    *published, "--task", self.task]
        return ["--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep",
                *published]

    async def _run_entry(self) -> FormationEnd:
        entry = self.admitted.entry
        if self._stop.is_set():
            return FormationEnd.SIGNALLED
        if self._bounds.deadline_passed():
            self._deadline_diagnostic()
            return FormationEnd.DEADLINE_BEFORE_ENTRY
        try:
            member = self._start(entry.name, doors=self._doors_of(entry.name),
                                 extra=self._entry_flags(), own_group=False,
                                 workdir=self.admitted.project_dir)
        except OSError as exc:
            report(diagnostic("E-RUN-045", entry.name, member=entry.name,
                              problem=f"it could not be started ({exc.strerror or exc})"))
            return FormationEnd.REFUSED
        reader = await member.process.stdout_reader()
        until, by_deadline = self._bounds.limit(member.started_at)
        if by_deadline:
            until += DEADLINE_GRACE  # the entry member reaches the deadline itself
        reading = asyncio.create_task(read_ready_line(
            member.process, reader, member=entry.name, formation_id=self.formation_id,
            until=until, deadline_bound=by_deadline, limit_seconds=self._bounds.ready_seconds))
        stopper = asyncio.create_task(self._stop.wait())
        noting = asyncio.create_task(note_while_waiting(
            lambda: [] if reading.done() else [entry.name], say))
        try:
            await asyncio.wait({reading, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            noting.cancel()
        if not reading.done():
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            return FormationEnd.SIGNALLED
        error = reading.exception()
        if isinstance(error, DeadlineFell):
            self._deadline_diagnostic()
            return FormationEnd.DEADLINE_RUNNING
        if isinstance(error, NotReady):
            report(diagnostic("E-RUN-045", entry.name, member=entry.name,
                              problem=error.problem))
            return FormationEnd.ENTRY_NOT_READY
        if error is not None:
            raise error
        member.ready = reading.result()
        member.helpers.append(asyncio.create_task(self._sign_entry_card(member)))
        self._announce()
        member.helpers.append(asyncio.create_task(copy_result(reader)))
        return await self._serve(member)

    def _announce(self) -> None:
        # The running record first: whoever reads the line finds the record complete.
        self._record.add_entry(self.members[self.admitted.entry.name])
        show_formation_line(formation_line(self.formation_id, self.admitted.project_dir,
                                           list(self.members.values())),
                            json_mode=self.json_mode)

    async def _serve(self, entry: LaunchedMember) -> FormationEnd:
        """Wait for the entry member to end, a signal, or the deadline to have fallen."""
        loop = asyncio.get_running_loop()
        ended = asyncio.create_task(entry.process.wait_async())
        stopper = asyncio.create_task(self._stop.wait())
        waits: set[asyncio.Future[Any]] = {ended, stopper}
        timer = None
        if self._bounds.deadline_at is not None:
            timer = asyncio.create_task(
                asyncio.sleep(max(0.0, self._bounds.deadline_at + DEADLINE_GRACE - loop.time())))
            waits.add(timer)
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                if task is not ended:
                    task.cancel()
        if ended in done:
            return FormationEnd.ENTRY_ENDED
        ended.cancel()
        await asyncio.gather(ended, return_exceptions=True)
        if stopper in done:
            return FormationEnd.SIGNALLED
        self._deadline_diagnostic()
        return FormationEnd.DEADLINE_RUNNING


    # --- the member template ------------------------------------------------------------

    async def _start_template(self) -> MemberTemplate | None:
        """The member template (launcher/formation/template.py), exec'd while the
        launcher holds no token yet (or begun before the launch, and waited for now);
        None where it cannot start (members are exec'd)."""
        early, self._early = self._early, None
        try:
            if isinstance(early, TemplateFailed):
                raise early
            if early is not None:
                return await asyncio.to_thread(early.wait_ready)
            if self.environ.get(ARGV_PREFIX_ENV):
                return None
            return await asyncio.to_thread(MemberTemplate.start, template_env(self.environ))
        except TemplateFailed as exc:
            say(f"[mur run] {exc}; starting each member afresh")
            return None
