"""The token scenario's door (loadtests/locustfile.py, ``TokenUser``): the door of member
``hub`` of a formation the load test minted, DoorAuth and the A2A app under uvicorn on
127.0.0.1, in a process of its own.

Reads one line on stdin, ``<public key hex> <formation id>``, prints ``PORT <n>``, and
serves until it is terminated. It never sees a private key or a token but those sent to
it on the wire.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import logging

    import uvicorn

    from gateway.auth.door_auth import AuthPolicy
    from gateway.auth.tokens import FormationVerifier
    from gateway.door.app import DoorSettings, build_door
    from gateway.door.card import CardInfo
    from gateway.door.tasks import TaskRun

    logging.disable(logging.WARNING)     # a forged token is refused at INFO, by design
    public_hex, formation = sys.stdin.readline().split()

    async def agent(run: TaskRun) -> str:
        return "ok"

    policy = AuthPolicy(authenticated=True,
                        verifier=FormationVerifier(bytes.fromhex(public_hex), formation),
                        member="hub", accept_peer_tasks=True)
    door = build_door(agent, DoorSettings(card=CardInfo(name="hub", description="load",
                                                        version="1", member="hub",
                                                        formation_id=formation)),
                      policy=policy)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)          # connections wait in the backlog until uvicorn serves
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(door.app, log_level="error", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
