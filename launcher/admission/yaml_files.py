"""Reading murmur's YAML files safely: ``murmur.yaml``, ``roster.yaml``, ``murmur.lock``.

:func:`read_yaml` reads one document in this order: the size bound and UTF-8 decoding
(:func:`_decode`), then libyaml's parser (PyYAML's own where libyaml is missing) under a
composer that refuses anchors, aliases and nests deeper than :data:`MAX_DEPTH`, then the
node tree built into plain values, refusing custom tags, keys that are not plain text
and duplicate keys, and keeping version fields as their source text (``version: 1.10``
is ``"1.10"``). Every refusal is one :class:`YamlFault` whose ``problem`` says what and
``fix`` what to write; the manifest, roster and store turn it into their own codes.
:func:`describe_value`, :func:`dotted` and :func:`suggest` are how those refusals name
what they found.
"""

from __future__ import annotations

from collections.abc import Collection
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from launcher.errors import LauncherError

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: _LOADER falls back to pure Python
    CParser = None  # type: ignore[assignment,misc]

# --- Reading YAML ------------------------------------------------------------------------

#: No murmur file is anywhere near this; a larger one is refused before it is parsed.
MAX_DOCUMENT_BYTES = 256 * 1024
#: Nesting deeper than this is refused (the composer recurses once per level).
MAX_DEPTH = 64

Location = tuple[str | int, ...]
#: A path pattern for :func:`read_yaml`'s ``text_paths``: keys, with ``"*"`` for any key
#: or list index.
PathPattern = tuple[str, ...]

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_TAG}{name}" for name in ("str", "int", "float", "bool", "null",
                                               "timestamp", "merge", "value")}
_NUMBER_LIKE_TAGS = {f"{_TAG}{name}" for name in ("int", "float", "bool", "timestamp")}


class YamlFault(LauncherError):
    """A document that does not read: ``problem`` says what, ``fix`` what to write."""

    def __init__(self, problem: str, fix: str, location: Location = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.location = location


def dotted(location: Location) -> str:
    """``("members", 1, "name")`` as ``members[1].name``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class _Refused(LauncherError, yaml.YAMLError):
    def __init__(self, problem: str, fix: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem, self.fix, self.mark = problem, fix, mark


class _Checks(Composer):
    """The composer, refusing anchors, aliases and deep nests as it builds each node.

    Refusing anchors outright (rather than bounding expansion) keeps a billion-laughs
    document as cheap as any other: it stops at its first ``&``.
    """

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("uses an anchor or alias (`&` or `*`), which murmur does not accept",
                           "write each value out in full", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nests deeper than {MAX_DEPTH} levels",
                               "flatten the document", event.start_mark)
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        finally:
            self._depth -= 1


class _PythonLoader(_Checks, yaml.SafeLoader):
    """PyYAML's own reader, scanner and parser, where libyaml is missing."""


_LOADER: type[_PythonLoader] | type[_LibyamlLoader] = _PythonLoader

if CParser is not None:
    class _LibyamlLoader(_Checks, CParser, SafeConstructor, Resolver):
        """libyaml's parser (six times faster on a large file) under the checking composer."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _LOADER = _LibyamlLoader


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise YamlFault(f"is larger than {MAX_DOCUMENT_BYTES // 1024} KiB",
                            "keep it under that size")
        return data
    if len(data) > MAX_DOCUMENT_BYTES:
        raise YamlFault(f"is {len(data)} bytes, larger than the {MAX_DOCUMENT_BYTES // 1024} "
                        "KiB murmur reads", "keep it under that size")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlFault(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start})", "save it as UTF-8") from None


def _tab_at(text: str, mark: yaml.Mark | None) -> bool:
    if mark is None:
        return False
    lines = text.splitlines()
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    return "\t" in line[: mark.column + 1]


def _describe_yaml_error(exc: yaml.YAMLError, text: str) -> YamlFault:
    if isinstance(exc, _Refused):
        where = f" at line {exc.mark.line + 1}, column {exc.mark.column + 1}" if exc.mark else ""
        return YamlFault(f"{exc.problem}{where}", exc.fix)
    if isinstance(exc, yaml.reader.ReaderError):
        return YamlFault(f"holds a character YAML does not allow (code point "
                         f"{exc.character!r} at offset {exc.position})",
                         "remove control characters and binary data; save it as UTF-8 text")
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "it does not parse"
        fix = ("indent with spaces, never tabs" if _tab_at(text, mark) or "\\t" in problem
               else "correct the YAML at that place")
        if "expected a single document" in str(exc.context) + str(problem):
            fix = "keep one document in the file (remove the second `---`)"
        return YamlFault(f"does not read as YAML: {where}{problem}", fix)
    return YamlFault("does not read as YAML", "correct the YAML")


def _matches(location: Location, patterns: Collection[PathPattern]) -> bool:
    return any(len(pattern) == len(location) and all(
        want == "*" or want == got for want, got in zip(pattern, location, strict=True))
        for pattern in patterns)


class _Builder:
    """Turns a composed node tree into plain dicts, lists and scalars."""

    def __init__(self, loader: SafeConstructor, text_paths: Collection[PathPattern]) -> None:
        self._loader = loader
        self._text_paths = text_paths

    def value(self, node: yaml.Node, location: Location) -> Any:
        if node.tag.startswith(_TAG) and node.tag[len(_TAG):] in ("map", "seq"):
            pass
        elif node.tag not in _SCALAR_TAGS or not isinstance(node, yaml.ScalarNode):
            tag = "!!" + node.tag[len(_TAG):] if node.tag.startswith(_TAG) else node.tag
            raise YamlFault(f"`{dotted(location) or 'the document'}` has the tag "
                            f"`{tag}`, which murmur does not accept",
                            "remove the `!` tag", location)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, location)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, (*location, index))
                    for index, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        return self._scalar(node, location)

    def _scalar(self, node: yaml.ScalarNode, location: Location) -> Any:
        if node.tag in _NUMBER_LIKE_TAGS and (
                node.tag == f"{_TAG}timestamp" or _matches(location, self._text_paths)):
            # A version is its source text (1.10 stays "1.10"); a date is never wanted.
            return node.value
        if node.tag in (f"{_TAG}merge", f"{_TAG}value"):
            return node.value
        return self._loader.construct_object(node)

    def _mapping(self, node: yaml.MappingNode, location: Location) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                raise YamlFault(f"`{dotted(location) or 'the document'}` has a key that is not "
                                "plain text", "write keys as plain words", location)
            key = str(key_node.value)
            if key in result:
                raise YamlFault(f"`{dotted((*location, key))}` is written twice",
                                "keep one of them", (*location, key))
            result[key] = self.value(value_node, (*location, key))
        return result


def read_yaml(data: bytes | str, *, text_paths: Collection[PathPattern] = ()) -> Any:
    """The one YAML document in ``data`` as plain Python values, ``None`` when empty.

    Scalars at ``text_paths`` that YAML would read as numbers, booleans or dates are kept
    as their source text. Raises :class:`YamlFault` for anything that does not read.
    """
    text = _decode(data)
    loader: _PythonLoader | _LibyamlLoader | None = None
    try:
        loader = _LOADER(text)  # reads ahead: refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        return _Builder(loader, text_paths).value(node, ())
    except yaml.YAMLError as exc:
        raise _describe_yaml_error(exc, text) from None
    except RecursionError:
        raise YamlFault(f"nests deeper than {MAX_DEPTH} levels", "flatten the document") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text_file(path: Path) -> bytes:
    """The bytes of ``path``, reading no more than one byte past the size murmur accepts."""
    with path.open("rb") as handle:
        return handle.read(MAX_DOCUMENT_BYTES + 1)


def describe_value(value: object) -> str:
    """How a refusal names a value it did not want."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"`{'true' if value else 'false'}`"
    if isinstance(value, int | float):
        return f"the number `{value}`"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text `{shown}`" if value.strip() else "blank text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def suggest(word: str, choices: Collection[str]) -> str:
    """``; did you mean `x`?`` for a close match, else nothing."""
    close = get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""
