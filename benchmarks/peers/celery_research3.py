"""research-3 on Celery: a chord (two parallel worker tasks, then a writer
task that receives both results), Redis as broker and result backend.

Run with the interpreter of benchmarks/.envs/celery:

    python celery_research3.py [--runs N] [--concurrent M] [--redis-url URL]

By default the script starts its own redis-server (loopback, free port,
temp dir) with appendonly yes / appendfsync always, so every broker and
result write is fsynced before Redis acknowledges it; the shared Redis on
this machine runs without persistence.  --redis-url uses an existing server
instead (the database in the URL is flushed at the end).

Tasks use acks_late (a message is acknowledged only after the task has run)
and reject_on_worker_lost.  A worker subprocess (prefork pool, one process
per core) is started by the script and stopped at the end.

Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from importlib.metadata import version

from celery import Celery, chord

BROKER = os.environ.get("BENCH_CELERY_URL", "redis://127.0.0.1:6379/15")

app = Celery("celery_research3", broker=BROKER, backend=BROKER)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="research3.worker")
def worker(topic: str, part: str) -> str:
    return f"{part}:{topic}"


@app.task(name="research3.writer")
def writer(parts: list[str], topic: str) -> str:
    return "report(" + ",".join(sorted(parts)) + ")"


def research3(topic: str):
    return chord([worker.s(topic, "web"), worker.s(topic, "papers")])(writer.s(topic))


def hard_timeout(seconds: float, result: dict, cleanup) -> None:
    def fire() -> None:
        result["error"] = f"hard timeout after {seconds:.0f}s"
        try:
            cleanup()
        finally:
            print(json.dumps(result), flush=True)
            os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_redis(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("private redis-server did not start")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument(
        "--redis-url", default=None, help="use this Redis instead of a private durable one"
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="worker pool size")
    args = ap.parse_args()

    result: dict = {
        "peer": "celery",
        "backend": "redis",
        "version": version("celery"),
        "sequential_runs_per_s": None,
        "ms_per_step": None,
        "concurrent_runs_per_s": None,
        "error": None,
    }
    procs: list[subprocess.Popen] = []
    tmp = tempfile.mkdtemp(prefix="bench-celery-")

    def cleanup() -> None:
        for p in reversed(procs):  # worker first, then redis
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=10)
                except Exception:
                    with contextlib.suppress(OSError):
                        os.killpg(p.pid, signal.SIGKILL)
        procs.clear()
        shutil.rmtree(tmp, ignore_errors=True)

    hard_timeout(args.timeout, result, cleanup)

    try:
        if args.redis_url:
            url = args.redis_url
            result["durability"] = "existing redis (its own persistence settings); acks_late"
        else:
            redis_bin = shutil.which("redis-server")
            if redis_bin is None:
                raise RuntimeError("redis-server not found; pass --redis-url")
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [
                        redis_bin,
                        "--bind",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--dir",
                        tmp,
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        "always",
                        "--save",
                        "",
                        "--daemonize",
                        "no",
                        "--logfile",
                        os.path.join(tmp, "redis.log"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            wait_redis(port, time.monotonic() + 15)
            url = f"redis://127.0.0.1:{port}/0"
            result["durability"] = "private redis appendonly=yes appendfsync=always; acks_late"
        app.conf.broker_url = url
        app.conf.result_backend = url

        env = dict(os.environ, BENCH_CELERY_URL=url)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "celery_research3",
                    "worker",
                    "--pool",
                    "prefork",
                    "--concurrency",
                    str(args.workers),
                    "--loglevel",
                    "WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"bench{os.getpid()}@%h",
                ],
                cwd=os.path.dirname(os.path.abspath(__file__)),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(tmp, "worker.log"), "w"),  # noqa: SIM115 - lives as long as the worker
                start_new_session=True,
            )
        )
        # the worker is ready when it answers a run
        deadline = time.monotonic() + 60
        while True:
            try:
                research3("warm").get(timeout=5)
                break
            except Exception:
                if time.monotonic() > deadline or procs[-1].poll() is not None:
                    raise RuntimeError("celery worker did not come up") from None
        for i in range(3):
            research3(f"warm{i}").get(timeout=30)

        t0 = time.perf_counter()
        for i in range(args.runs):
            out = research3(f"seq{i}").get(timeout=60)
            assert out == f"report(papers:seq{i},web:seq{i})", out
        seq = time.perf_counter() - t0
        result["sequential_runs_per_s"] = round(args.runs / seq, 2)
        result["ms_per_step"] = round(seq * 1000 / (args.runs * 3), 3)

        if args.concurrent > 0:
            try:
                t0 = time.perf_counter()
                handles = [research3(f"conc{i}") for i in range(args.concurrent)]
                outs = [h.get(timeout=max(60, args.timeout / 2)) for h in handles]
                conc = time.perf_counter() - t0
                assert all(o.startswith("report(") for o in outs)
                result["concurrent_runs_per_s"] = round(args.concurrent / conc, 2)
            except Exception as exc:
                result["error"] = f"concurrent: {type(exc).__name__}: {exc}"[:300]
    except Exception as exc:
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if args.redis_url:
            try:
                app.backend.client.flushdb()
            except Exception:
                traceback.print_exc()
        cleanup()

    print(json.dumps(result), flush=True)
    return 0 if result["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
