"""An MCP server for interlock: coding agents list pipelines, start and rerun runs, follow
them, read their outputs, and approve, reject, edit or cancel them at a pause.

`interlock mcp` serves it over stdio; `interlock serve` also at `/mcp` (streamable HTTP),
behind the API's bearer tokens and scopes. Needs the `mcp` extra
(`pip install 'interlock[mcp]'`). The package is not named `mcp`, which would hide the SDK.
"""

from __future__ import annotations

from interlock.mcpserver.backend import Backend
from interlock.mcpserver.server import build

__all__ = ["Backend", "build"]
