"""The journal of `ctx.model` calls: answers replayed per request, lines that fail their
hash refused with everything after them, and calls no attempt counted handed on."""

from __future__ import annotations

import json
from pathlib import Path

from interlock.providers.base import ModelRequest, ModelResult, ToolCall
from interlock.runtime.call_journal import CallJournal, request_key


def _request(prompt: str) -> ModelRequest:
    return ModelRequest(
        alias="gpt", model="m", system="", prompt=prompt, timeout=5.0, idempotency_key="k"
    )


def _result(text: str) -> ModelResult:
    return ModelResult(
        text=text,
        provider="p",
        model="m",
        input_tokens=10,
        output_tokens=5,
        latency_s=0.1,
        cost_usd=0.5,
        finish_reason="tool_calls",
        tool_calls=(ToolCall(id="c1", name="lookup", arguments='{"key": "a"}'),),
    )


def test_answers_replay_per_request_in_the_order_recorded(tmp_path: Path) -> None:
    """The k-th call of a request replays its k-th recorded answer, tool calls included;
    another request finds none."""
    path = tmp_path / "journal" / "w@1.calls.jsonl"
    first = CallJournal(path, attempt=1)
    key = request_key(_request("same"))
    first.record(key, _result("one"), {"cost_usd": 0.5})
    first.record(key, _result("two"), {"cost_usd": 0.5})
    again = CallJournal(path, attempt=2)
    replayed = [again.replay(key), again.replay(key), again.replay(key)]
    assert [r.text if r else None for r in replayed] == ["one", "two", None]
    assert replayed[0] is not None and replayed[0].tool_calls == _result("x").tool_calls
    assert again.replay(request_key(_request("other"))) is None


def test_a_line_that_fails_its_hash_is_refused_with_what_follows(tmp_path: Path) -> None:
    """A changed line and the lines after it are not replayed, and the file is cut back to
    the good prefix."""
    path = tmp_path / "w@1.calls.jsonl"
    journal = CallJournal(path, attempt=1)
    keys = [request_key(_request(p)) for p in ("a", "b", "c")]
    for key, text in zip(keys, ("A", "B", "C"), strict=True):
        journal.record(key, _result(text), {"cost_usd": 0.5})
    lines = path.read_text().splitlines()
    changed = json.loads(lines[1])
    changed["body"]["result"]["text"] = "forged"
    path.write_text("\n".join([lines[0], json.dumps(changed), lines[2]]) + "\n")
    again = CallJournal(path, attempt=2)
    assert [again.replay(k) is not None for k in keys] == [True, False, False]
    assert path.read_text().splitlines() == [lines[0]]


def test_calls_no_attempt_counted_are_handed_to_the_next(tmp_path: Path) -> None:
    """Calls recorded after the last settled mark (an attempt killed before it reported)
    are the next attempt's to count; settled ones are not."""
    path = tmp_path / "w@1.calls.jsonl"
    journal = CallJournal(path, attempt=1)
    journal.record(request_key(_request("a")), _result("A"), {"cost_usd": 0.1})
    journal.settle()
    journal.record(request_key(_request("b")), _result("B"), {"cost_usd": 0.2})
    assert CallJournal(path, attempt=2).unreported() == [{"cost_usd": 0.2}]
    killed = CallJournal(path, attempt=2)
    killed.settle()
    assert CallJournal(path, attempt=3).unreported() == []
