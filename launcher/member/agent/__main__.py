"""``python -m launcher.member.agent FD``: an agent process in a fresh interpreter, its
socketpair on descriptor FD (a restart, or a runtime that took no warm fork)."""

from __future__ import annotations

import socket
import sys

from launcher.member.agent.host import forked_child

if __name__ == "__main__":
    forked_child(socket.socket(fileno=int(sys.argv[1])))
