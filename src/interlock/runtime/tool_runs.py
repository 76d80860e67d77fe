"""Running a model worker that has `tools:`: its servers opened for the attempt, the tool
loop, and the attempt's transcript.

The transcript is kept beside the attempt's prompt, as ``prompts/<task>.<attempt>.tools.md``
(so ``interlock explain --prompt`` shows it too), and rewritten after every entry: a loop that
fails part-way leaves every call made so far on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interlock.core.tools import DEFAULT_MAX_TURNS
from interlock.core.workflow import Worker
from interlock.providers.base import ModelRequest, ModelResult, ProviderError
from interlock.providers.mcp_tools import Toolbox
from interlock.providers.tool_loop import Complete, run_tool_loop
from interlock.runtime.artifacts import write_atomic

TOOL_KINDS = frozenset({"openai", "anthropic", "offline"})
"""Provider kinds a tool loop runs on (the offline stand-in never asks for a tool)."""


class Transcript:
    """The attempt's tool transcript as Markdown, rewritten as entries arrive."""

    def __init__(self, path: Path, servers: list[str]) -> None:
        self.path = path
        self.lines = ["# Tool servers", "", *(f"- `{s}`" for s in servers), ""]

    def add(self, entry: dict[str, Any]) -> None:
        """Add one entry from the loop and write the file."""
        if "text" in entry:
            self.lines += [f"# Turn {entry['turn']}: model ({entry['finish_reason']})", ""]
            if entry["text"]:
                self.lines += [entry["text"], ""]
            for call in entry["calls"]:
                self.lines += [
                    f"## Call `{call['name']}` ({call['id']})",
                    "",
                    "```json",
                    _pretty(call["arguments"]),
                    "```",
                    "",
                ]
        elif "fault" in entry:
            self.lines += [f"## Fault ({entry['call']})", "", entry["fault"], ""]
        else:
            heading = "Error result" if entry["is_error"] else "Result"
            self.lines += [
                f"## {heading} of `{entry['name']}` ({entry['call']})",
                "",
                "```",
                entry["result"],
                "```",
                "",
            ]
        write_atomic(self.path, "\n".join(self.lines).encode(), durable=False)


def _pretty(arguments: str) -> str:
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
) -> ModelResult:
    """The worker's answer after its tool loop (see `interlock.providers.tool_loop`).

    Raises:
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
    async with Toolbox(worker.tools, role=worker.role, cwd=cwd) as toolbox:
        return await run_tool_loop(
            complete,
            request,
            toolbox,
            max_turns=worker.max_turns or DEFAULT_MAX_TURNS,
            accept_max_turns=worker.accept_max_turns,
            record=record.add,
        )
