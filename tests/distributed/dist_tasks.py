"""Call workers of the distributed tests; each execution is logged with its idempotency key."""

from __future__ import annotations

import json
import os
import time

from interlock.runtime.executors import TaskContext


def _log(context: TaskContext) -> None:
    path = os.environ.get("DIST_TASKS_LOG")
    if path:
        line = f"{context.spec.run_id} {context.spec.task_id} {context.spec.idempotency_key}\n"
        with open(path, "a") as handle:
            handle.write(line)
    time.sleep(float(os.environ.get("DIST_TASKS_DELAY", "0")))


def plan(context: TaskContext) -> str:
    """Three items to write about."""
    _log(context)
    count = int(os.environ.get("DIST_TASKS_ITEMS", "3"))
    return json.dumps({"items": [f"{context.topic}-{i}" for i in range(count)]})


def write(context: TaskContext) -> str:
    """A paragraph about one item."""
    _log(context)
    return f"About {context.item}.\n"


def merge(context: TaskContext) -> str:
    """All paragraphs, in item order."""
    _log(context)
    return context.read("writer.md")


def merge_free(context: TaskContext) -> str:
    """Half a second of work that reads nothing."""
    _log(context)
    time.sleep(0.5)
    return f"Done for {context.topic}.\n"


def timed(context: TaskContext) -> str:
    """Sleep 0.6 s, then log "call START END" (wall clock) to SLOTS_LOG."""
    started = time.time()
    time.sleep(0.6)
    with open(os.environ["SLOTS_LOG"], "a") as handle:
        handle.write(f"call {started} {time.time()}\n")
    return "done\n"
