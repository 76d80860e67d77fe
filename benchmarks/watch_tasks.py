"""The no-op worker of `watchers.py`, importable by the server it starts (`watch_tasks:noop`)."""

from __future__ import annotations

from typing import Any


async def noop(ctx: Any) -> str:
    """Return at once: only orchestration and fan-out are measured."""
    return "ok"
