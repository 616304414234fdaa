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


# --------------------------------------------------------------------------- records


def home() -> Path:
    """``$MURMUR_HOME`` (``~/.murmur`` when unset) as an absolute path."""
    return Path(os.path.abspath(murmur_home()))


def records_root() -> Path:
    return home() / "records"


def detached_logs() -> Path:
    """Where launchers started with ``mur run --roster --detach`` write their stderr,
    one ``<formation id>.log`` each."""
    return records_root() / "detached"


def running_dir() -> Path:
    return home() / "running"


def formations_root() -> Path:
    return home() / "formations"


def path_key(path: str | os.PathLike[str]) -> str:
    """An absolute path, symlinks resolved, without its leading ``/``: how a work folder
    or project appears inside ``records/``. ``/`` itself gives ``""``."""
    return os.path.realpath(path).lstrip("/")


def workdir_records(workdir: str | os.PathLike[str]) -> Path:
    """``records/<workdir>/``: where every session run in ``workdir`` keeps its records."""
    key = path_key(workdir)
    return records_root() / key if key else records_root()
