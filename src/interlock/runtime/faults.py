"""Named crash points, for proving that a kill at any of them loses nothing.

Set `INTERLOCK_CRASH_AT=<name>` (or `<name>:<n>` for its n-th pass) and the process kills
itself with SIGKILL when it reaches that point; `<name>:<n>:SIGTERM` sends it SIGTERM instead
(what a service manager sends), and the process goes on to stop as it would on being told.
Unarmed, a crash point costs one comparison.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

CRASH_POINTS = (
    "before_append",  # decisions made, nothing recorded yet
    "after_append",  # recorded, not yet acted on
    "before_dispatch",  # a recorded task is about to start
    "after_dispatch",  # a task started, its start not yet recorded
    "before_commit_output",  # a worker succeeded, its output not yet at its final path
    "after_commit_output",  # output renamed into place, completion not yet recorded
    "before_deliver",  # final.md about to be written
    "after_deliver",  # final.md written
    "before_archive",  # the run directory about to move to the archive
)
REUSE_CRASH_POINTS = (  # reached only by reruns and cache hits (tests/runtime/test_rerun_crash)
    "before_record_reuse",  # a reuse was claimed, not yet recorded
    "after_record_reuse",  # a reuse was recorded, its file not yet placed
)

REVIEW_CRASH_POINTS = (  # reached only by edits and rejections (tests/runtime/test_review_crash)
    "before_record_review",  # an edit or reject command is being turned into an event
    "after_record_edit",  # an edit was recorded, its new text not yet written
    "after_record_reject",  # a rejection was recorded, its new visit not yet started
)

WAIT_CRASH_POINTS = (  # reached only by signals and waits (tests/runtime/test_waits_crash)
    "before_record_signal",  # a signal command is being turned into an event
    "after_record_signal",  # a signal was recorded, not yet acted on
    "after_record_wait",  # a wait (and its due time) was recorded, nothing acted on
    "after_end_wait",  # a wait's end was recorded, the phase's tasks not yet started
)

# Reached only by child runs (tests/reliability/test_subpipelines_crash).
SUBPIPELINE_CRASH_POINTS = (
    "before_child_start",  # a pipeline task started, its child run not yet recorded
    "after_child_start",  # the child run recorded, the parent not yet told
    "before_child_result",  # the child ended, the parent's task not yet completed
)

_armed = os.environ.get("INTERLOCK_CRASH_AT") or None
_name, _, _rest = (_armed or "").partition(":")
_count, _, _signal_name = _rest.partition(":")
_remaining = int(_count or "1")
_signal = signal.Signals[_signal_name] if _signal_name else signal.SIGKILL
# The deterministic simulator (`interlock.sim`) installs a hook here to crash an in-process
# orchestrator by raising, instead of killing the whole process.
_hook: Callable[[str], None] | None = None


def set_hook(hook: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Call `hook(name)` at every crash point (None removes it); returns the previous hook."""
    global _hook
    previous, _hook = _hook, hook
    return previous


def crash_point(name: str) -> None:
    """Die here, by SIGKILL (or the armed signal), if this point is armed (and this is the
    armed pass)."""
    global _remaining
    if _hook is not None:
        _hook(name)
    if _armed is None or name != _name:
        return
    _remaining -= 1
    if _remaining == 0 or (_remaining < 0 and _signal is signal.SIGKILL):
        os.kill(os.getpid(), _signal)
