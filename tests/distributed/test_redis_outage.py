"""Redis lost or away mid-run, with real orchestrator and worker processes.

Each test starts its own `redis-server` (a free port, a scratch folder, no persistence), so
that it can be flushed and killed without touching anybody else's Redis.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from tests.distributed.helpers import Processes, check_histories, statuses, wait_until
from tests.distributed.test_fleet import submit_many

from interlock.storage.postgres import PostgresStore

pytestmark = pytest.mark.slow


class OwnRedis:
    """A `redis-server` of this test alone, without persistence (a restart loses all)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start (or restart) the server and wait until it answers."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--save", "", "--appendonly", "no",
             "--logfile", str(self.folder / "redis.log")],
        )  # fmt: skip
        client = redis.Redis(port=self.port)
        wait_until(lambda: self._answers(client), 10, "redis-server to answer")

    @staticmethod
    def _answers(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def kill(self) -> None:
        """SIGKILL: everything it held is gone."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def flushall(self) -> None:
        """Forget every key, consumer groups included."""
        redis.Redis(port=self.port).flushall()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """A private redis-server, stopped at the end."""
    server = OwnRedis(tmp_path / "redis")
    yield server
    server.kill()


def fleet(procs: Processes, url: str) -> None:
    """One orchestrator and two workers announcing and taking tasks through `url`."""
    procs.orchestrator("orch", "--redis", url)
    for i in range(2):
        procs.worker(f"w{i}", "--redis", url, "--concurrency", "4", DIST_TASKS_DELAY="1")


def check_nothing_spent(procs: Processes, run_ids: list[str], names: list[str]) -> None:
    """Every run delivered with each task done once on its first attempt (the outage cost no
    retry), no queue entry left waiting, and no traceback in any process's log."""
    check_histories(procs.url, run_ids)
    store = PostgresStore(procs.url)
    try:
        for run_id in run_ids:
            events = store.events(run_id)
            assert not [e for e in events if e.kind == "task_failed"], run_id
            attempts = {e.data["attempt"] for e in events if e.kind == "task_dispatched"}
            assert attempts == {1}, (run_id, attempts)
    finally:
        store.close()
    with psycopg.connect(procs.url) as db:
        states: dict[str, int] = dict(
            db.execute("SELECT state, count(*) FROM task_queue GROUP BY 1").fetchall()
        )
    assert states == {"done": len(run_ids) * 5}, states
    for name in names:
        assert "Traceback" not in procs.log(name), procs.log(name)


def delivered(procs: Processes) -> int:
    """Runs delivered so far."""
    return statuses(procs.url).get("delivered", 0)


def all_delivered(procs: Processes, run_ids: list[str]) -> bool:
    """Whether each of `run_ids` is delivered."""
    with psycopg.connect(procs.url) as db:
        rows = db.execute("SELECT status FROM runs WHERE run_id = ANY(%s)", (run_ids,)).fetchall()
    return len(rows) == len(run_ids) and {r[0] for r in rows} == {"delivered"}


def test_flushall_mid_run_recovers(procs: Processes, own_redis: OwnRedis) -> None:
    """After FLUSHALL (consumer group and announcements gone) every run still delivers,
    promptly, and no task attempt is spent on it."""
    fleet(procs, own_redis.url)
    run_ids = submit_many(procs.url, procs.root / "submit", 12)
    wait_until(lambda: delivered(procs) >= 1, 60, "a run delivered")
    own_redis.flushall()
    flushed = time.monotonic()
    left = 12 - delivered(procs)
    assert left >= 2, "too few runs left to exercise the recovery"
    wait_until(lambda: delivered(procs) == 12, 30, "every run delivered after FLUSHALL")
    recovery = time.monotonic() - flushed
    print(f"\nFLUSHALL with {left} runs under way: all delivered {recovery:.1f}s after it")
    later = submit_many(procs.url, procs.root / "submit", 4, prefix="after")
    wait_until(lambda: delivered(procs) == 16, 30, "runs submitted after FLUSHALL delivered")
    check_nothing_spent(procs, run_ids + later, ["orch", "w0", "w1"])
    workers = procs.log("w0") + procs.log("w1")
    assert "consumer group recreated" in workers
    assert workers.count("NOGROUP") <= 2  # heard once per worker at most, never in a loop


def test_redis_killed_and_restarted_empty_mid_run(procs: Processes, own_redis: OwnRedis) -> None:
    """Redis killed for 3 s, runs submitted meanwhile, then back without its data: workers
    take tasks from the queue table while it is away, the queue is re-announced when it is
    back, every run delivers and no attempt is spent on the outage."""
    fleet(procs, own_redis.url)
    run_ids = submit_many(procs.url, procs.root / "submit", 12)
    wait_until(lambda: delivered(procs) >= 1, 60, "a run delivered")
    own_redis.kill()
    killed = time.monotonic()
    left = 12 - delivered(procs)
    assert left >= 2, "too few runs left to exercise the outage"
    during = submit_many(procs.url, procs.root / "submit", 4, prefix="away")
    wait_until(lambda: all_delivered(procs, during), 30, "runs delivered while Redis is away")
    away = time.monotonic() - killed
    assert own_redis.process is None  # delivered from the queue table alone
    time.sleep(max(0.0, 3.0 - away))
    own_redis.start()
    restarted = time.monotonic()
    later = submit_many(procs.url, procs.root / "submit", 4, prefix="back")
    wait_until(lambda: delivered(procs) == 20, 30, "every run delivered")
    recovery = time.monotonic() - restarted
    print(
        f"\nRedis killed with {left} runs under way, 4 submitted while away: those delivered "
        f"{away:.1f}s after the kill; all 20 delivered {recovery:.1f}s after the restart"
    )
    check_nothing_spent(procs, run_ids + during + later, ["orch", "w0", "w1"])
    workers = procs.log("w0") + procs.log("w1")
    assert "taking tasks from the queue table" in workers
    assert "re-announced" in workers
