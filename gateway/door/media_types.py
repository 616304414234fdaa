"""What parts a door takes: each part's media type, and whether the modes its card
accepts cover it (docs/door.md, "Media types"). Standard library only: the manifest's
check of ``agent.input_modes`` reads :func:`media_type_problem` too.

In this order:

1. how a media type is read (:func:`parse_media_type`): ``type/subtype``, compared in
   lower case, its parameters (``; charset=utf-8``) dropped;
2. what one part's media type is (:func:`part_media_type`): its own ``mediaType`` when
   it gives one; else a ``text`` part is ``text/plain``, a ``data`` part
   ``application/json``, a ``raw`` or ``url`` part ``application/octet-stream``;
3. what a card accepts (:class:`AcceptedModes`): its ``defaultInputModes`` and each
   skill's ``inputModes`` (a message names no skill, so a part one skill takes is one the
   agent takes), each exact or a wildcard (``*/*``, ``image/*``). A card whose list
   holds anything that is no media type (``"text"``, as some SDK samples write) or is
   empty is not enforced: the door cannot tell what it means, and the agent judges;
4. the first part outside them (:meth:`AcceptedModes.refused`), which the methods
   refuse with ``-32005`` (:func:`gateway.door.methods.send_message_request`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = ["ANY_MODE", "AcceptedModes", "media_type_problem", "parse_media_type",
           "part_media_type"]

#: RFC 9110's token, the characters of each half of ``type/subtype``.
_TCHARS: Final = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE: Final = re.compile(rf"({_TCHARS})/({_TCHARS})")
#: The media types of the parts that name none (step 2).
TEXT_MEDIA_TYPE: Final = "text/plain"
DATA_MEDIA_TYPE: Final = "application/json"
BYTES_MEDIA_TYPE: Final = "application/octet-stream"


def parse_media_type(value: str) -> tuple[str, str] | None:
    """``(type, subtype)`` in lower case, parameters dropped; None when ``value`` is no
    ``type/subtype``."""
    found = _MEDIA_TYPE.fullmatch(value.split(";", 1)[0].strip())
    if found is None:
        return None
    return found.group(1).lower(), found.group(2).lower()


def media_type_problem(value: str) -> str | None:
    """Why ``value`` is not a media type a card may accept, or None."""
    parsed = parse_media_type(value)
    if parsed is None:
        return f"must be a media type such as `text/plain`, and `{value}` is not"
    if parsed[0] == "*" and parsed[1] != "*":
        return f"is `{value}`: a wildcard type is `*/*`, not `*/{parsed[1]}`"
    return None


#: The media type of a part of each kind that names none (step 2).
_KIND_MEDIA_TYPES: Final = {"text": TEXT_MEDIA_TYPE, "data": DATA_MEDIA_TYPE}


def part_media_type(kind: str, media_type: str | None) -> str:
    """The media type of one part of ``kind`` (``text``, ``raw``, ``url`` or ``data``)
    that gives ``media_type`` (step 2). An empty ``mediaType`` (protobuf's unset string)
    is none."""
    if media_type:
        return media_type
    return _KIND_MEDIA_TYPES.get(kind, BYTES_MEDIA_TYPE)


class AcceptedModes:
    """The media types a door takes, read once from its card (step 3)."""

    __slots__ = ("_any", "_exact", "_types", "listed")

    def __init__(self, modes: Iterable[str]) -> None:
        #: The modes as the card lists them, for the refusal's text.
        self.listed: tuple[str, ...] = tuple(dict.fromkeys(modes))
        parsed = [parse_media_type(mode) for mode in self.listed]
        readable = [mode for mode in parsed if mode is not None]
        self._any = not readable or len(readable) != len(parsed) or ("*", "*") in readable
        self._types = frozenset(kind for kind, subtype in readable if subtype == "*")
        self._exact = frozenset(readable)

    @classmethod
    def of_card(cls, card: Mapping[str, Any]) -> AcceptedModes:
        """The modes ``card`` accepts: its ``defaultInputModes`` and its skills'
        ``inputModes`` (an entry that is not text makes the card unenforceable)."""
        modes: list[Any] = list(_listed(card.get("defaultInputModes")))
        for skill in _listed(card.get("skills")):
            if isinstance(skill, Mapping):
                modes.extend(_listed(skill.get("inputModes")))
        if not all(isinstance(mode, str) for mode in modes):
            return ANY_MODE
        return cls(modes)

    @property
    def enforced(self) -> bool:
        """Whether some part could be refused."""
        return not self._any

    def takes(self, media_type: str) -> bool:
        if self._any:
            return True
        parsed = parse_media_type(media_type)
        return parsed is not None and (parsed in self._exact or parsed[0] in self._types)

    def refused(self, media_types: Iterable[str]) -> tuple[int, str] | None:
        """The index and media type of the first of ``media_types`` (a message's parts',
        in order) this door does not take."""
        if self._any:
            return None
        for index, media_type in enumerate(media_types):
            if not self.takes(media_type):
                return index, media_type
        return None


def _listed(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


#: Every part taken: a door whose card is not yet known, or says nothing enforceable.
ANY_MODE: Final = AcceptedModes(["*/*"])
