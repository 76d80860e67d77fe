"""A secret is masked in the encodings a program prints it in, and interlock's own secrets
(registered once by the process) are masked wherever provider keys are."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest

from interlock.providers.redaction import (
    MaskedStream,
    Secret,
    mask_keys,
    protect,
    protect_url,
    redact,
    redact_file,
    scrub,
)

KEY = "k3y-of-a-gateway-0123456789abcdef"


def encodings(value: str) -> dict[str, str]:
    """The common encodings of `value`, by name."""
    data = value.encode()
    return {
        "plain": value,
        "upper": value.upper(),
        "lower": value.lower(),
        "hex": data.hex(),
        "HEX": data.hex().upper(),
        "base64": base64.b64encode(data).decode(),
        "base64 unpadded": base64.b64encode(data).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(data).decode(),
        "base64url unpadded": base64.urlsafe_b64encode(data).decode().rstrip("="),
    }


@pytest.mark.parametrize("length", [16, 17, 18, 32, 33])
def test_every_common_encoding_of_a_key_is_masked(length: int) -> None:
    """Plain, upper- and lower-case, hex in both cases and base64 in both alphabets with and
    without padding, for keys of every length modulo 3: `redact` and `scrub` mask each."""
    # Bytes that make '+', '/', '-' and '_' likely in base64, so both alphabets differ.
    key = "K" + secrets.token_urlsafe(64)[: length - 2] + "~"
    for name, form in encodings(key).items():
        text = f"before {form} after"
        for masked in (redact(text, [Secret(key)]), scrub(text, [Secret(key)])):
            assert form not in masked, name
            assert masked.startswith("before ") and masked.endswith(" after"), name


@pytest.mark.parametrize("prefix", ["user:", "ab:", "a:", '{"key": "'])
def test_a_key_inside_a_longer_base64_text_is_masked(prefix: str) -> None:
    """A key encoded together with what comes before it (a Basic header of user:key, a JSON
    document encoded whole) loses every base64 character that only the key determines."""
    whole = base64.b64encode(f'{prefix}{KEY}"}}'.encode()).decode()
    masked = redact(f"Authorization: Basic {whole}", [Secret(KEY)])
    assert "[redacted]" in masked
    assert whole not in masked
    # What is left of the encoded text cannot be decoded back into the key, or most of it.
    left = max(masked.removeprefix("Authorization: Basic ").split("[redacted]"), key=len)
    assert len(left) <= len(prefix) * 4 // 3 + 4


def test_own_secrets_registered_once_are_masked_everywhere(tmp_path: Path) -> None:
    """A value given to `protect` (and a URL's password given to `protect_url`) is masked by
    `redact`, `scrub`, `mask_keys`, `redact_file` and a `MaskedStream` without being passed to
    them, in its encodings too; a too short value is not taken (it would mask words)."""
    own = "own-secret-" + secrets.token_hex(12)
    password = "pw-" + secrets.token_hex(8)
    protect(own)
    protect_url(f"postgresql://app:{password}@db.internal:5432/ledger?sslmode=require")
    protect("short")
    text = f"{own} {base64.b64encode(own.encode()).decode()} {password} short {own.upper()}"
    for masked in (redact(text, []), scrub(text), mask_keys(text)):
        assert own not in masked and password not in masked and own.upper() not in masked
        assert "short" in masked
    log = tmp_path / "w.1.stderr"
    log.write_text(f"dsn=postgresql://app:{password}@db\nhex {own.encode().hex()}\n")
    assert redact_file(log, [])
    assert password not in log.read_text() and own.encode().hex() not in log.read_text()
    stream = MaskedStream()
    pieces = [own[:5], own[5:9], own[9:], " and ", password[:2], password[2:], " end"]
    shown = "".join(stream.feed(p) for p in pieces) + stream.flush()
    assert shown == "[redacted] and [redacted] end"


def test_mask_keys_leaves_credential_shaped_text_of_an_answer_alone() -> None:
    """An answer's own text shaped like a credential (an example `Bearer` header, an `sk-`
    placeholder) is kept by `mask_keys`; only the configured keys go."""
    answer = f"Send 'Authorization: Bearer sk-example-000000000000' (not {KEY})."
    assert mask_keys(answer, [Secret(KEY)]) == (
        "Send 'Authorization: Bearer sk-example-000000000000' (not [redacted])."
    )


def test_a_log_is_searched_in_blocks_without_missing_a_key_across_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`redact_file` reads a log in blocks: a key that starts in one block and ends in the
    next is still found and masked, and a log without a key is left untouched."""
    from interlock.providers import redaction

    monkeypatch.setattr(redaction, "_BLOCK", 64)
    for start in range(40, 70):
        log = tmp_path / f"{start}.stdout"
        log.write_text("x" * start + KEY + "y" * 100 + "\n")
        assert redact_file(log, [Secret(KEY)]), start
        assert log.read_text() == "x" * start + "[redacted]" + "y" * 100 + "\n"
    clean = tmp_path / "clean.stdout"
    clean.write_text("z" * 1000)
    assert not redact_file(clean, [Secret(KEY)])
