"""Batches: one run per row of a dataset, tracked as one thing. Pure: no I/O, no clock.

Three parts, each a function over frozen values:
- `parse_rows`: the text of a JSONL or CSV file into rows (objects of column -> value);
- `check_rows`: every row against the pipeline's declared inputs, all problems at once,
  before anything is recorded;
- `fold` and `next_starts`: a batch's status from its rows, and which rows to start next
  given the concurrency, the budget, the tolerance for failed rows and whether the batch
  was cancelled.

Rows are numbered from 1 in the order of the file (for a CSV, the row after the header is
row 1): that number names the row everywhere, and a row's run ids are derived from it.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from interlock.core.tolerance import Tolerance, allowed_failures, describe, parse_tolerance
from interlock.errors import UsageError

if TYPE_CHECKING:
    from interlock.core.workflow import InputSpec

SHOWN_ROWS = 5  # row numbers named in one problem line; the rest are counted
MAX_BATCH_ID = 48  # leaves room for "-r<row>-t<try>" within a run id's 81 characters
RUN_ENDED = ("delivered", "failed", "cancelled")
# Rows whose run only waits for provider-batch answers that do not count against
# `--concurrency` (`--batch-waiting`): one provider batch of the default `batch_max`.
DEFAULT_BATCH_WAITING = 1000
# The most runs a batch drives at once, and rows it lets wait in provider batches beside them:
# well past what one process drives, and within what both ledgers store (PostgreSQL INTEGER).
MAX_CONCURRENCY = 10_000
MAX_BATCH_WAITING = 1_000_000


class BatchInputError(UsageError):
    """A batch's input file cannot be used: nothing is recorded (exit 2, as bad input)."""


class RowState(StrEnum):
    """Where a row stands in the batch's own table; persisted as text."""

    PENDING = "pending"  # not started: its current try has no run id yet
    STARTED = "started"  # its current try's run id is recorded (the run exists, or is made next)
    CANCELLED = "cancelled"  # the batch was cancelled before the row started
    REFUSED = "refused"  # its run could not be created (the error says why)


class RowStatus(StrEnum):
    """A row as people see it: its state folded with its run's status."""

    WAITING = "waiting"  # not started yet
    STARTING = "starting"  # its run id is recorded and the run is made next (after a crash)
    RUNNING = "running"  # its run is in flight
    BATCHED = "in provider batch"  # its run is in flight, only waiting for provider-batch answers
    PAUSED = "paused"  # its run waits for a person's approval
    DELIVERED = "delivered"
    FAILED = "failed"  # its run failed, or could not be created
    CANCELLED = "cancelled"  # its run was cancelled, or the batch before the row started
    # Not started: the batch's spend reached --max-cost-usd, or the next row's worst case
    # would pass what is left of it (see `BudgetHold`).
    BUDGET = "paused: batch budget"
    STOPPED = "not started: batch failed"  # not started: more rows failed than --tolerate allows


@dataclass(frozen=True, kw_only=True)
class Row:
    """One row of the input file: its number, its line in the file, and its values."""

    number: int
    line: int
    values: Any  # an object (column -> value) when the row is valid


@dataclass(frozen=True, kw_only=True)
class RowInputs:
    """A valid row, ready to become a run: its topic and its inputs as given (text or JSON
    scalars; the run converts them to their declared types)."""

    number: int
    topic: str
    inputs: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class RowView:
    """A row as the ledger holds it, with its current run's summary."""

    number: int
    state: RowState
    tries: int  # the current try (1 for the first run, 2 after one retry...)
    run_id: str | None = None
    run_status: str | None = None  # None: no run (not started, or not made yet)
    cost_usd: float = 0.0  # every try's spend, this one's so far included
    tokens: int = 0
    kept: bool = False  # its ended run's result is recorded on the row
    parked: bool = False  # its run only waits for provider-batch answers (its summary says)
    estimated: bool = False  # some try's tokens, so its cost, were estimated (no usage reported)

    @property
    def status(self) -> RowStatus:
        """The row's status, the batch's budget aside (see `fold`)."""
        if self.state is RowState.PENDING:
            return RowStatus.WAITING
        if self.state is RowState.CANCELLED:
            return RowStatus.CANCELLED
        if self.state is RowState.REFUSED:
            return RowStatus.FAILED
        if self.parked and self.run_status == "running":
            return RowStatus.BATCHED
        return _RUN_STATUS.get(self.run_status or "", RowStatus.STARTING)


_RUN_STATUS = {
    "running": RowStatus.RUNNING,
    "waiting": RowStatus.RUNNING,
    "paused": RowStatus.PAUSED,
    "delivered": RowStatus.DELIVERED,
    "failed": RowStatus.FAILED,
    "cancelled": RowStatus.CANCELLED,
}


@dataclass(frozen=True, kw_only=True)
class BatchProgress:
    """A batch folded: how many rows stand where, what it spent, and whether it is over."""

    counts: Mapping[RowStatus, int]
    rows: int
    cost_usd: float
    tokens: int
    over_budget: bool  # the budget holds back the rows not started (reached, or `budget`)
    breach: Breach | None = None  # more rows failed than the batch tolerates: none start
    estimated: bool = False  # the spend includes a row's estimated cost (no usage reported)
    budget: BudgetHold | None = None  # the next row's worst case does not fit what is left
    max_cost_usd: float | None = None  # the batch's budget (None: none)

    @property
    def overspent(self) -> bool:
        """The spend passed the budget (a row's worst case was not known: no price, no
        output limit, tools, or the budget was set after rows had started)."""
        return self.max_cost_usd is not None and self.cost_usd > self.max_cost_usd + _EPSILON

    @property
    def done(self) -> int:
        """Rows whose run ended (delivered, failed or cancelled)."""
        return sum(self.counts.get(s, 0) for s in (RowStatus.DELIVERED, *_STOPPED))

    @property
    def ran(self) -> int:
        """Rows that ran to their end: delivered or failed (not cancelled)."""
        return sum(self.counts.get(s, 0) for s in (RowStatus.DELIVERED, RowStatus.FAILED))

    @property
    def running(self) -> int:
        """Rows in flight (their run made or about to be), those waiting only for
        provider-batch answers included."""
        flying = (RowStatus.RUNNING, RowStatus.STARTING, RowStatus.BATCHED)
        return sum(self.counts.get(s, 0) for s in flying)

    @property
    def parked(self) -> int:
        """Rows in flight whose run only waits for provider-batch answers."""
        return self.counts.get(RowStatus.BATCHED, 0)

    def counted(self, batch_waiting: int) -> int:
        """Rows in flight that count against `--concurrency`: all but the first
        `batch_waiting` of those whose run only waits for provider-batch answers."""
        return self.running - min(self.parked, max(0, batch_waiting))

    @property
    def waiting(self) -> int:
        """Rows not started yet (for lack of room, held by the budget, or by the failure)."""
        held = (RowStatus.WAITING, RowStatus.BUDGET, RowStatus.STOPPED)
        return sum(self.counts.get(s, 0) for s in held)

    @property
    def settled(self) -> bool:
        """Nothing runs and nothing more will start: every row ended, is paused, or waits
        for a budget it reached."""
        startable = self.counts.get(RowStatus.WAITING, 0)
        return self.running == 0 and startable == 0

    def eta(self, elapsed: float, done_since: int) -> float | None:
        """Seconds until the rows still to run are done, at the rate of the `done_since`
        rows that ended in the last `elapsed` seconds (None: no rate yet)."""
        left = self.running + self.counts.get(RowStatus.WAITING, 0)
        if left == 0:
            return 0.0
        if done_since <= 0 or elapsed <= 0:
            return None
        return left * elapsed / done_since


_STOPPED = (RowStatus.FAILED, RowStatus.CANCELLED)
_EPSILON = 1e-9  # dollars: sums of float costs that equal the budget are within it


@dataclass(frozen=True, kw_only=True)
class BudgetHold:
    """The batch's budget holds back a row: the most its run can cost would pass what is
    left once the spend and the worst cases still held for the rows in flight are taken
    from the budget (a run's `budget:` holds back each call's worst case the same way)."""

    row: int  # the next row that would start
    worst_usd: float  # the most its run can cost (its worst-case quote)
    left_usd: float  # the budget less the spend and what rows in flight may still spend
    max_cost_usd: float

    @property
    def reason(self) -> str:
        """`row 3's worst case ($0.0450) would pass what is left of the budget ($0.0210 of
        $0.0300)`."""
        return (
            f"row {self.row}'s worst case (${self.worst_usd:.4f}) would pass what is left of "
            f"the budget (${max(0.0, self.left_usd):.4f} of ${self.max_cost_usd:.4f})"
        )


def held_usd(views: Sequence[RowView], worst_usd: Mapping[int, float]) -> float:
    """What the rows in flight may still spend: each one's worst case, less what its run
    spent so far (a later try's row holds its whole worst case: its cost counts the tries
    before too). A row whose worst case is not known holds nothing."""
    total = 0.0
    for view in views:
        if view.state is not RowState.STARTED or view.run_status in RUN_ENDED:
            continue
        worst = worst_usd.get(view.number)
        if worst is not None:
            total += max(0.0, worst - view.cost_usd) if view.tries == 1 else worst
    return total


def _budget_room(
    rows: Sequence[int],
    views: Sequence[RowView],
    *,
    max_cost_usd: float,
    worst_usd: Mapping[int, float],
    spent: float,
) -> tuple[tuple[int, ...], BudgetHold | None]:
    """Of `rows` (in row order), those whose worst cases fit, one after another, in what is
    left of the budget, and what holds back the first that does not. A row whose worst case
    is not known (no bound on a prompt, a model without a price) starts while the spend is
    under the budget and no other such row is in flight: the budget is passed by at most
    what one such run costs, not by one for each row the concurrency allows."""
    left = max_cost_usd - spent - held_usd(views, worst_usd)
    unbounded = any(
        v.number not in worst_usd
        for v in views
        if v.state is RowState.STARTED and v.run_status not in RUN_ENDED
    )
    fit: list[int] = []
    for number in rows:
        worst = worst_usd.get(number)
        if worst is None:
            if unbounded:
                break  # after the row of unknown cost in flight, in row order
            unbounded = True
        elif worst > left + _EPSILON:
            return tuple(fit), BudgetHold(
                row=number, worst_usd=worst, left_usd=left, max_cost_usd=max_cost_usd
            )
        left -= worst or 0.0
        fit.append(number)
    return tuple(fit), None


@dataclass(frozen=True, kw_only=True)
class Breach:
    """More rows failed for good than the batch's `--tolerate` allows: the batch failed."""

    failed: tuple[int, ...]  # the failed rows, in row order
    rows: int  # the batch's rows
    tolerate: Tolerance

    @property
    def reason(self) -> str:
        """`3 of 20 rows failed, past tolerate 2; failed rows: 4, 9, 17`."""
        shown = ", ".join(str(n) for n in self.failed[:SHOWN_ROWS]) + _more(len(self.failed))
        return (
            f"{len(self.failed)} of {self.rows} rows failed, past "
            f"{describe(self.tolerate, self.rows, 'rows')}; failed rows: {shown}"
        )


def breach_of(views: Sequence[RowView], tolerate: Tolerance | None) -> Breach | None:
    """The batch's failure past its tolerance, or None: within it, or no `--tolerate` (a
    batch without one starts every row, however many fail). A percentage is of the
    batch's rows, rounded down, as a fan-out's is of its items."""
    if tolerate is None:
        return None
    failed = tuple(sorted(v.number for v in views if v.status is RowStatus.FAILED))
    if len(failed) <= allowed_failures(tolerate, len(views)):
        return None
    return Breach(failed=failed, rows=len(views), tolerate=tolerate)


def fold(
    views: Sequence[RowView],
    *,
    max_cost_usd: float | None,
    tolerate: Tolerance | None = None,
    worst_usd: Mapping[int, float] | None = None,
) -> BatchProgress:
    """The batch's status from its rows: waiting rows become `STOPPED` once more rows
    failed than `tolerate` allows, else `BUDGET` once the spend of all rows' runs reached
    `max_cost_usd`, or (with `worst_usd`, row -> the most its run can cost) once the first
    waiting row's worst case would pass what is left of it (finished rows are never touched
    by either)."""
    cost = sum(v.cost_usd for v in views)
    tokens = sum(v.tokens for v in views)
    over = max_cost_usd is not None and cost >= max_cost_usd
    hold = None
    if max_cost_usd is not None and worst_usd is not None and not over:
        first = [min((v.number for v in views if v.status is RowStatus.WAITING), default=0)]
        if first[0]:
            _, hold = _budget_room(
                first, views, max_cost_usd=max_cost_usd, worst_usd=worst_usd, spent=cost
            )
        over = hold is not None
    breach = breach_of(views, tolerate)
    held = RowStatus.STOPPED if breach is not None else RowStatus.BUDGET if over else None
    counts: dict[RowStatus, int] = {}
    for view in views:
        status = view.status
        if status is RowStatus.WAITING and held is not None:
            status = held
        counts[status] = counts.get(status, 0) + 1
    return BatchProgress(
        counts=counts,
        rows=len(views),
        cost_usd=cost,
        tokens=tokens,
        over_budget=over,
        breach=breach,
        estimated=any(v.estimated for v in views),
        budget=hold,
        max_cost_usd=max_cost_usd,
    )


def row_status(view: RowView, progress: BatchProgress) -> RowStatus:
    """One row's status within its folded batch."""
    status = view.status
    if status is not RowStatus.WAITING:
        return status
    if progress.breach is not None:
        return RowStatus.STOPPED
    return RowStatus.BUDGET if progress.over_budget else status


def batch_tolerance(value: object, where: str) -> Tolerance | None:
    """A batch's tolerance for failed rows as given (`--tolerate`, or a body's `tolerate`):
    a count of rows or a percentage of them, None when not given.

    Raises:
        BatchInputError: a negative count, a percentage past 100%, or neither.
    """
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)  # "-1" is refused as negative, not as "neither"
    hint = f"give a number of rows ({where} 5) or a percentage of them ({where} 10%)"
    try:
        return parse_tolerance(value, hint, "rows")
    except ValueError as exc:  # its message starts "tolerate ...": said as it was given
        said = str(exc).removeprefix("tolerate")
        raise BatchInputError(f"{where}{said}; nothing was recorded") from None


class Held(StrEnum):
    """Why no more rows start now (the rule `next_starts` applied)."""

    NOTHING_LEFT = "nothing_left"  # every row started
    CONCURRENCY = "concurrency"  # --concurrency runs are in flight
    BUDGET = "budget"  # the spend reached --max-cost-usd, or the next row's worst case passes it
    CANCELLED = "cancelled"  # the batch was cancelled
    FAILED = "failed"  # more rows failed than --tolerate allows
    BASE = "base"  # a variant's rows wait for the base rows they reuse to end


@dataclass(frozen=True, kw_only=True)
class Starts:
    """Which rows to start now, and why not more (None: every waiting row starts)."""

    rows: tuple[int, ...]
    held: Held | None
    budget: BudgetHold | None = None  # held by the budget: the row it holds back, and why


def next_starts(
    views: Sequence[RowView],
    *,
    concurrency: int,
    max_cost_usd: float | None,
    cancelled: bool,
    ready: Collection[int] | None = None,
    tolerate: Tolerance | None = None,
    batch_waiting: int = 0,
    worst_usd: Mapping[int, float] | None = None,
) -> Starts:
    """The rows to start now: waiting rows in row order (a batch reads as its file does),
    as many as leave at most `concurrency` runs in flight, none once the batch is cancelled,
    more of its rows failed than `tolerate` allows, or its spend reached its budget.
    `ready`: the rows that may start at all (a variant's rows whose base row has ended);
    None: every row. Up to `batch_waiting` rows whose run only waits for provider-batch
    answers count as not in flight, so that more rows' calls gather into the same provider
    batch; at most `concurrency + batch_waiting` rows are in flight at once.
    `worst_usd` (row -> the most its run can cost): a row starts only while its worst case
    fits in the budget less the spend and the worst cases still held for the rows in flight
    (`BudgetHold`), so that the spend stays within the budget."""
    if cancelled:
        return Starts(rows=(), held=Held.CANCELLED)
    progress = fold(views, max_cost_usd=max_cost_usd, tolerate=tolerate, worst_usd=worst_usd)
    waiting = sorted(v.number for v in views if v.status is RowStatus.WAITING)
    if not waiting:
        return Starts(rows=(), held=Held.NOTHING_LEFT)
    if progress.breach is not None:
        return Starts(rows=(), held=Held.FAILED)
    if progress.over_budget:
        return Starts(rows=(), held=Held.BUDGET, budget=progress.budget)
    startable = waiting if ready is None else [n for n in waiting if n in ready]
    room = max(0, concurrency - progress.counted(batch_waiting))
    chosen = tuple(startable[:room])
    budget = None
    if max_cost_usd is not None and worst_usd is not None:
        chosen, budget = _budget_room(
            chosen, views, max_cost_usd=max_cost_usd, worst_usd=worst_usd, spent=progress.cost_usd
        )
    if budget is not None:
        return Starts(rows=chosen, held=Held.BUDGET, budget=budget)
    if len(chosen) < len(startable):
        held: Held | None = Held.CONCURRENCY
    elif len(chosen) < len(waiting):
        held = Held.BASE
    else:
        held = None
    return Starts(rows=chosen, held=held)


def run_id_of(batch_id: str, row: int, attempt: int) -> str:
    """The run id of a row's try: derived from the batch and the row, so that a row's try can
    never get two runs (the ledger refuses a second run with the same id, and a driver that
    crashed after recording the id finds the run, or makes it, under that id)."""
    return f"{batch_id}-r{row}" if attempt == 1 else f"{batch_id}-r{row}-t{attempt}"


# -- reading the input file ------------------------------------------------------------------


def parse_rows(name: str, text: str) -> list[Row]:
    """The rows of an input file by its name's ending: `.jsonl`/`.ndjson` (one JSON object a
    line; blank lines are skipped) or `.csv` (a header, then one row a line).

    Raises:
        BatchInputError: another kind of file, bad JSON on a line, a CSV with ragged rows, or
            no rows at all.
    """
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        rows = _jsonl_rows(name, text)
    elif lower.endswith(".csv"):
        rows = _csv_rows(name, text)
    else:
        raise BatchInputError(
            f"{name}: is neither JSONL nor CSV: give a file ending in .jsonl (one JSON object a "
            "line) or .csv (a header row naming the inputs, then one row a line)"
        )
    if not rows:
        raise BatchInputError(
            f"{name}: has no rows: nothing to run; add one row per run "
            + (
                "(one JSON object a line)"
                if not lower.endswith(".csv")
                else "after a header row naming the inputs"
            )
        )
    return rows


def _jsonl_rows(name: str, text: str) -> list[Row]:
    rows: list[Row] = []
    bad: list[str] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        deep = False
        try:
            value = json.loads(line)
        except ValueError as exc:
            bad.append(f"line {line_no}: {exc}")
            continue
        except RecursionError:  # nested past what the parser reads: refused just below
            deep = True
        if deep or _too_deep(value):
            bad.append(f"line {line_no}: nested more than {MAX_ROW_DEPTH} levels deep")
            continue
        rows.append(Row(number=len(rows) + 1, line=line_no, values=value))
    if bad:
        shown = "; ".join(bad[:SHOWN_ROWS]) + _more(len(bad))
        raise BatchInputError(
            f"{name}: bad JSON ({shown}); each line must be one JSON object, such as "
            '{"topic": "...", "language": "French"}'
        )
    return rows


MAX_ROW_DEPTH = 64  # as a workflow file (`core.parse`): inputs nest a few levels at most


def _too_deep(value: Any) -> bool:
    """Whether `value` nests lists and objects more than `MAX_ROW_DEPTH` levels (walked
    without recursion: the value may be as deep as the parser allowed)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_ROW_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _csv_rows(name: str, text: str) -> list[Row]:
    try:
        table = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise BatchInputError(f"{name}: is not valid CSV ({exc})") from None
    lines = [(i, r) for i, r in enumerate(table, start=1) if any(cell.strip() for cell in r)]
    if not lines:
        return []
    header_line, header = lines[0]
    if len(header) == 1:  # one column whose name holds another separator: not comma-separated
        for mark, said in ((";", "semicolons (;)"), ("\t", "tabs")):
            if mark in header[0]:
                raise BatchInputError(
                    f"{name}: the header (line {header_line}) {header[0]!r} has no comma but "
                    f"{said}: the file is separated by {said.split()[0]}, and a .csv file is "
                    "read with commas; save it comma-separated (a spreadsheet's 'CSV (comma "
                    "delimited)'), or write the rows as .jsonl"
                )
    header = [cell.strip() for cell in header]
    blank = [i for i, cell in enumerate(header, start=1) if not cell]
    if blank:
        raise BatchInputError(
            f"{name}: the header (line {header_line}) has an empty column name (column "
            f"{blank[0]}); name every column after a pipeline input"
        )
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise BatchInputError(f"{name}: the header names column {twice[0]!r} twice; keep one")
    rows: list[Row] = []
    ragged: list[tuple[int, int, int]] = []
    for line_no, cells in lines[1:]:
        number = len(rows) + 1
        if len(cells) != len(header):
            ragged.append((number, line_no, len(cells)))
        rows.append(Row(number=number, line=line_no, values=dict(zip(header, cells, strict=False))))
    if ragged:
        shown = ", ".join(f"{n} (line {line}: {k} cells)" for n, line, k in ragged[:SHOWN_ROWS])
        raise BatchInputError(
            f"{name}: ragged rows: the header has {len(header)} columns but row(s) {shown}"
            f"{_more(len(ragged))} do not; give every row one cell per column (quote a cell "
            'that holds a comma: "a, b")'
        )
    return rows


def _close_indexes(word: str, candidates: list[str]) -> list[int]:
    """The place in `candidates` of the closest near spelling of `word` (none, or one)."""
    close = difflib.get_close_matches(word, candidates, n=1)
    return [candidates.index(close[0])] if close else []


def _more(count: int) -> str:
    return f" and {count - SHOWN_ROWS} more" if count > SHOWN_ROWS else ""


# -- checking rows against the pipeline -------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Problems:
    """Problems found, each with the rows it concerns, in the order first found."""

    by_text: dict[str, list[int]] = field(default_factory=dict)

    def add(self, text: str, row: int) -> None:
        self.by_text.setdefault(text, []).append(row)

    def lines(self) -> list[str]:
        out = []
        for text, rows in self.by_text.items():
            label = "row" if len(rows) == 1 else "rows"
            shown = ", ".join(str(r) for r in rows[:SHOWN_ROWS]) + _more(len(rows))
            out.append(f"{label} {shown}: {text}")
        return out


def check_rows(
    name: str,
    pipeline: str,
    declared: Mapping[str, InputSpec],
    rows: Sequence[Row],
    *,
    topic_field: str | None,
    also: Callable[[str, dict[str, Any]], list[str]] | None = None,
    ignored: Collection[str] = (),
) -> list[RowInputs]:
    """Each row as a run's topic and inputs, or every problem at once.

    The topic comes from the column `topic_field` (default: a `topic` column when there is
    one, else "row N of FILE"), and a row whose cell there is empty is refused; every other
    column must be a declared input. An empty CSV cell or a JSON null is an input not given
    (its default applies).

    Columns in `ignored` (`--ignore-column`: an id, notes) are left out of every row.

    `also(topic, inputs)` gives further problems of a row, its inputs resolved (defaults
    applied): what would refuse its run when it is made (a `not_before` no time can be).

    Raises:
        BatchInputError: a row is not an object, names a column that is no input of the
            pipeline, lacks a required input, or holds a value its input's type refuses; the
            message names the file, the rows (up to a few per problem) and the fix.
    """
    from interlock.core.inputs import check_size, resolve_inputs

    problems = _Problems()
    objects = [r for r in rows if isinstance(r.values, dict)]
    for row in rows:
        if not isinstance(row.values, dict):
            kind = type(row.values).__name__.replace("dict", "object").replace("str", "text")
            problems.add(
                f"is a JSON {kind}, not an object: write each row as an object of input "
                'names to values, such as {"topic": "...", "language": "French"}',
                row.number,
            )
    columns: dict[str, None] = {}
    for row in objects:
        columns.update(dict.fromkeys(row.values))
    if topic_field is not None and topic_field not in columns:
        raise BatchInputError(
            f"{name}: --topic-field {topic_field!r} names no column of the file; its columns "
            f"are {', '.join(columns) or 'none'}"
        )
    if topic_field is not None and topic_field in ignored:
        raise BatchInputError(
            f"{name}: column {topic_field!r} is both --topic-field and --ignore-column; keep one"
        )
    topic_column = topic_field or (
        "topic" if "topic" in columns and "topic" not in ignored else None
    )
    known = ", ".join(sorted(declared)) or "none"
    # What a column may have meant: the inputs, and the topic when no column gives it.
    names = [*declared, *(() if topic_column else ("topic",))]
    unknown_ignored = [c for c in ignored if c not in columns]
    if unknown_ignored:
        raise BatchInputError(
            f"{name}: --ignore-column {unknown_ignored[0]!r} names no column of the file; its "
            f"columns are {', '.join(columns) or 'none'}"
        )
    for column in columns:
        if column == topic_column or column in declared or column in ignored:
            continue
        # The same name in other letters ('Topic', 'LANGUAGE') first, then a near spelling.
        close = [n for n in names if n.casefold() == column.casefold()] or [
            names[i] for i in _close_indexes(column.casefold(), [n.casefold() for n in names])
        ]
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        fix = f"rename it to {close[0]!r}" if close else "rename or drop the column"
        fix += f", or pass --ignore-column {column} to leave it out"
        if topic_column is None and not close:
            fix += f" (or --topic-field {column} to make it the runs' topic)"
        text = (
            f"column {column!r} is no input of pipeline {pipeline!r}{hint}; declared inputs: "
            f"{known}; {fix}"
        )
        for row in objects:
            if column in row.values:
                problems.add(text, row.number)
    checked = []
    for row in objects:
        values = row.values
        topic_value = values.get(topic_column) if topic_column else None
        given = {
            k: v for k, v in values.items() if k != topic_column and k in declared and _given(v)
        }
        scalar = True
        for key, value in [*given.items(), ("the topic", topic_value)]:
            if isinstance(value, dict | list):
                what = f"input {key!r}" if key != "the topic" else "the topic"
                problems.add(
                    f"{what} is a JSON {'object' if isinstance(value, dict) else 'list'}; "
                    "give text, a number or true/false",
                    row.number,
                )
                scalar = False
        if not scalar:
            continue
        if topic_column is not None and not _text(topic_value or "").strip():
            problems.add(
                f"its {topic_column!r} cell, the run's topic, is empty: fill it in (tasks "
                "that read {{ topic }} would send the model nothing)",
                row.number,
            )
            continue
        topic = _text(topic_value) if _given(topic_value) else f"row {row.number} of {name}"
        try:
            check_size(pipeline, "the topic", topic)
            resolved = resolve_inputs(pipeline, declared, given)
        except UsageError as exc:
            problems.add(_row_fix(exc.message, pipeline, name), row.number)
            continue
        further = also(topic, resolved) if also is not None else []
        for text in further:
            problems.add(text, row.number)
        if further:
            continue
        # Kept as their inputs' types (a CSV's "3" is 3 for an integer input); defaults are
        # left to the run, which records them.
        inputs = {k: resolved[k] for k in given}
        checked.append(RowInputs(number=row.number, topic=topic, inputs=inputs))
    lines = problems.lines()
    if lines:
        listed = "\n".join(f"  - {line}" for line in lines)
        count = len({r for rows_of in problems.by_text.values() for r in rows_of})
        raise BatchInputError(
            f"{name}: {count} of {len(rows)} row(s) cannot run pipeline {pipeline!r}; "
            f"nothing was recorded:\n{listed}"
        )
    return checked


def _given(value: Any) -> bool:
    return value is not None and value != ""


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _row_fix(message: str, pipeline: str, name: str) -> str:
    """An input error of `resolve_inputs` (worded for `--input`) in the words of a file."""
    for prefix in (f"pipeline {pipeline!r}: ", f"pipeline {pipeline!r} "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
            break
    head, sep, _ = message.partition(": pass --input ")
    if sep:  # a required input with no default, not given
        column = head.removeprefix("needs input ")
        return f"{head}: add a {column} column to {name} (or give the input a default)"
    return message
