"""Commands that read runs: lists, status, history, decisions, the dispatch ledger.

They never create anything: in a directory with no ledger they say so instead of making one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from interlock.cli.base import (
    COUNT,
    SEQUENCE,
    Ctx,
    driver_of,
    escape,
    handle_errors,
    out,
    pass_ctx,
    real_console,
    when,
)
from interlock.cli.printable import printable

if TYPE_CHECKING:
    from interlock.storage.base import RunRecord

# RunStatus's values (a test keeps them equal) and "waiting", which listings show and folding
# does not: spelled out so that listing runs does not import the engine's state.
STATUSES = ["running", "paused", "delivered", "failed", "cancelled", "waiting"]


@click.command()
@click.option(
    "--status",
    type=click.Choice(STATUSES, case_sensitive=False),
    help="Only runs with this status.",
)
@click.option("--pipeline", help="Only runs of this pipeline.")
@click.option("--limit", default=30, show_default=True, type=COUNT)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def runs(ctx: Ctx, status: str | None, pipeline: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first (a running run that no orchestrator drives says so)."""
    missing = ctx.missing_ledger()
    records = []
    if missing is None:
        records = ctx.store.list_runs(status=status, pipeline=pipeline, limit=limit + 1)
    more = len(records) > limit  # one past the limit says whether some were left out
    records = records[:limit]
    from interlock.runtime.family import parents_of

    # Only with records: opening the store where there is no ledger would create one.
    parents = parents_of(ctx.store, [r.run_id for r in records]) if records else {}
    live = ("running", "waiting")
    drivers = {r.run_id: driver_of(r) for r in records if r.summary.status in live}
    waits: dict[str, Any] = {}
    unreadable: dict[str, str] = {}
    if any(r.summary.status == "waiting" for r in records):
        # Only a waiting run's history is folded (and the engine's modules loaded for it).
        from interlock.runtime.projection import waits_of

        waits, unreadable = waits_of(ctx.store, records)
    capped: dict[str, Any] = {}  # running runs whose calls wait on a spend cap
    if any(drivers.values()):
        from interlock.runtime.home import Home
        from interlock.runtime.projection import live_spend_wait

        home = Home.at(ctx.home)
        for r in records:
            if r.summary.status == "running" and drivers[r.run_id] is not None:
                found = live_spend_wait(home.live_dir(r.run_id), drivers[r.run_id])
                if found is not None:
                    waits[r.run_id] = capped[r.run_id] = found["waiting"]
    if as_json:
        rows = [
            {
                "run_id": r.run_id,
                "pipeline": r.pipeline,
                "topic": r.topic,
                "status": "waiting" if r.run_id in capped else r.summary.status,
                "phase": r.summary.phase,
                "cost_usd": r.summary.cost_usd,
                "tokens": r.summary.tokens,
                # Some call's tokens, so the cost, were estimated: the server reported none.
                "estimated": r.summary.estimated,
                "created_at": r.created_at,
                "updated_at": r.summary.updated_at,
                "driven_by": drivers.get(r.run_id),
                "waiting": waits.get(r.run_id),
                "unreadable": unreadable.get(r.run_id),
                "parent_run": parents[r.run_id][0] if r.run_id in parents else None,
            }
            for r in records
        ]
        out.print_json(data=rows)
        return
    if not records:
        where = f" (no ledger at {missing})" if missing else ""
        filtered = " matching these filters" if status or pipeline else ""
        out.print(f"no runs{filtered} yet{where}: try 'interlock run FILE PIPELINE --topic ...'")
        return
    from interlock.cli.display import styled

    table = RunTable()
    stopped, idle = [], []
    for r in _nested(records, parents):
        state = styled("waiting" if r.run_id in capped else r.summary.status)
        if r.run_id in unreadable:
            state.append(" (unreadable)", style="red")
        if r.run_id in capped:
            from interlock.runtime.projection import waiting_text

            state.append(waiting_text(capped[r.run_id]).removeprefix("waiting"))
        elif r.run_id in waits:
            from interlock.runtime.projection import waiting_text

            state.append(" " + waiting_text(waits[r.run_id]).removeprefix("waiting "))
        if r.run_id in drivers and drivers[r.run_id] is None and r.run_id not in unreadable:
            # A waiting run holds no worker and was not cut off mid-task: it only needs an
            # orchestrator when its wait ends, so it is not one of the stopped running runs.
            if r.summary.status == "running" or _overdue_wait(waits.get(r.run_id)):
                state.append(" (not driven)", style="dim")
                stopped.append(r.run_id)
            else:
                idle.append(r.run_id)
        table.add_row(
            f"↳ {r.run_id}" if r.run_id in parents else r.run_id,  # a child run
            printable(r.pipeline),
            state,
            printable(r.summary.phase or ""),
            f"{'~' if r.summary.estimated else ''}${r.summary.cost_usd:.4f}",
            when(r.created_at),
            printable(r.topic[:40]),
        )
    for shown in table.render(real_console(out)):
        # A line that heads with a run id is never wrapped by rich (the id stays whole).
        out.print(shown, soft_wrap=not hasattr(shown, "columns"))
    for why in unreadable.values():
        out.print(f"unreadable: {why}")
    if any(r.summary.estimated for r in records):
        out.print("~: estimated, a server reported no token counts (four characters a token)")
    if more:
        out.print(
            f"showing the newest {limit} runs; older ones are left out: '--limit {limit * 4}' "
            "shows more, '--status' or '--pipeline' narrows the list"
        )
    if stopped:
        out.print(
            f"not driven: no orchestrator holds {len(stopped)} run(s) that should be going on "
            "(interrupted, or submitted and not yet taken up); continue one with "
            f"'interlock resume {stopped[0]}', or all of them with 'interlock serve'"
        )
    if idle:
        out.print(
            f"{len(idle)} waiting run(s) have no orchestrator to go on when the wait ends: "
            "'interlock signal RUN NAME' sends a signal and continues the run, 'interlock "
            f"resume {idle[0]}' (or a server) waits with it"
        )


def _overdue_wait(waiting: dict[str, Any] | None) -> bool:
    """A wait whose time has passed: its run should be going on (see `runs`, `status`)."""
    if not waiting:
        return False
    from interlock.runtime.projection import overdue

    return overdue(waiting)


def _plain(cell: Any) -> str:
    return cell.plain if hasattr(cell, "plain") else str(cell)


class RunTable:
    """The rows of `runs`, printed as a table when it fits the terminal, else as two lines a
    run. A run id is what one copies from the list, so it is never cut or wrapped: the
    pipeline, phase and topic give way (cut with an ellipsis) instead, and on a terminal too
    narrow for the table each id heads its own line."""

    HEADERS = ("run", "pipeline", "status", "phase", "cost", "started", "topic")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add_row(self, *cells: Any) -> None:
        self.rows.append(cells)

    def render(self, console: Any) -> list[Any]:
        """What to print on `console`, in order."""
        from rich.table import Table
        from rich.text import Text

        # The id, status, cost and start are shown whole; pipeline, phase and topic give way.
        whole = {0, 2, 4, 5}
        widths = {
            i: max([len(self.HEADERS[i])] + [len(_plain(row[i])) for row in self.rows])
            for i in whole
        }
        needed = sum(widths.values()) + 12 + 5 + 12 + len(self.HEADERS) * 2
        if console.width >= needed:
            table = Table(box=None, padding=(0, 1))
            for index, header in enumerate(self.HEADERS):
                table.add_column(
                    header,
                    no_wrap=True,
                    overflow="ellipsis",
                    min_width=widths.get(index, {1: 12, 3: 5, 6: 12}.get(index)),
                    max_width=30 if header == "pipeline" else None,
                )
            for row in self.rows:
                table.add_row(*row)
            return [table]
        lines: list[Any] = []
        for run_id, pipeline, state, phase, cost, started, topic in self.rows:
            shown_state = state if isinstance(state, Text) else Text(str(state))
            head = Text(str(run_id))
            rest = Text("    ")
            if len(head) + 2 + len(shown_state) <= console.width:
                head.append("  ")
                head.append_text(shown_state)
            else:  # the status starts the next line: the id alone is as wide as it gets
                rest.append_text(shown_state)
                rest.append("  ")
            rest.append("  ".join(str(c) for c in (pipeline, phase, cost, started, topic) if c))
            rest.truncate(console.width, overflow="ellipsis")
            lines += [head, rest]
        return lines


def _nested(records: list[Any], parents: dict[str, tuple[str, str | None]]) -> list[Any]:
    """The runs newest first, each child right under its parent when the parent is listed: a
    child is created after its parent, so newest first alone would put its "↳" row above the
    parent, under some unrelated run. A child whose parent is not listed keeps its place."""
    listed = {r.run_id for r in records}
    under: dict[str, list[Any]] = {}
    for r in records:
        parent = parents.get(r.run_id, (None, None))[0]
        if parent is not None and parent in listed:
            under.setdefault(parent, []).append(r)
    ordered: list[Any] = []

    def add(record: Any) -> None:
        ordered.append(record)
        for child in reversed(under.get(record.run_id, [])):  # oldest child first, as tasks ran
            add(child)

    for r in records:
        if parents.get(r.run_id, (None, None))[0] not in listed:
            add(r)
    return ordered


def item_lines(view: dict[str, Any]) -> list[str]:
    """Each fan-out phase's items: how many completed and failed (and the tolerance), then
    each failed item with its task and error."""
    lines = []
    for phase in view["phases"]:
        items = phase.get("items")
        if not items:
            continue
        text = f"items of {phase['id']!r}: {items['completed']} of {items['count']} completed"
        if items["failed"] or items["tolerate"] is not None:
            text += f", {items['failed']} failed"
        if items["tolerate"] is not None:
            text += f" (tolerate {items['tolerate']}: {items['allowed']} may fail)"
        if items["other"]:
            text += f", {items['other']} not done"
        lines.append(text)
        for failed in items["failed_items"]:
            lines.append(f"  item {failed['index']} failed ({failed['task']}): {failed['error']}")
    return lines


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@handle_errors
def status(ctx: Ctx, run_id: str, as_json: bool) -> None:
    """Show a run: phases, workers, retries, cost, warnings, and who drives it."""
    current = _current_status_file(ctx, run_id)
    capped = current is not None and (current[0].get("waiting") or {}).get("for") == "spend_cap"
    if current is not None and capped and driver_of(current[1]) is None:
        current = None  # a wait of a process gone: it waits no more
    if current is not None:
        view, record = current
    else:
        app = ctx.reader(run_id)
        view = app.status(run_id)
        record = app.store.get_run(view["run_id"])
    driver = driver_of(record)
    from interlock.runtime.family import family_view

    family = family_view(ctx.store, view)
    from interlock.runtime.run_config import config_report, recorded_config

    # Which interlock.toml its models were resolved from when it was created, as it is now.
    recorded = recorded_config(ctx.store, record.run_id)
    config = None if recorded is None else config_report(recorded)
    if as_json:
        # Plain json: rich's highlighting takes seconds on a phase of thousands of workers.
        whole = {**view, "driven_by": driver, **family, "config": config}
        click.echo(json.dumps(whole, indent=2, ensure_ascii=False))
        return
    from rich.table import Table
    from rich.text import Text

    from interlock.cli.display import LogPaths, ended_text, styled
    from interlock.runtime.home import Home

    run_status = styled(view["status"])
    if driver is None and (
        view["status"] == "running"
        or (view["status"] == "waiting" and _overdue_wait(view.get("waiting")))
    ):
        # As `runs` says it: a waiting run needs no orchestrator until its wait ends.
        run_status.append(" (not driven)", style="dim")
    out.print(
        Text(f"{printable(view['pipeline'])} ", style="bold"),
        f"{view['run_id']}  ",
        run_status,
        f"  topic: {printable(view['topic'])}",
    )
    rows: list[tuple[Any, ...]] = []
    words: dict[str, int] = {"phase": 5, "worker": 6, "status": 6, "cost": 4}
    # Roles with an attempt waiting for a task slot: "pending" alone would not say why.
    slot_waits = {
        task_id.partition("@")[0]: wait["key"]
        for task_id, wait in ((view.get("task_slots") or {}).get("waiting") or {}).items()
    }
    for phase in view["phases"]:
        shown, rest = _shown_workers(phase["workers"])
        for index, (role, w) in enumerate(shown):
            state = styled(w["status"])
            if role in slot_waits and w["status"] == "pending":
                state.append(f" (waiting for a slot of {slot_waits[role]!r})")
            if w.get("items_failed"):
                state.append(f" ({w['items_failed']} of {w['items']} items failed)")
            if w.get("spend_wait"):
                state.append(f" ({w['spend_wait']})")
            if w.get("provider_batch"):
                state.append(f" ({w['provider_batch']})")
            cost = task_cost(w)
            for column, word in [
                ("phase", phase["id"]), ("worker", role), ("status", w["status"]),
                ("cost", cost.partition(" ")[0]),
            ]:  # fmt: skip
                words[column] = max(words[column], len(word))
            rows.append(
                (
                    phase["id"] if index == 0 else "",
                    role,
                    state,
                    str(w.get("attempt", "")),
                    str(w.get("visit", "")),
                    cost,
                    printable(w.get("output") or ""),
                )
            )
        if rest:
            count = sum(rest.values())
            rows.append(
                (
                    "" if shown else phase["id"],
                    f"{count} more" if shown else f"{count} workers",
                    ", ".join(f"{count} {state}" for state, count in sorted(rest.items())),
                )
            )
    if out.width >= _table_width(rows, words):
        out.print(_workers_table(rows, words))
    else:  # too narrow for the columns: a line per worker, which wraps whole
        for line in _workers_lines(rows):
            out.print(line)
    for line in item_lines(view):
        out.print(escape(line), markup=True, soft_wrap=True)
    out.print(totals_line(view))
    if any(w.get("model") for p in view["phases"] for w in p["workers"].values()):
        _config_lines(ctx, record, config)
    if view.get("unpriced_models"):
        from interlock.runtime.projection import unpriced_note

        note = unpriced_note(view["unpriced_models"])
        out.print(f"[yellow]note:[/] {escape(note)}", markup=True)
    if view.get("rerun_of"):
        start = f", everything from phase {view['rerun_from']!r} ran again" * bool(
            view.get("rerun_from")
        )
        out.print(f"rerun of {view['rerun_of']}{start}; reused outputs cost nothing here")
    for warning in view["warnings"]:
        out.print(f"[yellow]warning:[/] {escape(printable(warning))}", markup=True)
    if view.get("failing"):
        from interlock.runtime.projection import failing_text

        out.print(failing_text(view["run_id"], view["failing"]), soft_wrap=True)
    waiting = view.get("waiting")
    if waiting:
        from interlock.runtime.projection import waiting_text

        line = waiting_text(waiting)
        if waiting.get("for") == "spend_cap":
            line += (
                f" (task {waiting['task']}; 'interlock limits' shows the caps, raise one "
                "in interlock.toml to go on now)"
            )
        elif waiting.get("for") not in ("slot", "task_slot", "child"):
            line += f" (phase {waiting['phase']!r}, {waiting['when']} it)"
        if waiting.get("signal"):
            line += f"; send it: interlock signal {view['run_id']} {waiting['signal']} --data JSON"
        out.print(line)
    pause = view.get("pause") or {}
    if pause.get("child"):
        child = pause["child"]
        # The detail names the run that paused (a grandchild's own id is worth keeping); the
        # child itself is named already.
        detail = str(child["detail"]).removeprefix(f"run {child['run']} ")
        out.print(
            f"paused because child run {child['run']} is paused ({escape(detail)}); "
            f"'interlock approve {view['run_id']}' approves it"
        )
    if pause and not pause.get("child"):
        at = view.get("current_phase")
        phases = view.get("phases") or []
        phase = phases[at]["id"] if isinstance(at, int) and at < len(phases) else None
        out.print(_paused_line(view["run_id"], phase, pause.get("reason")), soft_wrap=True)
        for call in pause.get("tool_calls") or []:
            out.print(_waiting_call_line(view["run_id"], call), soft_wrap=True, markup=False)
    for line in _running_children(view):
        out.print(line)
    if view.get("imported"):
        from interlock.runtime.orchestrator import imported_next

        trusted = bool(view.get("trusted"))
        how = "trusted" if trusted else f"inert until `interlock trust {view['run_id']}`"
        step = imported_next(view["run_id"], view["status"], trusted=trusted)
        out.print(f"imported ({how}): {step[0].lower()}{step[1:]}", markup=False, soft_wrap=True)
    parent = family["parent_run"]
    if parent:
        out.print(
            f"child run of {parent['run_id']} (task {parent['task_id']}, pipeline "
            f"{parent['pipeline']}, {parent['status']}): 'interlock status {parent['run_id']}'"
        )
    if family["child_runs"]:
        kids = Table(box=None, padding=(0, 2), title="child runs", title_justify="left")
        for column in ("task", "child run", "pipeline", "status", "cost"):
            kids.add_column(column)
        for child in family["child_runs"]:
            state = styled(child["status"])
            if child["detail"]:
                state.append(f" ({child['detail']})")
            kids.add_row(
                child["task_id"],
                child["run_id"],
                child["pipeline"] or "",
                state,
                f"${child['cost_usd']:.4f}",
            )
        out.print(kids)
    pending = (view.get("signals") or {}).get("pending")
    if pending:
        out.print(f"signals kept for a later wait: {', '.join(pending)}")
    if view["status"] in ("running", "waiting"):
        started = (w.get("session") for p in view["phases"] for w in p["workers"].values())
        # Submitted, no task taken up yet; a waiting run was driven until its wait began.
        if driver is None and view["status"] == "running" and not any(started):
            out.print(
                "[yellow]not driven yet:[/] the run is recorded and waits for an orchestrator "
                "('interlock serve' or 'interlock orchestrate' on this ledger takes it up); or "
                f"drive it here with 'interlock resume {view['run_id']}'",
                markup=True,
            )
        elif driver is None:
            out.print(
                "[yellow]not driven:[/] no orchestrator holds this run (it was interrupted or "
                f"its process died); continue it with 'interlock resume {view['run_id']}'",
                markup=True,
            )
        else:
            out.print(f"driven by {driver}")
    if view["failure"]:
        ended = ended_text(
            view["status"], LogPaths(Home.at(ctx.home))(view["failure"], view["run_id"])
        )
        status_word, colon, reason = ended.partition(":")
        out.print(f"[red]{status_word}{colon}[/]{escape(reason)}", markup=True, soft_wrap=True)
    if view["final"]:
        out.print(_final_line(ctx, view), soft_wrap=True, markup=True)


def _config_lines(ctx: Ctx, record: RunRecord, config: dict[str, Any] | None) -> None:
    """The interlock.toml the run's models were resolved from when it was created (said
    changed or gone when it is); and the one a command here finds now, when it differs,
    since that is what driving the run from here (`resume`) reads."""
    from pathlib import Path

    from interlock.providers.config_paths import found_line, used_line
    from interlock.runtime.home import Home
    from interlock.runtime.run_config import config_line

    source = record.source
    folder = Path(source).parent if source and not source.startswith("<") else None
    now = found_line(folder, Home.at(ctx.home).root)
    if config is None:  # recorded before runs kept their configuration: what is found now
        out.print(now, markup=False, soft_wrap=True)
        return
    started = used_line([Path(f["path"]) for f in config["files"]], config.get("env") or [])
    out.print(config_line(config, elsewhere=now != started), markup=False, soft_wrap=True)
    if now != started:
        found = now.removeprefix("config: ")
        out.print(
            f"config found here now: {found} (what 'interlock resume' from here reads)",
            markup=False,
            soft_wrap=True,
        )


def _final_line(ctx: Ctx, view: dict[str, Any]) -> str:
    """Where final.md is, or that it is missing and where it belongs (an archived run's in
    `archive/`, unless a move cut short left it in `runs/`)."""
    from interlock.runtime.home import Home

    home = Home.at(ctx.home)
    run_id = view["run_id"]
    archive, live = home.archive_dir(run_id), home.live_dir(run_id)
    for folder in (archive, live):
        if (folder / "final.md").is_file():
            return f"final: {escape(str(folder / 'final.md'))}"
    belongs = archive if view.get("archived") and not live.is_dir() else live
    return (
        f"[yellow]final:[/] missing, {escape(str(belongs / 'final.md'))} is not there; "
        "'interlock doctor --repair' writes back what the ledger holds"
    )


def _paused_line(run_id: str, phase: str | None, reason: str | None) -> str:
    """Why a paused run waits for a person, and the commands that answer it."""
    why = {
        "pause_after": f"after phase {phase!r} (pause_after)",
        # Said as it may be: the spend reached the budget, or the next call's worst case
        # does not fit what is left (the engine pauses before that call: `explain` has it).
        "budget": (
            f"on its budget: its spend reached it, or its next call's worst case would pass "
            f"what is left of it ('interlock explain {run_id}' says which; approving lets it "
            "spend on)"
        ),
        "tool": "for a tool call that waits for a decision",
    }.get(reason or "", f"({reason})" if reason else "")
    answers = f"interlock approve {run_id}"
    if reason == "tool":
        answers = "decide each call below"
    if reason == "pause_after":
        answers += (
            f", or change an output: interlock edit {run_id} OUTPUT --file F, or send it "
            f"back: interlock reject {run_id} --to PHASE -m TEXT"
        )
    return f"paused {why}: {answers}".replace("paused : ", "paused: ")


def _waiting_call_line(run_id: str, call: dict[str, Any]) -> str:
    """A tool call that waits for a decision: what it is and the commands that decide it."""
    return (
        f"  tool call {call['ref']}: {call['tool']}({call['arguments']}) in turn {call['turn']}"
        f" waits: interlock approve {run_id} --call {call['ref']}, or interlock reject "
        f"{run_id} --call {call['ref']} --reason TEXT"
    )


def _running_children(view: dict[str, Any]) -> list[str]:
    """A line per child run still running for a worker in flight, with its spend so far
    (counted in the parent's cost and budget already)."""
    if view["status"] in ("delivered", "failed", "cancelled"):
        return []
    running = {
        w.get("child")
        for phase in view["phases"]
        for w in phase["workers"].values()
        if w["status"] == "running"
    }
    lines = []
    for task_id, child in sorted((view.get("children") or {}).items()):
        if child["run"] not in running:
            continue
        lines.append(
            f"child run {child['run']} ({task_id}) {child['status']}: "
            f"${child.get('cost_usd', 0):.4f} and {child.get('tokens', 0)} tokens spent so far"
        )
    return lines


WIDE = 30  # a phase with more workers shows those that need a look, and counts the rest
SHOWN = 10  # of those, at most this many


def _shown_workers(
    workers: dict[str, dict[str, Any]],
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, int]]:
    """The workers of a phase to list, and how many of the others are in each status.

    A wide phase (thousands of workers) lists those not completed (the first few) and
    counts the rest: the table stays readable and quick to print; `--json` has them all.
    """
    if len(workers) <= WIDE:
        return list(workers.items()), {}
    shown: list[tuple[str, dict[str, Any]]] = []
    rest: dict[str, int] = {}
    for role, worker in workers.items():
        status = worker["status"]
        if status not in ("completed", "reused", "pending", "skipped") and len(shown) < SHOWN:
            shown.append((role, worker))
        else:
            rest[status] = rest.get(status, 0) + 1
    return shown, rest


def _table_width(rows: list[tuple[Any, ...]], words: dict[str, int]) -> int:
    """The columns the table of workers needs: the phase, worker, status and cost words
    whole, the attempt and visit headers, and a dozen characters of output names."""
    named = max((len(row[6]) for row in rows if len(row) > 6), default=0)
    return sum(min(width, 40) for width in words.values()) + 7 + 5 + min(named, 12) + 6


def _workers_lines(rows: list[tuple[Any, ...]]) -> list[Any]:
    """The table of workers as lines, for a terminal too narrow for its columns: each
    phase on a line of its own, then each worker's cells under it, labelled."""
    from rich.text import Text

    lines: list[Any] = []
    for row in rows:
        phase, worker, state, *rest = row
        if phase:
            lines.append(Text(f"phase {phase}", style="bold"))
        line = Text("  ").append(worker).append("  ").append(state)
        if rest:
            attempt, visit, cost, output = rest
            if attempt:  # no-break spaces: a label stays with its number
                line.append(f"  attempt\u00a0{attempt}")
            if visit:
                line.append(f"  visit\u00a0{visit}")
            line.append(f"  {cost}")
            if output:
                line.append(f"  {output}")
        lines.append(line)
    return lines


def _workers_table(rows: list[tuple[Any, ...]], words: dict[str, int]) -> Any:
    """The table of workers: on a narrow terminal a phase, a worker, a status word and a
    cost's dollars are never cut (each column is as wide as its longest, up to 40); what a
    status or a cost says after its first word, and output names, wrap."""
    from rich.table import Table

    table = Table(box=None, padding=(0, 1), pad_edge=False)
    for column in ("phase", "worker", "status", "attempt", "visit", "cost", "output"):
        width = min(words[column], 40) if column in words else None
        table.add_column(
            column,
            min_width=width,
            no_wrap=column in ("phase", "worker", "attempt", "visit"),
            overflow="fold",
        )
    for row in rows:
        table.add_row(*row)
    return table


def task_cost(worker: dict[str, Any]) -> str:
    """A worker's cost cell: its dollars over every visit and attempt (each visit's part
    when there were several), marked when a call of it had no known price, and as an
    estimate when a server reported no token counts."""
    cost = f"${worker.get('cost_usd', 0):.4f}"
    if worker.get("estimated"):
        cost = f"~{cost} (estimated)"
    visits = worker.get("visit_costs")
    if visits:
        parts = ", ".join(f"{v}: ${c:.4f}" for v, c in visits.items())
        cost += f" (by visit {parts})"
    return f"{cost} + unpriced" if worker.get("unpriced") else cost


def totals_line(view: dict[str, Any]) -> str:
    """The run's cost, tokens and retries; estimates said to be such, and the re-runs that
    edits caused counted apart from retries."""
    mark = "~" if view.get("estimated") else ""
    line = f"cost {mark}${view['cost_usd']:.4f}  tokens {mark}{view['tokens']}"
    line += f"  retries {view['retry_count']}"
    if view.get("reruns"):
        line += f"  re-runs after edits {view['reruns']}"
    if mark:
        line += "  (~: estimated where a server reported no token counts)"
    return line


STATUS_KEYS = (
    "run_id pipeline topic status phases cost_usd tokens retry_count warnings failure final events"
)


def _current_status_file(ctx: Ctx, prefix: str) -> tuple[dict[str, Any], RunRecord] | None:
    """The run's status.json with its record, when the file shows the whole history
    recorded so far (it holds the number of events it was made from): `status` then needs
    neither the engine nor the runtime. None sends it the long way (which also gives the
    errors for an unknown or ambiguous id)."""
    if ctx.missing_ledger() is not None or not prefix:
        return None
    from interlock.runtime.home import Home

    store = ctx.store
    matches = store.find_runs(prefix)
    run_id = prefix if prefix in matches else matches[0] if len(matches) == 1 else None
    if run_id is None:
        return None
    record = store.get_run(run_id)
    home = Home.at(ctx.home)
    for folder in (home.archive_dir(run_id), home.live_dir(run_id)):
        try:
            view = json.loads((folder / "status.json").read_bytes())
        except (OSError, ValueError):
            continue
        if (
            isinstance(view, dict)
            and all(key in view for key in STATUS_KEYS.split())
            and view["run_id"] == run_id
            and view["events"] == record.last_seq
        ):
            view.pop("orchestrator", None)  # who wrote the file; `driven_by` says who drives
            from interlock.storage.base import fold_history

            # The file may be older than damage to the ledger: the history is what counts
            # (a run whose history cannot be read is exit 5 here as everywhere).
            fold_history(store.events(run_id))
            return view, record
    return None


@click.command()
@click.argument("run_id")
@click.option("--since", default=0, type=SEQUENCE, help="Only events after this sequence number.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_ctx
@handle_errors
def events(ctx: Ctx, run_id: str, since: int, as_json: bool) -> None:
    """Print a run's history, one event a line."""
    from interlock.cli.display import LogPaths, describe
    from interlock.storage.base import NewEvent

    app = ctx.reader(run_id)
    run_id = app.resolve(run_id)
    paths = LogPaths(app.home)
    for stored in app.events(run_id, since):
        if as_json:
            record = {
                "seq": stored.seq,
                "at": stored.at,
                "kind": stored.kind,
                "data": stored.data,
                "rule": stored.rule,
                "why": stored.why,
            }
            click.echo(json.dumps(record))
        else:
            line = describe(NewEvent(event=stored.event, rule=stored.rule, why=stored.why))
            line = paths(line, run_id)
            click.echo(f"{stored.seq:>4} {when(stored.at)} {stored.kind:<16} {printable(line)}")


@click.command()
@click.argument("run_id")
@click.option("--prompt", "prompt_of", metavar="TASK", help="Show the prompt TASK was sent.")
@pass_ctx
@handle_errors
def explain(ctx: Ctx, run_id: str, prompt_of: str | None) -> None:
    """Each decision with the rule that made it, why, and the values its condition read (or
    the exact prompt of a task)."""
    if prompt_of is not None:
        from interlock.runtime.explain import prompt_heading, prompts

        app = ctx.reader(run_id)
        for name, text in prompts(app.run_dir(run_id), prompt_of):
            out.print(f"== {prompt_heading(name)}")
            click.echo(text)
        return
    from interlock.cli.display import LogPaths
    from interlock.cli.why import explain_lines, plain_lines
    from interlock.runtime.home import Home
    from interlock.runtime.lookup import resolve

    store = ctx.ledger_reader(run_id)
    run_id = resolve(store, run_id)
    paths = LogPaths(Home.at(ctx.home))
    if out.is_terminal:
        # One print for all lines: rich renders a wide run's tens of thousands of events in
        # one pass, instead of paying its per-call setup for each.
        text = paths("\n".join(explain_lines(store, run_id)), run_id, markup=True)
        out.print(text, markup=True)
    else:
        click.echo(paths("\n".join(plain_lines(store, run_id)), run_id))


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON (the default).")
@pass_ctx
@handle_errors
def ledger(ctx: Ctx, run_id: str, as_json: bool) -> None:
    """The dispatch ledger: every task, dispatched before it started, and each start."""
    click.echo(json.dumps(ctx.reader(run_id).ledger(run_id), indent=2))


COMMANDS = [runs, status, events, explain, ledger]
