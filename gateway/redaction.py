"""The one redaction point: what a credential looks like, and how it is hidden.

No token (formation, operator, declared) may reach a log line, a trace record or a
diagnostic, whatever a caller formats into them. Every writer of those passes its text
through here, in this order of strictness:

* :func:`redact` hides every :data:`TOKEN_SHAPE`: a formation token, whole or cut short
  (``mft1.`` and a part), an ``Authorization`` value (``Bearer`` followed by a
  credential), and ``bearer`` followed by a credential-length run anywhere in prose
  (short words after it, as in "bearer and jwt", are left alone);
* :func:`redact_value` does the same inside the strings of a JSON-like value (a trace
  record's fields);
* :func:`redact_request_text` is for text a client chose (a request's path or method):
  a declared credential may have any shape, so any run of :data:`CREDENTIAL_RUN` token
  characters is hidden as well.

The marker is always :data:`REDACTED`. This module imports only ``re``: every writer,
on the door's request path included, can afford it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

REDACTED: Final = "[redacted]"

#: A formation token, whole or cut short; an ``Authorization`` value at the start of a
#: text; ``bearer`` and a run long enough to be a credential anywhere.
TOKEN_SHAPE: Final = re.compile(
    r"mft1\.[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]*)?"
    r"|^Bearer\s+\S+"
    r"|(?i:\bbearer\s+[A-Za-z0-9._~+/=-]{20,})")
#: In text a client chose: a run of token characters this long is taken for a credential.
CREDENTIAL_RUN: Final = re.compile(r"[A-Za-z0-9_\-+=.~]{24,}")


def redact(text: str) -> str:
    """``text`` with every token shape replaced by ``[redacted]``."""
    # Every shape holds "mft1." or "bearer" in some case: two substring looks are 3x
    # cheaper than the pattern on text that has neither (the door's trace records).
    if "mft1." in text or "bearer" in text.lower():
        return TOKEN_SHAPE.sub(REDACTED, text)
    return text


def redact_value(value: Any) -> Any:
    """``value`` (strings, mappings, lists, tuples; anything else as it is) with every
    string redacted; mappings become dicts and tuples lists, as JSON writes them."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        # A trace record's fields: mostly short strings and numbers, so those are
        # handled here without a call each (every trace write pays this).
        redacted = {}
        for key, item in value.items():
            kind = item.__class__
            if kind is str:
                redacted[key] = redact(item)
            elif kind is int or kind is float or kind is bool or item is None:
                redacted[key] = item
            else:
                redacted[key] = redact_value(item)
        return redacted
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    return value


def redact_request_text(text: str) -> str:
    """Text a client chose, redacted for a log: token shapes and every long run of token
    characters (a declared credential has no fixed shape)."""
    return CREDENTIAL_RUN.sub(REDACTED, redact(text))
