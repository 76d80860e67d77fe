"""Batches' pure part: reading rows, checking them against a pipeline, folding and choosing."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core.batches import (
    BatchInputError,
    Held,
    RowState,
    RowStatus,
    RowView,
    batch_tolerance,
    check_rows,
    fold,
    next_starts,
    parse_rows,
    row_status,
    run_id_of,
)
from interlock.core.workflow import InputSpec

DECLARED = {
    "language": InputSpec(default="English"),
    "words": InputSpec(type="integer", default=50),
    "text": InputSpec(required=True),
}


def checked(
    name: str, text: str, topic_field: str | None = None
) -> list[tuple[int, str, dict[str, Any]]]:
    """The rows of `text` checked against DECLARED, as (number, topic, inputs)."""
    rows = check_rows(name, "p", DECLARED, parse_rows(name, text), topic_field=topic_field)
    return [(r.number, r.topic, r.inputs) for r in rows]


def problem(name: str, text: str, topic_field: str | None = None) -> str:
    """The message of the error reading or checking `text` raises."""
    with pytest.raises(BatchInputError) as caught:
        checked(name, text, topic_field)
    return caught.value.message


def test_csv_rows_take_their_inputs_types_and_topic() -> None:
    """A CSV's cells become typed inputs; `topic` is the topic; an empty cell is not given."""
    text = "topic,text,words,language\nA,hello,3,\nB,bye,,French\n"
    assert checked("d.csv", text) == [
        (1, "A", {"text": "hello", "words": 3}),
        (2, "B", {"text": "bye", "language": "French"}),
    ]


def test_jsonl_rows_with_a_topic_field_and_blank_lines() -> None:
    """JSONL rows are numbered without blank lines; --topic-field names the topic's column."""
    text = '{"title": "A", "text": "x"}\n\n{"title": "B", "text": "y", "words": 7}\n'
    assert checked("d.jsonl", text, "title") == [
        (1, "A", {"text": "x"}),
        (2, "B", {"text": "y", "words": 7}),
    ]
    assert checked("d.jsonl", '{"text": "x"}\n') == [(1, "row 1 of d.jsonl", {"text": "x"})]


def test_files_that_are_not_rows_are_refused_with_the_fix() -> None:
    """Another kind of file, bad JSON, ragged CSV rows and an empty file each say what to do."""
    assert "neither JSONL nor CSV" in problem("d.txt", "a\n")
    bad = problem("d.jsonl", '{"text": "x"}\n{"text": \n')
    assert "bad JSON (line 2:" in bad and "one JSON object" in bad
    ragged = problem("d.csv", "text,words\na,1\nb\nc,2,3\n")
    assert "ragged rows" in ragged and "2 (line 3: 1 cells), 3 (line 4: 3 cells)" in ragged
    assert "has no rows" in problem("d.csv", "text,words\n")
    assert "has no rows" in problem("d.jsonl", "\n\n")
    assert "column 'text' twice" in problem("d.csv", "text,text\na,b\n")


def test_rows_that_cannot_run_are_all_named_at_once() -> None:
    """Every problem is listed with its rows (a few, then a count), nothing is recorded."""
    rows = "\n".join(['{"text": "a"}', "[1, 2]", '{"langauge": "fr", "text": "b"}'] + ["{}"] * 7)
    message = problem("d.jsonl", rows)
    assert message.startswith(
        "d.jsonl: 9 of 10 row(s) cannot run pipeline 'p'; nothing was recorded"
    )
    assert "row 2: is a JSON list, not an object" in message
    assert (
        "row 3: column 'langauge' is no input of pipeline 'p' (did you mean 'language'?)" in message
    )
    assert (
        "rows 4, 5, 6, 7, 8 and 2 more: needs input 'text': add a 'text' column to d.jsonl"
        in message
    )


def test_a_value_its_input_refuses_names_the_row() -> None:
    """A value not of its input's type, or a list, refuses its row."""
    message = problem("d.csv", "text,words\na,many\n")
    assert "row 1: input 'words' is a whole number" in message
    assert "is a JSON list" in problem("d.jsonl", '{"text": ["a"]}\n')
    assert "--topic-field 'title' names no column" in problem("d.csv", "text\na\n", "title")


def view(
    number: int, state: RowState = RowState.PENDING, run: str | None = None, cost: float = 0.0
) -> RowView:
    """A row of a batch, started when `run` is its run's status."""
    run_id = None if state is RowState.PENDING else f"b-r{number}"
    return RowView(
        number=number, state=state, tries=1, run_id=run_id, run_status=run, cost_usd=cost
    )


def test_rows_start_in_order_up_to_the_concurrency() -> None:
    """Waiting rows start in row order, as many as leave `concurrency` runs in flight."""
    views = [view(1, RowState.STARTED, "running"), view(2, RowState.STARTED, "delivered")]
    views += [view(n) for n in (5, 3, 4)]
    assert next_starts(views, concurrency=3, max_cost_usd=None, cancelled=False).rows == (3, 4)
    full = next_starts(views, concurrency=1, max_cost_usd=None, cancelled=False)
    assert (full.rows, full.held) == ((), Held.CONCURRENCY)
    # A claimed row whose run is not made yet counts as in flight.
    claimed = [view(1, RowState.STARTED, None), view(2)]
    assert next_starts(claimed, concurrency=1, max_cost_usd=None, cancelled=False).rows == ()


def test_the_budget_holds_unstarted_rows_and_never_fails_finished_ones() -> None:
    """Once the spend reaches the budget no row starts; waiting rows say so, ended ones stay."""
    views = [view(1, RowState.STARTED, "delivered", 0.6), view(2, RowState.STARTED, "running", 0.5)]
    views += [view(3)]
    starts = next_starts(views, concurrency=5, max_cost_usd=1.0, cancelled=False)
    assert (starts.rows, starts.held) == ((), Held.BUDGET)
    progress = fold(views, max_cost_usd=1.0)
    assert progress.counts == {RowStatus.DELIVERED: 1, RowStatus.RUNNING: 1, RowStatus.BUDGET: 1}
    assert not progress.settled  # row 2 still runs
    assert next_starts(views, concurrency=5, max_cost_usd=2.0, cancelled=False).rows == (3,)


def test_a_cancelled_batch_starts_nothing_and_a_settled_one_is_over() -> None:
    """Cancelled: nothing starts; settled: nothing runs and nothing may start."""
    views = [view(1), view(2, RowState.CANCELLED), view(3, RowState.REFUSED)]
    assert (
        next_starts(views, concurrency=5, max_cost_usd=None, cancelled=True).held == Held.CANCELLED
    )
    progress = fold(views, max_cost_usd=None)
    assert not progress.settled and progress.waiting == 1
    ended = fold([*views[1:], view(4, RowState.STARTED, "paused")], max_cost_usd=None)
    assert ended.settled and ended.done == 2
    assert ended.counts[RowStatus.FAILED] == 1 and ended.counts[RowStatus.PAUSED] == 1


def test_eta_and_run_ids() -> None:
    """The ETA follows the rate rows ended at; run ids are the batch, the row and the try."""
    progress = fold([view(1, RowState.STARTED, "delivered"), view(2), view(3)], max_cost_usd=None)
    assert progress.eta(10.0, 1) == 20.0 and progress.eta(10.0, 0) is None
    assert run_id_of("b", 7, 1) == "b-r7" and run_id_of("b", 7, 2) == "b-r7-t2"


def test_a_topic_past_the_size_limit_refuses_its_row() -> None:
    """A topic of more than 100,000 characters is refused with its row, as `--topic` is."""
    message = problem("d.csv", f"topic,text\n{'x' * 100_001},a\nshort,b\n")
    assert message.startswith("d.csv: 1 of 2 row(s) cannot run pipeline 'p'")
    assert "row 1: the topic" in message


def test_an_empty_topic_cell_refuses_its_row() -> None:
    """A row whose topic column is empty (a blank CSV cell, spaces, a JSON null) is refused
    with the fix, not run as "row N of FILE" with that text sent to the model; without a
    topic column, rows are still named "row N of FILE"."""
    message = problem("d.csv", "topic,text\nA,a\n,b\n  ,c\n")
    assert message.startswith("d.csv: 2 of 3 row(s) cannot run pipeline 'p'"), message
    assert "rows 2, 3: its 'topic' cell, the run's topic, is empty: fill it in" in message
    jsonl = problem("d.jsonl", '{"title": null, "text": "x"}\n', topic_field="title")
    assert "row 1: its 'title' cell, the run's topic, is empty" in jsonl
    assert checked("d.csv", "text\na\n") == [(1, "row 1 of d.csv", {"text": "a"})]


def test_ignored_columns_are_left_out_and_the_refusal_says_how() -> None:
    """A column that is no input (an id, notes) is refused with both fixes: rename or drop
    it, or `--ignore-column` it (and, with no topic column, `--topic-field` it); ignored, it
    is left out of every row. An ignored column the file lacks, or one that is also the
    topic field, is refused."""
    text = "id,title,text\n7,A,a\n8,B,b\n"
    said = problem("d.csv", text)
    assert "column 'id' is no input of pipeline 'p'" in said
    assert "rename or drop the column, or pass --ignore-column id to leave it out" in said
    assert "(or --topic-field title to make it the runs' topic)" in said
    rows = check_rows(
        "d.csv", "p", DECLARED, parse_rows("d.csv", text), topic_field="title", ignored=["id"]
    )
    assert [(r.topic, r.inputs) for r in rows] == [("A", {"text": "a"}), ("B", {"text": "b"})]
    with pytest.raises(BatchInputError, match="--ignore-column 'notes' names no column"):
        check_rows("d.csv", "p", DECLARED, parse_rows("d.csv", text), topic_field=None,
                   ignored=["notes"])  # fmt: skip
    with pytest.raises(BatchInputError, match="both --topic-field and --ignore-column"):
        check_rows("d.csv", "p", DECLARED, parse_rows("d.csv", text), topic_field="title",
                   ignored=["title"])  # fmt: skip
    ignored_topic = check_rows(
        "d.csv", "p", DECLARED, parse_rows("d.csv", "topic,text\nA,a\n"), topic_field=None,
        ignored=["topic"],
    )  # fmt: skip
    assert [r.topic for r in ignored_topic] == ["row 1 of d.csv"]


def test_further_checks_refuse_their_rows() -> None:
    """A problem `also` finds in a row's resolved inputs refuses that row, with the others."""

    def late(topic: str, inputs: dict[str, Any]) -> list[str]:
        return ["phase 'go', not_before: past 9999"] if inputs["words"] > 100 else []

    text = "text,words\na,5\nb,500\nc,700\n"
    with pytest.raises(BatchInputError) as caught:
        check_rows("d.csv", "p", DECLARED, parse_rows("d.csv", text), topic_field=None, also=late)
    assert "rows 2, 3: phase 'go', not_before: past 9999" in caught.value.message
    rows = parse_rows("d.csv", "text\na\n")
    assert [
        r.inputs for r in check_rows("d.csv", "p", DECLARED, rows, topic_field=None, also=late)
    ] == [{"text": "a"}]


def test_a_variants_rows_start_only_once_their_base_rows_are_ready() -> None:
    """`ready` holds back the rows whose base row has not ended, saying so (`Held.BASE`);
    the concurrency still bounds those that may start."""
    views = [RowView(number=n, state=RowState.PENDING, tries=1) for n in range(1, 6)]
    held = next_starts(views, concurrency=4, max_cost_usd=None, cancelled=False, ready=set())
    assert (held.rows, held.held) == ((), Held.BASE)
    some = next_starts(views, concurrency=4, max_cost_usd=None, cancelled=False, ready={2, 4})
    assert (some.rows, some.held) == ((2, 4), Held.BASE)
    full = next_starts(views, concurrency=1, max_cost_usd=None, cancelled=False, ready={2, 4})
    assert (full.rows, full.held) == ((2,), Held.CONCURRENCY)
    every = next_starts(views, concurrency=9, max_cost_usd=None, cancelled=False, ready=range(9))
    assert (every.rows, every.held) == ((1, 2, 3, 4, 5), None)


def test_a_row_nested_past_the_limit_is_refused_with_its_line() -> None:
    """A JSONL row nested 100,000 levels (past the parser) or 65 levels (past the limit) is
    bad input naming its line, not a crash; 64 levels are a row."""
    deep = '{"topic": ' + "[" * 100_000 + "]" * 100_000 + "}"
    over = '{"topic": "t", "x": ' + "[" * 64 + "]" * 64 + "}"
    at = '{"topic": "t", "x": ' + "[" * 63 + "]" * 63 + "}"
    for text in (deep, over):
        with pytest.raises(BatchInputError, match="line 2: nested more than 64 levels deep"):
            parse_rows("rows.jsonl", '{"topic": "fine"}\n' + text + "\n")
    assert len(parse_rows("rows.jsonl", at + "\n")) == 1


def failed_rows(numbers: range | list[int], of: int) -> list[RowView]:
    """`of` rows: those of `numbers` failed (one refused, the rest their runs), the others
    waiting."""
    views = []
    for n in range(1, of + 1):
        if n not in numbers:
            views.append(view(n))
        elif n == numbers[0]:
            views.append(view(n, RowState.REFUSED))
        else:
            views.append(view(n, RowState.STARTED, "failed"))
    return views


def test_rows_go_on_within_the_tolerance_and_stop_past_it() -> None:
    """Within `tolerate` waiting rows start; one failed row more and none does, the waiting
    rows say why, and the batch's reason names how many of how many failed, and which."""
    views = failed_rows([2, 4], of=10)
    starts = next_starts(views, concurrency=2, max_cost_usd=None, cancelled=False, tolerate=2)
    assert starts.rows == (1, 3)
    assert fold(views, max_cost_usd=None, tolerate=2).breach is None
    views = failed_rows([2, 4, 5], of=10)
    starts = next_starts(views, concurrency=2, max_cost_usd=None, cancelled=False, tolerate=2)
    assert (starts.rows, starts.held) == ((), Held.FAILED)
    progress = fold(views, max_cost_usd=None, tolerate=2)
    assert progress.breach is not None and progress.settled
    assert progress.breach.reason == "3 of 10 rows failed, past tolerate 2; failed rows: 2, 4, 5"
    assert progress.counts[RowStatus.STOPPED] == 7 and progress.waiting == 7
    assert row_status(views[0], progress) is RowStatus.STOPPED


def test_without_a_tolerance_every_row_starts_however_many_fail() -> None:
    """No `tolerate`: failed rows never hold the others (a batch before tolerances)."""
    views = failed_rows(range(1, 9), of=10)
    starts = next_starts(views, concurrency=5, max_cost_usd=None, cancelled=False)
    assert starts.rows == (9, 10)
    assert fold(views, max_cost_usd=None).breach is None


def test_a_percentage_is_of_the_batchs_rows_rounded_down() -> None:
    """10% of 30 rows lets 3 fail, of 29 rows 2; the reason names the rows past five."""
    assert fold(failed_rows([1, 2, 3], of=30), max_cost_usd=None, tolerate="10%").breach is None
    breach = fold(failed_rows([1, 2, 3], of=29), max_cost_usd=None, tolerate="10%").breach
    assert breach is not None
    assert breach.reason == (
        "3 of 29 rows failed, past tolerate 10% (2 of 29 rows); failed rows: 1, 2, 3"
    )
    many = fold(failed_rows(range(1, 9), of=29), max_cost_usd=None, tolerate="0%").breach
    assert many is not None and many.reason.endswith("failed rows: 1, 2, 3, 4, 5 and 3 more")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("-1", "--tolerate -1 is negative"),
        ("150%", "--tolerate '150%' is more than 100% of the rows"),
        ("abc", "--tolerate 'abc' is neither a count nor a percentage"),
        (True, "--tolerate True is not a number of rows"),
    ],
)
def test_a_bad_tolerance_is_refused_with_the_fix(given: object, says: str) -> None:
    """A negative count, a percentage past 100% or neither is a bad-input error (exit 2)
    that says how to write one where it was given."""
    with pytest.raises(BatchInputError) as caught:
        batch_tolerance(given, "--tolerate")
    assert says in caught.value.message
    assert caught.value.message.startswith(says) and caught.value.exit_code == 2
    assert "nothing was recorded" in caught.value.message
    assert [batch_tolerance(v, "t") for v in ("3", 3, "2.5%", None)] == [3, 3, "2.5%", None]


def test_a_row_starts_only_while_its_worst_case_fits_what_the_budget_leaves() -> None:
    """With each row's worst case known, rows start in order while their worst cases fit in
    the budget less the spend and what the rows in flight may still spend (a row in flight
    holds its worst case less what it spent); the first that does not fit is named, with
    what is left, and holds back the rows after it."""
    worst = {n: 0.3 for n in range(1, 7)}
    fresh = [view(n) for n in range(1, 7)]
    starts = next_starts(fresh, concurrency=10, max_cost_usd=1.0, cancelled=False, worst_usd=worst)
    assert (starts.rows, starts.held) == ((1, 2, 3), Held.BUDGET)
    assert starts.budget is not None and starts.budget.row == 4
    assert starts.budget.reason == (
        "row 4's worst case ($0.3000) would pass what is left of the budget ($0.1000 of $1.0000)"
    )
    # Row 1 ended having spent 0.1; row 2 runs having spent 0.1 (it may spend 0.2 more).
    views = [view(1, RowState.STARTED, "delivered", 0.1), view(2, RowState.STARTED, "running", 0.1)]
    views += [view(n) for n in range(3, 7)]
    starts = next_starts(views, concurrency=10, max_cost_usd=1.0, cancelled=False, worst_usd=worst)
    assert starts.rows == (3, 4)  # 1.0 - 0.2 spent - 0.2 held leaves 0.6: two rows' worst cases
    # Nothing in flight and the next row does not fit: the rows wait on the budget, settled.
    ended = [view(1, RowState.STARTED, "delivered", 0.8), view(2)]
    progress = fold(ended, max_cost_usd=1.0, worst_usd=worst)
    assert progress.over_budget and progress.settled and not progress.overspent
    assert progress.counts == {RowStatus.DELIVERED: 1, RowStatus.BUDGET: 1}
    # A row whose worst case is not known starts while the spend is under the budget and no
    # other such row is in flight (one at a time, in row order); a spend past the budget is
    # flagged.
    unknown = [view(n) for n in range(1, 5)]
    assert next_starts(unknown, concurrency=4, max_cost_usd=1.0, cancelled=False,
                       worst_usd={3: 0.1}).rows == (1,)  # fmt: skip
    unknown[0] = view(1, RowState.STARTED, "running", 0.2)
    assert next_starts(unknown, concurrency=4, max_cost_usd=1.0, cancelled=False,
                       worst_usd={3: 0.1}).rows == ()  # fmt: skip
    unknown[0] = view(1, RowState.STARTED, "delivered", 0.2)
    assert next_starts(unknown, concurrency=4, max_cost_usd=1.0, cancelled=False,
                       worst_usd={2: 0.1}).rows == (2, 3)  # fmt: skip
    assert next_starts(unknown, concurrency=4, max_cost_usd=None, cancelled=False,
                       worst_usd={}).rows == (2, 3, 4)  # fmt: skip
    assert fold([view(1, RowState.STARTED, "delivered", 1.5)], max_cost_usd=1.0).overspent
