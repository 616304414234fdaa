"""The member template: one warm interpreter per formation that forks each member runtime
(``python -m launcher.template FD``; docs/launcher.md, "Starting members"). Like
``cli.py``, an entry point of ``mur``: it may import every part.

A member runtime started afresh spends most of its start importing (pydantic, uvicorn,
httpx's neighbours: some 0.3 s of CPU); a formation of 30 paid that 30 times. The
launcher instead starts this program once, exec'd afresh (so it holds nothing of the
launcher's memory: no signing key, no token), and asks it for each member. In order:

1. it imports what a member runtime imports, ignores SIGINT, SIGTERM and SIGHUP (sent to
   the launcher's group, they are for the launcher and the members), dies with the
   launcher (``PR_SET_PDEATHSIG``), and says
   ``ready`` on its socket (an ``AF_UNIX`` ``SOCK_SEQPACKET`` pair: one JSON message per
   packet, descriptors beside it);
2. for each ``spawn`` (``id``, ``argv``, ``env`` and ``unset``: how its environment
   differs from the template's, ``cwd``, ``own_group``; descriptors:
   stdin, stdout, stderr or none, the formation channel, the lifeline) it forks; the
   child becomes the member: its own process group when asked, the descriptors at 0, 1,
   2 and the channel's and lifeline's numbers in its environment, every other descriptor
   closed, default signal handling, its environment changed as asked (the template's
   own, and any credential in it, never travels in a message), its directory, then
   ``mur`` with ``argv``, exactly as ``python -m launcher.cli`` would run it; the
   template answers ``spawned`` (``id``, ``pid``) and closes its copies;
3. each member that ends is reaped here and reported ``exited`` (``pid``, ``status``:
   the exit code, or minus the signal);
4. end of file on its socket (the launcher is done, or gone) ends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any, NoReturn

#: The largest message either side sends (a member's environment, mostly).
MESSAGE_BYTES = 1 << 20
#: Descriptors that travel with a spawn request, in this order.
SLOTS = ("stdin", "stdout", "stderr", "channel", "lifeline")
_PR_SET_PDEATHSIG = 1


def main(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    _warm()
    from launcher.sandbox.landlock import prctl

    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # A signal to the launcher's process group (a Ctrl-C; an init such as dumb-init or
    # tini passing on `docker stop`) is for the launcher and the members: the template
    # must outlive the wind-down to report the members' exits. It ends when the launcher
    # closes its socket, or at once when the launcher dies (the death signal above).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sock.sendall(json.dumps({"op": "ready", "pid": os.getpid()}).encode())
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "launcher")
    selector.register(wake_read, selectors.EVENT_READ, "children")
    while True:
        for key, _ in selector.select():
            if key.data == "children":
                with contextlib.suppress(OSError):
                    os.read(wake_read, 4096)
                _report_exits(sock)
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, len(SLOTS))
            except OSError:
                data, fds = b"", []
            if not data:
                return 0
            _serve(sock, json.loads(data), fds)


def _warm() -> None:
    """Import what every member runtime imports (and keep mur off the current
    directory's modules, as ``launcher.cli.main`` does for a program)."""
    # Every door serves gRPC where the grpc extra is installed (grpcio, protobuf); a
    # runtime installed without it (`make demo`'s) serves the other two bindings, and its
    # template must not fail, and print a traceback, for want of it (docs/grpc.md).
    with contextlib.suppress(ImportError):
        import gateway.grpc.server  # noqa: F401
    import launcher.cli
    import launcher.commands.running
    import launcher.home.task_db  # noqa: F401 - sqlite3, at a member's first task
    import launcher.member.main
    import launcher.member.session  # noqa: F401 - imported to be inherited warm

    launcher.cli.forget_working_directory()


def _serve(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    descriptors = dict(zip(request.get("slots", SLOTS), fds, strict=False))
    try:
        pid = os.fork()
    except OSError as exc:
        _close(fds)
        sock.sendall(json.dumps({"op": "spawned", "id": request.get("id"),
                                 "error": exc.strerror or str(exc)}).encode())
        return
    if pid == 0:  # pragma: no cover - the child's lines run in the child
        _become_member(request, descriptors)
    _close(fds)
    sock.sendall(json.dumps({"op": "spawned", "id": request.get("id"), "pid": pid}).encode())


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            sock.sendall(json.dumps({"op": "exited", "pid": pid,
                                     "status": os.waitstatus_to_exitcode(status)}).encode())


def _become_member(request: dict[str, Any], descriptors: dict[str, int]) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        if request.get("own_group"):
            os.setpgid(0, 0)
        for number, slot in enumerate(("stdin", "stdout", "stderr")):
            if slot in descriptors:
                os.dup2(descriptors[slot], number)
        env = {str(k): str(v) for k, v in request.get("env", {}).items()}
        kept = {0, 1, 2}
        for slot, variable in (("channel", "channel_env"), ("lifeline", "lifeline_env")):
            if slot in descriptors and request.get(variable):
                fd = descriptors[slot]
                os.set_inheritable(fd, True)
                env[request[variable]] = str(fd)
                kept.add(fd)
        _close_all_but(kept)
        os.chdir(request["cwd"])
        # Changes only: the environment this process was born with stays where it is (in
        # the C environ and os.environ), where an agent process's scrub overwrites it.
        for name in request.get("unset", []):
            os.environ.pop(str(name), None)
        os.environ.update(env)
        argv = [str(arg) for arg in request["argv"]]
        sys.argv = ["mur", *argv]
        from launcher.cli import run_program

        code = run_program(argv)
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    except BaseException:  # noqa: BLE001 - a member that cannot start says why, then ends
        import traceback

        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _close_all_but(kept: set[int]) -> None:
    """Close every descriptor this process has but ``kept`` (the template's socket, its
    wake-up pipe, its selector and whatever else it opened)."""
    try:
        opened = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        opened = list(range(os.sysconf("SC_OPEN_MAX")))
    for fd in opened:
        if fd not in kept:
            with contextlib.suppress(OSError):
                os.close(fd)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
