"""A task's journals (a tool loop's turns, a `call:` worker's model calls) travel with its
attempts over the fleet: the orchestrator's copy goes out with the next attempt's payload,
and what a worker's attempt added comes back with its result, so an attempt on any worker
goes on from what an earlier one recorded."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from tests.distributed.helpers import Processes, statuses, wait_until
from tests.distributed.test_dispatch_batch import spec
from tests.providers.conftest import API_KEY
from tests.providers.fake_llm_server import FakeServer, FakeState, Fault
from tests.providers.project import CONFIG

from interlock.core.state import fold
from interlock.distributed import submit
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


AGENT = """
def solve(ctx):
    model = ctx.model("claude")
    return " ".join(model.complete(word).text for word in ("one", "two", "three"))
"""


def test_a_worker_killed_mid_attempt_leaves_the_calls_it_was_answered_to_the_next(
    procs: Processes,
) -> None:
    """A `call:` worker's attempt on a fleet worker has two model calls answered and the
    third in flight when the worker is killed (SIGKILL). The worker that takes the hand-out
    over replays the two answered calls from the journal kept in the queue and sends only
    the third: three calls paid, each counted once in the run's cost."""
    state = FakeState(api_key=API_KEY, models={"claude-test"}, reply=["ok"])
    server = FakeServer(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        root = procs.root
        (root / "interlock.toml").write_text(CONFIG.format(url=server.url))
        (root / "journal_agent.py").write_text(AGENT)
        flow = root / "flow.yaml"
        flow.write_text(
            "p:\n  phases:\n  - id: a\n    workers:\n"
            "    - {role: w, call: 'journal_agent:solve', final: true}\n"
        )
        path = os.pathsep.join([str(root), procs.env["PYTHONPATH"]])
        state.faults.extend([Fault(), Fault(), Fault(delay=60)])  # the third is held
        run_id = submit(procs.url, flow, topic="t", home=procs.home / "submitter")
        procs.orchestrator("orchestrator", FAKE_KEY=API_KEY, PYTHONPATH=path)
        first = procs.worker("first", FAKE_KEY=API_KEY, PYTHONPATH=path)
        wait_until(lambda: len(state.requests) >= 3, 60, "the third model call")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        state.faults.clear()
        procs.worker("second", FAKE_KEY=API_KEY, PYTHONPATH=path)
        wait_until(lambda: statuses(procs.url).get("delivered") == 1, 90, "the run delivered")
        prompts = [_prompt(r.body) for r in state.requests]
        assert prompts == ["one", "two", "three", "three"], prompts
        store = PostgresStore(procs.url)
        try:
            run = fold([s.event for s in store.events(run_id)])
        finally:
            store.close()
        assert run.cost_usd == pytest.approx(3 * (1000 * 3.0 + 500 * 15.0) / 1_000_000)
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def _prompt(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    content = messages[-1]["content"]
    return content if isinstance(content, str) else content[0]["text"]
