"""Commands of the PostgreSQL fleet: workers and orchestrators."""

from __future__ import annotations

import click

from interlock.cli.base import COUNT, Ctx, handle_errors, pass_ctx

KINDS = ("command", "model", "call")
SLOTS_MOST = 100_000  # a claim's count is a 32-bit integer in the queue


class KindCount(click.ParamType):  # type: ignore[type-arg]
    """`N` (every kind) or `KIND=N` (one kind): (kind or None, N)."""

    name = "[KIND=]N"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str | None, int]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        kind, sep, number = (part.strip() for part in text.rpartition("="))
        kind = kind.lower()
        if sep and kind not in KINDS:
            named = f"no kind {kind!r}" if kind else f"{text!r} names no kind"
            self.fail(
                f"{named}: use command, model or call (as in model=64), or a number for every kind",
                param,
                ctx,
            )
        if not (number.isascii() and number.isdigit()) or not 1 <= int(number) <= SLOTS_MOST:
            example = f"{kind}=2" if kind else "8 or command=2"
            none = f"no {kind} tasks, leave {kind}" if kind else "none of a kind, leave it"
            self.fail(
                f"{number!r}{f' for {kind}' if kind else ''}: expected a whole number from 1 to "
                f"{SLOTS_MOST:,} (as in {example}; to take {none} out of --kinds)",
                param,
                ctx,
            )
        return (kind or None, int(number))


def worker_slots(given: tuple[tuple[str | None, int], ...]) -> dict[str, int]:
    """The kinds `--concurrency` sets (a later value wins); the others keep the worker's
    defaults (`interlock.distributed.cli.default_slots`)."""
    slots: dict[str, int] = {}
    for kind, count in given:
        for each in [kind] if kind else KINDS:
            slots[each] = count
    return slots


def taken_kinds(text: str, concurrency: tuple[tuple[str | None, int], ...]) -> tuple[str, ...]:
    """The kinds `--kinds` names, checked against `--concurrency`: a value for a kind this
    worker does not take would be ignored, so it is refused (click's usage error, exit 2)."""
    kinds = tuple(dict.fromkeys(k.strip().lower() for k in text.split(",") if k.strip()))
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        named = f"no kind {', '.join(map(repr, unknown))}" if unknown else f"{text!r} names no kind"
        raise click.BadParameter(
            f"{named}: name one or more of command, model, call (as in model,call)",
            param_hint="'--kinds'",
        )
    for kind, count in concurrency:
        if kind is not None and kind not in kinds:
            raise click.BadParameter(
                f"{kind}={count}, but this worker takes no {kind} tasks (--kinds "
                f"{','.join(kinds)}): add {kind} to --kinds, or leave the value out",
                param_hint="'--concurrency'",
            )
    return kinds


@click.command()
@click.option(
    "--concurrency",
    "-c",
    multiple=True,
    type=KindCount(),
    help="Tasks run at once, of each kind: N (1 to 100,000) for every kind, KIND=N for one; "
    "repeatable, a later value winning. Unless given: command=4, call=32, and as many "
    "model calls as the providers allow (the largest max_concurrency in interlock.toml, 8 "
    "unless set).",
)
@click.option("--kinds", default="command,model,call", show_default=True, help="Kinds taken.")
@click.option("--tags", default="", help="Tags this worker offers (comma-separated).")
@click.option(
    "--lease-ttl",
    default=15.0,
    show_default=True,
    help="Seconds before a silent worker's tasks are handed out again.",
)
@click.option("--grace", default=30.0, show_default=True, help="Seconds to finish on SIGTERM.")
@click.option("--redis", "redis_url", envvar="INTERLOCK_REDIS", help="Take tasks from Redis.")
@click.option(
    "--store", "store_here", help="Ledger URL (as the global --store, given after the command)."
)
@pass_ctx
@handle_errors
def worker(
    ctx: Ctx,
    store_here: str | None,
    concurrency: tuple[tuple[str | None, int], ...],
    kinds: str,
    tags: str,
    lease_ttl: float,
    grace: float,
    redis_url: str | None,
) -> None:
    """Run queued tasks of a shared PostgreSQL ledger (--store) until SIGTERM."""
    taken = taken_kinds(kinds, concurrency)
    if store_here:
        ctx.store_url = store_here
    from interlock.distributed.cli import run_worker

    run_worker(
        ctx.store_url,
        ctx.home,
        slots=worker_slots(concurrency),
        kinds=taken,
        tags=tuple(t.strip() for t in tags.split(",") if t.strip()),
        lease_ttl=lease_ttl,
        grace=grace,
        redis_url=redis_url,
    )


@click.command()
@click.option("--capacity", default=200, show_default=True, type=COUNT, help="Runs driven at most.")
@click.option("--lease-ttl", default=15.0, show_default=True, help="Run lease (seconds).")
@click.option(
    "--heartbeat",
    default=0.5,
    show_default=True,
    help="Seconds between looks at leases and the command inbox (a NOTIFY looks at once).",
)
@click.option("--priority", multiple=True, help="PIPELINE=N: higher goes first.")
@click.option(
    "--limit",
    multiple=True,
    help="SCOPE=N: at most N tasks at once across all "
    "workers; SCOPE is pipeline:NAME, kind:KIND or model:ALIAS (-1 removes).",
)
@click.option("--redis", "redis_url", envvar="INTERLOCK_REDIS", help="Announce tasks on Redis.")
@click.option(
    "--queue-retention",
    default=3600.0,
    show_default=True,
    help="Seconds a finished queue entry of an ended run is kept (-1: for ever).",
)
@click.option(
    "--store", "store_here", help="Ledger URL (as the global --store, given after the command)."
)
@pass_ctx
@handle_errors
def orchestrate(
    ctx: Ctx,
    store_here: str | None,
    capacity: int,
    lease_ttl: float,
    heartbeat: float,
    priority: tuple[str, ...],
    limit: tuple[str, ...],
    redis_url: str | None,
    queue_retention: float,
) -> None:
    """Drive runs of a shared PostgreSQL ledger that no live orchestrator holds."""
    if store_here:
        ctx.store_url = store_here
    from interlock.distributed.cli import run_orchestrate

    run_orchestrate(
        ctx.store_url,
        ctx.home,
        capacity=capacity,
        lease_ttl=lease_ttl,
        heartbeat=heartbeat,
        priorities=priority,
        limits=limit,
        redis_url=redis_url,
        queue_retention=queue_retention,
    )


COMMANDS = [worker, orchestrate]
