"""How fast the runs list answers with many runs in the store (the dashboard's list query).

    python benchmarks/run_list.py                       # 100,000 runs, SQLite and PostgreSQL
    python benchmarks/run_list.py --runs 1000 --backend sqlite

Runs are written straight into a freshly migrated ledger (the ledger's own schema and indexes,
each run with its `run_created` event holding its inputs), then each query of the list is
timed through `Store.search_runs`: the median of several calls, in milliseconds. PostgreSQL
uses a throwaway database on the server named by INTERLOCK_TEST_PG.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interlock.storage.base import Store
from interlock.storage.run_list import RunQuery

T0 = 1_700_000_000.0
STATUSES = ("delivered", "delivered", "delivered", "failed", "cancelled", "running", "paused")
PG_ADMIN = os.environ.get("INTERLOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def rows(count: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(runs rows, run_created events rows) of `count` runs over about a year."""
    runs, events = [], []
    for n in range(count):
        run_id = f"{'research' if n % 4 else 'translate'}-{n:07d}"
        created = T0 + n * 300.0
        topic = f"Topic number {n} on {('tides', 'wind', 'solar', 'kelp')[n % 4]}"
        inputs = {"region": f"zone{n % 97}", "language": ("fr", "de", "ja")[n % 3]}
        pipeline = run_id.split("-")[0]
        cost = round((n * 7919 % 10_000) / 1000, 4)
        runs.append(
            (
                run_id,
                pipeline,
                topic,
                "h",
                "wf.yaml",
                created,
                12,
                STATUSES[n % len(STATUSES)],
                "x",
                cost,
                n % 5000,
                0,
                created + 60,
            )
        )
        data = {
            "run_id": run_id,
            "pipeline": pipeline,
            "definition_hash": "h",
            "topic": topic,
            "inputs": inputs,
            "rerun_of": None,
            "rerun_from": None,
            "no_cache": False,
            "v": 1,
        }
        events.append((run_id, 1, created, "run_created", json.dumps(data)))
    return runs, events


RUN_COLUMNS = (
    "run_id, pipeline, topic, definition_hash, source, created_at, last_seq, status, phase, "
    "cost_usd, tokens, warnings, updated_at"
)


def fill_sqlite(path: Path, count: int) -> Store:
    import sqlite3

    from interlock.storage.sqlite import SQLiteStore

    SQLiteStore(path).close()  # the schema, migrated
    runs, events = rows(count)
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO definitions (hash, body) VALUES ('h', '{}')")
        db.executemany(f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({', '.join('?' * 13)})", runs)
        db.executemany(
            "INSERT INTO events (run_id, seq, at, kind, data) VALUES (?, ?, ?, ?, ?)", events
        )
    db.execute("ANALYZE")
    db.close()
    return SQLiteStore(path)


def fill_postgres(database: str, count: int) -> Store:
    import psycopg

    from interlock.storage.postgres import PostgresStore

    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + database
    PostgresStore(url).close()
    runs, events = rows(count)
    with psycopg.connect(url) as db:
        db.execute("INSERT INTO definitions (hash, body) VALUES ('h', '{}')")
        with db.cursor().copy(f"COPY runs ({RUN_COLUMNS}) FROM STDIN") as copy:
            for row in runs:
                copy.write_row(row)
        with db.cursor().copy("COPY events (run_id, seq, at, kind, data) FROM STDIN") as copy:
            for row in events:
                copy.write_row(row)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("VACUUM ANALYZE")
    return PostgresStore(url)


def queries(count: int) -> dict[str, RunQuery]:
    """The list's typical questions (the middle of the range for date filters)."""
    middle = T0 + count * 150.0
    return {
        "first page (newest 100)": RunQuery(),
        "page 50 (cursor)": RunQuery(after=(T0 + (count - 5000) * 300.0, "~")),
        "status=failed": RunQuery(status="failed"),
        "pipeline=translate": RunQuery(pipeline="translate"),
        "date range (one week)": RunQuery(created_from=middle, created_to=middle + 7 * 86400),
        "status+pipeline+range": RunQuery(
            status="paused",
            pipeline="research",
            created_from=middle,
            created_to=middle + 30 * 86400,
        ),
        "sort by cost": RunQuery(sort="cost_usd"),
        "search id": RunQuery(text=f"-{count // 2:07d}"),
        "search topic (many hits)": RunQuery(text="KELP"),
        "search input value (rare)": RunQuery(text="zone42"),
        "search, no hit": RunQuery(text="nothing like this"),
    }


def timed(call: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(samples), 2)


def measure(store: Store, count: int, repeat: int) -> dict[str, float]:
    return {
        name: timed(lambda q=query: store.search_runs(q), repeat)
        for name, query in queries(count).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as scratch:
            store = fill_sqlite(Path(scratch) / "ledger.db", args.runs)
            results["sqlite"] = measure(store, args.runs, args.repeat)
            store.close()
    if args.backend in ("postgres", "both"):
        import psycopg

        database = f"il_bench_runlist_{os.getpid()}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {database}")
        try:
            store = fill_postgres(database, args.runs)
            results["postgres"] = measure(store, args.runs, args.repeat)
            store.close()
        finally:
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    names = list(queries(args.runs))
    backends = list(results)
    print(f"runs list with {args.runs:,} runs: median ms of {args.repeat} calls")
    print(f"{'query':<28}" + "".join(f"{b:>12}" for b in backends))
    for name in names:
        print(f"{name:<28}" + "".join(f"{results[b][name]:>12.2f}" for b in backends))
    print(json.dumps({"runs": args.runs, "ms": results}))


if __name__ == "__main__":
    main()
