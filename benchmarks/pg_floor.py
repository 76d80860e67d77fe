"""The floor of a PostgreSQL round trip here: CPU per statement, client and server.

A distributed task crosses processes through the database; what one statement costs, in the
calling Python process and in the PostgreSQL server process serving it, bounds what a task
can cost. Each figure is CPU per operation (user + system, from `/proc`), on a fresh
database, over `--count` repetitions:

- `select 1`: a prepared `SELECT 1` in autocommit (the bare round trip);
- `insert` / `update`: a one-row insert or update by key, each its own transaction (a WAL
  flush each);
- `notify`: `pg_notify` to a channel one other connection listens on (its server process and
  the listening thread of this process included);
- `task shape`: the least a queued task needs with a queue table between an orchestrator and
  a worker: the entry inserted and announced, claimed and announced, finished and announced,
  its result read, and one event appended with the run's row updated in one transaction:
  five statements, four commits, three notifications, each heard by one listener.

Then the same for interlock's own queue operations on that server (the interlock on
`PYTHONPATH`, so two checkouts compare side by side), per task: `enqueue, 8 at once` (a
fan-out tick's attempts queued by `TaskQueue.enqueue_many`, payloads shaped like the
distributed benchmark's), `worker turn` (`finish_claim`: one result recorded and the next
entry claimed, with its run's news) and `to_spec` (a claimed payload made a `TaskSpec` again,
client only).

    python benchmarks/pg_floor.py [--count 2000]
"""

from __future__ import annotations

import argparse
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ADMIN = os.environ.get("INTERLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

SCHEMA = """
CREATE TABLE q (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, payload JSONB NOT NULL,
                result JSONB, worker TEXT, delivery INT NOT NULL DEFAULT 0);
CREATE INDEX q_ready ON q (id) WHERE state = 'queued';
CREATE TABLE r (id TEXT PRIMARY KEY, seq INT NOT NULL);
CREATE TABLE e (run_id TEXT NOT NULL, seq INT NOT NULL, data JSONB NOT NULL,
                PRIMARY KEY (run_id, seq));
INSERT INTO r VALUES ('run', 0);
"""


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Listening(threading.Thread):
    """A connection in LISTEN on channel `c`, draining what it hears (as a fleet process's
    listener thread does)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.db = psycopg.connect(url, autocommit=True)
        self.db.execute("LISTEN c")
        self.pid = int(self.db.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        self.heard = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in self.db.notifies(timeout=0.2):
                self.heard += 1


def measure(count: int, servers: list[int], step: Callable[[int], None]) -> tuple[float, float]:
    """(client ms, server ms) of CPU per call of `step`."""
    step(-1)  # prepared statements and caches in place
    before_client = process_cpu(os.getpid())
    before_server = [process_cpu(pid) for pid in servers]
    for i in range(count):
        step(i)
    client = process_cpu(os.getpid()) - before_client
    server = sum(process_cpu(pid) - b for pid, b in zip(servers, before_server, strict=True))
    return client * 1000 / count, server * 1000 / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    name = f"il_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = ADMIN.rsplit("/", 1)[0] + "/" + name
    try:
        run(url, args.count)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run(url: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(SCHEMA.encode())
    db = psycopg.connect(url, autocommit=True, prepare_threshold=0)
    pid = int(db.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
    listener = Listening(url)
    listener.start()
    payload = psycopg.types.json.Jsonb({"task": "write", "item": "x" * 40})

    def select(_: int) -> None:
        db.execute("SELECT 1").fetchone()

    def insert(_: int) -> None:
        db.execute("INSERT INTO q (state, payload) VALUES ('done', %s)", (payload,))

    def update(i: int) -> None:
        db.execute("UPDATE r SET seq = %s WHERE id = 'run'", (i,))

    def notify(_: int) -> None:
        db.execute("SELECT pg_notify('c', 'x')")

    def task(i: int) -> None:
        row: Any = db.execute(
            "WITH a AS (INSERT INTO q (state, payload) VALUES ('queued', %s) RETURNING id) "
            "SELECT id, pg_notify('c', id || ':queued') FROM a",
            (payload,),
        ).fetchone()
        db.execute(
            "WITH p AS (SELECT id FROM q WHERE state = 'queued' ORDER BY id LIMIT 1 "
            "FOR UPDATE SKIP LOCKED) UPDATE q SET state = 'claimed', worker = 'w', "
            "delivery = q.delivery + 1 FROM p WHERE q.id = p.id "
            "RETURNING q.id, q.payload, pg_notify('c', q.id || ':claimed')"
        ).fetchall()
        db.execute(
            "UPDATE q SET state = 'done', result = %s WHERE id = %s AND delivery = 1 "
            "RETURNING pg_notify('c', id || ':done')",
            (payload, row[0]),
        ).fetchall()
        db.execute("SELECT state, result FROM q WHERE id = ANY(%s)", ([row[0]],)).fetchall()
        with db.transaction():
            db.execute("UPDATE r SET seq = seq + 1 WHERE id = 'run'")
            db.execute("INSERT INTO e VALUES ('run', %s, %s)", (i + 2 if i >= 0 else 0, payload))

    servers = [pid, listener.pid]
    print(f"{count} operations each; CPU ms per operation (client / server)")
    for label, step in [
        ("select 1", select),
        ("insert", insert),
        ("update", update),
        ("notify", notify),
        ("task shape", task),
    ]:
        if label == "task shape":
            db.execute("DELETE FROM e")
        client, server = measure(count, servers, step)
        print(f"{label:>10}: {client + server:6.3f} ({client:.3f} / {server:.3f})", flush=True)
    listener.stop.set()
    listener.join()
    db.close()
    interlock_ops(url, count)


def interlock_ops(url: str, count: int) -> None:
    """CPU per task of interlock's queue operations (see the module's docstring)."""
    from interlock.core.workflow import Worker
    from interlock.distributed.artifacts import PostgresArtifacts
    from interlock.distributed.payload import to_spec
    from interlock.distributed.queue import Finished, TaskQueue
    from interlock.storage.postgres import PostgresStore

    store = PostgresStore(url, pool_size=2)
    queue = TaskQueue(store)
    artifacts = PostgresArtifacts(store)
    worker = Worker.model_validate({"role": "writer", "call": "bench_tasks:write"})
    payload = {
        "run_id": "run",
        "task_id": "writer",
        "attempt": 1,
        "pipeline": "bench",
        "worker": worker.model_dump(mode="json", by_alias=True),
        "task": "",
        "topic": "t",
        "inputs": {},
        "item": "t-1",
        "reads": [],
        "model": None,
        "idempotency_key": "k" * 32,
        "workflow_dir": None,
    }
    batches = max(1, count // 8)
    serial = iter(range(10**9))

    def enqueue(_: int) -> None:
        queue.enqueue_many(
            [
                {
                    "run_id": f"run{next(serial)}",
                    "task_id": f"writer[{i}]",
                    "attempt": 1,
                    "kind": "call",
                    "tags": [],
                    "scopes": ["pipeline:bench", "kind:call"],
                    "priority": 0,
                    "payload": payload,
                }
                for i in range(8)
            ]
        )

    held = queue.claim_many("w", kinds=("call",), tags=(), ttl=30, limit=1)

    def turn(_: int) -> None:
        finished = [Finished(claim=c, result={"ok": True}, output=b"x") for c in held]
        held[:] = queue.finish_claim(
            "w", finished, kinds=("call",), tags=(), ttl=30, limit=1, known={}
        ).claims

    def spec(_: int) -> None:
        to_spec(payload, Path("/nonexistent/work"), artifacts)

    def servers() -> list[int]:
        rows = store.single(
            lambda db: db.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    enqueue(-1)
    turn(-1)
    client, server = measure(batches, servers(), enqueue)
    print(
        f"interlock: enqueue, 8 at once: {(client + server) / 8:6.3f} "
        f"({client / 8:.3f} / {server / 8:.3f}) per task",
        flush=True,
    )
    client, server = measure(count, servers(), turn)
    print(
        f"interlock: worker turn: {client + server:6.3f} ({client:.3f} / {server:.3f})", flush=True
    )
    client, _ = measure(count, [], spec)
    print(f"interlock: to_spec: {client:6.3f} (client)", flush=True)
    store.close()


if __name__ == "__main__":
    main()
