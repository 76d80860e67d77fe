"""A task's tool loop journal: what the model answered and what each tool gave back, kept
so that a later attempt of the task continues the loop instead of starting it again.

One file per task (not per attempt), ``journal/<task>.jsonl`` in the run directory: a line
per model answer that asked for tools, then a line per tool result, each appended and
fsynced as it completes. Each line carries the SHA-256 of its own content and of the line
before it, so a line changed or lost is found: the journal is trusted up to the last good
line, the rest is dropped (and the file rewritten to that prefix). A half-written last line
(a crash while it was written) is dropped the same way. Lines written for another prompt
(the task's prompt changed) are not reused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interlock.providers.base import ModelRequest, ToolCall, ToolResult, ToolTurn
from interlock.runtime.sealed_lines import append_sealed, keep_good, read_sealed


def request_digest(request: ModelRequest) -> str:
    """What a journal is for: the model alias, system text and prompt of the loop's first
    call (another prompt is another conversation, whose turns must not be replayed)."""
    text = json.dumps([request.alias, request.system, request.prompt], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ToolJournal:
    """The journal of one task's tool loop (see the module docstring).

    Args:
        path: ``journal/<task>.jsonl`` in the run directory.
        digest: `request_digest` of the loop's first call.
    """

    def __init__(self, path: Path, digest: str, mask: Callable[[str], str] = str) -> None:
        self.path = path
        self.digest = digest
        self._mask = mask  # keys out of what is kept (the turns replayed hold the mask)
        self._last = ""  # sha of the last good line: the next line's `prev`

    def load(self) -> tuple[list[ToolTurn], ToolTurn | None, str | None]:
        """The turns recorded by earlier attempts: (complete turns, the last turn if only
        some of its calls have results, a warning when lines were refused).

        A refused or foreign tail is removed from the file, so what is appended next
        follows the good prefix.
        """
        found = read_sealed(
            self.path, chained=True, until=lambda body: body.get("request") != self.digest
        )
        warning = None
        if found.broken is not None:
            warning = (
                f"{self.path}: line {found.broken} of the tool journal does not match its "
                f"hash chain; the loop continues from the {len(found.bodies)} entries before it"
            )
        self._last = found.last
        keep_good(self.path, found)  # a refused or foreign tail: appends follow the prefix
        entries = found.bodies
        done, partial = _turns(entries)
        return done, partial, warning

    def answer(self, turn: int, answer: ToolTurn) -> None:
        """Record the model's answer of `turn` and the calls it asks for."""
        self._append(
            {
                "turn": turn,
                "text": self._mask(answer.text),
                "thinking": list(answer.thinking),
                "calls": [
                    {"id": c.id, "name": c.name, "arguments": self._mask(c.arguments)}
                    for c in answer.calls
                ],
            }
        )

    def result(self, turn: int, index: int, result: ToolResult) -> None:
        """Record what call `index` (from 0) of `turn` gave back."""
        self._append(
            {
                "turn": turn,
                "index": index,
                "call_id": result.call_id,
                "content": self._mask(result.content),
                "is_error": result.is_error,
            }
        )

    def _append(self, entry: dict[str, Any]) -> None:
        self._last = append_sealed(self.path, {**entry, "request": self.digest, "prev": self._last})


def _turns(entries: list[dict[str, Any]]) -> tuple[list[ToolTurn], ToolTurn | None]:
    """Journal entries as turns: the complete ones, and a last one still missing results."""
    done: list[ToolTurn] = []
    current: ToolTurn | None = None
    for entry in entries:
        if "calls" in entry:
            if current is not None:
                break  # an answer before the last turn's results: keep what is whole
            current = ToolTurn(
                text=entry["text"],
                calls=tuple(ToolCall(**call) for call in entry["calls"]),
                results=(),
                thinking=tuple(entry["thinking"]),
            )
        elif current is not None and entry["index"] == len(current.results):
            result = ToolResult(
                call_id=entry["call_id"], content=entry["content"], is_error=entry["is_error"]
            )
            current = ToolTurn(
                text=current.text,
                calls=current.calls,
                results=(*current.results, result),
                thinking=current.thinking,
            )
        else:
            break
        if len(current.results) == len(current.calls):
            done.append(current)
            current = None
    return done, current
