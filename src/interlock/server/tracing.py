"""OpenTelemetry traces (the `otel` extra): a span per run, per phase visit and per task
attempt, built from committed events, with the run id as the correlation id on every span.

Spans get the recorded times, so a trace shows what the ledger says happened. Exporters are
configured the usual OpenTelemetry way (an SDK `TracerProvider` set by the application, or
the `opentelemetry-instrument` wrapper); without one the API is a no-op.
"""

from __future__ import annotations

from typing import Any

from interlock.core.state import RunState
from interlock.server.messages import is_final
from interlock.storage.base import StoredEvent

TASK_END = ("task_completed", "task_failed", "task_timed_out")


def _ns(at: float) -> int:
    return int(at * 1e9)


class Tracer:
    """Opens and closes spans as a run's events arrive."""

    def __init__(self, tracer: Any = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:  # the flag was given without the extra installed
            raise RuntimeError(
                "tracing needs the otel extra: pip install 'interlock[otel]'"
            ) from exc
        self._trace = trace
        self.tracer = tracer or trace.get_tracer("interlock")
        self.runs: dict[str, Any] = {}
        self.phases: dict[str, Any] = {}
        self.tasks: dict[tuple[str, str], Any] = {}

    def _child(self, run_id: str, parent: Any, name: str, at: float, **attributes: Any) -> Any:
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        attributes = {"interlock.run_id": run_id, **attributes}
        clean = {k: v for k, v in attributes.items() if v is not None}
        return self.tracer.start_span(name, context=context, start_time=_ns(at), attributes=clean)

    def on_event(self, stored: StoredEvent, state: RunState) -> None:
        """Hub hook: open or close the spans an event starts or ends."""
        run_id, d, at = stored.run_id, stored.data, stored.at
        run = self.runs.get(run_id)
        if run is None:
            run = self.runs[run_id] = self._child(
                run_id,
                None,
                f"run {state.pipeline}",
                state.created_at or at,
                **{"interlock.pipeline": state.pipeline},
            )
        if stored.kind == "phase_started":
            self._end(self.phases.pop(run_id, None), at)
            self.phases[run_id] = self._child(
                run_id, run, f"phase {d['phase']}", at, **{"interlock.visit": d.get("visit")}
            )
        elif stored.kind == "task_dispatched":
            key = (run_id, d["task_id"])
            self._end(self.tasks.pop(key, None), at)
            self.tasks[key] = self._child(
                run_id,
                self.phases.get(run_id, run),
                f"task {d['task_id']}",
                at,
                **{"interlock.attempt": d.get("attempt"), "interlock.model": d.get("model")},
            )
        elif stored.kind in TASK_END:
            span = self.tasks.pop((run_id, d["task_id"]), None)
            if span is not None:
                span.set_attribute("interlock.outcome", stored.kind.removeprefix("task_"))
                self._end(span, at, error=d.get("error") or d.get("detail"))
        elif stored.kind == "phase_completed":
            self._end(self.phases.pop(run_id, None), at)
        if is_final(state):
            for key in [k for k in self.tasks if k[0] == run_id]:
                self._end(self.tasks.pop(key), at)
            self._end(self.phases.pop(run_id, None), at)
            run.set_attribute("interlock.status", state.status.value)
            self._end(
                self.runs.pop(run_id),
                at,
                error=state.failure if state.status.value == "failed" else None,
            )

    def _end(self, span: Any, at: float, error: str | None = None) -> None:
        if span is None:
            return
        if error:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=_ns(at))
