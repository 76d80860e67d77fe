"""Keeping API keys out of messages, reprs and logs.

A key is wrapped in `Secret` as soon as it is read, so printing a config object, a provider
or a traceback's locals shows a mask instead of the key. Text that may echo a key back (a
provider's error body, an exception message) goes through `redact` before it is raised.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "[redacted]"


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
            text = text.replace(value, MASK)
    return text
