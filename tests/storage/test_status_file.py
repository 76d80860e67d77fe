"""status.json is true while a run works: it exists once the run is recorded and follows
the ledger within about a second, also while one long task runs."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from interlock import Interlock, register
from interlock.core.loader import parse_workflow
from interlock.runtime.executors import TaskContext

FLOW = """
p:
  phases:
    - id: first
      workers:
        - {role: a, call: status_quick}
    - id: second
      workers:
        - {role: b, call: status_long, reads: [a.md], final: true}
"""


def _quick(context: TaskContext) -> str:
    return "a\n"


def _long(context: TaskContext) -> str:
    time.sleep(4.0)
    return "b\n"


register("status_quick", _quick)
register("status_long", _long)


def test_status_json_follows_the_ledger_within_a_second(tmp_path: Path) -> None:
    """Sampled every 50 ms while a run with a 4-second worker in its second phase is driven:
    status.json exists as soon as `start` returns, and never shows fewer events than the
    ledger held 1.5 s earlier (it used to show the first phase for the whole 4 s)."""
    app = Interlock(tmp_path / "home")
    run_id = app.start(parse_workflow(FLOW).get("p"), topic="status")
    status = app.run_dir(run_id) / "status.json"
    assert json.loads(status.read_text())["status"] == "running"
    ledger = sqlite3.connect(tmp_path / "home" / "ledger.db", check_same_thread=False)
    reached: dict[int, float] = {}  # ledger event count -> when first seen
    samples: list[tuple[float, int, str]] = []  # (when, events shown, second phase status)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            now = time.monotonic()
            count = ledger.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,))
            reached.setdefault(count.fetchone()[0], now)
            try:
                view = json.loads(status.read_text())
            except FileNotFoundError:  # moved to the archive at the end
                break
            samples.append((now, view["events"], view["phases"][1]["status"]))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    state = app.drive(run_id)
    done.set()
    watcher.join()
    assert state.status.value == "delivered"
    assert any(phase == "running" for _, _, phase in samples), "the second phase never showed"
    for when, shown, _ in samples:
        due = [n for n, at in reached.items() if at <= when - 1.5]
        assert shown >= max(due, default=0), (when, shown, sorted(reached.items()))
    archived = json.loads((app.run_dir(run_id) / "status.json").read_text())
    assert archived["status"] == "delivered" and archived["events"] == len(app.events(run_id))
    app.close()


@pytest.mark.parametrize(
    "timestamp",
    [0.0, 1.0, 0.0005, 0.9994999, 0.9999995, 1795469466.3632905, 1795469466.9999996, 1e9 + 0.0015],
)
def test_times_are_spelled_as_datetime_spells_them(timestamp: float) -> None:
    """status.json's times: the milliseconds datetime shows (microseconds rounded half to
    even, then cut), with the second carried when they round up to a whole one."""
    import datetime as dt

    from interlock.runtime.projection import iso

    moment = dt.datetime.fromtimestamp(timestamp, dt.UTC)
    assert iso(timestamp) == moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
