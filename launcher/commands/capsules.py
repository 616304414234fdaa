"""``mur new``, ``mur pack``, ``mur install`` and ``mur lock``: making and storing capsules.

Handlers import the store and the manifest model lazily: ``mur`` starts once per member.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

from launcher.commands import missing_project
from launcher.diagnostics import DiagnosticError, emit

if TYPE_CHECKING:
    from launcher.admission.store import InstalledArtifact

#: The names of the two members ``mur new --roster`` writes.
ENTRY_MEMBER = "planner"
WORKER_MEMBER = "worker"
VERSION = "0.1.0"
#: ``mur new --template`` → the folder of launcher/templates it writes from. ``llm`` is
#: the ``model`` template's earlier name, kept so earlier instructions still work.
TEMPLATES = {"python": "capsule", "a2a": "a2a", "model": "model", "llm": "model"}
DEFAULT_TEMPLATE = "python"
#: The folder of ``mur new --roster --template model``'s members (docs/llm.md).
MODEL_ROSTER = "roster-model"
MODEL_NEXT = ("its members are models on an OpenAI-compatible endpoint: set OPENAI_API_KEY "
              "(and OPENAI_BASE_URL, OPENAI_MODEL for another server; docs/llm.md)\n")


def register(subparsers: Any) -> None:
    new = subparsers.add_parser(
        "new", help="write a capsule source directory, or a two-member roster",
        description="Write a capsule source directory: murmur.yaml and a Python agent, or "
                    "with --template a2a an A2A server (server.py, a2a-sdk) that the door "
                    "stands in front of. With --roster, write a roster.yaml with two members, "
                    "an entry member that may call a worker, with a source directory for each, "
                    "and pack and install both into DIR's project store, so that `mur doctor` "
                    "in DIR admits it.")
    new.add_argument("directory", type=Path, metavar="DIR",
                     help="the directory to write into (made when missing); files already there "
                          "are never overwritten")
    new.add_argument("--roster", action="store_true",
                     help="write a two-member roster instead of one capsule")
    new.add_argument("--template", choices=tuple(TEMPLATES),
                     help="the agent: `python` (the default), an `async def run(task)`; "
                          "`a2a`, an A2A server of its own (needs a2a-sdk); `model`, a model "
                          "on an OpenAI-compatible endpoint, declared in murmur.yaml with its "
                          "instructions in MURMUR.md (with --roster, a planner and a worker "
                          "that call each other as tools; `llm` is its earlier name)")
    new.add_argument("--name", help="the capsule's name (default: from DIR's name)")
    new.set_defaults(handler=_new)

    pack = subparsers.add_parser(
        "pack", help="pack a capsule source directory into NAME-VERSION.mur.zip",
        description="Pack DIR (a capsule source directory) into a reproducible .mur.zip: the "
                    "same source always gives the same sha256. .murmur/, __pycache__/ and "
                    ".git/ are left out.")
    pack.add_argument("directory", type=Path, metavar="DIR",
                      help="the capsule source directory, holding murmur.yaml")
    pack.add_argument("-o", "--output", type=Path, metavar="FILE",
                      help="where to write it (default: ./NAME-VERSION.mur.zip)")
    pack.set_defaults(handler=_pack)

    install = subparsers.add_parser(
        "install", help="install a .mur.zip into the project store (or --global)",
        description="Install FILE as local/NAME at its version into the project store "
                    "(PROJECT/.murmur/artifacts) or, with --global, into "
                    "$MURMUR_HOME/artifacts.")
    install.add_argument("file", type=Path, metavar="FILE",
                         help="the .mur.zip to install (as `mur pack` writes it)")
    install.add_argument("--global", dest="to_global", action="store_true",
                         help="install into the global store, for every project")
    install.add_argument("--force", action="store_true",
                         help="replace an installed artifact of the same version with "
                              "other bytes")
    install.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                         help="the project (default: the current directory)")
    install.set_defaults(handler=_install)

    lock = subparsers.add_parser(
        "lock", help="pin what the roster's members resolve to in murmur.lock",
        description="Resolve every member of the project's roster.yaml (project store, then "
                    "global store) and write murmur.lock pinning each capsule to that version "
                    "and sha256.")
    lock.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                      help="the project (default: the current directory)")
    lock.set_defaults(handler=_lock)


# --- mur new -----------------------------------------------------------------------------

def _template(*parts: str) -> Template:
    from importlib.resources import files

    return Template(files("launcher").joinpath("templates", *parts).read_text(encoding="utf-8"))


def capsule_name_for(directory: Path) -> str:
    """A valid capsule name made from a directory's name (``My_Agent`` → ``my-agent``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:32].rstrip("-")
    return name or "capsule"


def _module_for(name: str) -> str:
    return f"{name.replace('-', '_')}_agent"


def _refuse_existing(paths: list[Path], code: str) -> None:
    for path in paths:
        if path.exists():
            raise DiagnosticError(code, str(path), target=path)


def _source_files(template: str, module: str) -> dict[str, str]:
    """The files ``template`` writes, as ``{file name: template file}`` (a template file
    of the folder above, ``../agent.py.tmpl``, is shared by that folder's members)."""
    if template == TEMPLATES["a2a"]:
        agent = {"server.py": "server.py.tmpl"}
    elif template == TEMPLATES["model"] or template.startswith(MODEL_ROSTER + "/"):
        agent = {"MURMUR.md": "MURMUR.md.tmpl"}
    else:
        agent = {f"{module}.py": "agent.py.tmpl"}
    return {"murmur.yaml": "murmur.yaml.tmpl", **agent}


def write_capsule_source(directory: Path, name: str, template: str = "capsule",
                         **values: str) -> Path:
    """Write ``murmur.yaml`` and the agent (a Python module, ``server.py`` for the ``a2a``
    template, the instructions ``MURMUR.md`` for a model) of capsule ``name`` into
    ``directory``."""
    module = _module_for(name)
    files = {directory / file: _template(*_template_path(template, source))
             for file, source in _source_files(template, module).items()}
    _refuse_existing(list(files), "E-MAN-005")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text.substitute(name=name, module=module, **values), encoding="utf-8")
    return directory


def _template_path(template: str, source: str) -> tuple[str, ...]:
    parts = [*template.split("/"), *source.split("/")]
    while ".." in parts:
        at = parts.index("..")
        del parts[at - 1: at + 1]
    return tuple(parts)


def write_roster_project(directory: Path, template: str = "python") -> list[InstalledArtifact]:
    """Write the two-member roster and its sources (``template``: ``python`` agents, or
    ``model`` members on a chat-completions endpoint), then pack and install both members
    into ``directory``'s project store. Returns the installed artifacts."""
    import tempfile

    from launcher.admission.store import install, pack

    names = {"entry": ENTRY_MEMBER, "worker": WORKER_MEMBER}
    _refuse_existing([directory / "roster.yaml", directory / ENTRY_MEMBER,
                      directory / WORKER_MEMBER], "E-ROS-009")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "roster.yaml").write_text(
        _template("roster", "roster.yaml.tmpl").substitute(names), encoding="utf-8")
    installed = []
    with tempfile.TemporaryDirectory(prefix="mur-new-") as build:
        for role, member in (("entry", ENTRY_MEMBER), ("worker", WORKER_MEMBER)):
            folder = MODEL_ROSTER if TEMPLATES[template] == "model" else "roster"
            source = write_capsule_source(directory / member, member, f"{folder}/{role}",
                                          **names)
            packed = pack(source, Path(build) / f"{member}-{VERSION}.mur.zip")
            installed.append(install(packed.path, directory)[0])
    return installed


def _new(args: argparse.Namespace) -> int:
    directory: Path = args.directory
    if args.roster and args.template == "a2a":
        print("mur new: --roster writes python (or model) members, not a2a ones; write an a2a "
              "capsule with `mur new --template a2a DIR` and add it to the roster",
              file=sys.stderr)
        return 2
    template = args.template or DEFAULT_TEMPLATE
    try:
        if args.roster:
            installed = write_roster_project(directory, template)
            pinned = ", ".join(f"{item.capsule} {item.version}" for item in installed)
            print(f"wrote {directory / 'roster.yaml'} with members {ENTRY_MEMBER} (entry) and "
                  f"{WORKER_MEMBER}, and installed {pinned} into its project store.\n"
                  + (MODEL_NEXT if TEMPLATES[template] == "model" else "")
                  + f"next: cd {directory} && mur doctor && mur run --roster --task hello")
            return 0
        name = args.name or capsule_name_for(directory)
        from launcher.admission.manifest import name_problem

        problem = name_problem(name)
        if problem is not None:
            print(f"mur new: --name {problem}", file=sys.stderr)
            return 2
        write_capsule_source(directory, name, TEMPLATES[template])
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    agent = {"a2a": "server.py, an A2A server", "model": "MURMUR.md, its instructions"}.get(
        TEMPLATES[template], f"{_module_for(name)}.py")
    print(f"wrote the capsule {name} in {directory} (murmur.yaml and {agent}).\n"
          f"next: mur pack {directory} && mur install {name}-{VERSION}.mur.zip && "
          f"mur run --capsule local/{name} --capsule-version {VERSION} --task hello")
    return 0


# --- mur pack, mur install, mur lock -----------------------------------------------------

def _pack(args: argparse.Namespace) -> int:
    from launcher.admission.store import pack

    try:
        packed = pack(args.directory, args.output)
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    print(f"packed {packed.manifest.name} {packed.manifest.version} into {packed.path} "
          f"(sha256 {packed.sha256})")
    return 0


def _install(args: argparse.Namespace) -> int:
    from launcher.admission.store import install

    if missing_project("install", args.project):
        return 2
    try:
        installed, changed = install(args.file, args.project, to_global=args.to_global,
                                     force=args.force)
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    done = "installed" if changed else "already installed:"
    print(f"{done} {installed.capsule} {installed.version} in the {installed.store} store "
          f"({installed.path}, sha256 {installed.sha256})")
    return 0


def _lock(args: argparse.Namespace) -> int:
    from launcher.admission.roster import lock_roster

    if missing_project("lock", args.project):
        return 2
    try:
        path, pins = lock_roster(args.project)
    except DiagnosticError as refusal:
        emit(refusal.diagnostic, sys.stderr)
        return 1
    pinned = ", ".join(f"{capsule} {pin.version}" for capsule, pin in sorted(pins.items()))
    print(f"pinned {len(pins)} capsule{'s' if len(pins) != 1 else ''} in {path}: {pinned}")
    return 0
