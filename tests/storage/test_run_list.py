"""The runs list's query (search, filters, sorts, keyset pages) on every backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from interlock.core import events as ev
from interlock.storage.base import AppendBatch, NewEvent, RunRecord, RunSummary, Store
from interlock.storage.run_list import RunQuery

T0 = 1_700_000_000.0
STATUSES = ("running", "paused", "delivered", "failed", "cancelled")


def fill(store: Store, count: int = 240) -> list[dict[str, object]]:
    """`count` runs: two pipelines, every status, costs and creation times with ties, and
    inputs whose values only a search of inputs finds."""
    made = []
    for n in range(count):
        run_id = f"run-{n:04d}"
        pipeline = "alpha" if n % 3 else "beta"
        created = T0 + (n // 4) * 60  # four runs share each minute: ties broken by id
        topic = f"Topic {n} about {'Tides' if n % 7 == 0 else 'wind'}"
        inputs = {"region": f"zone{n % 11}", "note": "50%_off" if n == 17 else "plain"}
        status, cost = STATUSES[n % 5], round((n * 37 % 101) / 100, 2)
        store.create_run(
            run_id=run_id,
            pipeline=pipeline,
            topic=topic,
            definition_hash="h",
            definition="{}",
            source="wf.yaml",
            created_at=created,
        )
        lease = store.acquire_lease(run_id, "o", 60, created)
        first = ev.RunCreated(
            at=created, run_id=run_id, pipeline=pipeline, definition_hash="h", topic=topic,
            inputs=inputs,
        )  # fmt: skip
        summary = RunSummary(status=status, phase="x", cost_usd=cost, updated_at=created)
        store.append(
            AppendBatch(lease=lease, events=[NewEvent(event=first)], summary=summary), created
        )
        made.append({"run_id": run_id, "pipeline": pipeline, "created": created, "topic": topic,
                     "inputs": inputs, "status": status, "cost": cost})  # fmt: skip
    return made


def pages(store: Store, query: RunQuery) -> list[list[str]]:
    """Every page of `query`, following each page's last row as the next one's cursor."""
    found: list[list[str]] = []
    while True:
        page: list[RunRecord] = store.search_runs(query)
        found.append([r.run_id for r in page])
        if len(page) < query.limit:
            return found
        last = page[-1]
        value = last.created_at if query.sort == "created_at" else last.summary.cost_usd
        query = replace(query, after=(value, last.run_id))


def flat(found: list[list[str]]) -> list[str]:
    """The pages' run ids in one list."""
    return [run_id for page in found for run_id in page]


def test_pages_filters_and_search(store: Store) -> None:
    """Pages of 50, newest first and by cost either way, list each run exactly once in the
    order of (sort value, run id), ties in creation time included; status, pipeline and a
    creation-time range filter together; a search finds a run by a part of its id, its topic
    in any case, or an input value, and takes % and _ literally."""
    made = fill(store)
    newest = pages(store, RunQuery(limit=50))
    assert [len(p) for p in newest] == [50, 50, 50, 50, 40]
    expected = sorted(made, key=lambda r: (r["created"], r["run_id"]), reverse=True)
    assert flat(newest) == [r["run_id"] for r in expected]
    for descending in (True, False):
        by_cost = flat(pages(store, RunQuery(sort="cost_usd", descending=descending, limit=33)))
        ordered = sorted(made, key=lambda r: (r["cost"], r["run_id"]), reverse=descending)
        assert by_cost == [r["run_id"] for r in ordered]

    def ids(**options: object) -> list[str]:
        return flat(pages(store, RunQuery(limit=40, **options)))  # type: ignore[arg-type]

    def want(keep: Callable[[dict[str, Any]], bool]) -> list[str]:
        chosen = [r for r in made if keep(r)]
        return [
            str(r["run_id"]) for r in sorted(chosen, key=lambda r: (r["created"], r["run_id"]))
        ][::-1]

    start, end = T0 + 600, T0 + 1800
    assert ids(status="paused", pipeline="beta", created_from=start, created_to=end) == want(
        lambda r: (
            r["status"] == "paused" and r["pipeline"] == "beta" and start <= r["created"] < end
        )
    )
    assert ids(text="RUN-012") == want(lambda r: str(r["run_id"]).startswith("run-012"))
    assert ids(text="tides") == want(lambda r: "Tides" in str(r["topic"]))
    assert ids(text="zone10", status="failed") == want(
        lambda r: r["inputs"]["region"] == "zone10" and r["status"] == "failed"
    )
    assert ids(text="50%_off") == ["run-0017"]
    assert ids(text="%") == ["run-0017"] and ids(text="5_%") == []
    assert ids(text="nothing like it") == []


def test_child_runs_can_be_left_out(store: Store) -> None:
    """`children=False` leaves out runs whose id has a child run's shape (`-c` and 12 hex
    digits, as `child_run_id` makes them) and keeps every other, a near miss included; the
    default lists them all."""
    from interlock.core.subpipelines import child_run_id

    child = child_run_id("parent-1", "summary@1", 1)
    near = ["parent-1", "x-c0123456789a", "x-c0123456789abz", "x-cg123456789ab"]
    for n, run_id in enumerate([child, *near]):
        store.create_run(
            run_id=run_id,
            pipeline="p",
            topic="t",
            definition_hash="h",
            definition="{}",
            source="wf.yaml",
            created_at=T0 + n,
        )
    everything = {r.run_id for r in store.search_runs(RunQuery())}
    assert everything == {child, *near}
    assert {r.run_id for r in store.search_runs(RunQuery(children=False))} == set(near)
