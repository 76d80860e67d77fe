"""The simulator's oracle is independent of the engine, and catches the engine's bugs that the
engine's own rules cannot: each deliberate bug below is applied to the real engine or runtime,
and the oracle must fail on it within a few seeds while the unpatched engine passes them."""

from __future__ import annotations

import ast
import importlib.util
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import interlock.core.decide as decide
import interlock.core.review as review
import interlock.engine.machine as machine
import interlock.runtime.apply as apply
import interlock.runtime.attempts as attempts
import interlock.runtime.projection as projection
from interlock.core import events as ev
from interlock.core.state import RunState
from interlock.core.workflow import Pipeline
from interlock.sim import SimResult, simulate
from interlock.sim.oracle import Oracle
from interlock.sim.outcomes import end_problems

# The modules that judge a run. They may import the event types, the parsed workflow model,
# the standard library and each other; nothing of the engine's fold, decisions, reviews or
# expressions (a rule shared with the engine is wrong in both at once, and never noticed).
ORACLE = (
    "interlock.sim.invariants",
    "interlock.sim.oracle",
    "interlock.sim.outcomes",
    "interlock.sim.policy",
    "interlock.sim.waits_check",
)
ALLOWED = {"interlock.core.events", "interlock.core.workflow", *ORACLE}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False  # a name inside a module, not a module


def _imports(module: str) -> set[str]:
    """Every interlock module `module` imports, anywhere in its text (TYPE_CHECKING too)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if _is_module(name) else node.module)
    return {name for name in found if name.split(".")[0] == "interlock"}


def test_the_oracle_imports_nothing_of_the_engine_but_events_and_the_workflow_model() -> None:
    """Each judging module imports only `core.events`, `core.workflow` and the other judging
    modules (so neither `core.state`, `core.decide`, `core.review` nor `core.expressions`)."""
    for module in ORACLE:
        outside = sorted(_imports(module) - ALLOWED)
        assert outside == [], f"{module} imports {outside}"


def _first_failing(seeds: range, pipeline: str | None = None) -> SimResult | None:
    for seed in seeds:
        result = simulate(seed, pipeline=pipeline)
        if result.violations:
            return result
    return None


def _passes_unpatched(result: SimResult, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    pipeline = result.pipeline if result.pipeline in ("revise", "mixed") else None
    again = simulate(result.seed, pipeline=pipeline)
    assert again.violations == [], again.summary()


def test_an_ignored_edit_of_a_later_fan_out_item_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the edit of any fan-out item but the first ignored when the engine looks for what
    read an edited output, a delivered run holds a task that read the old version: the oracle
    says so within 150 seeds of the `revise` pipeline (reviews after the task that reads every
    item); the same seed passes on the real engine."""
    real: Callable[..., list[Any]] = review._inputs

    def first_item_only(pipeline: Any, state: Any, task: Any) -> list[Any]:
        seen: set[str] = set()
        kept = []
        for source in real(pipeline, state, task):
            if source.role not in seen:
                seen.add(source.role)
                kept.append(source)
        return kept

    monkeypatch.setattr(review, "_inputs", first_item_only)
    result = _first_failing(range(150), "revise")
    assert result is not None, "an edit of a later fan-out item was ignored, unseen"
    assert any("read an old version of writer." in v for v in result.violations), result.violations
    _passes_unpatched(result, monkeypatch)


def test_a_reused_task_that_also_runs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every reused task started as well, the simulated workers count an execution the
    history calls a reuse: the oracle says so within 200 seeds; that seed passes unpatched."""
    real = apply._claim

    def claim_and_run(
        state: RunState, workers: apply.Workers, ports: apply.RunPorts, task_id: str
    ) -> bool:
        claimed = real(state, workers, ports, task_id)
        if claimed:
            ports.start(state.tasks[task_id])
        return claimed

    monkeypatch.setattr(apply, "_claim", claim_and_run)
    result = _first_failing(range(200))
    assert result is not None, "reused tasks ran, unseen"
    assert any("recorded as reused" in v for v in result.violations), result.violations
    _passes_unpatched(result, monkeypatch)


def test_a_retry_past_max_attempts_after_an_edit_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the engine never giving a task up once an output was edited, a task is retried
    past its max_attempts: the oracle says so within 200 seeds; that seed passes unpatched."""
    real = decide.given_up

    def never_after_an_edit(pipeline: Any, state: Any) -> Any:
        return None if state.edits else real(pipeline, state)

    for module in (decide, machine, attempts, projection):  # everywhere the engine uses it
        monkeypatch.setattr(module, "given_up", never_after_an_edit)
    result = _first_failing(range(200))
    assert result is not None, "a retry past max_attempts after an edit went unseen"
    assert any("max_attempts" in v or "failed for good" in v for v in result.violations), (
        result.violations
    )
    _passes_unpatched(result, monkeypatch)


def test_the_oracle_counts_attempts_after_an_edit() -> None:
    """A retry scheduled past max_attempts is refused even after an edit; a dispatch past it
    is allowed only as the re-run of a completed task."""
    pipeline = Pipeline.model_validate(
        {"phases": [{"id": "p", "workers": [{"role": "a", "model": "m", "final": True}]}]}
    )
    oracle = Oracle(pipeline)

    def dispatch(at: float, attempt: int) -> ev.TaskDispatched:
        return ev.TaskDispatched(
            at=at, task_id="a@1", phase="p", role="a", visit=1, item=None, attempt=attempt
        )

    history: list[ev.Event] = [
        ev.PhaseStarted(at=0, phase="p", visit=1),
        dispatch(0, 1),
        ev.TaskCompleted(at=1, task_id="a@1", attempt=1, artifact="a.md", sha256="x", size=1),
        ev.Paused(at=1, phase="p", visit=1),
        ev.OutputEdited(at=2, task_id="a@1", artifact="a.md", old_sha256="x", sha256="y", size=1),
        ev.Approved(at=2),
        dispatch(3, 2),  # the edit's re-run: allowed
        ev.TaskFailed(at=4, task_id="a@1", attempt=2, error="boom"),
        ev.RetryScheduled(at=4, task_id="a@1", attempt=3, not_before=4),
    ]
    problems = [oracle.feed(seq, event) for seq, event in enumerate(history, 1)]
    assert problems[:-1] == [None] * (len(history) - 1), problems
    assert problems[-1] is not None and "failed for good" in problems[-1]


def _delivered_oracle() -> Oracle:
    """An oracle fed one task completed at a.md (sha of b"v1"), reused in the same run as a
    second task, and delivered."""
    import hashlib

    pipeline = Pipeline.model_validate(
        {
            "phases": [
                {"id": "p", "workers": [{"role": "a", "model": "m"}]},
                {"id": "q", "workers": [{"role": "b", "model": "m", "final": True}]},
            ]
        }
    )
    sha = hashlib.sha256(b"v1").hexdigest()
    oracle = Oracle(pipeline)
    history: list[ev.Event] = [
        ev.PhaseStarted(at=0, phase="p", visit=1),
        ev.TaskDispatched(at=0, task_id="a@1", phase="p", role="a", visit=1, item=None, attempt=1),
        ev.TaskCompleted(at=1, task_id="a@1", attempt=1, artifact="a.md", sha256=sha, size=2),
        ev.PhaseStarted(at=1, phase="q", visit=1),
        ev.TaskDispatched(at=1, task_id="b@1", phase="q", role="b", visit=1, item=None, attempt=1),
        ev.TaskReused(
            at=1,
            task_id="b@1",
            attempt=1,
            source_run="old",
            source_task="b@1",
            artifact="b.md",
            sha256=sha,
            size=2,
        ),
        ev.Delivered(at=2, task_id="b@1", artifact="b.md"),
        ev.Archived(at=2),
    ]
    for seq, event in enumerate(history, 1):
        assert oracle.feed(seq, event) is None
    return oracle


def test_what_workers_ran_is_judged_against_the_history(tmp_path: Path) -> None:
    """A reused task whose worker ran, an attempt started twice by one process, and one
    started but never recorded as dispatched are each a violation; none is without them."""
    oracle = _delivered_oracle()
    for name in ("a.md", "b.md", "final.md"):
        (tmp_path / name).write_bytes(b"v1")
    ran = Counter({("r", "a@1", 1): 1})
    once = Counter({("r", "a@1", 1, "p1"): 1})
    assert end_problems(oracle, "r", tmp_path, ran, once) == []
    problems = end_problems(
        oracle,
        "r",
        tmp_path,
        Counter({("r", "a@1", 1): 2, ("r", "b@1", 1): 1, ("r", "c@1", 1): 1}),
        Counter({("r", "a@1", 1, "p1"): 2}),
    )
    assert any("b@1 attempt 1 is recorded as reused" in p for p in problems), problems
    assert any("a@1 attempt 1 was started 2 times by p1" in p for p in problems), problems
    assert any("c@1 attempt 1 ran but was never recorded" in p for p in problems), problems


def test_delivered_files_must_be_the_revision_the_history_delivered(tmp_path: Path) -> None:
    """final.md or an output whose bytes are not the revision the history last recorded is a
    violation."""
    oracle = _delivered_oracle()
    (tmp_path / "a.md").write_bytes(b"v1")
    (tmp_path / "b.md").write_bytes(b"v1")
    (tmp_path / "final.md").write_bytes(b"old")
    problems = end_problems(oracle, "r", tmp_path, Counter(), Counter())
    assert any("final.md is not the delivered revision" in p for p in problems), problems
    (tmp_path / "final.md").write_bytes(b"v1")
    (tmp_path / "a.md").write_bytes(b"v0")
    problems = end_problems(oracle, "r", tmp_path, Counter(), Counter())
    assert problems == ["a.md is not the revision the history last recorded"], problems
