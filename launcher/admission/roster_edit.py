"""Growing a roster by one member (``mur add``): the roster's new text and what the
manifests of the members on its new edges need (docs/growing-a-team.md).

In order: :func:`added_member` checks the new member against the roster as written
(its name free, each member it names there) and returns the roster's text with the
member and its edges (the file's leading comment kept; the rest written anew, every
key and value kept); :func:`granted` returns a manifest's text with what an edge needs
of it (``capabilities.network.allow: [localhost]`` for a caller,
``exports.peer_tasks.accept: true`` for a callee), edited in place where the manifest
writes those keys in a shape this knows, appended where it writes none, or ``None``
where it writes them otherwise (the caller then says what to change).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from launcher.errors import LauncherError

__all__ = ["RosterEditRefused", "added_member", "granted"]


class RosterEditRefused(LauncherError):
    """The member cannot be added as asked (the text says why and what to do)."""


def added_member(text: str, *, name: str, capsule: str, version: str,
                 calls: Sequence[str], called_by: Sequence[str]) -> str:
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or not isinstance(document.get("members"), list):
        raise RosterEditRefused("roster.yaml has no `members` list to add to; `mur doctor` "
                                "names what is wrong with it")
    names = [m.get("name") for m in document["members"] if isinstance(m, dict)]
    if name in names:
        raise RosterEditRefused(f"roster.yaml already has a member `{name}`; choose another "
                                "name")
    for other in (*calls, *called_by):
        if other not in names:
            raise RosterEditRefused(f"roster.yaml has no member `{other}` (its members: "
                                    f"{', '.join(str(n) for n in names)})")
    entry = next((m.get("name") for m in document["members"]
                  if isinstance(m, dict) and m.get("entry") is True), None)
    if entry in calls:
        raise RosterEditRefused(f"no member may call the entry member `{entry}`; drop it "
                                "from --calls")
    document["members"].append({"name": name, "capsule": capsule, "version": version})
    reach = document.get("reachability")
    if reach != "all" and (calls or called_by):
        rules: list[Any] = reach if isinstance(reach, list) else []
        for caller in called_by:
            _allow(rules, caller, name)
        if calls:
            _allow(rules, name, *calls)
        document["reachability"] = rules
    head = "".join(line for line in _leading_comments(text))
    return head + yaml.safe_dump(document, sort_keys=False, default_flow_style=None,
                                 width=100)


def _allow(rules: list[Any], caller: str, *callees: str) -> None:
    for rule in rules:
        if isinstance(rule, dict) and rule.get("from") == caller and isinstance(
                rule.get("to"), list) and set(rule) <= {"from", "to"}:
            rule["to"] += [callee for callee in callees if callee not in rule["to"]]
            return
    rules.append({"from": caller, "to": list(callees)})


def _leading_comments(text: str) -> list[str]:
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


_ACCEPT_FALSE = re.compile(r"^(\s*peer_tasks:\s*\{\s*accept:\s*)false(\s*\})", re.M)


def granted(text: str, *, calls: bool, called: bool) -> str | None:
    """``text`` with what the member's new edges need; ``text`` itself when it has it
    already; ``None`` when it writes the keys in a shape not edited here."""
    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        return None
    if calls and not _reaches_localhost(document):
        if "capabilities" in document:
            return None
        text = text.rstrip("\n") + ("\ncapabilities:\n  network: {allow: [localhost]}   "
                                    "# member doors are served on loopback\n")
    if called and not _accepts(document):
        exports = document.get("exports")
        if exports is None:
            text = text.rstrip("\n") + "\nexports:\n  peer_tasks: {accept: true}\n"
        elif _ACCEPT_FALSE.search(text):
            text = _ACCEPT_FALSE.sub(r"\1true\2", text, count=1)
        else:
            return None
    return text


def _reaches_localhost(document: dict[str, Any]) -> bool:
    """As ``W-RUN-008`` reads the grant (launcher/admission/reach.py)."""
    from gateway.proxy.egress import egress_reaches_loopback

    capabilities = document.get("capabilities")
    network = capabilities.get("network") if isinstance(capabilities, dict) else None
    allow = network.get("allow") if isinstance(network, dict) else None
    if not isinstance(allow, list):
        return False
    try:
        return egress_reaches_loopback([str(entry) for entry in allow])
    except ValueError:
        return False


def _accepts(document: dict[str, Any]) -> bool:
    exports = document.get("exports") or {}
    return isinstance(exports, dict) and (exports.get("peer_tasks") or {}).get("accept") is True
