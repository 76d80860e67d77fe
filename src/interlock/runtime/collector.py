"""The garbage collector while a loop of interlock runs.

A loop with a thousand model calls in flight keeps a couple of hundred thousand objects alive
(each call's coroutines, closures, connection and timeout), and CPython's default thresholds
(700, 10, 10) then run a full collection each time that heap grows by a quarter, every one of
them walking all of it: 60-180 ms apiece, a third of the loop's CPU with 1,000 runs of three
calls (`benchmarks/README.md`, "The garbage collector"). While a loop runs, the young
generation's threshold is raised to `Settings.gc_young` (`YOUNG`, 50,000 allocations), which makes
collections some seventy times rarer and full ones rarer still; garbage in reference cycles
waits a little longer to be freed (peak memory was unchanged in the benchmark).

The thresholds are the process's, so this is done with care for the host: only a collector
that is enabled and has a lower young threshold is changed, and the thresholds found are put
back when the last loop of the process ends, unless someone changed them meanwhile.
`Settings(gc_young=None)` leaves the collector alone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 50_000  # the young generation's threshold while a loop runs (CPython's default: 700)

_lock = threading.Lock()
_loops = 0  # loops of this process inside `roomy_collector`
_found: tuple[int, int, int] | None = None  # the thresholds to put back, if we changed them
_set: tuple[int, int, int] | None = None  # the thresholds we set


@contextmanager
def roomy_collector(young: int | None) -> Iterator[None]:
    """Within this block, a young-generation threshold of at least `young` (see the module)."""
    global _loops, _found, _set
    if young is None:
        yield
        return
    with _lock:
        _loops += 1
        current = gc.get_threshold()
        if _found is None and gc.isenabled() and current[0] < young:
            _found = current
            _set = (young, current[1], current[2])
            gc.set_threshold(*_set)
    try:
        yield
    finally:
        with _lock:
            _loops -= 1
            if _loops == 0 and _found is not None:
                if gc.get_threshold() == _set:  # nobody changed them since
                    gc.set_threshold(*_found)
                _found = _set = None
