"""`interlock mcp` as a real subprocess in a temporary project, driven by the MCP SDK's own
client over stdio, and the workflow the MCP tests run (model workers: with no interlock.toml
they use the offline provider)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

WORKFLOW = """\
announce:
  description: Draft an announcement, wait for a person, then publish it.
  inputs:
    audience: engineers
  phases:
    - id: draft
      pause_after: true
      workers:
        - role: writer
          model: sonnet
          task: "Draft an announcement about {{ topic }} for {{ audience }}. {{ feedback }}"
    - id: publish
      workers:
        - role: publisher
          model: haiku
          final: true
          reads: [writer.md]
          task: "Polish the approved draft."
"""


def project(directory: Path) -> Path:
    """A project folder holding the workflow file; returns the folder."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "workflow.yaml").write_text(WORKFLOW)
    return directory


def environment(home: Path) -> dict[str, str]:
    """The server's environment: its own state directory, this interpreter's path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_HOME"] = str(home)
    return env


@asynccontextmanager
async def stdio_session(directory: Path, *args: str) -> AsyncIterator[Client]:
    """A client connected to `interlock mcp ARGS` started in `directory`."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "interlock", "mcp", *args],
        cwd=directory,
        env=environment(directory / ".interlock"),
    )
    async with Client(params, cache=None, read_timeout_seconds=60) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result (the call must succeed)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {result.content}"
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> dict[str, str]:
    """A tool's error body (the call must fail): {"code", "message"}."""
    result: CallToolResult = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} did not fail: {result.structured_content}"
    assert result.structured_content is not None
    error: dict[str, str] = result.structured_content["error"]
    return error
