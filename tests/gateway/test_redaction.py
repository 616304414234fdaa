"""gateway.redaction: the one place a credential's shape is known and hidden."""

from __future__ import annotations

import pytest

from gateway.redaction import REDACTED, redact, redact_request_text, redact_value

TOKEN = "mft1.eyJmb3JtYXRpb24iOiJmcm1fMSJ9.c2lnbmF0dXJlc2lnbmF0dXJl"


@pytest.mark.parametrize("text", [
    TOKEN,
    f"the line held {TOKEN} and more",
    "mft1.eyJmb3JtYXRpb24iOiJmcm1fMSJ9",          # cut short: still a token's head
    "Bearer abc",                                   # an Authorization value
    "authorization: bEaReR s3cr3t-0123456789abcdefghij",
])
def test_a_token_shape_is_hidden(text: str) -> None:
    hidden = redact(text)
    assert REDACTED in hidden
    assert "eyJmb3Jt" not in hidden and "s3cr3t" not in hidden and "abc" not in hidden


@pytest.mark.parametrize("text", [
    "bearer and jwt credentials", "task_0193a1b2c3d4e5f6a7b8c9d0e1f2a3b4",
    "frm_0193a1b2c3d4e5f6a7b8c9d0e1f2a3b4", "", "mft1 without a dot",
])
def test_text_without_a_token_shape_is_unchanged(text: str) -> None:
    assert redact(text) == text


def test_redact_value_reaches_every_string_of_a_record() -> None:
    record = {"a": [TOKEN, ("x", {"b": f"Bearer {TOKEN}"})], "n": 3, "ok": "plain"}
    assert redact_value(record) == {"a": [REDACTED, ["x", {"b": REDACTED}]], "n": 3,
                                    "ok": "plain"}


def test_request_text_hides_a_credential_of_any_shape() -> None:
    # A declared bearer token can be any run of token characters, put in a URL.
    path = "/tasks/Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0"
    assert redact_request_text(path) == f"/tasks/{REDACTED}"
    assert redact(path) == path        # too broad for diagnostics, which print ids
