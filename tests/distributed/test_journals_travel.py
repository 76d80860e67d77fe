"""A task's journals (a tool loop's turns, a `call:` worker's model calls) travel with its
attempts over the fleet: the orchestrator's copy goes out with the next attempt's payload,
and what a worker's attempt added comes back with its result, so an attempt on any worker
goes on from what an earlier one recorded."""

from __future__ import annotations

from pathlib import Path

from tests.distributed.test_dispatch_batch import spec

from interlock.distributed.artifacts import PostgresArtifacts
from interlock.distributed.payload import (
    JOURNAL_LIMIT,
    keep_journals,
    read_journals,
    to_payload,
    to_spec,
)
from interlock.providers.base import ToolCall, ToolResult, ToolTurn
from interlock.runtime.tool_journal import ToolJournal
from interlock.storage.postgres import PostgresStore


def test_a_tasks_journals_go_out_with_its_attempt_and_load_on_the_worker(
    pg_url: str, tmp_path: Path
) -> None:
    """A tool journal recorded in the run's folder is in the payload of the task's next
    attempt and written into the worker's folder, where the loop loads every turn of it;
    another task's journal stays behind."""
    run_dir, work = tmp_path / "run", tmp_path / "work"
    journal = ToolJournal(run_dir / "journal" / "a.jsonl", "digest")
    call = ToolCall(id="c1", name="add", arguments='{"a": 1}')
    journal.answer(1, ToolTurn(text="", calls=(call,), results=()))
    journal.result(1, 0, ToolResult(call_id="c1", content="2", is_error=False))
    (run_dir / "journal" / "a.calls.jsonl").write_text('{"line": 1}\n')
    (run_dir / "journal" / "b.jsonl").write_text("another task's\n")
    store = PostgresStore(pg_url)
    artifacts = PostgresArtifacts(store)
    try:
        payload = to_payload(spec("a", run_dir), "p", artifacts)
        assert set(payload["journals"]) == {"a.jsonl", "a.calls.jsonl"}
        there = to_spec(payload, work, artifacts)
    finally:
        store.close()
    assert there.run_dir == work
    done, partial, warning = ToolJournal(work / "journal" / "a.jsonl", "digest").load()
    assert warning is None and partial is None
    assert [t.calls[0].name for t in done] == ["add"] and done[0].results[0].content == "2"
    assert (work / "journal" / "a.calls.jsonl").read_text() == '{"line": 1}\n'
    assert not (work / "journal" / "b.jsonl").exists()


def test_only_the_tasks_own_journals_are_kept_and_none_too_big_travels(tmp_path: Path) -> None:
    """Journals are data from another machine: a name that is not the task's own, one that
    climbs out, or a body that is not text is refused and said; a journal past the limit
    does not travel at all."""
    problems = keep_journals(
        tmp_path,
        "a",
        {"a.jsonl": "kept\n", "b.jsonl": "no", "../a.jsonl": "no", "a.calls.jsonl": 42},
    )
    assert (tmp_path / "journal" / "a.jsonl").read_text() == "kept\n"
    assert len(problems) == 3 and all("not a journal of task a" in p for p in problems)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.jsonl"]
    assert keep_journals(tmp_path, "a", ["a.jsonl"]) == ["journals that are not a mapping"]
    (tmp_path / "journal" / "a.calls.jsonl").write_text("x" * (JOURNAL_LIMIT + 1))
    assert read_journals(tmp_path, "a") == {"a.jsonl": "kept\n"}
    assert read_journals(tmp_path / "nowhere", "a") == {}
