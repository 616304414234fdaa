"""Names under ``formation.invalid``: which hosts name it, and which name a callee exactly.

Step 1 of the formation proxy (docs/proxy.md) reads these, as do ``FormationClient``
and the forward proxy. In order: every reading a parser or resolver might make of a
host (percent-decoded, NFKC-folded, ideographic dots as dots, punycode decoded);
:func:`names_formation`, whether any reading names something under
``formation.invalid``; :func:`exact_virtual_name`, the member an authority names
exactly; :func:`check_raw_url`, the refusal of a URL *text* that names
``formation.invalid`` in any but the exact form, before httpx's parsing hides how it
was written.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final
from urllib.parse import unquote

from gateway.protocol import MEMBER_NAME_RE
from gateway.proxy.egress import VIRTUAL_DOMAIN, VIRTUAL_SUFFIX
from gateway.proxy.proxy_errors import FormationRefused

#: Dots a resolver may read as ``.``: ideographic, fullwidth and halfwidth.
_UNICODE_DOTS: Final = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def _readings(host: str) -> set[str]:
    """Every way a parser or resolver might read ``host``: percent-decoded (twice, for
    double encoding), NFKC-folded, with ideographic dots as dots, lower case, without
    trailing dots, and with punycode labels decoded."""
    readings: set[str] = set()
    text = host
    for _ in range(3):
        folded = unicodedata.normalize("NFKC", text).translate(_UNICODE_DOTS).lower()
        folded = folded.strip("[]").rstrip(".")
        readings.add(folded)
        readings.add(_decode_punycode(folded))
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return readings


def _decode_punycode(host: str) -> str:
    labels = []
    for label in host.split("."):
        if label.startswith("xn--"):
            try:
                label = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                pass
        labels.append(label)
    return unicodedata.normalize("NFKC", ".".join(labels)).translate(_UNICODE_DOTS).lower()


def names_formation(host: str) -> bool:
    """Whether any reading of ``host`` names something under ``formation.invalid``.

    Deliberately wide: ``coder.formation.invalid.evil.example`` and ``xformation.invalid``
    count too. A host that does is either exactly a callee's virtual address or refused.
    """
    lowered = host.lower()
    if host.isascii() and "%" not in host and "xn--" not in lowered:
        return VIRTUAL_DOMAIN in lowered      # the only reading of plain ASCII
    return any(VIRTUAL_DOMAIN in reading for reading in _readings(host))


def exact_virtual_name(authority: str) -> str | None:
    """The member name when ``authority`` is exactly ``<member>.formation.invalid``."""
    if not authority.endswith(VIRTUAL_SUFFIX):
        return None
    name = authority[: -len(VIRTUAL_SUFFIX)]
    return name if MEMBER_NAME_RE.fullmatch(name) else None


_RAW_URL = re.compile(r"^(?P<scheme>[^:/?#]*):?//(?P<authority>[^/?#]*)")


def check_raw_url(url: str) -> None:
    """Refuse a URL *text* that names ``formation.invalid`` in any but the exact form.

    httpx folds case, drops a default port and maps ideographic dots before a transport
    sees a URL, so ``CODER.formation.invalid`` and ``coder.formation.invalid:80`` can
    only be told apart here, from the text the component wrote. The transport repeats
    every check it still can on the parsed URL.
    """
    match = _RAW_URL.match(url.strip())
    if match is None:
        return
    authority = match["authority"]
    if not names_formation(authority):
        return
    if match["scheme"] != "http" or exact_virtual_name(authority) is None:
        raise FormationRefused()
