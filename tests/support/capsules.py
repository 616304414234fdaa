"""Capsule helpers shared by the store, roster and CLI tests (no tests here): a capsule
source directory written from a few options, and the same packed and installed."""

from __future__ import annotations

from pathlib import Path

from launcher.admission.store import InstalledArtifact, install, pack


def capsule_source(root: Path, name: str, version: str = "1.0.0", *, accept: bool = False,
                   auth: bool = True, concurrency: int = 1, queue_depth: int = 0,
                   extra: str = "", reply: str = "") -> Path:
    """Write a capsule source directory under ``root`` and return it."""
    source = root / f"{name}-{version}-{accept}-{auth}-{concurrency}-{queue_depth}-{reply}"
    source.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_") + "_agent"
    lines = [
        "manifest_version: 1",
        f"name: {name}",
        f'version: "{version}"',
        "agent:",
        f"  python: {module}:run",
        f"exports: {{peer_tasks: {{accept: {'true' if accept else 'false'}}}}}",
        f"lifecycle: {{concurrency: {concurrency}, queue_depth: {queue_depth}}}",
    ]
    if auth:
        lines.append("network: {authentication: {}}")
    (source / "murmur.yaml").write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    (source / f"{module}.py").write_text(
        f"async def run(task):\n    return 'from {name}: ' + task.text + {reply!r}\n",
        encoding="utf-8")
    return source


def install_capsule(project: Path, name: str, version: str = "1.0.0", *,
                    to_global: bool = False, force: bool = False,
                    **options: object) -> InstalledArtifact:
    """Write, pack and install a capsule into ``project``'s store (or the global one)."""
    root = project.parent / f"{project.name}-sources"
    source = capsule_source(root, name, version, **options)  # type: ignore[arg-type]
    packed = pack(source, root / f"{source.name}.mur.zip")
    installed, _ = install(packed.path, project, to_global=to_global, force=force)
    return installed
