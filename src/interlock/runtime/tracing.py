"""OpenTelemetry traces (the `otel` extra), built from a run's committed events.

Every process that drives runs (`run`, `resume`, `orchestrate`, `serve`) exports spans when
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and `serve
--otel` uses whatever tracer provider the application set up. Per run:

- a span `run PIPELINE`, from the run's creation to its end;
- a span `phase ID` per phase visit;
- a span `task ID` per attempt, from its dispatch to its end, and for a model worker a child
  `chat MODEL` span with the GenAI semantic conventions (`gen_ai.operation.name`,
  `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens` and
  `output_tokens`, `gen_ai.response.finish_reasons`), the OpenInference names LLM tools read
  (`openinference.span.kind`, `llm.token_count.*`), and its cost; for a tool loop, a `chat`
  span per model call and an `execute_tool NAME` span per tool call, at their own times.

Spans get the times the ledger recorded, so a trace shows what happened, not when a process
heard of it. Their ids come from the run (a run's trace id is a hash of its id, a span's id a
hash of what it stands for), so the spans of one run from several processes (an orchestrator
that took the run over, another that finished it) join into one trace. Prompts and answers are
put in spans only when `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true (the GenAI
conventions' switch): then an attempt's span carries its records as kept (the prompt, a tool
loop's transcript, masked) and its output, each read back only when its SHA-256 is the one
the ledger recorded, with every key masked again. An endpoint that is down costs one
warning: spans are exported from a background thread and dropped when they cannot be sent;
a run is never slowed or failed.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from interlock.core.events import to_record
from interlock.core.state import RunState, RunStatus

logger = logging.getLogger(__name__)

TASK_END = ("task_completed", "task_failed", "task_timed_out")
# What a tool loop's step says of its model call, over the attempt's usage.
_CALL_FIELDS = ("model", "input_tokens", "output_tokens", "finish_reason", "cost_usd")
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_LIMIT = 32 * 1024  # characters of one record or output put in a span
Locate = Callable[[str], Path]  # a run's directory
Artifact = Callable[[str], "bytes | None"]  # a body the ledger holds, by SHA-256
_chosen: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "interlock_span_ids", default=None
)


def _hash(size: int, *parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1  # 0 is the invalid id


def trace_id_of(run_id: str) -> int:
    """The trace id of a run's spans, in every process."""
    return _hash(16, "interlock-trace", run_id)


def span_id_of(run_id: str, *what: object) -> int:
    """The span id of one thing of a run (the run itself with no `what`)."""
    return _hash(8, "interlock-span", run_id, *what)


def _ns(at: float) -> int:
    return int(at * 1e9)


def is_final(state: RunState) -> bool:
    """True once nothing more will be recorded for the run."""
    return state.status.ended and (state.archived or state.status is not RunStatus.DELIVERED)


class Tracer:
    """Opens and closes spans as a run's events arrive (`on_event` or `listener`)."""

    def __init__(self, tracer: Any = None, environ: Mapping[str, str] = os.environ) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:  # asked for without the extra installed
            raise RuntimeError(
                "tracing needs the otel extra: pip install 'interlock[otel]'"
            ) from exc
        self._trace = trace
        if tracer is None:
            provider = trace.get_tracer_provider()
            if hasattr(provider, "id_generator"):  # the SDK's: a run's spans get its ids
                provider.id_generator = RunIds(provider.id_generator)
            tracer = provider.get_tracer("interlock")
        self.tracer = tracer
        # Prompts and outputs in spans: only when asked for (`CAPTURE_VARIABLE`).
        self.capture = environ.get(CAPTURE_VARIABLE, "").strip().lower() in ("true", "1")
        self.artifact: Artifact | None = None
        self.phases: dict[str, tuple[Any, str, int]] = {}  # run -> (span, phase, visit)
        self.tasks: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
        self.ended: dict[str, tuple[str, int]] = {}  # run -> the last phase visit it ended

    def listener(self, run_id: str, seq: int, new: Any, state: RunState) -> None:
        """An `Orchestrator.listeners` entry: the same as `on_event` for a new event."""
        kind, data = to_record(new.event)
        self.on_event(run_id, kind, data, new.event.at, state)

    def listener_at(
        self, locate: Locate, artifact: Artifact | None = None
    ) -> Callable[[str, int, Any, RunState], None]:
        """`listener` for an orchestrator whose runs' directories `locate` finds, and whose
        ledger's bodies `artifact` reads: where an attempt's records and output are read
        when content is captured (an output held by the ledger is written into the run's
        folder only after the event that commits it)."""
        self.artifact = artifact

        def listen(run_id: str, seq: int, new: Any, state: RunState) -> None:
            kind, data = to_record(new.event)
            self.on_event(run_id, kind, data, new.event.at, state, locate)

        return listen

    def on_stored(self, stored: Any, state: RunState, locate: Locate | None = None) -> None:
        """A server hub hook: the same as `on_event` for a stored event."""
        self.on_event(stored.run_id, stored.kind, stored.data, stored.at, state, locate)

    def on_event(
        self,
        run_id: str,
        kind: str,
        d: dict[str, Any],
        at: float,
        state: RunState,
        locate: Locate | None = None,
    ) -> None:
        """Open or close the spans an event starts or ends."""
        try:
            self._on_event(run_id, kind, d, at, state, locate)
        except Exception as exc:  # tracing never stops a run
            logger.warning("tracing: %s event of %s: %s: %s", kind, run_id, type(exc).__name__, exc)

    def _on_event(
        self,
        run_id: str,
        kind: str,
        d: dict[str, Any],
        at: float,
        state: RunState,
        locate: Locate | None,
    ) -> None:
        if kind == "phase_started":
            self._end_phase(run_id, at)
            span = self._start(
                run_id,
                span_id_of(run_id),
                span_id_of(run_id, "phase", d["phase"], d.get("visit")),
                f"phase {d['phase']}",
                at,
                {"interlock.phase": d["phase"], "interlock.visit": d.get("visit")},
            )
            self.phases[run_id] = (span, d["phase"], d.get("visit", 1))
        elif kind == "task_dispatched":
            key = (run_id, d["task_id"])
            self._end_task(key, at, "superseded", {})
            parent = span_id_of(run_id, "phase", d.get("phase"), d.get("visit"))
            span = self._start(
                run_id,
                parent,
                span_id_of(run_id, "task", d["task_id"], d.get("attempt")),
                f"task {d['task_id']}",
                at,
                {
                    "interlock.task_id": d["task_id"],
                    "interlock.attempt": d.get("attempt"),
                    "interlock.role": d.get("role"),
                    "interlock.model": d.get("model"),
                },
            )
            self.tasks[key] = (span, {"at": at, **d})
        elif kind == "task_started" and d.get("worker"):
            entry = self.tasks.get((run_id, d["task_id"]))
            if entry is not None:  # the process that ran it: a fleet's worker, by name
                entry[0].set_attribute("interlock.worker", str(d["worker"]))
        elif kind in TASK_END:
            key = (run_id, d["task_id"])
            if self.capture and locate is not None and key in self.tasks:
                _put_content(self.tasks[key][0], locate(run_id), d, self.artifact)
            # An attempt that stopped at a tool call waiting for a person failed nothing.
            outcome = "awaiting_approval" if d.get("approval") else kind.removeprefix("task_")
            self._end_task(key, at, outcome, d)
        elif kind == "phase_completed":
            self._end_phase(run_id, at, state)
        if is_final(state):
            self._end_run(run_id, at, state)

    def _start(
        self, run_id: str, parent: int, span_id: int, name: str, at: float, attrs: dict[str, Any]
    ) -> Any:
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        context = self._trace.set_span_in_context(
            NonRecordingSpan(
                SpanContext(
                    trace_id_of(run_id),
                    parent,
                    is_remote=True,
                    trace_flags=TraceFlags(TraceFlags.SAMPLED),
                )
            )
        )
        attributes = {"interlock.run_id": run_id, **attrs}
        clean = {k: v for k, v in attributes.items() if v is not None}
        token = _chosen.set((trace_id_of(run_id), span_id))
        try:
            return self.tracer.start_span(
                name, context=context, start_time=_ns(at), attributes=clean
            )
        finally:
            _chosen.reset(token)

    def _end_phase(self, run_id: str, at: float, state: RunState | None = None) -> None:
        """End the run's open phase span; with `state`, one this process never saw begin
        (another process started the phase, this one took the run over) is made from the
        ledger's start of the visit, under the id the other process gave it."""
        entry = self.phases.pop(run_id, None)
        if entry is not None:
            _end(entry[0], at)
            self.ended[run_id] = (entry[1], entry[2])
            return
        current = state.current if state is not None else None
        if current is None or self.ended.get(run_id) == (current.phase, current.visit):
            return
        self.ended[run_id] = (current.phase, current.visit)
        span = self._start(
            run_id,
            span_id_of(run_id),
            span_id_of(run_id, "phase", current.phase, current.visit),
            f"phase {current.phase}",
            current.started_at,
            {"interlock.phase": current.phase, "interlock.visit": current.visit},
        )
        _end(span, at)

    def _end_task(self, key: tuple[str, str], at: float, outcome: str, d: dict[str, Any]) -> None:
        entry = self.tasks.pop(key, None)
        if entry is None:
            return
        span, dispatched = entry
        span.set_attribute("interlock.outcome", outcome)
        usage = d.get("usage") or {}
        steps = usage.get("steps")
        failed = outcome not in ("completed", "awaiting_approval")
        if isinstance(steps, list) and steps and usage.get("provider"):
            self._steps(key[0], dispatched, usage, steps, at, failed=failed)
        elif usage.get("provider") and usage.get("model"):
            self._model_call(key[0], dispatched, usage, at, failed=failed)
        if isinstance(usage.get("cost_usd"), int | float):
            span.set_attribute("interlock.cost_usd", float(usage["cost_usd"]))
        error = d.get("error") or d.get("detail") or d.get("reason")
        _end(span, at, error=None if outcome == "awaiting_approval" else error)

    def _model_call(
        self,
        run_id: str,
        dispatched: dict[str, Any],
        usage: dict[str, Any],
        at: float,
        failed: bool,
    ) -> None:
        """The attempt's model call, as the GenAI conventions (and OpenInference) name it."""
        model = str(usage["model"])
        latency = usage.get("latency_s")
        start = at - latency if isinstance(latency, int | float) and latency >= 0 else None
        task = span_id_of(run_id, "task", dispatched["task_id"], dispatched.get("attempt"))
        span = self._start(
            run_id,
            task,
            span_id_of(run_id, "chat", dispatched["task_id"], dispatched.get("attempt")),
            f"chat {model}",
            max(start, dispatched["at"]) if start is not None else dispatched["at"],
            self._chat_attributes(dispatched, usage),
        )
        _end(span, at, error="the call failed" if failed else None)

    @staticmethod
    def _chat_attributes(dispatched: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """A model call's span attributes: the GenAI conventions and OpenInference's."""
        model = str(usage["model"])
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        reason = usage.get("finish_reason")
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": usage["provider"],
            "gen_ai.system": usage["provider"],
            "gen_ai.request.model": usage.get("alias") or model,
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out,
            "gen_ai.response.finish_reasons": [reason] if reason else None,
            "openinference.span.kind": "LLM",
            "llm.model_name": model,
            "llm.provider": usage["provider"],
            "llm.token_count.prompt": tokens_in,
            "llm.token_count.completion": tokens_out,
            "llm.token_count.total": (tokens_in or 0) + (tokens_out or 0)
            if tokens_in is not None or tokens_out is not None
            else None,
            "interlock.task_id": dispatched["task_id"],
            "interlock.attempt": dispatched.get("attempt"),
            "interlock.cost_usd": usage.get("cost_usd"),
            "interlock.tokens_estimated": usage.get("estimated") or None,
        }

    def _steps(
        self,
        run_id: str,
        dispatched: dict[str, Any],
        usage: dict[str, Any],
        steps: list[Any],
        at: float,
        failed: bool,
    ) -> None:
        """A tool loop's attempt: a `chat MODEL` span per model call, an `execute_tool NAME`
        span per tool call, at the times the loop took them (within the attempt's span)."""
        task = span_id_of(run_id, "task", dispatched["task_id"], dispatched.get("attempt"))
        first = dispatched["at"]
        for number, step in enumerate(steps, start=1):
            if not isinstance(step, dict) or not isinstance(step.get("at"), int | float):
                continue
            start = min(max(float(step["at"]), first), at)
            end = min(start + max(float(step.get("s") or 0.0), 0.0), at)
            which = (dispatched["task_id"], dispatched.get("attempt"), number)
            if step.get("kind") == "chat":
                call = {**usage, **{k: step.get(k) for k in _CALL_FIELDS}, "latency_s": None}
                span = self._start(
                    run_id,
                    task,
                    span_id_of(run_id, "chat", *which),
                    f"chat {step.get('model') or usage.get('model')}",
                    start,
                    self._chat_attributes(dispatched, call),
                )
                last = number == len(steps)
                _end(span, end, error="the call failed" if failed and last else None)
            elif step.get("kind") == "tool":
                name = str(step.get("name") or "")
                attrs = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": step.get("call_id"),
                    "gen_ai.tool.type": "function",
                    "openinference.span.kind": "TOOL",
                    "tool.name": name,
                    "interlock.task_id": dispatched["task_id"],
                    "interlock.attempt": dispatched.get("attempt"),
                    "interlock.turn": step.get("turn"),
                    "interlock.tool_call": step.get("call"),
                    "interlock.refused": step.get("refused") or None,
                }
                span = self._start(
                    run_id,
                    task,
                    span_id_of(run_id, "tool", *which),
                    f"execute_tool {name}",
                    start,
                    attrs,
                )
                error = step.get("error")
                _end(
                    span,
                    end,
                    error=(error if isinstance(error, str) else "the tool answered an error")
                    if error
                    else None,
                )

    def _end_run(self, run_id: str, at: float, state: RunState) -> None:
        """The run's span, once it ended: from its creation, whoever saw it begin."""
        for key in [k for k in self.tasks if k[0] == run_id]:
            self._end_task(key, at, "stopped", {})
        self._end_phase(run_id, at, state)
        self.ended.pop(run_id, None)
        from opentelemetry.trace import INVALID_SPAN

        token = _chosen.set((trace_id_of(run_id), span_id_of(run_id)))
        try:
            span = self.tracer.start_span(
                f"run {state.pipeline}",
                context=self._trace.set_span_in_context(INVALID_SPAN),
                start_time=_ns(state.created_at or at),
                attributes={
                    "interlock.run_id": run_id,
                    "interlock.pipeline": state.pipeline,
                    "interlock.status": state.status.value,
                },
            )
        finally:
            _chosen.reset(token)
        _end(span, at, error=state.failure if state.status is RunStatus.FAILED else None)


def _put_content(
    span: Any, run_dir: Path, d: dict[str, Any], artifact: Artifact | None = None
) -> None:
    """An attempt's records (its prompt, a tool loop's transcript) and output on its span,
    as OpenInference names them, each only when it is what the ledger recorded, keys
    masked, at most `CONTENT_LIMIT` characters each."""
    from interlock.providers.redaction import mask_keys

    def read(relative: str, sha256: str) -> str | None:
        data = artifact(sha256) if artifact is not None else None
        path = run_dir / relative
        if data is None and not path.resolve().is_relative_to(run_dir.resolve()):
            return None  # never outside the run's folder
        try:
            data = path.read_bytes() if data is None else data
        except OSError:
            return None  # not written yet, or gone
        if hashlib.sha256(data).hexdigest() != sha256:
            return None
        return mask_keys(data.decode("utf-8", "replace"))[:CONTENT_LIMIT]

    records = d.get("records") or {}
    kept = [
        text
        for relative, sha in sorted(records.items())
        if (text := read(relative, str(sha))) is not None
    ]
    if kept:
        span.set_attribute("input.value", "\n\n".join(kept)[:CONTENT_LIMIT])
        span.set_attribute("input.mime_type", "text/markdown")
    if d.get("artifact") and d.get("sha256"):
        output = read(str(d["artifact"]), str(d["sha256"]))
        if output is not None:
            span.set_attribute("output.value", output)


def _end(span: Any, at: float, error: str | None = None) -> None:
    if error:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, str(error)[:500]))
    span.end(end_time=_ns(at))


class RunIds:
    """An SDK id generator: a run's own ids while its spans are made (`_chosen`), those of
    `base` otherwise."""

    def __init__(self, base: Any) -> None:
        self.base: Any = base.base if isinstance(base, RunIds) else base

    def __getattr__(self, name: str) -> Any:  # anything else an id generator has
        return getattr(self.base, name)

    def generate_span_id(self) -> int:
        chosen = _chosen.get()
        return chosen[1] if chosen else int(self.base.generate_span_id())

    def generate_trace_id(self) -> int:
        chosen = _chosen.get()
        return chosen[0] if chosen else int(self.base.generate_trace_id())


class _OneWarning(logging.Handler):
    """Where the OpenTelemetry SDK's and exporter's own log records go (they do not reach the
    process's handlers): the first warning or error becomes one line of interlock's, and the
    rest are dropped, so an endpoint that is down says so once, not once a batch."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.said:
            return
        self.said = True
        logger.warning(
            "tracing: spans could not be exported, and are dropped (%s); the runs go on",
            record.getMessage()[:300],
        )


_ONCE = _OneWarning()
_configured: list[Tracer] = []


def configured_tracer(
    environ: Any = os.environ, exporter: Any = None, service: str = "interlock"
) -> Tracer | None:
    """The process's tracer when an OTLP endpoint is set (or an `exporter` is given), made
    once per process; None otherwise. Needs the otel extra; without it, one warning."""
    if _configured:
        return _configured[0]
    if exporter is None and not any(environ.get(v) for v in ENDPOINT_VARIABLES):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(timeout=2)
    except ImportError:
        logger.warning(
            "%s is set, but tracing needs the otel extra: pip install 'interlock[otel]'",
            next(v for v in ENDPOINT_VARIABLES if environ.get(v)),
        )
        return None

    name = environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(
        resource=Resource.create({"service.name": name}),
        id_generator=cast(Any, RunIds(RandomIdGenerator())),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=2000))
    # Every logger under "opentelemetry" (the exporter logs from a child of its package's):
    # what they say goes to one handler that says it once.
    sdk_logs = logging.getLogger("opentelemetry")
    if _ONCE not in sdk_logs.handlers:
        sdk_logs.addHandler(_ONCE)
    sdk_logs.propagate = False
    import atexit

    atexit.register(_shutdown, provider)
    tracer = Tracer(provider.get_tracer("interlock"), environ=environ)
    tracer.provider = provider  # type: ignore[attr-defined]
    _configured.append(tracer)
    return tracer


def _shutdown(provider: Any) -> None:
    try:
        provider.shutdown()  # the last export: at most the exporter's timeout
    except Exception as exc:  # at exit: say it, never raise
        logger.warning("tracing: could not flush spans at exit: %s", exc)


def reset_for_tests() -> Callable[[], None]:
    """Forget the process's tracer (tests that configure one each)."""
    _configured.clear()
    _ONCE.said = False
    return _configured.clear
