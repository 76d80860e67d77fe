"""How large a worker's rendered task may be: the default and the most a workflow may allow.

Apart from the template guard, which enforces them, so that the workflow's models read the
limit without loading the template engine.
"""

from __future__ import annotations

MAX_TASK_SIZE = 1_000_000  # characters of a rendered task, and of any value it builds
MAX_TASK_SIZE_LIMIT = 100_000_000  # the most a worker's `max_task_size` may allow
