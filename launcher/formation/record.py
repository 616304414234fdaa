"""The launcher's running record (``running/<formation id>.json``,
docs/runtime-files.md), by which ``mur ps`` and ``mur stop`` find a formation.

In order: written as the launch starts, naming the entry member; completed with the
entry member's door once it is ready (before the formation line is printed, so whoever
reads the line finds the record complete); rewritten with the head of each seal the
launcher writes (docs/audit.md), so an operator can note it while the formation runs;
removed when the formation has ended. A record that cannot be written is said on stderr
and the formation runs anyway.
"""

from __future__ import annotations

import dataclasses
import os

from launcher.admission.roster import AdmittedRoster
from launcher.formation.members import LaunchedMember
from launcher.formation.printing import say
from launcher.home.running_records import RunningRecord, now_iso, remove_running, write_running
from launcher.spawn.process import process_start_time


class LauncherRecord:
    """The running record of the formation ``formation_id``."""

    def __init__(self, formation_id: str, admitted: AdmittedRoster) -> None:
        self.formation_id = formation_id
        self.admitted = admitted
        self._record: RunningRecord | None = None

    def write(self) -> None:
        pid = os.getpid()
        self._record = RunningRecord(
            id=self.formation_id, pid=pid, start=process_start_time(pid), kind="launcher",
            formation_id=self.formation_id, member=self.admitted.entry.name,
            project_dir=str(self.admitted.project_dir), started=now_iso())
        self._save()

    def add_entry(self, entry: LaunchedMember) -> None:
        """The entry member's door, records and public URL, once it is ready."""
        if self._record is not None and entry.ready is not None:
            self._record = dataclasses.replace(
                self._record, member=entry.name, door_url=entry.ready.door_url,
                records_dir=str(entry.ready.records_dir), public_url=entry.ready.public_url)
            self._save()

    def sealed(self, head: str) -> None:
        """The head of the seal just written."""
        if self._record is not None:
            self._record = dataclasses.replace(self._record, seal_head=head)
            self._save()

    def remove(self) -> None:
        remove_running(self.formation_id)

    def _save(self) -> None:
        if self._record is None:
            return
        try:
            write_running(self._record)
        except OSError as exc:
            say(f"[mur run] warning: cannot write the running record of formation "
                f"{self.formation_id} ({exc.strerror or exc}); `mur stop` and `mur ps` "
                "will not find it")
