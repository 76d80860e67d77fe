"""Rate limits of a fleet: N processes calling one key against a server that enforces it.

    python benchmarks/shared_limits.py                       # process, postgres, redis
    python benchmarks/shared_limits.py --limits process --limit 600 --seconds 120 --skip 60

A local OpenAI-compatible server (its own process) allows `--limit` requests a minute per
key, as a token bucket that starts full (a minute's burst, then `limit/60` a second), and
answers 429 with `Retry-After` past it. `--processes` client processes (4) each run
`--concurrency` calls at a time (16) through interlock's providers layer, with the key's
`requests_per_minute = --limit` in their `interlock.toml`, for `--seconds` (120). After the
first `--skip` seconds (60: the minute in which every bucket spends its starting burst) the
server counts its 429s and the requests it served, as a fraction of the limit.

`--limits` chooses where the clients keep their buckets: `process` (each its own, as before
buckets were shared; the clients use nothing newer, so `PYTHONPATH=<older src>` measures an
older interlock), `postgres` (`--pg`, a database of its own is created) or `redis`
(`--redis`). Each measurement uses a key of its own, so no bucket of an earlier one counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PG = os.environ.get("INTERLOCK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("INTERLOCK_BENCH_REDIS", "redis://127.0.0.1:6379/7")
LATENCY_S = 0.05  # each answer's wait: the model thinking, briefly


# -- the server ---------------------------------------------------------------------------


def make_app(limit: float) -> Any:
    """The limited server: a token bucket of `limit` a minute; /stats says what it did."""
    from aiohttp import web

    capacity, rate = limit, limit / 60.0
    bucket = {"level": capacity, "at": time.monotonic()}
    log: list[tuple[float, int]] = []  # (wall time, status) of every request

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        now = time.monotonic()
        bucket["level"] = min(capacity, bucket["level"] + (now - bucket["at"]) * rate)
        bucket["at"] = now
        if bucket["level"] < 1:
            log.append((time.time(), 429))
            wait = math.ceil((1 - bucket["level"]) / rate)  # whole seconds, as HTTP says
            error = {"message": "Rate limit reached for requests", "type": "requests"}
            return web.json_response(
                {"error": error}, status=429, headers={"Retry-After": str(wait)}
            )
        bucket["level"] -= 1
        log.append((time.time(), 200))
        await asyncio.sleep(LATENCY_S)
        message = {"role": "assistant", "content": "ok"}
        usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        return web.json_response(
            {
                "model": body.get("model", "bench"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": usage,
            }
        )

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(log)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/stats", stats)
    return app


async def serve(limit: float) -> None:
    from aiohttp import web

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    runner = web.AppRunner(make_app(limit), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    print(f"port {sock.getsockname()[1]}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    await runner.cleanup()


# -- a client process ---------------------------------------------------------------------


async def client(args: argparse.Namespace) -> dict[str, Any]:
    from interlock.providers import ModelConfig, ModelRequest, ProviderError, ProviderRegistry

    folder = Path(tempfile.mkdtemp(prefix="il-limits-"))
    (folder / "interlock.toml").write_text(
        f"""
[providers.bench]
kind = "openai"
base_url = "http://127.0.0.1:{args.port}/v1"
api_key_env = "BENCH_KEY"
requests_per_minute = {args.limit}
max_concurrency = {args.concurrency}

[models.bench]
provider = "bench"
model = "bench-model"
stream = false
"""
    )
    config = ModelConfig.load([folder], env={"BENCH_KEY": args.key})
    if args.limits == "process":
        registry = ProviderRegistry()  # what every interlock did before buckets were shared
    else:
        from interlock.runtime.shared_limits import open_buckets

        url = args.store_url
        registry = ProviderRegistry(store=open_buckets(url, env={"INTERLOCK_LIMITS": url}))
    provider = registry.build(config.resolve("bench"), config)
    counts = {"ok": 0, "failed": 0}
    print("ready", flush=True)
    await asyncio.sleep(max(0.0, args.start_at - time.time()))
    deadline = args.start_at + args.seconds

    async def loop(number: int) -> None:
        call = 0
        while time.time() < deadline:
            call += 1
            request = ModelRequest(
                alias="bench", model="bench-model", system="", prompt="hi", timeout=120.0,
                idempotency_key=f"{os.getpid()}/{number}/{call}",
            )  # fmt: skip
            try:
                await provider.complete(request)
                outcome = "ok"
            except ProviderError:
                outcome = "failed"  # out of transport retries: the engine would decide
            # A call still waiting for the bucket at the end is not counted either way.
            if time.time() < deadline:
                counts[outcome] += 1

    await asyncio.gather(*(loop(n) for n in range(args.concurrency)))
    await registry.aclose()
    return counts


# -- the measurement ----------------------------------------------------------------------


def measure(limits: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement: a fresh server, `args.processes` clients, the server's tally."""
    here = Path(__file__).resolve()
    server = subprocess.Popen(
        [sys.executable, str(here), "--serve", "--limit", str(args.limit)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    port = int(server.stdout.readline().split()[1])
    store_url = ""
    database = ""
    if limits == "postgres":
        import psycopg

        database = f"il_bench_limits_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as db:
            db.execute(f"CREATE DATABASE {database}")
        store_url = args.pg.rsplit("/", 1)[0] + "/" + database
    elif limits == "redis":
        store_url = args.redis
    key = f"bench-{uuid.uuid4().hex}"  # buckets of their own
    # The clients' warnings (a retry after each 429) go to --client-log, or nowhere.
    errors = open(args.client_log, "a") if args.client_log else subprocess.DEVNULL  # noqa: SIM115
    start_at = time.time() + 3.0 + 0.5 * args.processes
    clients = [
        subprocess.Popen(
            [
                sys.executable,
                str(here),
                "--client",
                "--limits",
                limits,
                "--port",
                str(port),
                "--limit",
                str(args.limit),
                "--seconds",
                str(args.seconds),
                "--concurrency",
                str(args.concurrency),
                "--key",
                key,
                "--start-at",
                repr(start_at),
                "--store-url",
                store_url,
            ],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        for _ in range(args.processes)
    ]
    results = []
    for process in clients:
        out, _ = process.communicate(timeout=args.seconds + 120)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {"ok": 0, "failed": 0})
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as answer:
        log = json.loads(answer.read())
    server.communicate("")
    if args.client_log:
        errors.close()  # type: ignore[union-attr]
    if database:
        import psycopg

        with psycopg.connect(args.pg, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    begin, end = start_at + args.skip, start_at + args.seconds
    window = [status for at, status in log if begin <= at < end]
    served = window.count(200)
    allowed = args.limit * (end - begin) / 60.0
    return {
        "limits": limits,
        "processes": args.processes,
        "limit_per_minute": args.limit,
        "window_s": end - begin,
        "refused_429_after_skip": window.count(429),
        "served_after_skip": served,
        "throughput_of_limit": round(served / allowed, 3),
        "refused_429_total": sum(1 for _, status in log if status == 429),
        # When each 429 after the skip was answered, in seconds from the start.
        "refused_at_s": [
            round(at - start_at, 2) for at, status in log if status == 429 and begin <= at < end
        ],
        "calls_failed_in_clients": sum(r["failed"] for r in results),
        "calls_ok_in_clients": sum(r["ok"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limits", default="process,postgres,redis")
    parser.add_argument("--limit", type=float, default=600.0, help="requests a minute")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--skip", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pg", default=PG)
    parser.add_argument("--redis", default=REDIS)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--client-log", type=Path, help="append the clients' warnings here")
    # Internal: the server and client processes.
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.limit))
        return
    if args.client:
        print(json.dumps(asyncio.run(client(args))), flush=True)
        return
    rows = []
    for limits in args.limits.split(","):
        row = measure(limits, args)
        rows.append(row)
        print(
            f"{limits:>8}: {row['refused_429_after_skip']:>6} 429s after the first "
            f"{args.skip:g}s, throughput {row['throughput_of_limit']:.1%} of the limit "
            f"({row['served_after_skip']} served in {row['window_s']:g}s; "
            f"{row['calls_failed_in_clients']} calls out of retries)",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
