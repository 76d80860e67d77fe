"""A small real MCP server for the tool-loop tests, spoken to over stdio.

Run as ``python mcp_server.py`` (stdio) or ``python mcp_server.py --http PORT`` (streamable
HTTP on 127.0.0.1:PORT/mcp). Its tools: ``add`` (two integers), ``lookup`` (a word from a
fixed table, an error result for any other word), ``sleep`` (waits, for timeouts), ``getenv``
(what the server was given), ``notes.count`` (a name the model APIs refuse), ``crash``
(the process exits at once, as a crashing server does) and ``note`` (appends its word and
the request's metadata to the file named by ``MCP_CALL_LOG``, so a test can count calls
across server processes and see their idempotency keys; the word ``die`` also exits the
server the first time it is written down, and ``kill`` kills the process that started the
server with SIGKILL, as a crash of interlock mid-loop). ``spoil`` changes a byte of one line
of a file, then exits as ``crash`` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("interlock-test-tools")

_TABLE = {"alpha": "the first letter", "omega": "the last letter"}


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def lookup(word: str) -> str:
    """Look a word up in a small glossary."""
    if word not in _TABLE:
        raise ToolError(f"no entry for {word!r}")
    return _TABLE[word]


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then say so."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def getenv(name: str) -> str:
    """The value of an environment variable of the server, or <unset>."""
    return os.environ.get(name, "<unset>")


@server.tool(name="notes.count")
def count(text: str) -> int:
    """Count the words of a text (a dotted name, as MCP allows and the model APIs do not)."""
    return len(text.split())


@server.tool()
def crash() -> str:
    """Write 2 MB of noise and a last line to stderr, then exit the server process at once."""
    sys.stdout.flush()
    sys.stderr.write("noise " * 350_000 + "\nlast words: crashed on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def note(word: str, ctx: Context) -> str:
    """Write a word down in the call log, with the request's metadata."""
    meta = dict(ctx.request_context.meta or {})
    path = os.environ["MCP_CALL_LOG"]
    with open(path, encoding="utf-8") as log:
        seen = sum(1 for line in log if json.loads(line)["word"] == word)
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"word": word, "meta": meta}) + "\n")
    if word == "die" and not seen:
        os._exit(3)
    if word == "kill" and not seen:
        os.kill(os.getppid(), signal.SIGKILL)
    return f"noted {word}"


@server.tool()
def spoil(path: str, line: int) -> str:
    """Change one byte of line `line` (from 1) of a file, then exit the server at once."""
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    lines[line - 1] = lines[line - 1].replace(b'"', b"'", 1)
    with open(path, "wb") as handle:
        handle.write(b"\n".join(lines))
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
