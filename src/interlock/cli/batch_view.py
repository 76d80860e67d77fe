"""What `interlock batch` shows: the live progress of a batch, its quote, its rows' table."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from interlock.cli.base import err, out, real_console

if TYPE_CHECKING:
    from rich.live import Live

    from interlock.core.batches import BatchProgress
    from interlock.workloads.batch_status import BatchStatus
    from interlock.workloads.batches import Snapshot

SAID = ("delivered", "failed", "cancelled", "paused")  # row statuses a line is printed for
PLAIN_EVERY = 2.0  # seconds between progress lines off a terminal (each ended row has its own)
BAR = 40  # characters of the progress bar


def duration(seconds: float | None) -> str:
    """`1h02m`, `3m05s`, `12s`; `?` when unknown."""
    if seconds is None:
        return "?"
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_line(
    progress: BatchProgress, eta: float | None, capped: Mapping[int, str] | None = None
) -> str:
    """done / running / failed / waiting, the spend and the ETA, in one line; of the rows
    running, those whose calls wait on a spend cap (`capped`: row -> what it waits for) are
    said with the first cap's words, and no ETA is given while every running row waits.
    Each row is counted once: `done` are the rows whose run ran to its end (delivered or
    failed), `waiting` those not started that may still start; cancelled rows and rows
    held back (by the budget, by failures past --tolerate) are counted apart."""
    from interlock.core.batches import RowStatus

    counts = progress.counts
    held = sorted(set((capped or {}).values()))
    parts = [
        f"{progress.ran}/{progress.rows} done",
        f"{counts.get(RowStatus.DELIVERED, 0)} delivered",
        f"{progress.running} running"
        + (f" ({progress.parked} in provider batch)" if progress.parked else "")
        + (f" ({len(capped or {})} {held[0]})" if held else ""),
        f"{counts.get(RowStatus.FAILED, 0)} failed",
        f"{counts.get(RowStatus.WAITING, 0)} waiting",
    ]
    for status in (RowStatus.PAUSED, RowStatus.CANCELLED, RowStatus.BUDGET, RowStatus.STOPPED):
        if counts.get(status):
            parts.append(f"{counts[status]} {status.value}")
    spent = f"{'~' if progress.estimated else ''}${progress.cost_usd:.4f}"
    if progress.max_cost_usd is not None:
        spent += f" of ${progress.max_cost_usd:.4f}" + (" (over)" if progress.overspent else "")
    parts.append(spent)
    if not progress.settled:
        stalled = bool(held) and len(capped or {}) >= progress.running
        parts.append(f"ETA {duration(None if stalled else eta)}")
    return ", ".join(parts)


def budget_line(batch_id: str, progress: BatchProgress) -> str | None:
    """What the batch's budget does to it, and the way on (None: nothing): it went over
    (a row's worst case was not known), its spend reached it, or the next row's worst case
    would pass what is left of it."""
    budget = progress.max_cost_usd
    if budget is None:
        return None
    raise_it = f"'interlock batch resume {batch_id} --max-cost-usd X' raises it"
    if progress.overspent:
        return (
            f"batch {batch_id} went over its budget: it spent ${progress.cost_usd:.4f} of "
            f"${budget:.4f} (a row whose worst case is not known, one with no bound in `check "
            "--cost`: a model without a price or an output limit, or a prompt with no bound "
            "(set context_tokens), starts one at a time, held to the recorded spend only)"
        )
    if not progress.over_budget or not progress.waiting:
        return None
    if progress.budget is not None:
        return f"rows not started wait for the batch's budget: {progress.budget.reason}; {raise_it}"
    return (
        f"rows not started wait for the batch's budget: its spend (${progress.cost_usd:.4f}) "
        f"reached it (${budget:.4f}); {raise_it}"
    )


class BatchProgressView:
    """A live bar and counts on a terminal; off one, a line per ended row and a progress
    line every few seconds."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        self.terminal = out.is_terminal
        self.live: Live | None = None
        self._seen: dict[int, str] = {}
        self._last_line = 0.0
        self._said = ""

    def __enter__(self) -> BatchProgressView:
        if self.terminal:
            from rich.live import Live

            self.live = Live(console=real_console(out), refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def __call__(self, snapshot: Snapshot) -> None:
        if self.live is not None:
            self.live.update(self._renderable(snapshot))
            return
        self._plain(snapshot)

    def _renderable(self, snapshot: Snapshot) -> Any:
        from rich.text import Text

        progress = snapshot.progress
        filled = BAR * progress.done // max(1, progress.rows)
        text = Text()
        text.append(f"batch {self.batch_id} ({snapshot.batch.pipeline})\n", style="bold")
        text.append("━" * filled, style="green")
        text.append("━" * (BAR - filled), style="dim")
        text.append(f"\n{progress_line(progress, snapshot.eta, snapshot.capped)}")
        return text

    def _plain(self, snapshot: Snapshot) -> None:
        from interlock.core.batches import row_status

        progress = snapshot.progress
        for view in snapshot.rows:
            status = row_status(view, progress).value
            before = self._seen.get(view.number)
            self._seen[view.number] = status
            # Rows that had ended before this process looked are not said again.
            if before is not None and before != status and status in SAID:
                cost = f"{'~' if view.estimated else ''}${view.cost_usd:.4f}"
                run = f"{view.run_id}, " if view.run_id else ""  # a row never started: no run
                out.print(f"row {view.number}: {status} ({run}{cost})")
        line = progress_line(progress, snapshot.eta, snapshot.capped)
        now = time.monotonic()
        if line != self._said and (now - self._last_line >= PLAIN_EVERY or progress.settled):
            err.print(line)
            self._said, self._last_line = line, now


def status_table(shown: BatchStatus, *, width: int = 40, line_width: int = 100) -> str:
    """The per-row table of `interlock batch status`, as aligned text: a rich Table of
    10,000 rows takes seconds to lay out, this a few milliseconds. A row in flight with a
    mark has its status from it; under a row, why it stands there (`BatchStatus.why`: what
    it waits for, or why it did not deliver), cut to `line_width`."""
    from interlock.cli.printable import printable

    lines = [("row", "inputs", "run", "status", "cost", "values")]
    why: dict[int, str] = {}  # line -> the reason under it
    for row in shown.rows:
        view = row.view
        values = (row.result or {}).get("values") or {}
        if (reason := shown.why(row)) is not None:
            why[len(lines)] = printable(reason)
        lines.append(
            (
                str(view.number),
                shorten(inputs_text(row.topic, row.inputs), width),
                view.run_id or "-",
                shown.shown_status(row),
                f"{'~' if view.estimated else ''}${view.cost_usd:.4f}",
                shorten(compact(values), width) if values else "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(6)]
    right = (0, 4)  # row numbers and costs line up on their last digit
    text: list[str] = []
    indent = " " * (widths[0] + 2)
    for n, line in enumerate(lines):
        text.append(
            "  ".join(
                cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                for i, cell in enumerate(line)
            ).rstrip()
        )
        if n in why:
            text.append(indent + cut(f"why: {why[n]}", max(20, line_width - len(indent))))
    return "\n".join(text)


def inputs_text(topic: str, inputs: Mapping[str, Any]) -> str:
    """A row's topic and inputs as `topic; k=v, k=v`."""
    given = ", ".join(f"{k}={v}" for k, v in inputs.items())
    return f"{topic}; {given}" if given else topic


def compact(values: Mapping[str, Any]) -> str:
    """Extracted values as `k=v, k=v` (JSON for what is not text or a number)."""
    return ", ".join(
        f"{k}={v if isinstance(v, str | int | float) else json.dumps(v)}" for k, v in values.items()
    )


def terminal_width() -> int:
    """The terminal's columns (`COLUMNS` when set; 100 off a terminal)."""
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def cut(text: str, width: int) -> str:
    """`text` (one line already) cut to at most `width` characters."""
    return text if len(text) <= width else text[: width - 1] + "…"


def shorten(text: str, width: int) -> str:
    """One line of at most `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
