"""Seals of a formation's traces: ``seals.jsonl`` in the formation directory (docs/audit.md).

While a formation runs, the launcher seals every member's trace every
:data:`SEAL_INTERVAL` seconds (when a trace grew) and once more after the last member
stopped. A seal is one line: ``{"formation", "seq", "at", "members": {"<name>":
{"session", "records", "head"}}, "signature"}``: for each member, how many records its
trace held (up to its last complete line) and the ``link`` of the last of them
(launcher/home/trace_chain.py), signed with the formation key over the seal's canonical
JSON (sorted keys, no spaces, UTF-8, without ``signature``). The last seal is marked
``"final": true``; a seal's head (:func:`seal_head`) is the SHA-256 of that same
canonical JSON, and the final seal's head, which the launcher prints as it ends, names
the whole record. The public key is in ``formation.json``; the private key is dropped
when the formation ends, so seals can be checked forever and made by nobody after.

In order: the canonical form, the head and the signature (:func:`canonical`,
:func:`seal_head`, :func:`seal_valid`); :class:`TraceCursor`, one trace read as it grows
(only its new bytes each time); :class:`Sealer`, the launcher's side; then what ``mur
audit`` checks (:func:`check_seals`): every seal's signature and sequence, every
member's trace against every seal, then, once the launcher has ended, that the record
ends with its final seal; each finding with its file and line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.home.trace_chain import TraceLine, link, record_of, seed

__all__ = ["SEALS_FILE", "SEAL_INTERVAL", "SHORT_HEAD", "SealCheck", "SealFinding",
           "Sealer", "TraceCursor", "canonical", "check_seals", "read_seals", "seal_head",
           "seal_valid", "verify_seals"]

SEALS_FILE = "seals.jsonl"
SEAL_INTERVAL = 10.0
#: How many hex digits of a head the launcher prints (48 bits: enough that a record
#: made to match a head it was shown is out of reach, short enough to copy by hand).
SHORT_HEAD = 12
Sign = Callable[[bytes], bytes]


def canonical(seal: Mapping[str, Any]) -> bytes:
    """What a seal's signature covers: its JSON without ``signature``, keys sorted."""
    body = {key: value for key, value in seal.items() if key != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def seal_head(seal: Mapping[str, Any]) -> str:
    """The seal's head: the SHA-256 (64 lowercase hex digits) of its canonical form, the
    bytes its signature covers. It commits to every member's session, record count and
    last record's link, so the final seal's head names the whole record."""
    return hashlib.sha256(canonical(seal)).hexdigest()


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal_valid(seal: Mapping[str, Any], public_key: bytes) -> bool:
    """Whether ``seal``'s signature verifies under the formation's public key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signature = seal.get("signature")
    if not isinstance(signature, str):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(_unb64(signature),
                                                              canonical(seal))
    except (InvalidSignature, ValueError):
        return False
    return True


# --- the launcher's side ---------------------------------------------------------------------

class TraceCursor:
    """One member's trace as it grows: the records counted so far and the ``link`` of the
    last, reading only the bytes added since the last look."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        self.records = 0
        self.head = seed(session_id)
        self._offset = 0

    def advance(self) -> bool:
        """Read what was appended (up to its last complete line); whether it grew."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, max(0, size - self._offset), self._offset)
        finally:
            os.close(fd)
        end = data.rfind(b"\n")
        if end < 0:
            return False
        grown = False
        for raw in data[:end].split(b"\n"):
            if record_of(raw) is not None:
                self.records += 1
                self.head = link(raw)
                grown = True
        self._offset += end + 1
        return grown


@dataclass
class Sealer:
    """Seals a formation's traces into its ``seals.jsonl`` (see the module text)."""

    formation_id: str
    path: Path
    sign: Sign
    cursors: dict[str, TraceCursor] = field(default_factory=dict)
    seq: int = 0

    def watch(self, member: str, trace: Path, session_id: str) -> None:
        if member not in self.cursors:
            self.cursors[member] = TraceCursor(trace, session_id)

    def seal(self, *, final: bool = False, at: str = "") -> dict[str, Any] | None:
        """Append a seal when a trace grew since the last (always when ``final``); the
        seal written, else None."""
        grew = [cursor.advance() for cursor in self.cursors.values()]
        # The final seal is written even when no member came up (it then names none):
        # every formation that ends ends with one, so a record without it was cut.
        if not any(grew) and not final:
            return None
        seal: dict[str, Any] = {
            "formation": self.formation_id, "seq": self.seq + 1, "at": at,
            "members": {name: {"session": cursor.session_id, "records": cursor.records,
                               "head": cursor.head}
                        for name, cursor in sorted(self.cursors.items())}}
        if final:
            seal["final"] = True
        seal["signature"] = _b64(self.sign(canonical(seal)))
        line = json.dumps(seal, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                     | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        self.seq += 1   # only once written: a seal that failed leaves no gap in the count
        return seal


# --- what mur audit checks -----------------------------------------------------------------

@dataclass(frozen=True)
class SealFinding:
    """Something the seals say of the record: ``kind`` is ``tampered`` or
    ``incomplete`` (both exit 1: a seal or record changed; the final seal or the whole
    ``seals.jsonl`` missing), or ``unsealed`` (records after the last seal of a launcher
    still running). ``line`` 0 names the whole file."""

    kind: str
    file: str
    line: int
    problem: str


@dataclass(frozen=True)
class SealCheck:
    """What :func:`check_seals` found: its findings, the seal lines read, and the last
    seal whose signature verified (its line and the seal), final or not."""

    findings: list[SealFinding]
    read: int = 0
    last: tuple[int, dict[str, Any]] | None = None

    @property
    def final(self) -> tuple[int, dict[str, Any]] | None:
        """The final seal, when the last seal that verified is marked final."""
        return self.last if self.last is not None and self.last[1].get("final") is True \
            else None


def read_seals(path: Path) -> list[tuple[int, bytes, dict[str, Any] | None]]:
    """(line number, bytes, seal or None when the line is not a JSON object); none when
    the file is missing."""
    try:
        return _seal_lines(path.read_bytes())
    except FileNotFoundError:
        return []


def _seal_lines(data: bytes) -> list[tuple[int, bytes, dict[str, Any] | None]]:
    return [(number, raw, record_of(raw)) for number, raw in
            enumerate(data.split(b"\n"), start=1) if raw.strip()]


def verify_seals(seals_path: Path, public_key: bytes, formation_id: str,
                 traces: Mapping[str, tuple[str, list[TraceLine]]]) -> list[SealFinding]:
    """The findings of :func:`check_seals` for a launcher that may still run: the seals
    and the traces against them, without asking for the final seal."""
    return check_seals(seals_path, public_key, formation_id, traces, ended=False).findings


def check_seals(seals_path: Path, public_key: bytes, formation_id: str,
                traces: Mapping[str, tuple[str, list[TraceLine]]], *,
                ended: bool) -> SealCheck:
    """Every seal against the key and the sequence, then every member's trace (by
    member: its file and its record lines) against the seals that name it; then, when
    the launcher has ended (``ended``), that ``seals.jsonl`` is there and its last seal
    is the final one."""
    findings: list[SealFinding] = []
    where = str(seals_path)
    try:
        lines = _seal_lines(seals_path.read_bytes())
    except FileNotFoundError:
        lines = None
    valid: list[tuple[int, dict[str, Any]]] = []
    expected = 1
    for number, _raw, seal in lines or ():
        if seal is None or not seal_valid(seal, public_key) \
                or seal.get("formation") != formation_id:
            findings.append(SealFinding("tampered", where, number,
                                        "a seal whose signature does not verify under the "
                                        "formation's key (edited, or not the launcher's)"))
            continue
        seq = seal.get("seq")
        if seq != expected:
            findings.append(SealFinding("tampered", where, number,
                                        f"seal {seq} follows seal {expected - 1}: a seal "
                                        "before it was removed or moved"))
        expected = seq + 1 if isinstance(seq, int) else expected + 1
        valid.append((number, seal))
    for member, (file, trace) in sorted(traces.items()):
        findings += _trace_against_seals(member, file, trace, valid, where, ended=ended)
    for member, number in _sealed_members(valid).items():
        if member not in traces:
            findings.append(SealFinding("tampered", where, number,
                                        f"the seals name member {member}, whose trace is "
                                        "gone from this MURMUR_HOME"))
    check = SealCheck(findings, len(lines or ()), valid[-1] if valid else None)
    if ended:
        findings += _not_final(check, where, missing=lines is None)
    return check


def _not_final(check: SealCheck, where: str, *, missing: bool) -> list[SealFinding]:
    """Why a record whose launcher has ended does not end with its final seal: the
    launcher writes one as its last act (even for a formation whose members never came
    up), so without it the record was cut, or the launcher was killed."""
    if missing:
        return [SealFinding("incomplete", where, 0,
                            "seals.jsonl is gone: formation.json names the formation's key, "
                            "so its launcher sealed the record and ended it with a final "
                            "seal (the file was removed, or the launcher could not write "
                            "it and said so)")]
    if check.last is None:
        return [SealFinding("incomplete", where, 0,
                            "no seal of the launcher's is left: the record cannot be shown "
                            "whole")]
    if check.final is not None:
        return []
    number, seal = check.last
    return [SealFinding("incomplete", where, number,
                        f"the record has no final seal: it ends at seal {seal.get('seq')} "
                        f"({seal.get('at') or 'no time'}); the launcher was killed before "
                        f"it sealed the end, or the seals after seal {seal.get('seq')} were "
                        "removed (and with them, the records they sealed)")]


def _sealed_members(seals: list[tuple[int, dict[str, Any]]]) -> dict[str, int]:
    """Each member a seal names with records, and the line of the last such seal."""
    named: dict[str, int] = {}
    for number, seal in seals:
        members = seal.get("members")
        for name, entry in (members.items() if isinstance(members, dict) else ()):
            if isinstance(entry, dict) and entry.get("records"):
                named[name] = number
    return named


def _trace_against_seals(member: str, file: str, lines: list[TraceLine],
                         seals: list[tuple[int, dict[str, Any]]],
                         where: str, *, ended: bool) -> list[SealFinding]:
    findings: list[SealFinding] = []
    sealed = 0
    for number, seal in seals:
        entry = seal.get("members", {}).get(member) if isinstance(seal.get("members"),
                                                                   dict) else None
        if not isinstance(entry, dict):
            continue
        count, head = entry.get("records"), entry.get("head")
        if not isinstance(count, int) or count <= 0:
            continue
        session = lines[0].record.get("session_id") if lines else None
        if lines and session != entry.get("session"):
            findings.append(SealFinding(
                "tampered", file, lines[0].number,
                f"the trace of {member} is session {session}; seal {seal.get('seq')} "
                f"({where}:{number}) sealed session {entry.get('session')}: the whole "
                "trace was replaced"))
            return findings
        if count > len(lines):
            findings.append(SealFinding(
                "tampered", file, lines[-1].number if lines else 0,
                f"seal {seal.get('seq')} ({where}:{number}) sealed {count} records of "
                f"{member}; the trace holds {len(lines)}: records were removed"))
            return findings
        if link(lines[count - 1].raw) != head:
            findings.append(SealFinding(
                "tampered", file, lines[count - 1].number,
                f"record {count} of {member} is not the one seal {seal.get('seq')} "
                f"({where}:{number}) sealed: it or a record before it was changed, "
                "removed, inserted or moved"))
            return findings
        sealed = max(sealed, count)
    if len(lines) > sealed:
        first = lines[sealed].number
        final = seals[-1] if seals and seals[-1][1].get("final") is True else None
        named = final is not None and isinstance(final[1].get("members"), dict) \
            and member in final[1]["members"]
        if final is not None and named:
            # The final seal is written after every member stopped: nothing of a member
            # it names can come after it but what someone added to the trace.
            findings.append(SealFinding(
                "tampered", file, first,
                f"{len(lines) - sealed} record(s) of {member} from line {first} on follow "
                f"the final seal ({where}:{final[0]}), written after every member had "
                "stopped: they were added afterwards"))
            return findings
        why = ("it never saw this member come up" if final is not None
               else "killed, or the seals after them removed" if ended
               else "killed, or still running")
        findings.append(SealFinding(
            "unsealed", file, first,
            f"{len(lines) - sealed} record(s) of {member} from line {first} on are after "
            f"the last seal (the launcher did not seal them: {why})"))
    return findings
