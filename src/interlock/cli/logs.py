"""Logging setup: readable lines by default, one JSON object per line with --log-format json.

Records from the runtime carry `run_id`, `task_id` and a machine-readable `action`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

CONTEXT_KEYS = ("run_id", "task_id", "action", "attempt")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# True in the `interlock` command's own process (`cli.main.main`): the root logger is then
# its to configure. A program that calls the click group itself (tests, an embedding host)
# keeps its own logging for everything but interlock's loggers.
OWN_PROCESS = False

# Libraries whose routine warnings interlock already reports in its own words: the pool's
# "error connecting" for every attempt while a database is down (`storage.outage` says it once).
QUIETER = {"psycopg.pool": logging.ERROR}


def configure_logging(*, debug: bool = False, json_format: bool = False) -> None:
    """Send interlock's logs to stderr, and the libraries' warnings through the same handler
    (in the same format: a JSON log stays one JSON object per line)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    ours = logging.getLogger("interlock")
    ours.handlers[:] = [handler]
    ours.setLevel(logging.DEBUG if debug else logging.WARNING)
    ours.propagate = False
    if not OWN_PROCESS:
        return
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name, level in QUIETER.items():
        logging.getLogger(name).setLevel(logging.DEBUG if debug else level)
