"""A gateway member's upstream as the member runtime runs it (docs/gateway.md), in
the order a session uses it:

1. :func:`upstream_environment`: what the upstream's process sees: the variables
   ``capabilities.env.allow`` passes, ``PORT``, ``MURMUR_FORMATION_PEERS`` when the member
   may call someone, the forward proxy's variables, ``HOME``/``TMPDIR`` in the session;
   never a token (nor the runtime's own variables).
2. :class:`Upstream.start`: for ``command``, a free loopback port in place of ``{port}``
   and in ``PORT``, the command started in the capsule's directory in a process group
   of its own, its stdout and stderr on the member's stderr (the launcher prefixes them
   with the member's name and keeps them in its log; confined, its stderr is copied
   there by the runtime, which keeps the last lines); for ``url``, nothing to start.
3. :meth:`Upstream.wait_for_card`: the card read at ``card_path`` until it answers
   (within the readiness budget), the interface the door speaks found on it
   (``gateway.relay.interfaces``); every way this fails is ``E-RUN-049`` naming what
   happened (an upstream that exited says its exit status, and the path the sandbox
   denied it when its last words name one, with the grant that allows it).
4. :meth:`Upstream.exited`: waits for a started upstream to exit on its own; the session
   then ends with ``E-RUN-050``.
5. :meth:`Upstream.stop`: SIGTERM to the process group, SIGKILL 5 s later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.protocol import PEERS_ENV
from gateway.proxy.egress import peers_environ
from gateway.relay.client import (
    UpstreamCardError,
    UpstreamClient,
    fetch_card,
    new_session,
)
from gateway.relay.interfaces import upstream_interface
from launcher.admission.manifest import A2aAgent, UpstreamHeaderError
from launcher.diagnostics import Diagnostic, DiagnosticError
from launcher.member.outcome import (
    UPSTREAM_EXITED,
    UPSTREAM_NOT_READY,
    member_diagnostic,
)
from launcher.sandbox import descendants
from launcher.sandbox.denials import StderrTail, denied_path, grant_hint

if TYPE_CHECKING:
    from launcher.member.confinement import AgentPlan
    from launcher.sandbox.agent_cgroup import AgentCgroup
    from launcher.sandbox.seccomp import SocketFilter

#: How long an upstream may take to serve its card (the launcher waits 180 s for a
#: member's readiness line; this leaves the rest for the door).
READY_SECONDS = 120.0
#: How long after SIGTERM the upstream's process group gets SIGKILL.
STOP_GRACE = 5.0
_POLL_SECONDS = 0.05
#: What ``python``/``python3`` as a command's program means: the interpreter running the
#: member, so the upstream has the packages installed beside mur.
_PYTHON_NAMES = frozenset({"python", "python3", f"python3.{sys.version_info.minor}"})


def upstream_environment(allowed: Mapping[str, str], *, port: int | None,
                         callees: tuple[str, ...], home: Path | None,
                         tmp: Path | None) -> dict[str, str]:
    """The upstream's environment before the forward proxy's variables are added."""
    env = {name: value for name, value in allowed.items() if name != PEERS_ENV}
    env.update(peers_environ(callees))
    if port is not None:
        env["PORT"] = str(port)
    if home is not None:
        env.setdefault("HOME", str(home))
    if tmp is not None:
        env.setdefault("TMPDIR", str(tmp))
    return env


def free_loopback_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the upstream binds it itself)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """What the session knows of its upstream before starting it."""

    agent: A2aAgent
    capsule_dir: Path
    member: str
    capsule: str
    version: str


class Upstream:
    """One session's upstream: started (``command``) or reached (``url``)."""

    def __init__(self, spec: UpstreamSpec, headers: Mapping[str, str]) -> None:
        self.spec = spec
        self.headers = dict(headers)
        self.port: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.card: dict[str, Any] | None = None
        self.rpc_url: str | None = None
        self.stderr_tail: StderrTail | None = None
        #: Whether it runs confined (a refusal it prints is then the sandbox's).
        self.confined = False

    @classmethod
    def prepare(cls, spec: UpstreamSpec, environ: Mapping[str, str]) -> Upstream:
        """The upstream with its headers expanded from ``environ`` (the variables
        ``capabilities.env.allow`` passes); ``E-RUN-049`` naming a header whose
        variable is missing."""
        try:
            headers = spec.agent.expand_headers(environ)
        except UpstreamHeaderError as exc:
            raise DiagnosticError(_not_ready(spec, str(exc),
                                             "set the variable, and name it in "
                                             "`capabilities.env.allow`")) from None
        upstream = cls(spec, headers)
        if spec.agent.command is not None:
            upstream.port = free_loopback_port()
        return upstream

    @property
    def base_url(self) -> str:
        if self.port is not None:
            return f"http://127.0.0.1:{self.port}"
        assert self.spec.agent.url is not None
        return self.spec.agent.url

    @property
    def card_url(self) -> str:
        return self.spec.agent.card_url(self.base_url if self.port is not None else None)

    def program(self, env: Mapping[str, str]) -> str:
        """The program a ``command`` upstream runs, as a path (nothing for a ``url`` one)."""
        command = self.spec.agent.command
        return _program(command[0], env) if command else ""

    async def start(self, env: Mapping[str, str], *,
                    confinement: AgentPlan | None = None,
                    cgroup: AgentCgroup | None = None,
                    output: Callable[[bytes], None] | None = None) -> None:
        """Start a ``command`` upstream (a ``url`` one already runs), confined as
        ``confinement`` says (Landlock, the socket filter and no capability, applied
        between its fork and its exec: both are built here, the child only applies
        them); in ``cgroup`` (joined first, before it is confined), when given. What it
        prints (stdout and stderr, one pipe) is copied to this runtime's stderr and told
        to ``output`` (the session's output log)."""
        agent = self.spec.agent
        if agent.command is None or self.port is None:
            return
        argv = agent.command_for(self.port)
        argv[0] = _program(argv[0], env)
        self.confined = confinement is not None
        ruleset = _ruleset(confinement)
        socket_filter = _socket_filter(confinement)
        join = _join_fd(cgroup)
        try:
            with descendants.starting():
                self.process = await asyncio.create_subprocess_exec(
                    *argv, cwd=self.spec.capsule_dir, env=dict(env), start_new_session=True,
                    # Both through here: kept in the output log, and a refusal it prints
                    # names the path the sandbox denied (launcher/sandbox/denials.py).
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    preexec_fn=None if confinement is None and join is None
                    else _confine_child(ruleset, socket_filter, join,
                                        confined=confinement is not None))
                descendants.own(self.process.pid)
        except (OSError, subprocess.SubprocessError) as exc:
            if isinstance(exc, PermissionError) and confinement is not None:
                raise DiagnosticError(_denied(self.spec, "it could not be started", argv[0])
                                      ) from None
            why = getattr(exc, "strerror", None) or exc
            raise DiagnosticError(_not_ready(
                self.spec, f"`agent.a2a.command` cannot be started: {why}",
                "correct `agent.a2a.command` (its program must exist and be executable)"
            )) from None
        finally:
            if ruleset is not None:
                os.close(ruleset)
            if join is not None:
                os.close(join)
        if self.process.stdout is not None:
            self.stderr_tail = StderrTail(sys.stderr.fileno(), keep=output)
            self.stderr_tail.follow(self.process.stdout)

    async def wait_for_card(self, seconds: float = READY_SECONDS) -> UpstreamClient:
        """Read the card until it answers; the client for its JSON-RPC interface."""
        session = new_session(limit=1)
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        last = "it did not answer"
        try:
            while True:
                await self._check_alive()
                try:
                    card = await fetch_card(session, self.card_url, self.headers)
                except UpstreamCardError as exc:
                    raise DiagnosticError(_not_ready(self.spec, str(exc), _CARD_FIX)) from None
                except Exception as exc:  # noqa: BLE001 - not answering yet is retried
                    last = f"it did not answer ({type(exc).__name__})"
                else:
                    break
                if loop.time() >= until:
                    raise DiagnosticError(_not_ready(
                        self.spec, f"its agent card was not served within {seconds:g} s; "
                        f"{last}", "make the server listen on 127.0.0.1 at the port in "
                        "`{port}`/PORT and serve its card at `agent.a2a.card_path`"))
                await asyncio.sleep(_POLL_SECONDS)
        finally:
            await session.close()
        try:
            interface = upstream_interface(card, self.card_url)
        except UpstreamCardError as exc:
            raise DiagnosticError(_not_ready(self.spec, str(exc), _CARD_FIX)) from None
        self.card, self.rpc_url = card, interface.url
        return UpstreamClient(interface.url, member=self.spec.member, headers=self.headers,
                              framing=interface.framing())

    async def _check_alive(self) -> None:
        process = self.process
        if process is None or process.returncode is None:
            return
        exited = f"it exited before it served its card ({exit_text(process)})"
        tail = self.stderr_tail
        if tail is not None:
            await tail.finish()
        if tail is not None and self.confined:  # else no sandbox denied it anything
            path = denied_path(tail.lines)
            if path is not None:
                raise DiagnosticError(_denied(self.spec, exited, path))
        raise DiagnosticError(_not_ready(
            self.spec, exited, "run `agent.a2a.command` by hand in the capsule's directory "
            "to see why it stops (its output is above)"))

    async def exited(self) -> Diagnostic:
        """Wait until a started upstream exits; the diagnostic that ends the member."""
        process = self.process
        if process is None:
            await asyncio.Event().wait()  # a url upstream is not ours to watch
        assert process is not None
        await process.wait()
        return member_diagnostic(UPSTREAM_EXITED, capsule=self.spec.capsule,
                                 version=self.spec.version, status=exit_text(process))

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM to the upstream's process group, SIGKILL ``grace`` seconds later."""
        process = self.process
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            pass
        # The group may outlive its leader (a server's workers): end them all.
        _signal_group(process.pid, signal.SIGKILL)
        if process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), grace)
        if self.stderr_tail is not None:
            await self.stderr_tail.finish(grace=0.5)


_CARD_FIX = ("serve an A2A agent card (1.0 with a JSONRPC or HTTP+JSON interface, or 0.3 with "
             "a JSONRPC url) at "
             "`agent.a2a.card_path` (default /.well-known/agent-card.json)")


def _denied(spec: UpstreamSpec, what: str, path: str) -> Diagnostic:
    """``E-RUN-049`` for an upstream the sandbox denied ``path``: names it and the grant."""
    return _not_ready(
        spec, f"{what}: the sandbox denied it `{path}`",
        f"grant it: add `{grant_hint(path)}` to `capabilities.filesystem.read` in "
        "murmur.yaml (read and execute, never write), or install it under a path the "
        "sandbox grants (docs/isolation.md)")


def _not_ready(spec: UpstreamSpec, problem: str, fix: str) -> Diagnostic:
    return member_diagnostic(UPSTREAM_NOT_READY, "agent.a2a", capsule=spec.capsule,
                             version=spec.version, problem=problem, fix=fix)


def _program(program: str, env: Mapping[str, str]) -> str:
    """The command's program as a path: ``python``/``python3`` is the interpreter running
    the member; a bare name is looked up on the upstream's PATH, else the runtime's."""
    if "/" in program:
        return program
    if program in _PYTHON_NAMES:
        return sys.executable
    return shutil.which(program, path=env.get("PATH")) or shutil.which(program) or program


def exit_text(process: asyncio.subprocess.Process) -> str:
    code = process.returncode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _ruleset(confinement: AgentPlan | None) -> int | None:
    """The Landlock ruleset of ``confinement``, when the kernel offers Landlock."""
    if confinement is None:
        return None
    from launcher.sandbox.landlock import Confinement, build_ruleset, host_support

    support = host_support()
    if not support.files:
        return None
    return build_ruleset(Confinement(read=confinement.read, write=confinement.write,
                                     connect_ports=confinement.connect,
                                     bind_ports=confinement.bind), support)


def _socket_filter(confinement: AgentPlan | None) -> SocketFilter | None:
    """The seccomp socket filter, built here so the child only installs it."""
    if confinement is None or not confinement.seccomp:
        return None
    from launcher.sandbox.seccomp import socket_filter

    return socket_filter()


def _join_fd(cgroup: AgentCgroup | None) -> int | None:
    if cgroup is None:
        return None
    try:
        return cgroup.join_fd()
    except OSError:
        return None


def _confine_child(ruleset: int | None, socket_filter: SocketFilter | None,
                   join: int | None, *, confined: bool) -> Callable[[], None]:
    from launcher.sandbox.landlock import restrict_self
    from launcher.sandbox.privileges import drop_all_capabilities
    from launcher.sandbox.seccomp import install

    def confine() -> None:  # in the child, between fork and exec
        if join is not None:  # before Landlock, which would refuse the write
            with contextlib.suppress(OSError):
                os.write(join, b"0")
        if not confined:
            return
        if ruleset is not None:
            restrict_self(ruleset)
        if socket_filter is not None:
            install(socket_filter)
        drop_all_capabilities()

    return confine
