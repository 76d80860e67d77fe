"""A fleet run's delivery is done once it is archived, whatever stops its orchestrator."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from tests.distributed.helpers import WORKFLOW, Processes, submit_runs, wait_until

from interlock.api import Interlock
from interlock.core.state import fold
from interlock.storage.postgres import PostgresStore

pytestmark = pytest.mark.slow


def kinds(url: str, run_id: str) -> list[str]:
    """The kinds of the run's events, in order."""
    store = PostgresStore(url)
    try:
        return [e.kind for e in store.events(run_id)]
    finally:
        store.close()


def doctor(procs: Processes) -> subprocess.CompletedProcess[str]:
    """`interlock doctor` of the fleet's state directory and database."""
    return subprocess.run(
        [sys.executable, "-m", "interlock", "doctor"],
        env=procs.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_an_orchestrator_stopped_right_after_a_delivery_archives_the_run(
    procs: Processes,
) -> None:
    """SIGTERM just after final.md is written: the orchestrator archives the run, then exits 0."""
    orchestrator = procs.orchestrator("o1", INTERLOCK_CRASH_AT="after_deliver:1:SIGTERM")
    procs.worker("w1", "--concurrency", "4")
    [run_id] = submit_runs(procs.url, 1, procs.root / "submit")
    assert orchestrator.wait(60) == 0, procs.log("o1")
    assert kinds(procs.url, run_id)[-1] == "archived"
    assert (procs.home / "archive" / run_id / "final.md").read_text().count("About ") == 3
    assert not (procs.home / "runs" / run_id).exists()
    checked = doctor(procs)
    assert checked.returncode == 0, checked.stdout


def test_a_delivered_run_handed_back_unarchived_is_taken_up_by_the_next_orchestrator(
    procs: Processes,
) -> None:
    """A run let go between its delivery and its archive is found by the fleet's next look
    (not taken as finished), archived by the next orchestrator, and `doctor` says so meanwhile."""
    run_id = "fleet-archive-1"
    crashed = procs.start(
        "run", "run", str(WORKFLOW), "fanout", "-t", "x", "--run-id", run_id,
        INTERLOCK_CRASH_AT="after_deliver",
    )  # fmt: skip
    assert crashed.wait(60) == -9, procs.log("run")
    app = Interlock(procs.root / "here", store=procs.url)
    try:
        store = app.store
        assert isinstance(store, PostgresStore)
        assert fold([e.event for e in store.events(run_id)]).status.value == "delivered"
        assert kinds(procs.url, run_id)[-1] != "archived"
        # Taken over from the killed process, then let go unarchived (as a shutdown that
        # could not archive it does).
        here = Interlock(procs.home, store=procs.url)
        try:
            here.orchestrator.release(here.orchestrator.take(run_id))
            here.orchestrator.flush_releases()
        finally:
            here.close()
        assert run_id in store.unowned_runs(time.time() + 0.001)
        reported = doctor(procs)
        assert reported.returncode == 6, reported.stdout
        assert f"run {run_id}: delivered but never archived" in reported.stdout
        procs.orchestrator("o2")
        wait_until(lambda: kinds(procs.url, run_id)[-1] == "archived", 30, "the archive")
        assert (procs.home / "archive" / run_id / "final.md").is_file()
        wait_until(lambda: doctor(procs).returncode == 0, 10, "doctor to say ok")
    finally:
        app.close()
