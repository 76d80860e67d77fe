"""Traces from committed events: a run, its phases, its attempts and each model call with
the GenAI conventions, ids that come from the run (so two processes' spans join one trace),
and an exporter that fails costing one warning, never the run."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from interlock import Interlock
from interlock.runtime import tracing

WORKFLOW = {
    "t": {
        "phases": [
            {
                "id": "draft",
                "workers": [
                    {"role": "writer", "model": "sonnet", "task": "Write about {{ topic }}."},
                    {"role": "counter", "command": ["echo", "3"], "timeout": 30},
                ],
            },
            {
                "id": "edit",
                "workers": [
                    {
                        "role": "editor",
                        "model": "sonnet",
                        "final": True,
                        "task": "Edit.",
                        "reads": ["writer.md"],
                    },
                ],
            },
        ]
    }
}


def _run(tmp_path: Path, exporter: Any) -> tuple[str, list[Any]]:
    tracer = tracing.configured_tracer({}, exporter=exporter)
    assert tracer is not None
    tmp_path.mkdir(parents=True, exist_ok=True)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(WORKFLOW))
    app = Interlock(home=tmp_path / "home")
    run_id = app.start(flow, "t", topic="bees")
    state = app.drive(run_id)
    assert state.status.value == "delivered"
    app.close()
    tracer.provider.force_flush()  # type: ignore[attr-defined]
    if not isinstance(exporter, InMemorySpanExporter):
        return run_id, []
    return run_id, list(exporter.get_finished_spans())


def test_a_run_is_one_trace_of_its_phases_attempts_and_model_calls(
    tmp_path: Path, exporter: Any
) -> None:
    run_id, spans = _run(tmp_path, exporter)
    names = sorted(s.name for s in spans)
    assert names == sorted(
        [
            "run t",
            "phase draft",
            "phase edit",
            "task writer@1",
            "task counter@1",
            "task editor@1",
            "chat sonnet",
            "chat sonnet",
        ]
    ), names
    assert {s.context.trace_id for s in spans} == {tracing.trace_id_of(run_id)}
    by_id = {s.context.span_id: s for s in spans}
    run = next(s for s in spans if s.name == "run t")
    assert run.parent is None and run.attributes["interlock.status"] == "delivered"
    for span in spans:
        if span is not run:  # every other span hangs from one that is in the trace
            assert span.parent is not None and span.parent.span_id in by_id, span.name
    chat = next(s for s in spans if s.name == "chat sonnet")
    task = by_id[chat.parent.span_id]
    assert task.name in ("task writer@1", "task editor@1")
    assert task.attributes["interlock.worker"]  # the process that ran the attempt
    assert by_id[task.parent.span_id].name.startswith("phase ")
    a = chat.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "offline"
    assert a["gen_ai.request.model"] == "sonnet"
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert (
        a["llm.token_count.total"]
        == a["gen_ai.usage.input_tokens"] + a["gen_ai.usage.output_tokens"]
    )
    assert a["openinference.span.kind"] == "LLM"
    assert a["interlock.run_id"] == run_id and a["interlock.cost_usd"] == 0.0
    assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
    # A command worker is no model call: its attempt has no chat span.
    counter = next(s for s in spans if s.name == "task counter@1")
    assert not [s for s in spans if s.parent and s.parent.span_id == counter.context.span_id]
    # Nothing of the prompt or the answer is in a span.
    assert not [s for s in spans for v in s.attributes.values() if "bees" in str(v)]
    for span in spans:  # recorded times, in order
        assert span.start_time <= span.end_time
        assert run.start_time <= span.start_time and span.end_time <= run.end_time


def test_two_processes_make_the_same_ids_for_a_run() -> None:
    assert tracing.trace_id_of("r-1") == tracing.trace_id_of("r-1") != tracing.trace_id_of("r-2")
    assert tracing.span_id_of("r-1", "phase", "draft", 1) != tracing.span_id_of("r-1")
    assert 0 < tracing.trace_id_of("r-1") < 2**128 and 0 < tracing.span_id_of("r-1") < 2**64


class _Down(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.calls += 1
        # Where the OTLP exporter logs from: a child of its package's logger.
        logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").warning(
            "Transient error: connection refused"
        )
        logging.getLogger("opentelemetry.sdk._shared_internal").error("Failed to export")
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def test_an_endpoint_that_is_down_costs_one_warning_and_no_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracing.reset_for_tests()
    down = _Down()
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(2):
                _run(tmp_path / str(n), down)
        assert down.calls >= 2
        said = [r for r in caplog.records if "could not be exported" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in caplog.records]
    finally:
        tracer = tracing.configured_tracer({}, exporter=down)
        tracer.provider.shutdown()  # type: ignore[union-attr]
        tracing.reset_for_tests()


def test_without_an_endpoint_nothing_is_set_up() -> None:
    tracing.reset_for_tests()
    assert tracing.configured_tracer({}) is None


def test_prompts_and_outputs_are_in_spans_only_when_asked_for(
    tmp_path: Path, exporter: Any
) -> None:
    """By default no span holds a prompt or an output; with the GenAI conventions' capture
    switch, an attempt's span holds its prompt record and its output as the ledger hashed
    them."""
    _, spans = _run(tmp_path / "plain", exporter)
    assert not any("input.value" in (s.attributes or {}) for s in spans)
    exporter.clear()
    tracing.reset_for_tests()
    captured = tracing.configured_tracer({tracing.CAPTURE_VARIABLE: "true"}, exporter=exporter)
    assert captured is not None and captured.capture
    run_id, spans = _run(tmp_path / "captured", exporter)
    [writer] = [s for s in spans if s.name == "task writer@1"]
    assert "Write about bees." in writer.attributes["input.value"]
    app = Interlock(home=tmp_path / "captured" / "home")
    output = (app.run_dir(run_id) / "writer.md").read_text()
    app.close()
    assert writer.attributes["output.value"] == output
    assert not any("input.value" in (s.attributes or {}) for s in spans if s.name == "run t")


def test_a_process_that_took_a_run_over_mid_phase_still_makes_its_phase_span(
    tmp_path: Path,
) -> None:
    """The spans a process makes from a run's history seen from the middle of its first
    phase on (another process started it): the phase span is made once, from the ledger's
    start of the visit and under the id the first process gave it; no phase twice."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from interlock.core.state import apply, fold

    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(WORKFLOW))
    app = Interlock(home=tmp_path / "home")
    run_id = app.start(flow, "t", topic="bees")
    app.drive(run_id)
    history = app.events(run_id)
    app.close()
    memory = InMemorySpanExporter()
    provider = TracerProvider(id_generator=tracing.RunIds(RandomIdGenerator()))  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tracing.Tracer(provider.get_tracer("test"))
    first = next(n for n, e in enumerate(history) if e.kind == "phase_started")
    state = fold([e.event for e in history[: first + 1]])
    for stored in history[first + 1 :]:  # this process never saw the first phase begin
        apply(state, stored.event)
        tracer.on_event(run_id, stored.kind, stored.data, stored.at, state)
    names = sorted(s.name for s in memory.get_finished_spans())
    assert names.count("phase draft") == 1 and names.count("phase edit") == 1, names
    draft = next(s for s in memory.get_finished_spans() if s.name == "phase draft")
    assert draft.context.span_id == tracing.span_id_of(run_id, "phase", "draft", 1)
    assert draft.start_time == int(history[first].at * 1e9)
