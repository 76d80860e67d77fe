"""The cache: `cache:` reuses outputs of any earlier run of the store with the same fingerprint."""

from __future__ import annotations

import time
from pathlib import Path

from interlock import Interlock, RunStatus

from .conftest import WriteWorkflow
from .test_rerun import PIPELINE, calls


def cached(text: str, where: str = "pipeline", ttl: str | None = None) -> str:
    """The demo pipeline with `cache:` on the pipeline, or on worker a only."""
    setting = f"{{ttl: {ttl}}}" if ttl else "true"
    if where == "pipeline":
        return text.replace("demo:\n", f"demo:\n  cache: {setting}\n", 1)
    return text.replace(
        "        - role: a\n", f"        - role: a\n          cache: {setting}\n", 1
    )


def test_a_second_run_of_a_cached_pipeline_calls_nothing(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Every task of the second run is reused from the first through the cache."""
    workflow = write_workflow(cached(PIPELINE))
    first = app.run(workflow, "demo", topic="t")
    assert calls(workflow) == ["a", "b", "s"]
    second = app.run(workflow, "demo", topic="t")
    assert second.status is RunStatus.DELIVERED and calls(workflow) == []
    assert {t.reused_from for t in second.tasks.values()} == {
        f"{first.run_id}/a@1",
        f"{first.run_id}/b@1",
        f"{first.run_id}/s@1",
    }
    assert [e.data["via"] for e in app.events(second.run_id) if e.kind == "task_reused"] == [
        "cache"
    ] * 3
    view = app.status(second.run_id)
    assert {w["status"] for p in view["phases"] for w in p["workers"].values()} == {"reused"}
    assert len(app.store.cache_list()) == 3  # reuses add no entries of their own


def test_no_cache_runs_everything_and_other_topics_miss(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """--no-cache ignores the cache; a new topic changes every fingerprint."""
    workflow = write_workflow(cached(PIPELINE))
    app.run(workflow, "demo", topic="t")
    calls(workflow)
    app.drive(app.start(workflow, "demo", topic="t", no_cache=True))
    assert calls(workflow) == ["a", "b", "s"]
    app.run(workflow, "demo", topic="another")
    assert calls(workflow) == ["a", "b", "s"]


def test_cache_on_one_worker_reuses_only_it(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A worker-level `cache:` leaves the pipeline's other workers uncached."""
    workflow = write_workflow(cached(PIPELINE, where="worker"))
    app.run(workflow, "demo", topic="t")
    calls(workflow)
    app.run(workflow, "demo", topic="t")
    assert calls(workflow) == ["b", "s"]


def test_an_entry_older_than_the_ttl_is_not_used(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """With `ttl: 1s`, a run two seconds later runs again."""
    workflow = write_workflow(cached(PIPELINE, ttl="1s"))
    app.run(workflow, "demo", topic="t")
    calls(workflow)
    time.sleep(2.0)
    app.run(workflow, "demo", topic="t")
    assert calls(workflow) == ["a", "b", "s"]


def test_a_cache_entry_whose_output_is_gone_runs_the_task(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """An entry whose output is neither in the ledger nor on disk is skipped: the task runs."""
    workflow = write_workflow(cached(PIPELINE, where="worker"))
    first = app.run(workflow, "demo", topic="t")
    calls(workflow)
    entry = app.store.cache_list()[0]
    (app.run_dir(first.run_id) / entry.artifact).unlink()
    original = app.store.artifact
    app.store.artifact = lambda sha256: None  # type: ignore[method-assign]
    try:
        app.run(workflow, "demo", topic="t")
    finally:
        app.store.artifact = original  # type: ignore[method-assign]
    assert calls(workflow) == ["a", "b", "s"]


def test_a_rerun_prefers_its_source_and_from_forces_past_the_cache(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """`rerun --from synth` of a cached pipeline still runs the synthesis."""
    workflow = write_workflow(cached(PIPELINE))
    first = app.run(workflow, "demo", topic="t")
    calls(workflow)
    state = app.drive(app.rerun(first.run_id, from_phase="synth"))
    assert calls(workflow) == ["s"]
    assert state.tasks["a@1"].reused_from == f"{first.run_id}/a@1"


def test_a_bad_cache_setting_is_one_clear_error(write_workflow: WriteWorkflow) -> None:
    """`cache: maybe` and a ttl that is no duration are refused, each naming its place and
    what is allowed; a worker's `cache: false` under a cached pipeline is fine."""
    import pytest

    from interlock.core.loader import load_workflow
    from interlock.errors import WorkflowError

    bad = cached(PIPELINE, ttl="soon").replace(
        "        - role: a\n", "        - role: a\n          cache: maybe\n", 1
    )
    with pytest.raises(WorkflowError) as caught:
        load_workflow(write_workflow(bad))
    assert (
        caught.value.problems
        == [
            "pipeline 'demo', key 'cache': ttl 'soon' must be seconds or a duration like "
            "30m, 12h, 7d",
            "pipeline 'demo', phase 'collect', worker 'a', key 'cache': cache must be true, false "
            "or a mapping like {ttl: 7d}, not 'maybe'",
        ]
        or len(caught.value.problems) == 2
    )
    good = cached(PIPELINE).replace(
        "        - role: a\n", "        - role: a\n          cache: false\n", 1
    )
    pipeline = load_workflow(write_workflow(good)).get("demo").pipeline
    assert pipeline.cache_for("a") is None and pipeline.cache_for("b") is not None


def _cli(home: Path, *args: str, crash_at: str | None = None) -> int:
    """The real CLI (armed to kill itself at `crash_at`); its exit code."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    command = [sys.executable, "-m", "interlock", "--home", str(home), *args]
    done = subprocess.run(command, env=env, capture_output=True, timeout=120, check=False)
    return done.returncode


def test_a_kill_right_after_a_cached_completion_keeps_its_cache_entry(
    write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Killed (SIGKILL) just after each of its first commits and resumed, a cached run leaves
    every task in the cache: the next run of the same topic calls nothing."""
    import signal

    workflow = write_workflow(cached(PIPELINE))
    killed = 0
    for n in (1, 2, 3, 4):
        home = tmp_path / f"home{n}"
        first = _cli(home, "run", str(workflow), "demo", "-t", "t", "--run-id", "first",
                     crash_at=f"after_append:{n}")  # fmt: skip
        if first == -signal.SIGKILL:
            killed += 1
            assert _cli(home, "resume", "first") == 0
        calls(workflow)
        assert _cli(home, "run", str(workflow), "demo", "-t", "t", "--run-id", "next") == 0
        assert calls(workflow) == [], f"killed after commit {n}: the next run paid again"
    assert killed >= 3
