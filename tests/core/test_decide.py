"""The decision table, rule by rule: each decision names its rule and says why."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.decide import (
    RuleName,
    backoff_delay,
    decide,
    expression_context,
    next_wake,
    settle,
)
from interlock.core.observe import Command, CommandKind, interpret_command
from interlock.core.state import RunStatus, TaskStatus, artifact_name, fold
from interlock.core.workflow import Backoff

from .runs import Run, fixture, pipeline_of, worker

R = RuleName


def research() -> Run:
    """A started run of the research pipeline from the design article."""
    d = Run(fixture("research.json", "research").pipeline)
    d.start(topic="FSA architecture")
    return d


def one_worker(**extra: Any) -> Run:
    """A started run of a one-phase pipeline whose only worker is `w`."""
    d = Run(pipeline_of({"phases": [{"id": "a", "workers": [worker("w", final=True, **extra)]}]}))
    d.start()
    return d


def test_start_dispatches_the_first_phase_in_parallel() -> None:
    """A new run starts its first phase and dispatches both parallel researchers at once."""
    d = research()
    assert d.rules() == [R.START, R.DISPATCH, R.DISPATCH]
    started = d.events_of(ev.PhaseStarted)
    assert [(e.phase, e.visit, e.items) for e in started] == [("collect", 1, None)]
    assert d.in_flight() == ["researcher-a@1", "researcher-b@1"]
    assert [d.state.tasks[t].model for t in d.in_flight()] == ["sonnet", "sonnet"]


def test_every_decision_has_a_rule_and_a_reason() -> None:
    """Each decision of a whole run carries its rule and a non-empty why."""
    d = research()
    d.complete("researcher-a@1")
    d.complete("researcher-b@1")
    d.complete("synthesizer@1")
    assert all(isinstance(x.rule, RuleName) and (x.why or "").strip() for x in d.decisions)
    assert d.decisions[0].why == "the run was created"
    assert d.decisions[1].why == "phase 'collect' visit 1: researcher-a is ready"


def test_one_researcher_done_means_wait() -> None:
    """With one parallel worker still running within its timeout, the table says wait."""
    d = research()
    assert d.complete("researcher-a@1") == []
    assert decide(d.pipeline, d.state, d.now + 600) == []
    assert d.state.phase_status == {"collect": "running"}


def test_research_walkthrough_delivers_and_archives() -> None:
    """Both researchers done -> synthesis runs -> its output is delivered, then archived."""
    d = research()
    d.complete("researcher-a@1")
    made = d.complete("researcher-b@1")
    assert [x.rule for x in made] == [R.PHASE_DONE, R.BRANCH, R.BRANCH, R.DISPATCH]
    assert made[1].why == "no rule applied: next in order"
    assert d.in_flight() == ["synthesizer@1"]
    made = d.complete("synthesizer@1")
    assert [x.rule for x in made] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]
    assert d.state.status is RunStatus.DELIVERED
    assert d.state.delivered == "synthesizer.md"
    assert d.state.archived
    assert d.state.phase_status == {"collect": "completed", "synthesis": "completed"}
    assert decide(d.pipeline, d.state, d.now) == []


def test_a_delivered_run_is_archived_only_when_the_runtime_allows_it() -> None:
    """With `archive=False` (its folder is not durable yet) a delivered run waits; asked
    again with `archive=True`, the archive is the one decision left."""
    d = research()
    d.complete("researcher-a@1")
    d.complete("researcher-b@1")
    d.record(d.completion("synthesizer@1"))
    made = settle(d.pipeline, d.state, d.now, archive=False)
    assert [x.rule for x in made] == [R.PHASE_DONE, R.DELIVER]
    assert d.state.status is RunStatus.DELIVERED and not d.state.archived
    assert decide(d.pipeline, d.state, d.now, archive=False) == []
    assert [x.rule for x in decide(d.pipeline, d.state, d.now)] == [R.ARCHIVE]


def test_sequential_phase_dispatches_one_worker_at_a_time() -> None:
    """In a sequential phase the next worker is dispatched only when the previous completed."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "s",
                        "mode": "sequential",
                        "workers": [
                            worker("w1"),
                            worker("w2", reads=["w1.md"]),
                            worker("w3", final=True),
                        ],
                    }
                ]
            }
        )
    )
    d.start()
    assert d.in_flight() == ["w1@1"]
    assert [x.rule for x in d.complete("w1@1")] == [R.DISPATCH]
    assert d.in_flight() == ["w2@1"]
    d.complete("w2@1")
    assert d.in_flight() == ["w3@1"]
    assert [x.rule for x in d.complete("w3@1")] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]


def test_pause_after_waits_for_approval() -> None:
    """A phase with pause_after stops the run until a person approves, then it goes on."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {"id": "draft", "pause_after": True, "workers": [worker("writer")]},
                    {"id": "final", "workers": [worker("editor", final=True)]},
                ]
            }
        )
    )
    d.start()
    made = d.complete("writer@1")
    assert [x.rule for x in made] == [R.PHASE_DONE, R.PAUSE]
    assert made[-1].why == "phase 'draft' has pause_after"
    assert d.state.status is RunStatus.PAUSED
    assert decide(d.pipeline, d.state, d.now + 10**6) == []
    event = interpret_command(d.state, Command(kind=CommandKind.APPROVE, by="ann"), d.now)
    assert isinstance(event, ev.Approved)
    d.record(event)
    assert [x.rule for x in d.settle()] == [R.BRANCH, R.BRANCH, R.DISPATCH]
    assert d.in_flight() == ["editor@1"]
    assert d.state.approvals == 1


def test_approval_is_refused_when_not_paused() -> None:
    """Approving a running run is refused with a message, and nothing is recorded."""
    d = research()
    refusal = interpret_command(d.state, Command(kind=CommandKind.APPROVE), d.now)
    assert refusal == "run run-1 is not paused (it is running); nothing to approve"


def test_cancel_abandons_tasks_in_flight() -> None:
    """Cancelling stops the run, abandons its tasks and leaves nothing to decide."""
    d = research()
    event = interpret_command(
        d.state, Command(kind=CommandKind.CANCEL, message="no longer needed"), 1
    )
    assert isinstance(event, ev.RunCancelled)
    d.record(event)
    assert d.state.status is RunStatus.CANCELLED
    assert {t.status for t in d.state.tasks.values()} == {TaskStatus.ABANDONED}
    assert decide(d.pipeline, d.state, d.now) == []
    again = interpret_command(d.state, Command(kind=CommandKind.CANCEL), d.now)
    assert again == "run run-1 already ended (cancelled); nothing to cancel"


def test_timeout_default_grace_is_120_seconds() -> None:
    """A task is timed out only once it runs past its timeout plus the default 120 s grace."""
    d = research()
    d.begin("researcher-a@1", "researcher-b@1")
    assert d.advance(600 + 119.9) == []
    made = d.advance(0.1)
    assert [x.rule for x in made] == [R.TIMEOUT, R.TIMEOUT, R.GIVE_UP]
    assert made[0].why == "task researcher-a@1 attempt 1 passed its deadline"
    assert d.state.status is RunStatus.FAILED
    assert d.state.failure is not None and "researcher-a@1 failed after 1 attempt(s)" in (
        d.state.failure
    )


def test_timeout_counts_from_when_the_worker_started() -> None:
    """A worker that reported starting late gets its full timeout from that moment."""
    d = one_worker(timeout=100, grace=10)
    d.now = 50
    assert d.observe(ev.TaskStarted(at=50, task_id="w@1", attempt=1, worker="pid 7")) == []
    assert next_wake(d.pipeline, d.state) == 160
    assert d.advance(109) == []
    assert [x.rule for x in d.advance(1)] == [R.TIMEOUT, R.GIVE_UP]


def test_timeout_then_retry_with_backoff_then_success() -> None:
    """A timed-out attempt is retried after its backoff, and the retry's success ends the run."""
    d = one_worker(retries=2, timeout=60, backoff={"initial": 10, "jitter": 0})
    d.begin("w@1")
    made = d.advance(180)
    assert [x.rule for x in made] == [R.TIMEOUT, R.RETRY]
    retry = made[1].event
    assert isinstance(retry, ev.RetryScheduled)
    assert (retry.attempt, retry.not_before, retry.model) == (2, 190.0, "m")
    assert (
        made[1].why
        == "attempt 1 timed_out (no result within timeout + grace (180s)); retry in 10.00s"
    )
    assert d.state.tasks["w@1"].status is TaskStatus.RETRY_WAIT
    assert d.advance(9.9) == []
    made = d.advance(0.1)
    assert [x.rule for x in made] == [R.RETRY_DUE]
    assert d.state.tasks["w@1"].attempt == 2
    assert [x.rule for x in d.complete("w@1")] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]


def test_late_result_of_a_timed_out_attempt_is_dropped() -> None:
    """Once attempt 1 timed out and attempt 2 runs, attempt 1's late report is stale."""
    d = one_worker(retries=1, timeout=60, backoff={"jitter": 0})
    d.begin("w@1")
    d.advance(180)
    d.advance_to_wake()
    assert d.attempt("w@1") == 2
    assert d.observe(d.completion("w@1", attempt=1)) is None
    assert d.state.tasks["w@1"].status is TaskStatus.DISPATCHED


def test_backoff_grows_and_is_capped() -> None:
    """Retry n waits initial * multiplier**(n-1), capped at max, the same on every replay."""
    d = one_worker(retries=5)
    task = d.state.tasks["w@1"]
    no_jitter = Backoff(initial=2, max=10, multiplier=3, jitter=0)
    assert [backoff_delay(no_jitter, "r", task, n) for n in range(2, 6)] == [2, 6, 10, 10]
    jittered = Backoff(initial=100, jitter=0.2)
    delay = backoff_delay(jittered, "r", task, 2)
    assert 80 <= delay <= 120
    assert backoff_delay(jittered, "r", task, 2) == delay
    assert backoff_delay(jittered, "other-run", task, 2) != delay


def test_timeout_fails_the_run_after_all_retries() -> None:
    """A task that times out on every attempt fails the run after retries + 1 attempts."""
    d = one_worker(retries=2, timeout=10, grace=0, backoff={"initial": 1, "jitter": 0})
    for _ in range(2):
        d.begin("w@1")
        d.advance(10)
        d.advance_to_wake()
    assert d.attempt("w@1") == 3
    d.begin("w@1")
    made = d.advance(10)
    assert [x.rule for x in made] == [R.TIMEOUT, R.GIVE_UP]
    assert (made[-1].why or "").startswith("task w@1 failed after 3 attempt(s): no result within")
    failed = made[-1].event
    assert isinstance(failed, ev.RunFailed) and failed.task_id == "w@1"
    assert d.state.status is RunStatus.FAILED


def test_give_up_on_a_failure_without_retries() -> None:
    """A worker with no retries fails the run at its first failure, naming the error."""
    d = one_worker()
    made = d.fail("w@1", "exit status 2")
    assert [x.rule for x in made] == [R.GIVE_UP]
    assert made[0].why == "task w@1 failed after 1 attempt(s): exit status 2"


def test_fallback_models_are_tried_in_order_after_own_retries() -> None:
    """Each model gets retries + 1 attempts, then the next fallback model, then the run fails."""
    d = one_worker(retries=1, fallback_models=["b", "c"], backoff={"jitter": 0})
    seen = []
    for _ in range(5):
        seen.append((d.attempt("w@1"), d.state.tasks["w@1"].model))
        made = d.fail("w@1", "overloaded")
        if made[0].rule is R.RETRY:
            assert [x.rule for x in d.advance_to_wake()] == [R.RETRY_DUE]
        else:
            # a fallback starts at once: the new model is not the one that was overloaded
            assert [x.rule for x in made] == [R.FALLBACK, R.RETRY_DUE]
            now_on = d.state.tasks["w@1"].model
            assert made[0].why == (
                f"model {seen[-1][1]!r} failed for good (overloaded); trying {now_on!r}"
            )
    seen.append((d.attempt("w@1"), d.state.tasks["w@1"].model))
    assert seen == [(1, "m"), (2, "m"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]
    assert [x.rule for x in d.fail("w@1", "overloaded")] == [R.GIVE_UP]


def test_non_retryable_failure_skips_to_the_next_fallback() -> None:
    """A non-retryable failure skips the model's remaining retries and moves to the next one."""
    d = one_worker(retries=2, fallback_models=["b"])
    made = d.fail("w@1", "context too long", retryable=False)
    assert [x.rule for x in made] == [R.FALLBACK, R.RETRY_DUE]
    assert (d.attempt("w@1"), d.state.tasks["w@1"].model) == (4, "b")
    assert [x.rule for x in d.fail("w@1", "context too long", retryable=False)] == [R.GIVE_UP]


def test_non_retryable_failure_of_a_command_gives_up() -> None:
    """A command worker has no fallback, so a non-retryable failure ends its retries at once."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "workers": [
                            {
                                "role": "w",
                                "command": ["python", "x.py"],
                                "retries": 3,
                                "final": True,
                            }
                        ],
                    }
                ]
            }
        )
    )
    d.start()
    assert [x.rule for x in d.fail("w@1", "bad arguments", retryable=False)] == [R.GIVE_UP]


def budgeted(on_exceed: str) -> Run:
    """A started two-phase run with a $1 budget."""
    d = Run(
        pipeline_of(
            {
                "budget": {"max_cost_usd": 1.0, "max_tokens": 10_000, "on_exceed": on_exceed},
                "phases": [
                    {"id": "a", "workers": [worker("w1"), worker("w2")]},
                    {"id": "b", "workers": [worker("w3", final=True)]},
                ],
            }
        )
    )
    d.start()
    return d


def test_budget_fail() -> None:
    """Reaching the cost budget fails the run and abandons what is still running."""
    d = budgeted("fail")
    assert d.complete("w1@1", cost_usd=0.4) == []
    made = d.complete("w2@1", cost_usd=0.6, input_tokens=5, output_tokens=5)
    assert [x.rule for x in made] == [R.BUDGET]
    assert made[0].why == "cost $1.0000 reached the budget of $1"
    assert d.state.status is RunStatus.FAILED
    assert d.state.failure == "budget exceeded: cost $1.0000 reached the budget of $1"


def test_budget_on_tokens() -> None:
    """The token budget counts input and output tokens of every attempt."""
    d = budgeted("fail")
    made = d.complete("w1@1", input_tokens=9_000, output_tokens=1_000)
    assert [x.rule for x in made] == [R.BUDGET]
    assert made[0].why == "10000 tokens reached the budget of 10000"
    assert d.state.tasks["w2@1"].status is TaskStatus.ABANDONED


def test_budget_pause_then_approval_lets_the_run_spend_on() -> None:
    """With on_exceed: pause, the run waits for a person; after approval it goes on."""
    d = budgeted("pause")
    made = d.complete("w1@1", cost_usd=2.0)
    assert [x.rule for x in made] == [R.BUDGET]
    assert d.state.status is RunStatus.PAUSED and d.state.pause_reason == "budget"
    # the worker still running may report while the run is paused
    assert d.complete("w2@1") == []
    assert [x.rule for x in d.approve()] == [R.PHASE_DONE, R.BRANCH, R.BRANCH, R.DISPATCH]
    assert d.in_flight() == ["w3@1"]
    assert [x.rule for x in d.complete("w3@1", cost_usd=5.0)] == [
        R.PHASE_DONE,
        R.DELIVER,
        R.ARCHIVE,
    ]


def fan_out(concurrency: int | None = 2, max_items: int = 1000, mode: str = "parallel") -> Run:
    """A started plan -> write (for_each) -> merge run."""
    for_each: dict[str, Any] = {"items": "planner.topics", "max_items": max_items}
    if concurrency is not None:
        for_each["concurrency"] = concurrency
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "plan",
                        "workers": [
                            worker("planner", extract={"topics": {"json": "t", "type": "list"}})
                        ],
                    },
                    {
                        "id": "write",
                        "mode": mode,
                        "for_each": for_each,
                        "workers": [
                            worker("writer", task="Write about {{ item }}"),
                            worker("checker", reads=["writer.md"] if mode == "sequential" else []),
                        ],
                    },
                    {"id": "merge", "workers": [worker("editor", final=True)]},
                ]
            }
        )
    )
    d.start()
    return d


def test_for_each_fans_out_within_the_concurrency_cap_and_fans_in() -> None:
    """Each item gets its own tasks, at most `concurrency` at once; the phase ends when all did."""
    d = fan_out(concurrency=3)
    made = d.complete("planner@1", {"topics": ["x", "y", "z"]})
    assert [x.rule for x in made] == [R.PHASE_DONE, R.BRANCH, R.BRANCH, *[R.DISPATCH] * 3]
    assert made[2].event == ev.PhaseStarted(at=0, phase="write", visit=1, items=["x", "y", "z"])
    assert d.in_flight() == ["writer@1.0", "checker@1.0", "writer@1.1"]
    assert [x.event.task_id for x in d.complete("writer@1.0")] == ["checker@1.1"]  # type: ignore[attr-defined]
    d.complete("checker@1.0")
    d.complete("writer@1.1")
    assert d.in_flight() == ["checker@1.1", "writer@1.2", "checker@1.2"]
    for tid in list(d.in_flight()):
        d.complete(tid)
    assert d.in_flight() == ["editor@1"]
    assert d.state.outputs["writer"] == (1, {0: "writer.0.md", 1: "writer.1.md", 2: "writer.2.md"})
    assert d.state.phase_status["write"] == "completed"


def test_for_each_sequential_lanes() -> None:
    """In a sequential fan-out each item's workers run in order, items side by side."""
    d = fan_out(concurrency=None, mode="sequential")
    d.complete("planner@1", {"topics": ["x", "y"]})
    assert d.in_flight() == ["writer@1.0", "writer@1.1"]
    d.complete("writer@1.1")
    assert d.in_flight() == ["writer@1.0", "checker@1.1"]


def test_empty_fan_out_list_completes_the_phase_at_once() -> None:
    """A for_each over an empty list has nothing to do: the run moves straight on."""
    d = fan_out()
    made = d.complete("planner@1", {"topics": []})
    assert [x.rule for x in made] == [
        R.PHASE_DONE,
        R.BRANCH,
        R.BRANCH,
        R.PHASE_DONE,
        R.BRANCH,
        R.BRANCH,
        R.DISPATCH,
    ]
    assert made[3].why == "all 0 task(s) completed"
    assert d.in_flight() == ["editor@1"]


def test_too_many_items_fails_the_run() -> None:
    """A list longer than max_items is a branch error that fails the run with the counts."""
    d = fan_out(max_items=2)
    made = d.complete("planner@1", {"topics": ["x", "y", "z"]})
    assert [x.rule for x in made] == [R.PHASE_DONE, R.BRANCH, R.BRANCH_ERROR]
    assert made[-1].why == (
        "phase 'write': for_each 'planner.topics' has 3 items, more than max_items 2"
    )
    assert d.state.status is RunStatus.FAILED


def test_fan_out_over_a_missing_list_fails_the_run() -> None:
    """A for_each whose list was not extracted (or is not a list) fails with a clear reason."""
    d = fan_out()
    made = d.complete("planner@1", {"topics": "x, y"})
    assert made[-1].rule is R.BRANCH_ERROR
    assert made[-1].why == "phase 'write': for_each 'planner.topics' is not a list"


def translate() -> Run:
    """A started run of the translate fixture, with fetch and translate already done."""
    d = Run(fixture("translate.yaml", "translate").pipeline)
    d.start(topic="https://example.org/article")
    d.complete("fetcher@1")
    d.complete("translator@1")
    return d


def test_polish_loop_two_rounds_then_publish_with_a_warning() -> None:
    """Scores 6.5, 7.9, 7.9: exactly two polish rounds, then publish with a loop-bound warning."""
    d = translate()
    d.complete("reviewer@1", {"score": 6.5})
    assert d.in_flight() == ["polisher@1"]
    d.complete("polisher@1")
    assert d.in_flight() == ["reviewer@2"]
    d.complete("reviewer@2", {"score": 7.9})
    assert d.in_flight() == ["polisher@2"]
    d.complete("polisher@2")
    made = d.complete("reviewer@3", {"score": 7.9})
    assert [x.rule for x in made] == [R.PHASE_DONE, R.LOOP_BOUND, R.BRANCH, R.BRANCH, R.DISPATCH]
    assert d.in_flight() == ["publisher@1"]
    assert d.state.visits == {"fetch": 1, "translate": 1, "review": 3, "polish": 2, "publish": 1}
    assert d.state.warnings == [
        "phase 'review': rule 1 (reviewer.score < 8.0) would go to 'polish' again, but it already "
        "ran 2 time(s) (max_visits 2); continuing without it"
    ]
    branch = made[2].event
    assert isinstance(branch, ev.BranchTaken)
    assert (branch.goto, branch.rule, branch.condition) == ("publish", 2, None)
    d.complete("publisher@1")
    assert d.state.status is RunStatus.DELIVERED


def test_polish_loop_one_round_when_the_score_recovers() -> None:
    """Scores 6.5 then 8.4: one polish round, publish, and no warning."""
    d = translate()
    made = d.complete("reviewer@1", {"score": 6.5})
    assert made[1].why == "rule 1 (reviewer.score < 8.0)"
    d.complete("polisher@1")
    made = d.complete("reviewer@2", {"score": 8.4})
    assert made[1].why == "rule 2 (always)"
    assert d.in_flight() == ["publisher@1"]
    d.complete("publisher@1")
    assert d.state.visits["polish"] == 1
    assert d.state.warnings == []
    assert R.LOOP_BOUND not in d.rules()
    assert d.state.status is RunStatus.DELIVERED


def test_loop_outputs_keep_each_visit() -> None:
    """Each visit writes its own file, and reads see the latest visit."""
    d = translate()
    d.complete("reviewer@1", {"score": 6.5})
    d.complete("polisher@1")
    d.complete("reviewer@2", {"score": 9})
    assert d.state.outputs["reviewer"] == (2, {None: "reviewer.v2.md"})
    assert d.state.tasks["reviewer@1"].artifact == "reviewer.md"
    assert d.state.values["reviewer"] == {"score": 9}


@pytest.mark.parametrize(
    ("values", "detail"),
    [
        ({}, "reviewer has no 'score' (it has: nothing)"),
        ({"score": "good"}, 'the values do not fit the operation: reviewer.score = "good" (text)'),
        ({"score": None}, "reviewer.score is null: nothing was extracted for it"),
    ],
)
def test_branch_error_on_a_missing_or_mistyped_value(values: dict[str, Any], detail: str) -> None:
    """A condition over a value that is missing or of the wrong type fails the run, saying so."""
    d = translate()
    made = d.complete("reviewer@1", values)
    assert [x.rule for x in made] == [R.PHASE_DONE, R.BRANCH_ERROR]
    assert (made[-1].why or "").startswith(
        "phase 'review', next rule 1: expression 'reviewer.score < 8.0' cannot be evaluated"
    )
    assert detail in (made[-1].why or "")
    assert d.state.status is RunStatus.FAILED


def test_condition_on_visits_of_a_phase_not_yet_run() -> None:
    """`visits.<phase>` is 0 for a phase that has not run yet, so loops can count rounds."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "draft",
                        "workers": [worker("writer")],
                        "next": [{"if": "visits.fix < 1", "goto": "fix", "max_visits": 3}],
                    },
                    {"id": "fix", "workers": [worker("fixer")], "next": [{"goto": "done"}]},
                    {"id": "done", "workers": [worker("editor", final=True)]},
                ]
            }
        )
    )
    d.start()
    made = d.complete("writer@1")
    assert made[-1].rule is R.DISPATCH, [x.why for x in made]
    assert d.in_flight() == ["fixer@1"]


def test_condition_that_is_false_falls_through_to_the_next_phase() -> None:
    """When no rule applies, the run goes on to the next phase in file order."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {
                        "id": "a",
                        "workers": [worker("w", extract={"ok": {"json": "ok", "type": "bool"}})],
                        "next": [{"if": "w.ok", "goto": "c"}],
                    },
                    {"id": "b", "workers": [worker("x")]},
                    {"id": "c", "workers": [worker("y", final=True)]},
                ]
            }
        )
    )
    d.start()
    made = d.complete("w@1", {"ok": False})
    assert made[1].event == ev.BranchTaken(at=0, phase="a", visit=1, goto="b")
    assert made[1].why == "no rule applied: next in order"


def test_decisions_are_the_same_from_the_folded_history() -> None:
    """Folding the recorded history from scratch gives the same state and the same decisions."""
    d = translate()
    d.complete("reviewer@1", {"score": 6.5})
    state = fold(d.history)
    assert state == d.state
    assert decide(d.pipeline, state, d.now + 1000) == decide(d.pipeline, d.state, d.now + 1000)


def test_next_wake_is_the_earliest_deadline_or_retry() -> None:
    """The engine wakes at the earliest task deadline or due retry, and never when idle."""
    d = research()
    assert next_wake(d.pipeline, d.state) == 86400  # not started: the start deadline
    d.begin("researcher-a@1", "researcher-b@1")
    assert next_wake(d.pipeline, d.state) == 720
    d.complete("researcher-a@1")
    d.complete("researcher-b@1")
    assert next_wake(d.pipeline, d.state) == 86400
    d.begin("synthesizer@1")
    assert next_wake(d.pipeline, d.state) == 540
    d.complete("synthesizer@1")
    assert next_wake(d.pipeline, d.state) is None


def test_retry_due_while_paused_does_not_wake_the_engine() -> None:
    """A retry that comes due while the run is paused waits for approval without busy wake-ups."""
    d = Run(
        pipeline_of(
            {
                "budget": {"max_cost_usd": 1.0, "on_exceed": "pause"},
                "phases": [
                    {"id": "a", "workers": [worker("w1"), worker("w2", retries=1)]},
                    {"id": "b", "workers": [worker("w3", final=True)]},
                ],
            }
        )
    )
    d.start()
    d.complete("w1@1", cost_usd=2.0)
    assert [x.rule for x in d.fail("w2@1")] == [R.RETRY]
    assert d.advance(3600) == []
    assert next_wake(d.pipeline, d.state) is None
    assert [x.rule for x in d.approve()] == [R.RETRY_DUE]
    assert d.in_flight() == ["w2@1"] and d.attempt("w2@1") == 2


def budget_and_pause_after() -> Run:
    """A started run: phase `a` (w1, w2) pauses after itself; `b` (w3) is final; 100 tokens."""
    d = Run(
        pipeline_of(
            {
                "budget": {"max_tokens": 100, "on_exceed": "pause"},
                "phases": [
                    {"id": "a", "pause_after": True, "workers": [worker("w1"), worker("w2")]},
                    {"id": "b", "workers": [worker("w3", final=True)]},
                ],
            }
        )
    )
    d.start()
    return d


def test_approving_a_pause_after_does_not_waive_the_budget() -> None:
    """Only approving a budget pause lets the run spend on: after a pause_after approval,
    reaching the budget still pauses the run for it."""
    d = budget_and_pause_after()
    d.complete("w1@1", input_tokens=20, output_tokens=20)
    assert [x.rule for x in d.complete("w2@1", input_tokens=5)] == [R.PHASE_DONE, R.PAUSE]
    assert [x.rule for x in d.approve()] == [R.BRANCH, R.BRANCH, R.DISPATCH]
    assert not d.state.budget_waived
    made = d.complete("w3@1", input_tokens=30, output_tokens=30)
    assert [x.rule for x in made] == [R.BUDGET]
    assert d.state.status is RunStatus.PAUSED and d.state.pause_reason == "budget"
    assert [x.rule for x in d.approve()] == [R.PHASE_DONE, R.DELIVER, R.ARCHIVE]


def test_approving_a_budget_pause_keeps_the_phase_own_pause_after() -> None:
    """A budget pause approved in the middle of a pause_after phase does not count as the
    phase's own approval: the phase still pauses when it completes."""
    d = budget_and_pause_after()
    assert [x.rule for x in d.complete("w1@1", input_tokens=150)] == [R.BUDGET]
    assert d.approve() == []  # w2 still runs
    assert d.state.budget_waived and not d.state.current.approved  # type: ignore[union-attr]
    made = d.complete("w2@1", input_tokens=10)
    assert [x.rule for x in made] == [R.PHASE_DONE, R.PAUSE]
    assert d.state.pause_reason == "pause_after"
    assert [x.rule for x in d.approve()] == [R.BRANCH, R.BRANCH, R.DISPATCH]


def test_phase_status_after_a_failure_and_a_cancel() -> None:
    """The phase a run failed or was cancelled in says so; phases done before stay completed."""
    d = Run(
        pipeline_of(
            {
                "phases": [
                    {"id": "a", "workers": [worker("w1")]},
                    {"id": "b", "workers": [worker("w2", final=True)]},
                ]
            }
        )
    )
    d.start()
    d.complete("w1@1")
    assert [x.rule for x in d.fail("w2@1")] == [R.GIVE_UP]
    assert d.state.phase_status == {"a": "completed", "b": "failed"}
    assert d.state.tasks["w1@1"].status is TaskStatus.COMPLETED  # done work stays done
    cancelled = research()
    cancelled.record(ev.RunCancelled(at=1, reason="no longer needed"))
    assert cancelled.state.phase_status == {"collect": "cancelled"}


def test_the_event_counter_counts_every_event_once() -> None:
    """`events` (what the server's `since=` and status.json rely on) equals the history's
    length at every step, live and folded."""
    d = research()
    counts = [d.state.events]
    for task in ("researcher-a@1", "researcher-b@1", "synthesizer@1"):
        d.complete(task)
        counts.append(d.state.events)
        assert d.state.events == len(d.history) == fold(d.history).events
    assert counts == sorted(set(counts))


def test_conditions_see_zero_visits_of_phases_not_yet_run() -> None:
    """The `visits` conditions read names every phase, 0 for those that have not run yet."""
    d = research()
    context = expression_context(d.state, d.pipeline)
    assert context["visits"] == {"collect": 1, "synthesis": 0}
    assert expression_context(d.state)["visits"] == {"collect": 1}


def test_cancel_abandons_a_task_waiting_for_its_retry() -> None:
    """A task between attempts (waiting out its backoff) is abandoned with the run too."""
    d = one_worker(retries=2, backoff={"initial": 30})
    assert [x.rule for x in d.fail("w@1")] == [R.RETRY]
    assert d.state.tasks["w@1"].status is TaskStatus.RETRY_WAIT
    d.record(ev.RunCancelled(at=d.now, reason="stop"))
    assert d.state.tasks["w@1"].status is TaskStatus.ABANDONED
    assert d.state.phase_status == {"a": "cancelled"}


def test_output_names_without_an_extension_keep_their_name() -> None:
    """An output named without an extension gets its visit and item suffixes after it."""
    assert artifact_name("notes", 1, None) == "notes"
    assert artifact_name("notes", 2, None) == "notes.v2"
    assert artifact_name("notes", 1, 0) == "notes.0"
    assert artifact_name("a.md", 2, 1) == "a.1.v2.md"


def test_nothing_is_dispatched_while_a_budget_pause_waits() -> None:
    """A budget pause in the middle of a sequential phase holds its next worker until the
    pause is approved."""
    d = Run(
        pipeline_of(
            {
                "budget": {"max_tokens": 10, "on_exceed": "pause"},
                "phases": [
                    {
                        "id": "a",
                        "mode": "sequential",
                        "workers": [worker("w1"), worker("w2", final=True)],
                    }
                ],
            }
        )
    )
    d.start()
    assert [x.rule for x in d.complete("w1@1", input_tokens=20)] == [R.BUDGET]
    assert d.in_flight() == [] and "w2@1" not in d.state.tasks
    assert [x.rule for x in d.approve()] == [R.DISPATCH]
    assert d.in_flight() == ["w2@1"]
