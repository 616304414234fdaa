"""Formation and session ids: UUIDv7 behind frm_ / ses_."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from launcher.ids import (
    id_time,
    is_formation_id,
    is_session_id,
    new_formation_id,
    new_session_id,
)


def test_formation_id_is_prefix_and_32_lowercase_hex_of_a_uuid7() -> None:
    ident = new_formation_id()
    assert ident.startswith("frm_") and len(ident) == 36
    parsed = uuid.UUID(hex=ident[4:])
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert ident[4:] == ident[4:].lower()
    assert is_formation_id(ident) and not is_session_id(ident)


def test_session_id_is_its_own_kind() -> None:
    ident = new_session_id()
    assert ident.startswith("ses_")
    assert uuid.UUID(hex=ident[4:]).version == 7
    assert is_session_id(ident) and not is_formation_id(ident)


def test_ids_are_strictly_increasing_within_a_process() -> None:
    ids = [new_formation_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    mixed = [new_session_id()[4:] if i % 2 else new_formation_id()[4:] for i in range(200)]
    assert mixed == sorted(mixed)


def test_id_time_is_the_minting_time_in_utc() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=2)
    ident = new_formation_id()
    after = datetime.now(UTC) + timedelta(milliseconds=2)
    moment = id_time(ident)
    assert moment.tzinfo is UTC
    assert before <= moment <= after


def test_id_time_reads_the_reference_example() -> None:
    example = "frm_0199c4e2f1b7712a9d3e4f5061728394"
    assert is_formation_id(example)
    assert id_time(example) == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        milliseconds=0x0199C4E2F1B7)
    assert id_time(example).year == 2025


@pytest.mark.parametrize("value", [
    "",
    "frm_",
    "frm_0199C4E2F1B7712A9D3E4F5061728394",   # upper case
    "frm_0199c4e2f1b7412a9d3e4f5061728394",   # version 4
    "frm_0199c4e2f1b7712a1d3e4f5061728394",   # variant bits not 10
    "frm_0199c4e2f1b7712a9d3e4f506172839",    # 31 digits
    "frm_0199c4e2f1b7712a9d3e4f50617283945",  # 33 digits
    "frm-0199c4e2f1b7712a9d3e4f5061728394",
    " frm_0199c4e2f1b7712a9d3e4f5061728394",
    "frm_0199c4e2f1b7712a9d3e4f5061728394\n",
    "ses_0199c4e2f1b7712a9d3e4f5061728394",
])
def test_malformed_formation_ids_are_refused(value: str) -> None:
    assert not is_formation_id(value)


def test_non_strings_are_not_ids() -> None:
    assert not is_formation_id(None)
    assert not is_session_id(b"ses_0199c4e2f1b7712a9d3e4f5061728394")


def test_id_time_refuses_what_is_not_an_id_without_echoing_it() -> None:
    with pytest.raises(ValueError) as caught:
        id_time("mft1.secret-looking.thing")
    assert "mft1" not in str(caught.value)
