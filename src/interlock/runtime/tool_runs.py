"""Running a model worker that has `tools:`: its servers opened for the attempt, the tool
loop, and the attempt's transcript.

The transcript is kept beside the attempt's prompt, as ``prompts/<task>.<attempt>.tools.md``
(so ``interlock explain --prompt`` shows it too), and written as each entry arrives: a loop
that fails part-way leaves every call made so far on disk. Entries are appended, each one's
text shown up to `ENTRY_CHARS`, and the file stops growing at `TRANSCRIPT_CHARS` (saying so):
a model or a tool that answers without end must not fill the disk, nor rewrite a growing file
per entry.

The loop's turns are also kept in the task's journal (`interlock.runtime.tool_journal`), for
every attempt of the task: an attempt after a failed or killed one continues from the turns
that one completed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from interlock.core.tools import DEFAULT_MAX_TURNS
from interlock.core.workflow import Worker
from interlock.providers.base import ModelRequest, ModelResult, ProviderError, ToolTurn
from interlock.providers.mcp_tools import Toolbox
from interlock.providers.tool_loop import ApprovalNeeded, Complete, run_tool_loop
from interlock.runtime.artifacts import write_atomic
from interlock.runtime.tool_journal import ToolJournal, request_digest

ENTRY_CHARS = 64 * 1024  # of one text, call's arguments or result, in the transcript
TRANSCRIPT_CHARS = 4 * 1024 * 1024  # of the whole transcript

TOOL_KINDS = frozenset({"openai", "anthropic", "offline"})
"""Provider kinds a tool loop runs on (the offline stand-in never asks for a tool)."""


class Transcript:
    """The attempt's tool transcript as Markdown, appended to as entries arrive."""

    def __init__(self, path: Path, servers: list[str]) -> None:
        self.path = path
        self.head = "\n".join(["# Tool servers", "", *(f"- `{s}`" for s in servers), ""]) + "\n"
        self.size = 0  # characters written; 0 until the first entry writes the file
        self.full = False

    def add(self, entry: dict[str, Any]) -> None:
        """Add one entry from the loop to the file."""
        if self.full:
            return
        lines: list[str] = []
        if "text" in entry:
            lines += [f"# Turn {entry['turn']}: model ({entry['finish_reason']})", ""]
            if entry["text"]:
                lines += [_clip(entry["text"]), ""]
            for call in entry["calls"]:
                lines += [
                    f"## Call `{_clip(call['name'], 200)}` ({_clip(call['id'], 200)})",
                    "",
                    "```json",
                    _pretty(_clip(call["arguments"])),
                    "```",
                    "",
                ]
        elif "resumed" in entry:
            lines += [
                f"# Turns 1-{entry['resumed']}: recorded by an earlier attempt, not repeated",
                "",
            ]
        elif "awaiting" in entry:
            lines += [
                f"## Call `{_clip(entry['name'], 200)}` ({entry['call']}) waits for approval",
                "",
                "The attempt stops here: `interlock approve --call` runs it, `interlock reject "
                "--call` answers the model with a refusal.",
                "",
            ]
        elif "fault" in entry:
            lines += [f"## Fault ({entry['call']})", "", _clip(entry["fault"]), ""]
        else:
            heading = "Error result" if entry["is_error"] else "Result"
            lines += [
                f"## {heading} of `{entry['name']}` ({entry['call']})",
                "",
                "```",
                _clip(entry["result"]),
                "```",
                "",
            ]
        text = "\n".join(lines) + "\n"
        if self.size + len(text) > TRANSCRIPT_CHARS:
            self.full = True
            text = (
                f"(The transcript stops here: it reached {TRANSCRIPT_CHARS // (1024 * 1024)} MiB. "
                "Later turns, calls and results are not shown.)\n"
            )
        if not self.size:
            text = self.head + text
            write_atomic(self.path, text.encode(), durable=False)
        else:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(text)
        self.size += len(text)


def _clip(text: str, limit: int = ENTRY_CHARS) -> str:
    """`text`, or its start with how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit:,} more characters not shown)"


def _pretty(arguments: str) -> str:
    if len(arguments) > ENTRY_CHARS:
        return arguments  # clipped: no longer JSON
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


async def complete_with_tools(
    complete: Complete,
    request: ModelRequest,
    worker: Worker,
    *,
    kind: str,
    transcript: Path,
    cwd: Path | None,
    journal: Path | None = None,
    warn: Callable[[str], None] = lambda _: None,
    mask: Callable[[str], str] = str,
    decisions: Mapping[str, Mapping[str, Any]] | None = None,
) -> ModelResult:
    """The worker's answer after its tool loop (see `interlock.providers.tool_loop`).

    With `journal` (``journal/<task>.jsonl``), the turns of earlier attempts are read from it
    and the loop continues after them; journal lines that are refused are said to `warn`.
    What the journal keeps goes through `mask` first (the keys of the configuration), as the
    transcript does once the loop ends. `decisions` are the tool calls a person decided
    (`interlock.providers.tool_loop`).

    Raises:
        ApprovalNeeded: A call waits for a person's decision (its arguments masked).
        ProviderError: The model kind cannot call tools, a server failed, or the loop
            reached `max_turns`.
    """
    if kind not in TOOL_KINDS:
        raise ProviderError(
            f"worker {worker.role!r}: model {request.alias!r} is a {kind} agent, which cannot "
            "call the worker's tools: use a model served over the OpenAI or Anthropic API",
            retryable=False,
        )
    record = Transcript(transcript, [server.label for server in worker.tools])
    kept = None if journal is None else ToolJournal(journal, request_digest(request), mask)
    done: list[ToolTurn] = []
    partial: ToolTurn | None = None
    if kept is not None:
        done, partial, warning = kept.load()
        if warning is not None:
            warn(warning)
        if done:
            record.add({"resumed": len(done)})
    async with Toolbox(worker.tools, role=worker.role, cwd=cwd) as toolbox:
        try:
            return await run_tool_loop(
                complete,
                request,
                toolbox,
                max_turns=worker.max_turns or DEFAULT_MAX_TURNS,
                accept_max_turns=worker.accept_max_turns,
                record=record.add,
                journal=kept,
                done=done,
                partial=partial,
                decisions=decisions,
            )
        except ApprovalNeeded as waiting:
            arguments = str(waiting.approval.get("arguments", ""))
            waiting.approval = {**waiting.approval, "arguments": mask(arguments)}
            raise
