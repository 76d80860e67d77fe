"""research-3 on DBOS: two parallel steps, then one step reading both.

Run with the interpreter of benchmarks/.envs/dbos:

    python dbos_research3.py --backend sqlite|postgres [--runs N] [--concurrent M]

One run is an async DBOS workflow.  Its first phase starts two steps with
asyncio.gather (DBOS assigns step ids in the order the steps are started, so
the workflow stays deterministic); its second phase is one step taking both
outputs.  DBOS checkpoints the workflow's start, each step's output and the
workflow's result in its system database before going on.

Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from importlib.metadata import version

PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_DB = os.environ.get("BENCH_DBOS_DB", "bench_dbos")
PG_URL_BASE = PG_ADMIN_URL.rsplit("/", 1)[0]


def hard_timeout(seconds: float, result: dict) -> None:
    """Print a failure line and exit the process if it is still running after `seconds`."""

    def fire() -> None:
        result["error"] = f"hard timeout after {seconds:.0f}s"
        print(json.dumps(result), flush=True)
        os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    result: dict = {
        "peer": "dbos",
        "backend": args.backend,
        "version": version("dbos"),
        "sequential_runs_per_s": None,
        "ms_per_step": None,
        "concurrent_runs_per_s": None,
        "error": None,
        "durability": (
            "system database on SQLite (rollback journal, synchronous=FULL: SQLite defaults)"
            if args.backend == "sqlite"
            else "system database on PostgreSQL (server: synchronous_commit=on, fsync=on)"
        ),
    }
    hard_timeout(args.timeout, result)
    logging.getLogger("dbos").setLevel(logging.WARNING)

    from dbos import DBOS, DBOSConfig

    tmp = tempfile.mkdtemp(prefix="bench-dbos-")
    if args.backend == "sqlite":
        url = f"sqlite:///{os.path.join(tmp, 'dbos_sys.sqlite')}"
    else:
        pg_admin(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        pg_admin(f"CREATE DATABASE {PG_DB}")
        url = f"{PG_URL_BASE}/{PG_DB}"

    config: DBOSConfig = {
        "name": "research3",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    async def worker(topic: str, part: str) -> str:
        return f"{part}:{topic}"

    @DBOS.step()
    async def writer(topic: str, a: str, b: str) -> str:
        return f"report({a},{b})"

    @DBOS.workflow()
    async def research3(topic: str) -> str:
        a, b = await asyncio.gather(worker(topic, "web"), worker(topic, "papers"))
        return await writer(topic, a, b)

    async def bench() -> None:
        # warm-up (first use of the pools, prepared statements, ...)
        for i in range(3):
            assert (await research3(f"warm{i}")).startswith("report(")

        t0 = time.perf_counter()
        for i in range(args.runs):
            out = await research3(f"seq{i}")
            assert out == f"report(web:seq{i},papers:seq{i})", out
        seq = time.perf_counter() - t0
        result["sequential_runs_per_s"] = round(args.runs / seq, 2)
        result["ms_per_step"] = round(seq * 1000 / (args.runs * 3), 3)

        if args.concurrent > 0:
            try:
                t0 = time.perf_counter()
                handles = await asyncio.gather(
                    *(
                        DBOS.start_workflow_async(research3, f"conc{i}")
                        for i in range(args.concurrent)
                    )
                )
                outs = await asyncio.gather(*(h.get_result() for h in handles))
                conc = time.perf_counter() - t0
                assert all(o.startswith("report(") for o in outs)
                result["concurrent_runs_per_s"] = round(args.concurrent / conc, 2)
            except Exception as exc:  # the figure is "the error" then
                result["error"] = f"concurrent: {type(exc).__name__}: {exc}"[:300]

    try:
        DBOS.launch()
        asyncio.run(bench())
    except Exception as exc:
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        try:
            DBOS.destroy(destroy_registry=True)
        except Exception:
            traceback.print_exc()
        shutil.rmtree(tmp, ignore_errors=True)
        if args.backend == "postgres":
            try:
                pg_admin(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
            except Exception:
                traceback.print_exc()

    print(json.dumps(result), flush=True)
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
