"""The tool loop's journal: a retried attempt continues after the turns an earlier attempt
completed, against the fake model server and the real MCP test server."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from tests.reliability.crash_points import cli

from interlock import RunStatus
from interlock.providers.mcp_tools import KEY_META
from interlock.runtime.tool_journal import ToolJournal

from .fake_llm_server import FakeServer, Fault
from .project import app_for, attempt_usage, make_project
from .test_tools import MCP, tool_flow

TOOLS = f"[{{mcp: {MCP}, env: [MCP_CALL_LOG]}}]"
RETRY = "      retries: 1\n      backoff: {initial: 0}\n"


def note(word: str) -> Fault:
    """A model answer that asks for the `note` tool."""
    return Fault(tool_calls=[("note", {"word": word})])


def logged(path: Path) -> list[dict[str, Any]]:
    """The calls of `note` the MCP server wrote down, in order."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def call_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty call log, named to the MCP server by MCP_CALL_LOG."""
    path = tmp_path / "calls.jsonl"
    path.write_text("")
    monkeypatch.setenv("MCP_CALL_LOG", str(path))
    return path


def test_a_retry_after_a_tool_server_crash_continues_from_the_recorded_turns(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """The server dies during turn 3's call: the retry makes no model call of turns 1-3 and
    no tool call of turns 1-2 again, only the call in flight, with the same idempotency
    key; its usage is that of its own model call alone."""
    server.fail_next(note("one"), note("two"), note("die"))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(tool_flow(project, "gpt", RETRY, tools=TOOLS), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    assert len(server.requests) == 4  # 3 in the first attempt, 1 in the retry
    last = server.requests[3].body["messages"]
    assert [m["content"] for m in last if m["role"] == "tool"] == [
        "noted one",
        "noted two",
        "noted die",
    ]
    calls = logged(call_log)
    assert [c["word"] for c in calls] == ["one", "two", "die", "die"]
    run = state.run_id
    keys = [c["meta"][KEY_META] for c in calls]
    assert keys == [f"{run}/w@1/1/1", f"{run}/w@1/2/1", f"{run}/w@1/3/1", f"{run}/w@1/3/1"]
    failed, done = attempt_usage(app, run)
    assert (failed["turns"], done["turns"], done["input_tokens"]) == (3, 1, 1000)
    shown = (app.run_dir(run) / "prompts" / "w@1.2.tools.md").read_text()
    assert "# Turns 1-2: recorded by an earlier attempt, not repeated" in shown


def test_a_resume_after_sigkill_mid_loop_repeats_only_the_call_in_flight(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """The real CLI is killed (SIGKILL) while turn 3's tool call runs; `interlock resume`
    makes one model call, and the tool server sees turn 3's call again under its key and
    no call of turns 1-2."""
    server.fail_next(note("one"), note("two"), note("kill"))
    project = make_project(tmp_path, server, monkeypatch)
    flow = tool_flow(project, "gpt", tools=TOOLS)
    home, run = project / "home", "journal-kill"
    first = cli(home, "run", str(flow), "--topic", "t", "--run-id", run)
    assert first.returncode == -signal.SIGKILL, first.stderr[-500:]
    assert len(server.requests) == 3
    resumed = cli(home, "resume", run)
    assert resumed.returncode == 0, resumed.stderr[-500:]
    assert len(server.requests) == 4
    calls = logged(call_log)
    assert [c["word"] for c in calls] == ["one", "two", "kill", "kill"]
    assert {c["meta"][KEY_META] for c in calls[2:]} == {f"{run}/w@1/3/1"}
    assert (app_for(project).run_dir(run) / "w.md").read_text() == "Hello, world."


def test_a_journal_line_that_fails_its_hash_is_refused_and_the_loop_restarts_before_it(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, call_log: Path
) -> None:
    """A changed line (turn 2's answer) ends what the journal is trusted for: the retry
    keeps turn 1, asks the model for turn 2 again, says so in a warning, and leaves a
    journal whose chain holds."""
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    run = app.start(tool_flow(project, "gpt", RETRY, tools=TOOLS), topic="t")
    journal = app.run_dir(run) / "journal" / "w@1.jsonl"
    spoil = Fault(tool_calls=[("spoil", {"path": str(journal), "line": 3})])
    server.fail_next(note("one"), note("two"), spoil, note("two"))
    state = app.drive(run)
    assert state.status is RunStatus.DELIVERED, state.failure
    assert len(server.requests) == 5  # 3, then turns 2 and 3 again
    retried = server.requests[3].body["messages"]
    assert [m["content"] for m in retried if m["role"] == "tool"] == ["noted one"]
    assert [c["word"] for c in logged(call_log)] == ["one", "two", "two"]
    warnings = attempt_usage(app, run)[-1]["warnings"]
    assert any("line 3 of the tool journal does not match its hash chain" in w for w in warnings)
    journal = app.run_dir(run) / "journal" / "w@1.jsonl"  # archived now
    digest = json.loads(journal.read_text().splitlines()[0])["body"]["request"]
    done, partial, warning = ToolJournal(journal, digest).load()
    # The refused tail was dropped and the new turns chained after turn 1.
    assert (warning, partial, len(done)) == (None, None, 2)


def test_a_half_written_last_line_is_dropped_without_a_warning(tmp_path: Path) -> None:
    """A line cut short by a crash (no newline after it) is no refusal: the entries before
    it are kept and the file is rewritten without it."""
    from interlock.providers.base import ToolCall, ToolResult, ToolTurn

    path = tmp_path / "journal" / "t.jsonl"
    journal = ToolJournal(path, "d")
    call = ToolCall(id="c1", name="note", arguments='{"word": "one"}')
    journal.answer(1, ToolTurn(text="", calls=(call,), results=()))
    journal.result(1, 0, ToolResult(call_id="c1", content="noted one"))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"body": {"turn": 2')
    done, partial, warning = ToolJournal(path, "d").load()
    assert warning is None and partial is None
    assert [t.results[0].content for t in done] == ["noted one"]
    assert path.read_bytes() == whole
    assert ToolJournal(path, "another prompt").load() == ([], None, None)


def test_a_key_a_tool_hands_back_is_masked_in_the_journal(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool that echoes the provider's key: the journal (kept in the run directory and
    archived with it) holds the mask, never the key, as the transcript does."""
    from .conftest import API_KEY

    server.fail_next(Fault(tool_calls=[("getenv", {"name": "FAKE_KEY"})]))
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    tools = f"[{{mcp: {MCP}, env: [FAKE_KEY]}}]"
    state = app.run(tool_flow(project, "gpt", tools=tools), topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    kept = (app.run_dir(state.run_id) / "journal" / "w@1.jsonl").read_text()
    assert API_KEY not in kept
    assert "getenv" in kept and "[redacted]" in kept
