"""The hash chain of a trace (launcher/home/trace_chain.py) and the seals
(launcher/home/seals.py), without a formation: what the writer chains, where it resumes,
what the verifier blames, and what a seal covers."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.auth.tokens import FormationKey
from launcher.home.seals import Sealer, canonical, seal_valid, verify_seals
from launcher.home.trace import TraceWriter
from launcher.home.trace_chain import link, seed, trace_lines, verify_chain

SESSION = "ses_0190c0de00007000800000000000beef"
FORMATION = "frm_0190c0de00007000800000000000beef"


def written(path: Path, count: int = 4) -> list[bytes]:
    with TraceWriter(path, session_id=SESSION) as trace:
        trace.write("session_start", session_id=SESSION)
        for n in range(count - 1):
            trace.write("task_state", task_id=f"t{n}", state="TASK_STATE_WORKING")
    return path.read_bytes().splitlines()


def test_each_record_names_the_line_before_and_the_first_the_session(tmp_path: Path) -> None:
    lines = written(tmp_path / "trace.jsonl")
    records = [json.loads(line) for line in lines]
    assert records[0]["prev"] == seed(SESSION)
    for before, record in zip(lines, records[1:], strict=False):
        assert record["prev"] == link(before)
    assert verify_chain(trace_lines(b"\n".join(lines) + b"\n"), None) == []


def test_a_resumed_trace_continues_its_chain_even_after_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    written(path, 2)
    with open(path, "ab") as handle:
        handle.write(b'{"ts":"2026-12-05T00:00:00Z","event":"tor')   # killed mid-write
    with TraceWriter(path, session_id=SESSION) as trace:
        trace.write("session_resumed")
    data = path.read_bytes()
    lines = trace_lines(data)
    assert [line.record["event"] for line in lines] == ["session_start", "task_state",
                                                        "session_resumed"]
    assert lines[2].number == 4                        # the torn line stays on its own
    assert verify_chain(lines, None) == []


def test_a_record_written_inside_another_write_waits_its_turn(tmp_path: Path) -> None:
    """A signal handler's record, written while another is being written, follows it."""
    path = tmp_path / "trace.jsonl"
    trace = TraceWriter(path, session_id=SESSION)
    original = trace._append

    def interrupted(line: bytes) -> None:
        trace._append = original                        # once
        trace.write("session_end", reason="signal")     # as a signal handler would
        original(line)

    trace._append = interrupted                         # type: ignore[method-assign]
    trace.write("task_state", state="TASK_STATE_WORKING")
    trace.close()
    lines = trace_lines(path.read_bytes())
    assert [line.record["event"] for line in lines] == ["task_state", "session_end"]
    assert verify_chain(lines, SESSION) == []


def test_prev_is_the_writers_field_alone(tmp_path: Path) -> None:
    import pytest

    with TraceWriter(tmp_path / "t.jsonl", session_id=SESSION) as trace, \
            pytest.raises(ValueError, match="prev"):
        trace.write("x", prev="forged")


def test_the_verifier_blames_the_changed_the_inserted_and_the_moved_line(
        tmp_path: Path) -> None:
    lines = written(tmp_path / "trace.jsonl", 6)

    def blamed(changed: list[bytes]) -> list[int]:
        return [b.line for b in verify_chain(trace_lines(b"\n".join(changed)), SESSION)]

    edited = list(lines)
    # The field itself: a bare "t1" also turns up in a `prev` (base64url) now and then.
    edited[2] = edited[2].replace(b'"task_id":"t1"', b'"task_id":"t9"')
    assert edited[2] != lines[2]
    assert blamed(edited) == [3]
    inserted = list(lines)
    forged = json.loads(lines[2])
    forged["prev"] = link(lines[1])                     # a forger who knows the chain
    inserted.insert(2, json.dumps(forged).encode())
    assert blamed(inserted) == [3]
    swapped = list(lines)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    assert blamed(swapped) == [3]
    replaced = [line.replace(SESSION.encode(), b"ses_other") for line in lines]
    assert blamed(replaced) == [1]


def test_a_seal_is_signed_over_its_canonical_form_and_checks_a_trace(
        tmp_path: Path) -> None:
    key = FormationKey.generate()
    trace = tmp_path / "trace.jsonl"
    written(trace, 3)
    sealer = Sealer(FORMATION, tmp_path / "seals.jsonl", key.sign)
    sealer.watch("coder", trace, SESSION)
    first = sealer.seal(at="now")
    assert first is not None and first["members"]["coder"]["records"] == 3
    assert sealer.seal(at="later") is None               # nothing grew: no seal
    assert sealer.seal(final=True, at="end")["seq"] == 2  # type: ignore[index]
    assert seal_valid(first, key.public_bytes)
    assert not seal_valid({**first, "seq": 7}, key.public_bytes)
    assert not seal_valid(first, FormationKey.generate().public_bytes)
    assert b"signature" not in canonical(first)
    lines = trace_lines(trace.read_bytes())
    assert verify_seals(tmp_path / "seals.jsonl", key.public_bytes, FORMATION,
                        {"coder": (str(trace), lines)}) == []
    # Records the seals do not cover yet are unsealed while no final seal came; after
    # the final seal (every member had stopped), added: tampered. Fewer than sealed,
    # tampered.
    with TraceWriter(trace, session_id=SESSION) as writer:
        writer.write("late")
    grown = {"coder": (str(trace), trace_lines(trace.read_bytes()))}
    findings = verify_seals(tmp_path / "seals.jsonl", key.public_bytes, FORMATION, grown)
    assert [(f.kind, f.line) for f in findings] == [("tampered", 4)]
    assert "follow the final seal" in findings[0].problem
    only_first = tmp_path / "first.jsonl"
    only_first.write_bytes((tmp_path / "seals.jsonl").read_bytes().splitlines(True)[0])
    findings = verify_seals(only_first, key.public_bytes, FORMATION, grown)
    assert [(f.kind, f.line) for f in findings] == [("unsealed", 4)]
    findings = verify_seals(tmp_path / "seals.jsonl", key.public_bytes, FORMATION,
                            {"coder": (str(trace), lines[:2])})
    assert [f.kind for f in findings] == ["tampered"]
    # A member the seals name whose trace is gone.
    findings = verify_seals(tmp_path / "seals.jsonl", key.public_bytes, FORMATION, {})
    assert [(f.kind, f.file.endswith("seals.jsonl")) for f in findings] == [
        ("tampered", True)]


def test_the_key_never_signs_what_could_pass_for_a_token() -> None:
    import pytest

    with pytest.raises(ValueError):
        FormationKey.generate().sign(b"mft1.eyJ9")
