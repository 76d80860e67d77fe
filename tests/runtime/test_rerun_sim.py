"""Reruns in the deterministic simulator: under crashes and faults, every reuse invariant holds,
and the checkers catch the histories they must refuse."""

from __future__ import annotations

import contextlib

from interlock.core import events as ev
from interlock.core.state import fold
from interlock.core.workflow import Pipeline
from interlock.sim.invariants import HistoryChecker
from interlock.sim.rerun import reuse_problems
from interlock.sim.world import simulate

SEEDS = 300


def test_reruns_under_faults_keep_every_invariant() -> None:
    """Hundreds of seeds, a third of them rerun after their run ended: no violation, and
    reuse really happens (crashes at the reuse points included)."""
    reruns = reused = 0
    for seed in range(SEEDS):
        result = simulate(seed)
        assert result.ok, (seed, result.pipeline, result.violations[:3])
        reruns += result.reruns
        reused += result.reused
    assert reruns > SEEDS // 5 and reused > SEEDS // 5


def test_without_faults_a_rerun_delivers_and_reuses() -> None:
    """Fault-free seeds deliver their reruns too, carrying tasks over."""
    reused = 0
    for seed in range(60):
        result = simulate(seed, faults=False)
        assert result.ok and result.status == "delivered", (seed, result.violations[:3])
        reused += result.reused
    assert reused > 0


def dispatched(task_id: str = "a@1") -> ev.TaskDispatched:
    """The first attempt of a task of the `collect` phase."""
    return ev.TaskDispatched(
        at=1, task_id=task_id, phase="p", role="a", visit=1, item=None, attempt=1
    )


def reuse(task_id: str = "a@1", sha: str = "1" * 64) -> ev.TaskReused:
    """A reuse of the source's task with the same id."""
    return ev.TaskReused(
        at=2, task_id=task_id, attempt=1, source_run="src", source_task=task_id,
        artifact="a.md", sha256=sha, size=1,
    )  # fmt: skip


def test_the_history_checker_refuses_a_reuse_after_a_start_or_twice() -> None:
    """A reuse must replace the first attempt before it started, and happen once."""
    pipeline = Pipeline.model_validate(
        {"phases": [{"id": "p", "workers": [{"role": "a", "command": ["true"], "final": True}]}]}
    )
    created = ev.RunCreated(at=0, run_id="r", pipeline="p", definition_hash="h", topic="t")
    for history, expected in (
        ([dispatched(), ev.TaskStarted(at=1, task_id="a@1", attempt=1), reuse()], "while started"),
        ([dispatched(), reuse(), reuse()], "while completed"),
        ([reuse()], "never dispatched"),
    ):
        checker = HistoryChecker(pipeline)
        checker.feed(1, created)
        for seq, event in enumerate(history, start=2):
            with contextlib.suppress(KeyError):  # the fold refuses a task it never saw
                checker.feed(seq, event)
        assert any(expected in p for p in checker.problems), (expected, checker.problems)


def test_reuse_problems_names_what_a_rerun_must_never_do() -> None:
    """Reused twice, reused and run, reused past --from, or a hash the source never had."""
    source = fold(
        [
            ev.RunCreated(at=0, run_id="src", pipeline="p", definition_hash="h", topic="t"),
            ev.PhaseStarted(at=0, phase="p", visit=1),
            dispatched(),
            ev.TaskCompleted(at=1, task_id="a@1", attempt=1, artifact="a.md", sha256="1" * 64,
                             size=1),
        ]
    )  # fmt: skip
    history = [
        reuse(),
        reuse(),
        ev.TaskStarted(at=3, task_id="a@1", attempt=1),
        ev.PhaseStarted(at=4, phase="later", visit=1),
        reuse(sha="2" * 64),
    ]
    problems = reuse_problems(history, source, "later")
    assert "a@1 reused twice" in problems
    assert "a@1 was both reused and run" in problems
    assert "a@1 reused at or after --from 'later'" in problems
    assert "a@1 reused an output the source never completed as recorded" in problems
