"""The garbage collector's thresholds while a loop runs, and afterwards."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Interlock, parse_workflow
from interlock.core.state import RunState
from interlock.runtime import collector
from interlock.runtime.orchestrator import Settings
from interlock.storage.base import NewEvent

WORKFLOW = """
one:
  phases:
    - id: p
      workers:
        - role: w
          command: [sh, -c, 'echo hi > "$0"', "{output}"]
          final: true
"""


@pytest.fixture(autouse=True)
def host_thresholds() -> Iterator[None]:
    """Every test starts from CPython's defaults and leaves the process as it found it."""
    found, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*found)
    if not enabled:
        gc.disable()


def test_a_loop_raises_the_young_threshold_and_puts_it_back(tmp_path: Path) -> None:
    seen: dict[str, tuple[int, int, int]] = {}  # event kind: thresholds when it was recorded
    app = Interlock(tmp_path)

    def listen(run_id: str, seq: int, new: NewEvent, state: RunState) -> None:
        seen.setdefault(type(new.event).__name__, gc.get_threshold())

    app.orchestrator.listeners.append(listen)
    run_id = app.start(parse_workflow(WORKFLOW).get("one"), topic="t")
    assert seen["RunCreated"] == (collector.YOUNG, 10, 10)  # runs are created in a burst too
    assert gc.get_threshold() == (700, 10, 10)  # and the host's thresholds are back after it
    asyncio.run(app.orchestrator.run_until_settled())
    assert app.state(run_id).status == "delivered"
    assert seen["TaskCompleted"] == seen["Delivered"] == (collector.YOUNG, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
    app.close()


def test_none_leaves_the_collector_alone(tmp_path: Path) -> None:
    seen: list[tuple[int, int, int]] = []
    app = Interlock(tmp_path, settings=Settings(gc_young=None))
    app.orchestrator.listeners.append(lambda *_: seen.append(gc.get_threshold()))
    app.start(parse_workflow(WORKFLOW).get("one"), topic="t")
    asyncio.run(app.orchestrator.run_until_settled())
    assert len(seen) > 3 and set(seen) == {(700, 10, 10)}
    app.close()


def test_nested_loops_put_it_back_when_the_last_one_ends() -> None:
    with collector.roomy_collector(50_000):
        with collector.roomy_collector(50_000):
            assert gc.get_threshold() == (50_000, 10, 10)
        assert gc.get_threshold() == (50_000, 10, 10)  # the outer loop still runs
    assert gc.get_threshold() == (700, 10, 10)


def test_a_host_with_its_own_policy_keeps_it() -> None:
    gc.set_threshold(100_000, 20, 20)  # already roomier: left as it is
    with collector.roomy_collector(50_000):
        assert gc.get_threshold() == (100_000, 20, 20)
    assert gc.get_threshold() == (100_000, 20, 20)
    gc.set_threshold(700, 10, 10)
    gc.disable()  # a host that turned the collector off: nothing to tune
    with collector.roomy_collector(50_000):
        assert gc.get_threshold() == (700, 10, 10)
    gc.enable()


def test_thresholds_changed_during_the_loop_are_not_undone() -> None:
    with collector.roomy_collector(50_000):
        gc.set_threshold(5_000, 10, 10)  # the host changed its mind meanwhile
    assert gc.get_threshold() == (5_000, 10, 10)
