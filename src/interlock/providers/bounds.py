"""How much one model call may bring back: the longest line of its stream and the largest answer.

A server that streams without end, or sends one line that never ends, must not grow the
process until the kernel stops it, nor keep the event loop busy. Each call is bounded:

- ``max_line_bytes`` (default 1 MiB): one line of the event stream, and the data lines of
  one event together;
- ``max_answer_bytes`` (default 32 MiB): what the call keeps of the answer (text, tool-call
  arguments and thinking together), the body of an answer given as one JSON document, and
  what a command-line agent prints.

Both are set per model in ``interlock.toml``'s ``[models.<alias>]`` tables. Passing one fails
the attempt without a retry (the same server would answer the same way), and the message
names the limit and the key that raises it. An error answer's body is read only up to
`ERROR_BODY_BYTES`: only its message is ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from interlock.providers.failures import ProviderError

if TYPE_CHECKING:
    from interlock.providers.base import ModelResult

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "ERROR_BODY_BYTES",
    "AnswerLimits",
    "AnswerMeter",
    "AnswerTooLarge",
]

MIB = 1 << 20
DEFAULT_MAX_LINE_BYTES = MIB
DEFAULT_MAX_ANSWER_BYTES = 32 * MIB
ERROR_BODY_BYTES = 64 * 1024  # of an error answer, read for its message


def describe_bytes(size: int) -> str:
    """`size` for a message: ``1 MiB``, ``512 KiB``, or bytes."""
    for unit, name in ((MIB, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


class AnswerTooLarge(ProviderError):
    """A call's answer passed one of its limits: not retried, since the same server would
    answer the same way; the message names the limit and the key that raises it."""

    def __init__(self, message: str, *, answered: ModelResult | None = None) -> None:
        super().__init__(message, retryable=False, answered=answered)

    def with_message(self, message: str) -> AnswerTooLarge:
        """The same failure with another message (e.g. with keys masked)."""
        return AnswerTooLarge(message, answered=self.answered)


@dataclass(frozen=True, kw_only=True)
class AnswerLimits:
    """The limits of every call to one model alias.

    Attributes:
        max_line_bytes: The longest line (and event) of a stream, in bytes.
        max_answer_bytes: The largest answer kept, in bytes.
        table: Where they are set, for messages: ``[models.<alias>]``.
    """

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    table: str = "[models.<alias>]"

    def exceeded(self, provider: str, key: str, what: str) -> AnswerTooLarge:
        """The failure of a call whose `what` passed the limit `key`."""
        limit = describe_bytes(getattr(self, key))
        return AnswerTooLarge(
            f"{provider}: {what} passed {key} ({limit}); the call was stopped and is not "
            f"retried. If answers of this model are really that large, raise {key} in "
            f"{self.table} of interlock.toml"
        )

    def line_too_long(self, provider: str) -> AnswerTooLarge:
        """A line or an event of the stream passed `max_line_bytes`."""
        return self.exceeded(provider, "max_line_bytes", "a line of the event stream")

    def answer_too_large(self, provider: str, what: str = "the answer") -> AnswerTooLarge:
        """The answer passed `max_answer_bytes`."""
        return self.exceeded(provider, "max_answer_bytes", what)


class AnswerMeter:
    """Counts what a call keeps of its answer, failing it once `max_answer_bytes` is passed.

    Counted in characters of text, which for the UTF-8 a server sends is at most its bytes:
    the bound holds for the bytes too, without encoding anything again.
    """

    __slots__ = ("_left", "_limits", "_provider", "_what")

    def __init__(self, limits: AnswerLimits, provider: str, what: str = "the answer") -> None:
        self._limits = limits
        self._provider = provider
        self._what = what
        self._left = limits.max_answer_bytes

    def add(self, text: str) -> str:
        """Count `text` (a fragment about to be kept) and give it back.

        Raises:
            AnswerTooLarge: The answer so far passed the limit.
        """
        self.count(len(text))
        return text

    def count(self, size: int) -> None:
        """Count `size` bytes kept (bookkeeping, say) without text.

        Raises:
            AnswerTooLarge: The answer so far passed the limit.
        """
        self._left -= size
        if self._left < 0:
            raise self._limits.answer_too_large(self._provider, self._what)
