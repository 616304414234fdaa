"""docs/manifest.md lists every key murmur.yaml accepts, generated from the manifest's
model: never stale, every key with a meaning and an example that reads as YAML."""

from __future__ import annotations

import yaml

from launcher.commands.manifest_reference import DOCS_PATH, MEANINGS, keys, render


def test_the_manifest_page_is_not_stale() -> None:
    assert DOCS_PATH.read_text(encoding="utf-8") == render(), (
        "docs/manifest.md is stale: run "
        "`python -m launcher.commands.manifest_reference --write-docs`")


def test_every_key_of_the_model_has_a_meaning_and_no_meaning_is_for_a_gone_key() -> None:
    paths = [path for path, _ in keys()]
    assert set(paths) == set(MEANINGS)
    for key in ("agent.python", "network.cors.allow_origins", "lifecycle.queue_depth",
                "trace.retain.max_age", "capabilities.env.allow", "inference.max_turns"):
        assert f"| `{key}` |" in render()


def test_every_example_reads_as_yaml() -> None:
    for path, (meaning, example) in MEANINGS.items():
        assert meaning.strip() and example.strip(), path
        yaml.safe_load(example)
