"""Where murmur keeps things: ``MURMUR_HOME`` and the two artifact stores.

Kept tiny and import-free on purpose: every ``mur`` process imports it.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.spawn.env_names import HOME_ENV

#: The environment variable naming murmur's home; ``~/.murmur`` when unset or empty.
#: The folder, inside a project, that holds its store (and nothing the user writes).
PROJECT_STATE_DIR = ".murmur"


def murmur_home() -> Path:
    """The root of every global store and record: ``$MURMUR_HOME``, else ``~/.murmur``."""
    configured = os.environ.get(HOME_ENV, "")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".murmur"


def project_store(project_dir: Path) -> Path:
    """The project store, searched first: ``<project>/.murmur/artifacts``."""
    return Path(project_dir) / PROJECT_STATE_DIR / "artifacts"


def global_store() -> Path:
    """The global store, searched after the project's: ``$MURMUR_HOME/artifacts``."""
    return murmur_home() / "artifacts"


def store_search_order(project_dir: Path) -> tuple[Path, Path]:
    """The stores a capsule is looked up in, in order: the project's, then the global one."""
    return project_store(project_dir), global_store()
