"""Regular expressions from workflow files, compiled for RE2: matching takes linear time.

An extract's pattern is written by a workflow's author and matched against a model's
output, which nobody controls: with a backtracking engine (Python's `re`), a pattern such as
`(a+)+$` over thirty characters takes minutes and cannot be interrupted. RE2 (google-re2)
guarantees time linear in the text and refuses, when the pattern is compiled, the features
that need backtracking; those are refused with the reason and a way to write it instead.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

# What RE2 leaves out, by the start of its message, and what to write instead.
_UNSUPPORTED = (
    ("invalid perl operator: (?=", "lookahead (?=...) is not supported"),
    ("invalid perl operator: (?!", "negative lookahead (?!...) is not supported"),
    ("invalid perl operator: (?<=", "lookbehind (?<=...) is not supported"),
    ("invalid perl operator: (?<!", "negative lookbehind (?<!...) is not supported"),
    ("invalid perl operator: (?>", "atomic groups (?>...) are not supported"),
    ("bad repetition operator: ++", "possessive repeats (x++) are not supported"),
    ("bad repetition operator: *+", "possessive repeats (x*+) are not supported"),
    ("bad repetition operator: ?+", "possessive repeats (x?+) are not supported"),
    ("invalid escape sequence: \\Z", "\\Z is written \\z (end of text)"),
    ("invalid repetition size", "a repeat count is at most 1000"),
    ("pattern too large", "the pattern is too large once its repeats are expanded"),
)


class PatternError(ValueError):
    """A pattern that RE2 cannot compile, with the reason in words."""


def _unsupported(message: str, pattern: str) -> str | None:
    """What RE2 leaves out that `pattern` uses, or None for a plain syntax error."""
    if "(?P=" in pattern and message.startswith("invalid perl operator: (?P"):
        return "backreferences (?P=name) are not supported"
    for start, reason in _UNSUPPORTED:
        if message.startswith(start):
            return reason
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return "backreferences (\\1) are not supported"
    return None


def as_written(pattern: str) -> str:
    """`pattern` quoted as the file has it: `\\d` stays one backslash, not repr's two."""
    if "'" not in pattern:
        return f"'{pattern}'"
    if '"' not in pattern:
        return f'"{pattern}"'
    return repr(pattern)


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str, *, multiline: bool = True) -> Any:
    """`pattern` compiled for RE2; multi-line (`^` and `$` at each line) as extracts match
    it, or not, as JSON Schema's `pattern` is. Raises PatternError naming what RE2 does not
    support."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the reason is raised here, not printed to stderr
    try:
        return re2.compile(f"(?m){pattern}" if multiline else pattern, options)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        reason = _unsupported(message, pattern)
        if reason is None:
            said = message.replace("(?m)", "", 1) if multiline else message
            raise PatternError(f"regex {as_written(pattern)} does not compile: {said}") from None
        raise PatternError(
            f"regex {as_written(pattern)} is not supported: {reason} (interlock matches with "
            "RE2, in time linear in the text; syntax: https://github.com/google/re2/wiki/Syntax)"
        ) from None
