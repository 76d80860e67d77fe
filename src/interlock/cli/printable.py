"""Text from a run (a topic, a pipeline's name or description, a warning) made safe to print.

A topic or a description is whatever someone typed or a program wrote: an escape sequence
in it would recolour the terminal, move the cursor or set the window title, and a carriage
return would overwrite the line that shows it. Every human-readable output passes such text
through `printable`, which shows each control character as its escape (``\\x1b``, ``\\n``)
instead; `--json` output stays as recorded.
"""

from __future__ import annotations

import re
import shlex

# C0 and C1 controls, DEL, and the invisible marks that reorder or hide text (bidi overrides
# and isolates, zero-width characters).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character shown as its escape."""
    return _CONTROL.sub(_escaped, text)


def shell_word(text: str) -> str:
    """`text` quoted for a command line to copy: as `shlex.quote` does, or, when it holds a
    control character, in the shell's `$'...'` quoting with each one as its escape (which
    that quoting reads back as the character)."""
    if not _CONTROL.search(text):
        return shlex.quote(text)
    body = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"$'{printable(body)}'"
