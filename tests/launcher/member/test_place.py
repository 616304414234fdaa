"""Where a member stands in a formation: channel, lifeline, started by hand, resumed."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gateway.auth.tokens import FormationKey
from launcher.ids import new_formation_id, new_session_id
from launcher.member.place import close_place, forget_descriptors, read_place
from launcher.spawn.channel import ChannelRefused, encode_credentials

SESSION = new_session_id()


@pytest.fixture
def fds() -> Iterator[list[int]]:
    opened: list[int] = []
    yield opened
    for fd in opened:
        try:
            os.close(fd)
        except OSError:
            pass


def channel(fds: list[int], formation: str, key: FormationKey, member: str,
            callees: tuple[str, ...] = (), entry: bool = False) -> int:
    read_end, write_end = os.pipe()
    fds += [read_end, write_end]
    tokens = {c: key.mint(formation=formation, caller=member, callee=c) for c in callees}
    os.write(write_end, encode_credentials(formation_id=formation, member=member,
                                           key=key.public_bytes, tokens=tokens, entry=entry))
    return read_end


def lifeline(fds: list[int]) -> int:
    read_end, write_end = os.pipe()
    fds += [read_end, write_end]
    return read_end


def test_no_formation_variable_is_no_formation() -> None:
    place = read_place({}, session_id=SESSION)
    assert place.formation_id is None and place.member is None
    assert place.callees == () and place.lifeline is None and place.warnings == ()
    assert not place.verifies_tokens


def test_a_member_handed_a_channel_and_a_lifeline(fds: list[int]) -> None:
    formation, key = new_formation_id(), FormationKey.generate()
    environ = {"MURMUR_FORMATION_ID": formation,
               "MURMUR_FORMATION_CHANNEL": str(channel(fds, formation, key, "planner",
                                                       ("coder", "reviewer"), entry=True)),
               "MURMUR_FORMATION_LIFELINE": str(lifeline(fds))}
    place = read_place(environ, session_id=SESSION)
    assert place.formation_id == formation and place.member == "planner"
    assert place.callees == ("coder", "reviewer") and place.entry
    assert place.key == key.public_bytes and place.verifies_tokens
    assert place.lifeline is not None and not os.get_inheritable(place.lifeline)
    assert place.warnings == ()
    assert "mft1." not in repr(place)


def test_a_channel_without_a_lifeline_is_a_member_started_by_hand(fds: list[int]) -> None:
    formation, key = new_formation_id(), FormationKey.generate()
    environ = {"MURMUR_FORMATION_ID": formation,
               "MURMUR_FORMATION_CHANNEL": str(channel(fds, formation, key, "coder"))}
    place = read_place(environ, session_id=SESSION)
    assert place.member == "coder" and place.lifeline is None
    assert [w.code for w in place.warnings] == ["W-RUN-007"]
    assert SESSION in place.warnings[0].hint


def test_a_formation_id_alone_warns_and_keeps_the_id() -> None:
    formation = new_formation_id()
    place = read_place({"MURMUR_FORMATION_ID": formation}, session_id=SESSION)
    assert place.formation_id == formation and place.member is None
    assert not place.verifies_tokens
    assert [w.code for w in place.warnings] == ["W-RUN-007"]
    assert formation in place.warnings[0].message


def test_a_formation_id_that_is_no_id_is_not_recorded() -> None:
    place = read_place({"MURMUR_FORMATION_ID": "not-an-id"}, session_id=SESSION)
    assert place.formation_id is None
    assert [w.code for w in place.warnings] == ["W-RUN-007"]


def test_peers_in_the_environment_are_refused_even_when_resuming() -> None:
    for resume in (False, True):
        with pytest.raises(ChannelRefused) as caught:
            read_place({"MURMUR_FORMATION_PEERS": ""}, session_id=SESSION, resume=resume)
        assert caught.value.code == "E-RUN-046"


def test_a_resumed_session_ignores_every_formation_variable(fds: list[int]) -> None:
    formation = new_formation_id()
    environ = {"MURMUR_FORMATION_ID": formation, "MURMUR_FORMATION_CHANNEL": "999",
               "MURMUR_FORMATION_LIFELINE": "998"}
    place = read_place(environ, session_id=SESSION, resume=True)
    assert place.formation_id is None and place.lifeline is None and place.warnings == ()


def test_a_lifeline_that_is_not_an_open_pipe_is_refused(fds: list[int],
                                                        tmp_path: object) -> None:
    formation = new_formation_id()
    for value in ("997", "abc"):
        with pytest.raises(ChannelRefused) as caught:
            read_place({"MURMUR_FORMATION_ID": formation,
                        "MURMUR_FORMATION_LIFELINE": value}, session_id=SESSION)
        assert caught.value.code == "E-RUN-046"
        assert "MURMUR_FORMATION_LIFELINE" in str(caught.value)


def test_the_channel_refusals_reach_the_member(fds: list[int]) -> None:
    formation, key = new_formation_id(), FormationKey.generate()
    read_end = channel(fds, formation, key, "coder")
    with pytest.raises(ChannelRefused) as caught:
        read_place({"MURMUR_FORMATION_ID": new_formation_id(),
                    "MURMUR_FORMATION_CHANNEL": str(read_end)}, session_id=SESSION)
    assert caught.value.case == "other_formation"


def test_descriptor_variables_are_forgotten_once_read_and_the_id_kept() -> None:
    environ = {"MURMUR_FORMATION_ID": "frm_x", "MURMUR_FORMATION_CHANNEL": "5",
               "MURMUR_FORMATION_LIFELINE": "6", "OTHER": "1"}
    forget_descriptors(environ)
    assert environ == {"MURMUR_FORMATION_ID": "frm_x", "OTHER": "1"}


def test_close_place_closes_the_lifeline(fds: list[int]) -> None:
    formation = new_formation_id()
    fd = lifeline(fds)
    place = read_place({"MURMUR_FORMATION_ID": formation,
                        "MURMUR_FORMATION_LIFELINE": str(fd)}, session_id=SESSION)
    close_place(place)
    with pytest.raises(OSError):
        os.fstat(fd)


# --- a delegated child (docs/delegation.md) ------------------------------------------


def test_a_delegated_child_adopts_its_spawner_lifeline_and_keeps_only_the_formation_id(
        fds: list[int]) -> None:
    formation = new_formation_id()
    parent = new_session_id()
    spawner = lifeline(fds)
    environ = {"MURMUR_FORMATION_ID": formation, "MURMUR_SPAWNER_LIFELINE": str(spawner),
               "MURMUR_PARENT_SESSION": parent, "MURMUR_DELEGATED_BY": "boss",
               "MURMUR_DELEGATION_DEPTH": "2", "MURMUR_DELEGATION_MAX_DEPTH": "3"}
    place = read_place(environ, session_id=SESSION)
    assert place.delegated and place.lifeline == spawner
    assert place.formation_id == formation and place.member is None
    assert place.credentials is None and not place.verifies_tokens
    assert place.warnings == (), "a delegated child prints no W-RUN-007"
    assert place.lineage is not None
    assert (place.lineage.parent_session, place.lineage.delegated_by, place.lineage.depth,
            place.lineage.max_depth) == (parent, "boss", 2, 3)
    assert not os.get_inheritable(spawner)
    forget_descriptors(environ)
    assert environ == {"MURMUR_FORMATION_ID": formation}


def test_a_spawner_lifeline_beside_a_formation_channel_is_refused(fds: list[int]) -> None:
    formation, key = new_formation_id(), FormationKey.generate()
    environ = {"MURMUR_FORMATION_ID": formation,
               "MURMUR_FORMATION_CHANNEL": str(channel(fds, formation, key, "boss")),
               "MURMUR_SPAWNER_LIFELINE": str(lifeline(fds))}
    with pytest.raises(ChannelRefused) as refused:
        read_place(environ, session_id=SESSION)
    assert refused.value.case == "spawner_beside_formation"
    assert refused.value.diagnostic.code == "E-RUN-046"


def test_a_spawner_lifeline_that_is_not_a_pipe_is_refused(fds: list[int]) -> None:
    with pytest.raises(ChannelRefused) as refused:
        read_place({"MURMUR_SPAWNER_LIFELINE": "999"}, session_id=SESSION)
    assert refused.value.case == "not_open"
    assert "MURMUR_SPAWNER_LIFELINE" in str(refused.value.diagnostic.message)


def test_a_lineage_without_a_spawner_lifeline_is_no_child(fds: list[int]) -> None:
    place = read_place({"MURMUR_PARENT_SESSION": new_session_id(),
                        "MURMUR_DELEGATION_DEPTH": "1"}, session_id=SESSION)
    assert not place.delegated and place.lineage is None
