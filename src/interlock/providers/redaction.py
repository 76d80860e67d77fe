"""Keeping API keys and interlock's own secrets out of messages, reprs and logs.

A key is wrapped in `Secret` as soon as it is read, so printing a config object, a provider
or a traceback's locals shows a mask instead of the key. Text that may echo a key back (a
provider's error body, a stream's error event, an exception message) goes through `redact`
before it is raised, and again through `scrub` where a provider's failure becomes a task's
failure: there every configured key is masked, in the forms a server may echo it or a
program may print it (plain, JSON-escaped, URL-encoded, upper- and lower-case, base64 in its
standard and URL-safe alphabets with or without padding, also inside a longer base64 text,
and hex), together with anything shaped like a credential (a bearer token, an ``sk-`` key,
an ``api_key=`` query parameter), since a proxy may echo a key this process never held.

The secrets of this process itself (a server's token secret, its hooks' secrets, the
password of a store or Redis URL, a webhook's URL) are registered with `protect` when the
process starts; `redact`, `redact_file` and `scrub` mask them in every text, whoever asks.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

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


MIN_SECRET = 8  # shorter values would mask ordinary words; real keys are long

# This process's own secrets (`protect`), masked in every text whoever asks.
_OWN: set[Secret] = set()
_own_lock = threading.Lock()


def protect(value: str | bytes | Secret | None) -> None:
    """Mask `value` in every text `redact`, `redact_file` and `scrub` see from now on: a
    secret of this process (a server's token secret, a hook's secret, a password)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        value = Secret(value)
    if value is not None and len(value.reveal()) >= MIN_SECRET:
        with _own_lock:
            _OWN.add(value)


def protect_url(url: str | None) -> None:
    """`protect` the password of a URL (``postgresql://user:pw@host/db``, ``redis://:pw@h``,
    a ``password=`` query parameter), as written and decoded."""
    if not url:
        return
    try:
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query)
    except ValueError:
        return
    if password:
        protect(password)
        protect(unquote(password))
    for name, value in query:
        if name.lower() in ("password", "pass", "passwd") and value:
            protect(value)


def protected() -> list[Secret]:
    """The secrets registered with `protect`."""
    with _own_lock:
        return list(_OWN)


def _base64_forms(data: bytes) -> set[str]:
    """The base64 spellings of `data`: whole (padded or not, both alphabets), and the part
    that is the same wherever `data` starts inside a longer encoded text (a ``Basic``
    header of ``user:key``, a JSON document encoded whole)."""
    found: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode()
        found |= {whole, whole.rstrip("=")}
        for offset in range(3):
            # Preceded by `offset` bytes, the first characters also carry bits of those
            # bytes and the last ones bits of what follows: keep the characters fixed by
            # `data` alone.
            encoded = encode(b"\0" * offset + data).decode().rstrip("=")
            start = -(-offset * 8 // 6)  # characters touched by the preceding bytes
            end = (offset + len(data)) * 8 // 6  # the characters holding only `data`
            core = encoded[start:end]
            if len(core) >= MIN_SECRET:
                found.add(core)
    return found


@functools.lru_cache(maxsize=256)
def _forms(value: str) -> frozenset[str]:
    """The spellings of a key a server may echo or a program print: as sent, JSON-escaped,
    URL-encoded, upper- and lower-case, base64 and hex."""
    data = value.encode()
    hexed = binascii.hexlify(data).decode()
    return frozenset(
        {
            value,
            json.dumps(value)[1:-1],
            quote(value, safe=""),
            quote(value),
            value.upper(),
            value.lower(),
            hexed,
            hexed.upper(),
            *_base64_forms(data),
        }
    )


def _needles(secrets: Iterable[Secret | None]) -> list[str]:
    """Every form of every secret given and protected, longest first (an escaped form may
    contain the plain one)."""
    forms: set[str] = set()
    for secret in [*secrets, *protected()]:
        if secret is not None and len(secret.reveal()) >= MIN_SECRET:
            forms |= _forms(secret.reveal())
    return sorted(forms, key=len, reverse=True)


def redact(text: str, secrets: Iterable[Secret | None]) -> str:
    """Replace every occurrence of each secret's value (in each of its forms), and of this
    process's own secrets (`protect`), in `text` with a mask.

    Args:
        text: Any message that might echo a key back (error bodies, exception text).
        secrets: The keys to hide; `None` entries are ignored so callers can pass optional keys.

    Returns:
        `text` with the keys replaced by ``[redacted]``.
    """
    for form in _needles(secrets):
        if form in text:
            text = text.replace(form, MASK)
    return text


def redact_file(path: Path, secrets: Iterable[Secret | None]) -> bool:
    """Mask every given key and this process's own secrets in the file at `path` (in the
    spellings `redact` knows); returns whether there was one. The file is searched in large
    overlapping blocks, and written again, a line at a time (a key holds no line break) and
    atomically, only when it held a key: a log without one costs a read."""
    needles = [form.encode() for form in _needles(secrets)]
    if not needles or not _holds_any(path, _detectors(needles)):
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


_BLOCK = 1 << 20  # bytes searched at once: a search per line costs more than the search


def _detectors(needles: list[bytes]) -> list[bytes]:
    """The needles that find every one of `needles`: one that holds another is found with it
    (a padded base64 with its unpadded form, a whole encoding with its inner part)."""
    kept: list[bytes] = []
    for needle in sorted(set(needles), key=len):
        if not any(shorter in needle for shorter in kept):
            kept.append(needle)
    return kept


def _holds_any(path: Path, needles: list[bytes]) -> bool:
    """Whether the file holds one of `needles`, read in blocks that overlap by the longest
    needle less one byte (so that none is missed across two blocks)."""
    overlap = max(len(n) for n in needles) - 1
    tail = b""
    with open(path, "rb") as source:
        while block := source.read(_BLOCK):
            window = tail + block
            if any(needle in window for needle in needles):
                return True
            tail = window[-overlap:] if overlap else b""
    return False


def remember(secret: Secret | None) -> None:
    """Have `scrub` mask this key from now on (called where a key goes into a request)."""
    if secret is not None:
        _SENT.add(secret)


def mask_keys(text: str, secrets: Iterable[Secret | None] = ()) -> str:
    """`redact` the given keys, every key sent so far and this process's own secrets, and
    nothing else: for a model's answer, where text merely shaped like a credential (an
    example in documentation) is the answer's own."""
    return redact(text, [*secrets, *_SENT])


class MaskedStream:
    """A text that arrives in fragments (a model's streamed answer) with `mask_keys`
    applied: a key split across two fragments is masked too, since the end of what came
    (as long as the longest form of a key, less one character) is held back until more
    comes or `flush`."""

    def __init__(self, secrets: Iterable[Secret | None] = ()) -> None:
        self._needles = _needles([*secrets, *_SENT])
        self._hold = max((len(n) for n in self._needles), default=1) - 1
        self._held = ""

    def feed(self, text: str) -> str:
        """The part of what came so far that can be shown now, masked."""
        if not self._needles:
            return text
        held = self._held + text
        for needle in self._needles:
            if needle in held:
                held = held.replace(needle, MASK)
        cut = max(0, len(held) - self._hold)
        self._held = held[cut:]
        return held[:cut]

    def flush(self) -> str:
        """What is still held back, masked (at the end of the stream)."""
        held, self._held = self._held, ""
        return held


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


def held_back(secrets: Iterable[Secret | None] = ()) -> int:
    """How many characters a `MaskedStream` of `secrets` may hold back: a progress line
    that must be seen whole at once (a call saying it waits) is followed by this much white
    space."""
    return max((len(n) for n in _needles([*secrets, *_SENT])), default=1) - 1
