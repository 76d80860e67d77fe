"""`interlock serve`: the HTTP API, live event streams, dashboard, notifications and schedules.

Everything here needs the `server` extra (`pip install 'interlock[server]'`); nothing else in
interlock imports this package, so the CLI starts without it.
"""

from __future__ import annotations

from interlock.server.config import ServerConfig

__all__ = ["ServerConfig"]
