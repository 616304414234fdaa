"""Shared fixtures. Every test runs with MURMUR_HOME in a temporary folder of its own, so
no test reads or writes the real ~/.murmur."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The container tests run in their own target (`make test-containers`): they build an
# image and start an engine's containers, minutes that `make test` does not spend.
collect_ignore = [] if os.environ.get("MURMUR_CONTAINER_TESTS") == "1" else ["containers"]
# The framework agents' tests likewise (`make test-frameworks`): their venvs are minutes
# of installing, made by that target.
if os.environ.get("MURMUR_FRAMEWORK_TESTS") != "1":
    collect_ignore.append("frameworks")


@pytest.fixture(autouse=True)
def murmur_home(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("murmur-home")
    home.chmod(0o700)
    monkeypatch.setenv("MURMUR_HOME", str(home))
    for name in ("MURMUR_FORMATION_ID", "MURMUR_FORMATION_CHANNEL",
                 "MURMUR_FORMATION_LIFELINE", "MURMUR_FORMATION_PEERS",
                 "MURMUR_HOST_WARNINGS_REPORTED"):
        monkeypatch.delenv(name, raising=False)
    yield home
