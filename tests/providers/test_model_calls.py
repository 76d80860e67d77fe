"""`ctx.model` in `call:` workers: calls through interlock's providers, priced, journaled
and counted in the attempt's usage, against the local fake model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interlock import BudgetExceeded, RunStatus
from interlock.runtime.executors import TaskContext, register

from .fake_llm_server import FakeServer
from .project import app_for, attempt_usage, make_project, one_worker

# A call of the fake server: 1000 input tokens at $2/M and 500 output tokens at $8/M.
GPT_CALL = (1000 * 2.0 + 500 * 8.0) / 1_000_000


def _both_shapes(ctx: TaskContext) -> str:
    client = ctx.model("gpt")
    first = client.complete("Say hello.", system="Be brief.", temperature=0.2)
    chat = client.chat.completions.create(
        model="gpt", messages=[{"role": "user", "content": f"Again: {first.text}"}]
    )
    return f"{first.text}|{chat.choices[0].message.content}|{chat.usage.total_tokens}"


async def _async_worker(ctx: TaskContext) -> str:
    client = ctx.async_model("claude")
    answer = await client.complete([{"role": "user", "content": "Hi"}])
    return answer.text


register("mc.both", _both_shapes)
register("mc.async", _async_worker)


def test_a_call_worker_calls_a_model_in_both_shapes_and_its_cost_counts(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`complete` and `chat.completions.create` reach the server with the alias's model,
    and both calls' tokens and cost are the attempt's usage, in the run's totals."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      call: mc.both\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "Hello, world.|Hello, world.|1500"
    bodies = [r.body for r in server.state.requests]
    assert [b["model"] for b in bodies] == ["gpt-test", "gpt-test"]
    assert bodies[0]["temperature"] == 0.2
    assert bodies[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert bodies[1]["messages"][-1]["content"] == "Again: Hello, world."
    (usage,) = attempt_usage(app, state.run_id)
    assert usage["calls"] == 2 and usage["input_tokens"] == 2000
    assert usage["cost_usd"] == pytest.approx(2 * GPT_CALL)
    assert usage["by_alias"]["gpt"]["calls"] == 2
    assert state.cost_usd == pytest.approx(2 * GPT_CALL) and state.tokens == 3000
    status = app.status(state.run_id)
    assert json.dumps(status)  # the status view holds the spend
    assert status["cost_usd"] == pytest.approx(2 * GPT_CALL)


def test_an_async_worker_calls_the_anthropic_wire_format(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctx.async_model` in a coroutine calls an Anthropic alias, priced at its rates."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      call: mc.async\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert server.state.requests[0].path == "/v1/messages"
    assert state.cost_usd == pytest.approx((1000 * 3.0 + 500 * 15.0) / 1_000_000)


calls_made: list[int] = []


def _fails_after_two(ctx: TaskContext) -> str:
    client = ctx.model("gpt")
    texts = [client.complete(f"step {n}").text for n in (1, 2)]
    calls_made.append(ctx.spec.attempt)
    if ctx.spec.attempt == 1:
        raise RuntimeError("flaky after two calls")
    texts.append(client.complete("step 3").text)
    return " / ".join(texts)


register("mc.flaky", _fails_after_two)


def test_a_retry_replays_the_calls_its_failed_attempt_paid_for(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second attempt gets the first two answers from the journal: the server sees
    three calls in all, and the run's cost counts each once."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      call: mc.flaky\n      retries: 1\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert calls_made[-2:] == [1, 2]
    prompts = [r.body["messages"][-1]["content"] for r in server.state.requests]
    assert prompts == ["step 1", "step 2", "step 3"]
    first, second = attempt_usage(app, state.run_id)
    assert first["calls"] == 2 and first["cost_usd"] == pytest.approx(2 * GPT_CALL)
    assert second["calls"] == 1 and second["replayed"] == 2
    assert state.cost_usd == pytest.approx(3 * GPT_CALL)
    journal = app.run_dir(state.run_id) / "journal" / "w@1.calls.jsonl"
    assert len(journal.read_text().splitlines()) == 5  # three calls, two settled marks


def _changed_prompt(ctx: TaskContext) -> str:
    return ctx.model("gpt").complete(f"attempt {ctx.spec.attempt}").text + (
        "" if ctx.spec.attempt > 1 else str(1 / 0)
    )


register("mc.changed", _changed_prompt)


def test_a_request_that_differs_is_sent_not_replayed(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal line whose request hash does not match is not used: the call is made."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      call: mc.changed\n      retries: 1\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert len(server.state.requests) == 2
    assert state.cost_usd == pytest.approx(2 * GPT_CALL)


def _spends(ctx: TaskContext) -> str:
    client = ctx.model("gpt")
    for n in range(10):
        client.complete(f"call {n}", max_tokens=500)
    return "never"


register("mc.spender", _spends)


def test_the_run_budget_stops_a_call(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a budget of $0.02 a call that could pass what is left is refused, not sent:
    the attempt fails saying so, and what was spent is recorded."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "flow.yaml"
    flow.write_text(
        "p:\n  budget: {max_cost_usd: 0.02}\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: mc.spender, final: true}\n"
    )
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.FAILED
    # Each call costs $0.006 and may cost up to 1000/4... tokens of prompt + 500 output.
    sent = len(server.state.requests)
    assert 1 <= sent < 10
    assert state.cost_usd == pytest.approx(sent * GPT_CALL)
    assert state.cost_usd <= 0.02
    failed = [e for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert "budget has no room for this call" in failed[-1].data["error"]
    assert BudgetExceeded.__name__ in failed[-1].data["error"]


def _records(ctx: TaskContext) -> str:
    ctx.record_usage(model="gpt", input_tokens=1000, output_tokens=500)
    ctx.record_usage(model="elsewhere", input_tokens=10, output_tokens=10, cost_usd=0.25)
    return "done"


register("mc.records", _records)


def test_recorded_usage_counts_in_status_and_budget(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctx.record_usage` adds calls made another way: priced from the alias when no cost
    is given, and counted against the budget, which the run then exceeds."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "flow.yaml"
    flow.write_text(
        "p:\n  budget: {max_cost_usd: 0.1}\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: mc.records}\n"
        "  - id: b\n    workers:\n    - {role: v, call: mc.records, final: true}\n"
    )
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert not server.state.requests
    assert state.cost_usd == pytest.approx(GPT_CALL + 0.25)
    assert state.tasks["w@1"].tokens == 1520
    assert state.status is RunStatus.FAILED  # over the budget: phase b never runs
    assert "v@1" not in state.tasks or state.tasks["v@1"].attempt == 0
    usage: dict[str, Any] = attempt_usage(app, state.run_id)[0]
    assert set(usage["by_alias"]) == {"gpt", "elsewhere"}


def _falls_back(ctx: TaskContext) -> str:
    return ctx.model("nosuch", fallbacks=("gpt",)).complete("hi").alias


async def _sync_in_coroutine(ctx: TaskContext) -> str:
    return ctx.model("gpt").complete("hi").text


register("mc.fallback", _falls_back)
register("mc.sync_in_async", _sync_in_coroutine)


def test_a_failed_alias_falls_back_to_the_next(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An alias that cannot be called gives way to the fallback, which answers."""
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(one_worker(project, "      call: mc.fallback\n"), "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "gpt"
    assert len(server.state.requests) == 1


def test_the_blocking_client_in_a_coroutine_says_to_use_the_async_one(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctx.model` called from an `async def` worker fails the attempt for good, naming
    `ctx.async_model`, instead of blocking the event loop."""
    project = make_project(tmp_path, server, monkeypatch)
    app = app_for(project)
    state = app.run(one_worker(project, "      call: mc.sync_in_async\n"), "p", topic="t")
    assert state.status is RunStatus.FAILED
    failed = [e for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert "ctx.async_model" in failed[0].data["error"]
    assert failed[0].data["retryable"] is False
    assert not server.state.requests


def test_the_token_budget_stops_a_call(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a budget of 2000 tokens, calls of 1500 tokens go on until the attempt has used
    what was left: the second is sent, the third is refused."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "flow.yaml"
    flow.write_text(
        "p:\n  budget: {max_tokens: 2000}\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, call: mc.spender, final: true}\n"
    )
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.FAILED
    assert len(server.state.requests) == 2
    assert state.tokens == 3000
    failed = [e for e in app.events(state.run_id) if e.kind == "task_failed"]
    assert "token budget is used up" in failed[-1].data["error"]


def test_a_budget_a_person_let_the_run_pass_holds_no_call_back(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run paused at its budget and approved goes on spending: its `call:` worker's
    calls are no longer refused for the budget."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "flow.yaml"
    flow.write_text(
        "p:\n  budget: {max_cost_usd: 0.005, on_exceed: pause}\n  phases:\n"
        "  - id: a\n    workers:\n    - {role: w, call: mc.records}\n"
        "  - id: b\n    workers:\n    - {role: v, call: mc.both, final: true}\n"
    )
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.PAUSED
    app.approve(state.run_id)
    state = app.resume(state.run_id)
    assert state.status is RunStatus.DELIVERED, state
    assert len(server.state.requests) == 2


def test_each_call_is_in_the_attempts_record_masked(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt's record lists each call (alias, model, prompt, answer, tokens), replayed
    ones marked; `explain --prompts` reads it, and the event that ends the attempt holds its
    hash."""
    from interlock.runtime.explain import prompts

    project = make_project(tmp_path, server, monkeypatch)
    flow = one_worker(project, "      call: mc.flaky\n      retries: 1\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED
    shown = dict(prompts(app.run_dir(state.run_id), "w"))
    assert "## Call 1: `gpt` -> oa:gpt-test" in shown["w@1.1"]
    assert "step 2" in shown["w@1.1"] and "1000 + 500 tokens" in shown["w@1.1"]
    assert shown["w@1.2"].count("replayed from the journal") == 2
    assert "**User**\n\nstep 3" in shown["w@1.2"]
    ended = [e for e in app.events(state.run_id) if e.kind == "task_completed"]
    assert "prompts/w@1.2.md" in ended[0].data["records"]


def _by_name(ctx: TaskContext) -> str:
    ctx.record_usage(model="gpt-4o", input_tokens=1000, output_tokens=500)
    ctx.record_usage(model="no-such-model-9", input_tokens=10, output_tokens=10)
    return "done"


register("mc.by_name", _by_name)


@pytest.mark.parametrize("configured", [True, False])
def test_recorded_usage_of_a_model_no_alias_names_is_priced_by_its_name(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch, configured: bool
) -> None:
    """A model that is no alias (with an interlock.toml or without one) is priced from the
    providers' price tables by its name; one no table knows counts $0, marked unpriced."""
    project = make_project(tmp_path, server, monkeypatch)
    if not configured:
        (project / "interlock.toml").unlink()
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    flow = one_worker(project, "      call: mc.by_name\n")
    app = app_for(project)
    state = app.run(flow, "p", topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    usage: dict[str, Any] = attempt_usage(app, state.run_id)[0]
    assert usage["by_alias"]["gpt-4o"]["cost_usd"] == pytest.approx(
        (1000 * 2.5 + 500 * 10.0) / 1_000_000
    )
    assert usage["by_alias"]["no-such-model-9"]["cost_usd"] == 0.0
    assert usage.get("unpriced") is True
    assert state.unpriced == ("no-such-model-9",)  # what the status note names, alone
