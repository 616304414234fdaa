"""Property: every spelling of a callee's virtual address other than the exact one is
refused before anything is opened, whichever mix of tricks writes it."""

from __future__ import annotations

import asyncio

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.proxy.formation import FormationClient, FormationRefused, FormationTransport
from tests.support.proxy_fakes import Doors, FakeDoor, FakeNet

CANONICAL = "http://coder.formation.invalid/"
HOST = "coder.formation.invalid"


@st.composite
def spellings(draw: st.DrawFn) -> str:
    host = "".join(
        (char.upper() if draw(st.booleans()) else char) if char.isalpha() else char
        for char in HOST)
    if draw(st.booleans()):
        index = draw(st.integers(0, len(host) - 1))
        host = host[:index] + f"%{ord(host[index]):02X}" + host[index + 1:]
    host += "." * draw(st.integers(0, 2))
    host += draw(st.sampled_from(["", "", ":80", ":8080", ":"]))
    userinfo = draw(st.sampled_from(["", "", "x@", "x:y@", "@"]))
    scheme = draw(st.sampled_from(["http", "http", "https", "HTTP"]))
    return f"{scheme}://{userinfo}{host}/"


async def attempt(url: str) -> tuple[bool, int]:
    door = FakeDoor()
    net = FakeNet({"127.0.0.1:4401": door})
    doors = Doors({"coder": "http://127.0.0.1:4401"})
    transport = FormationTransport(net, tokens={"coder": "mft1.a.b"}, doors=doors,
                                   allow=["localhost"])
    async with FormationClient(transport=transport) as client:
        try:
            await client.post(url, json={})
        except FormationRefused:
            return False, len(net.opened) + len(doors.lookups)
    return True, len(door.seen)


@settings(max_examples=150, deadline=None)
@given(spellings())
@example(CANONICAL)
@example("http://coder.formation.invalid:/")
def test_any_spelling_but_the_exact_one_is_refused_before_anything_opens(url: str) -> None:
    reached, count = asyncio.run(attempt(url))
    if url == CANONICAL:
        assert reached and count == 1
    else:
        assert not reached and count == 0, url
