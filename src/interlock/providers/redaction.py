"""Keeping API keys out of messages, reprs and logs.

A key is wrapped in `Secret` as soon as it is read, so printing a config object, a provider
or a traceback's locals shows a mask instead of the key. Text that may echo a key back (a
provider's error body, a stream's error event, an exception message) goes through `redact`
before it is raised, and again through `scrub` where a provider's failure becomes a task's
failure: there every configured key is masked, in the forms a server may echo it (plain,
JSON-escaped, URL-encoded), together with anything shaped like a credential (a bearer
token, an ``sk-`` key, an ``api_key=`` query parameter), since a proxy may echo a key this
process never held.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

MASK = "[redacted]"

# Shapes of credentials, whoever's they are. Each keeps its label and masks the value.
_SHAPES = (
    # "Bearer <token>" / "Basic <token>" as in an echoed Authorization header
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}"),
    # header or field echoes: x-api-key: ..., "api_key": "...", api-key=..., ?key=...
    re.compile(
        r"(?i)((?:x-)?api[-_]?key|access[-_]?token|secret|password|auth[-_]?token|[?&]key)"
        r"""(["']?\s*[:=]\s*["']?)[^\s"'&,;}]{8,}"""
    ),
    # OpenAI/Anthropic/compatible key shapes: sk-..., sk-ant-..., sk-proj-...
    re.compile(r"()()\bsk-[A-Za-z0-9_-]{12,}"),
)


# Every key a provider of this process has sent, so that `scrub` masks it in any text,
# log records of the HTTP libraries included, whoever asks.
_SENT: set[Secret] = set()


class Secret:
    """An API key whose value is only available through `reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The key itself; call this only where it goes into a request header."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling would write the key to disk or a queue; refuse rather than leak it.
        raise TypeError("a Secret cannot be pickled")


def _forms(value: str) -> set[str]:
    """The spellings of a key a server may echo: as sent, JSON-escaped, URL-encoded."""
    return {value, json.dumps(value)[1:-1], quote(value, safe=""), quote(value)}


def redact(text: str, secrets: Iterable[Secret | None]) -> str:
    """Replace every occurrence of each secret's value in `text` with a mask.

    Args:
        text: Any message that might echo a key back (error bodies, exception text).
        secrets: The keys to hide; `None` entries are ignored so callers can pass optional keys.

    Returns:
        `text` with the keys replaced by ``[redacted]``.
    """
    for secret in secrets:
        if secret is None:
            continue
        value = secret.reveal()
        # Very short values would mask ordinary words; real keys are long.
        if len(value) >= 8:
            # Longest first: an escaped form may contain the plain one.
            for form in sorted(_forms(value), key=len, reverse=True):
                text = text.replace(form, MASK)
    return text


def redact_file(path: Path, secrets: Iterable[Secret | None]) -> bool:
    """Mask every given key in the file at `path` (in the spellings `redact` knows); returns
    whether there was one. The file is read a line at a time (a key holds no line break), and
    written again, atomically, only when it held a key: a log without one costs a read."""
    needles = sorted(
        {
            form.encode()
            for secret in secrets
            if secret is not None and len(secret.reveal()) >= 8
            for form in _forms(secret.reveal())
        },
        key=len,
        reverse=True,  # longest first: an escaped form may contain the plain one
    )
    if not needles:
        return False
    with open(path, "rb") as source:
        if not any(needle in line for line in source for needle in needles):
            return False
    mask = MASK.encode()
    temporary = path.with_name(f".{path.name}.redacting")
    with open(path, "rb") as source, open(temporary, "wb") as sink:
        for line in source:
            for needle in needles:
                line = line.replace(needle, mask)
            sink.write(line)
    os.replace(temporary, path)
    return True


def remember(secret: Secret | None) -> None:
    """Have `scrub` mask this key from now on (called where a key goes into a request)."""
    if secret is not None:
        _SENT.add(secret)


def scrub(text: str, secrets: Iterable[Secret | None] = ()) -> str:
    """`redact` the given keys and every key sent so far, then mask anything shaped like a
    credential.

    This is what every text from a provider passes through before it is recorded, printed
    or served; it errs on the side of masking.
    """
    text = redact(text, [*secrets, *_SENT])
    for shape in _SHAPES:
        text = shape.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return text


def join_url(base_url: str, path: str) -> str:
    """`path` appended to the path of `base_url`, keeping its query string (some
    OpenAI-compatible services take their key or API version there)."""
    parts = urlsplit(base_url)
    joined = f"{parts.path.rstrip('/')}/{path.lstrip('/')}"
    return urlunsplit((parts.scheme, parts.netloc, joined, parts.query, ""))


def safe_url(url: str) -> str:
    """A URL fit for a message: without user info and query string (either may hold a key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unreadable URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
