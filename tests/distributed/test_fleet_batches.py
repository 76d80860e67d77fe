"""Fleet workers whose model calls wait in provider batches hold nothing meanwhile: a call
waiting in a batch frees its worker's model slot, so the rows of a run gather into one
provider batch whatever the slots; the orchestrator records the wait from the hand-out, so
no timeout runs while the provider takes its time; and a worker killed while its calls wait
leaves them to the next worker, which finds their requests in the batch already sent."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from tests.distributed.helpers import REDIS, Processes, statuses, wait_until
from tests.providers.batch_server import BatchServer, BatchServerState
from tests.providers.test_provider_batch import write_config

from interlock.distributed import submit
from interlock.distributed.redis_streams import RedisStreams
from interlock.storage.postgres import PostgresStore

ROWS = 40
# The attempt's own work is bounded at 2 + 1 s; the provider takes longer than that.
WORKFLOW = """
rows:
  phases:
    - id: plan
      workers:
        - role: planner
          call: dist_tasks:plan
          extract:
            items: {json: items, type: list}
    - id: answer
      for_each: planner.items
      workers:
        - role: answerer
          model: cheap
          task: "row {{ item }}"
          timeout: 2
          grace: 1
    - id: end
      workers:
        - role: last
          call: dist_tasks:merge_free
          final: true
"""


@pytest.fixture
def fleet(procs: Processes) -> Iterator[tuple[Processes, Path]]:
    """The fleet's home, and the workflow of the rows."""
    procs.home.mkdir(parents=True, exist_ok=True)
    workflow = procs.root / "rows.yaml"
    workflow.write_text(WORKFLOW)
    yield procs, workflow


def start(procs: Processes, name: str, rows: int, *extra: str) -> subprocess.Popen[bytes]:
    """A worker with 2 model slots (unless `extra` says `--kinds call`), polling batches
    every 0.05 s; its planner plans `rows` rows."""
    slots = () if "call" in extra else ("--concurrency", "model=2")
    return procs.worker(
        name,
        *slots,
        *extra,
        TEST_KEY="k",
        INTERLOCK_BATCH_POLL_S="0.05",
        DIST_TASKS_ITEMS=str(rows),
    )


def parked(url: str) -> int:
    """How many hand-outs say their model call waits in a provider batch."""
    with psycopg.connect(url) as db:
        row = db.execute(
            "SELECT count(*) FROM task_queue WHERE parked_at IS NOT NULL AND unparked_at IS NULL"
        ).fetchone()
    return int(row[0]) if row else 0


def kinds(url: str, run_id: str) -> Counter[str]:
    """How many events of each kind the run recorded."""
    store = PostgresStore(url)
    try:
        return Counter(e.kind for e in store.events(run_id))
    finally:
        store.close()


def sent(server: BatchServer) -> Counter[str]:
    """How many times each request was sent to the provider, by its idempotency key."""
    lines = [line for batch in server.state.inputs.values() for line in batch]
    return Counter(str(line["custom_id"]).split("-", 1)[1] for line in lines)


def test_a_run_s_calls_gather_into_one_batch_across_two_workers(
    fleet: tuple[Processes, Path],
) -> None:
    """Two workers of 2 model slots each, 40 rows of a batch alias: every call frees its slot
    while it waits, so the rows go out in one or two provider batches (not ten of four);
    the batch takes longer than the rows' timeout and grace, and no timeout fires; each
    request is sent once."""
    procs, workflow = fleet
    server = BatchServer(BatchServerState(seconds_to_end=5)).start()  # > timeout + grace
    try:
        # A batch goes out once it holds every row, or 5 s after its first.
        write_config(procs.home, server.url, window="5", size=ROWS)
        began = time.monotonic()
        run_id = submit(procs.url, workflow, topic="t", home=procs.home)
        procs.orchestrator("o")
        for n in range(2):
            start(procs, f"w{n}", ROWS)
        wait_until(lambda: statuses(procs.url).get("delivered") == 1, 240, "the run delivered")
        took = time.monotonic() - began
        created = server.state.created
        requests = sent(server)
    finally:
        server.stop()
    print(f"{ROWS} rows: {created} provider batch(es), {took:.1f}s")
    recorded = kinds(procs.url, run_id)
    assert recorded["task_timed_out"] == 0, recorded
    assert recorded["task_completed"] == ROWS + 2, recorded
    assert recorded["task_batch_waited"] == 2 * ROWS, recorded  # in, and out again
    assert created <= 2, created
    assert len(requests) == ROWS and set(requests.values()) == {1}, requests


def killed_while_waiting(
    procs: Processes,
    workflow: Path,
    *transport: str,
    waiting: Callable[[], None] | None = None,
    stop: signal.Signals = signal.SIGKILL,
) -> None:
    """The worker holding every row is sent `stop` while their batch is at the provider
    (after `waiting` looked), then another starts (both with `transport`): the run is
    delivered, no timeout having fired, one provider batch sent, each request in it once."""
    rows = 8
    server = BatchServer(BatchServerState(seconds_to_end=12)).start()
    try:
        # Sent once all the rows' calls are in (`size`): a window that could end first, as
        # under load while Redis hands the rows out one at a time, would split the batch.
        write_config(procs.home, server.url, window="120", size=rows)
        run_id = submit(procs.url, workflow, topic="t", home=procs.home)
        procs.orchestrator("o", *transport)
        first = start(procs, "first", rows, *transport)
        wait_until(lambda: server.state.created >= 1, 60, "a provider batch sent")
        wait_until(lambda: kinds(procs.url, run_id)["task_batch_waited"] == rows, 10, "waits")
        if waiting is not None:
            waiting()
        os.kill(first.pid, stop)
        if stop == signal.SIGTERM:  # it hands the calls back after its grace (5 s)
            first.wait(30)
            assert parked(procs.url) == rows  # and their waits stay on the hand-outs
        start(procs, "second", rows, *transport)
        wait_until(lambda: statuses(procs.url).get("delivered") == 1, 120, "the run delivered")
        created = server.state.created
        requests = sent(server)
    finally:
        server.stop()
    recorded = kinds(procs.url, run_id)
    assert recorded["task_timed_out"] == 0, recorded
    assert recorded["task_completed"] == rows + 2, recorded
    assert created == 1
    assert len(requests) == rows and set(requests.values()) == {1}, requests


def test_a_worker_killed_while_its_calls_wait_leaves_them_to_the_next(
    fleet: tuple[Processes, Path],
) -> None:
    """Once the killed worker's leases end the rows go to another worker, whose calls wait
    for the same batch: none is sent again, no request twice, and no timeout fires."""
    killed_while_waiting(*fleet)


def test_a_worker_stopped_while_its_calls_wait_hands_them_back_still_waiting(
    fleet: tuple[Processes, Path],
) -> None:
    """SIGTERM: after its grace the worker hands back the calls still in their batch, whose
    waits stay recorded (no timeout runs while they are queued again); the next worker waits
    for the same batch."""
    killed_while_waiting(*fleet, stop=signal.SIGTERM)


def test_with_redis_a_call_waiting_in_a_batch_leaves_no_stream_message_pending(
    fleet: tuple[Processes, Path],
) -> None:
    """With `--redis` a worker acknowledges a hand-out's message as its call enters the wait
    (other workers would claim it in vain for hours); killed while the calls wait, its
    entries are queued again and taken from the table by the next worker."""
    redis.Redis.from_url(REDIS).flushdb()
    streams = RedisStreams(REDIS)

    def pending() -> int:
        info: Any = streams.redis.xpending(streams.stream, streams.group)
        return int(info["pending"])

    def nothing_pending() -> None:
        # The message is acknowledged as the call enters its wait, on the worker's own thread,
        # which may be a moment after the wait is recorded in the ledger.
        wait_until(lambda: pending() == 0, 10, "every hand-out acknowledged")

    try:
        killed_while_waiting(*fleet, "--redis", REDIS, waiting=nothing_pending)
    finally:
        redis.Redis.from_url(REDIS).flushdb()


def test_an_orchestrator_taking_the_run_over_records_the_waits_it_did_not_see(
    fleet: tuple[Processes, Path],
) -> None:
    """The orchestrator is SIGKILLed once the rows are queued, before any model call runs:
    the calls go into their batch with nobody driving the run, and the orchestrator that
    takes the run over reads their waits from the hand-outs: no timeout fires although the
    batch takes longer than the rows' timeout and grace."""
    procs, workflow = fleet
    rows = 8
    server = BatchServer(BatchServerState(seconds_to_end=15)).start()
    try:
        write_config(procs.home, server.url, window="5", size=rows)
        run_id = submit(procs.url, workflow, topic="t", home=procs.home)
        first = procs.orchestrator("first")
        start(procs, "planner", rows, "--kinds", "call")

        def queued() -> bool:
            with psycopg.connect(procs.url) as db:
                row = db.execute("SELECT count(*) FROM task_queue WHERE kind = 'model'").fetchone()
            return bool(row and row[0] == rows)

        wait_until(queued, 60, "the rows queued")
        os.kill(first.pid, signal.SIGKILL)
        start(procs, "models", rows, "--kinds", "model")
        wait_until(lambda: parked(procs.url) == rows, 60, "every row's call parked")
        assert kinds(procs.url, run_id)["task_batch_waited"] == 0  # nobody recorded them
        procs.orchestrator("second")
        wait_until(lambda: statuses(procs.url).get("delivered") == 1, 120, "the run delivered")
        created = server.state.created
    finally:
        server.stop()
    recorded = kinds(procs.url, run_id)
    assert recorded["task_timed_out"] == 0, recorded
    assert recorded["task_batch_waited"] == 2 * rows, recorded
    assert created == 1
