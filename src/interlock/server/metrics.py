"""Prometheus metrics, fed by the event feed (one hook call per committed event) and read from
the store and the orchestrator's drivers at scrape time. Each server has its own registry."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from interlock.core.state import RunState
from interlock.storage.base import StoredEvent

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator
    from interlock.storage.base import Store

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
COUNT_EVERY = 60.0  # seconds a count of runs by status is reused for at most
# Events that never change a run's status: the frequent ones, which leave the count standing.
TASK_KINDS = frozenset(
    {
        "task_dispatched",
        "task_started",
        "task_completed",
        "task_failed",
        "task_timed_out",
        "task_reused",
        "retry_scheduled",
        "item_failed",
        "usage_recorded",
        "task_batch_waited",
        "warned",
        "phase_started",
        "phase_completed",
        "branch_taken",
        "message_noted",
        "output_edited",
        "archived",
    }
)
ENDED = {"delivered": "delivered", "run_failed": "failed", "run_cancelled": "cancelled"}


class _Live(Collector):
    """Gauges computed when scraped: runs by status, tasks by state."""

    def __init__(self, store: Store, orchestrator: Orchestrator) -> None:
        self.store, self.orchestrator = store, orchestrator
        self._counted: tuple[float, dict[str, int]] | None = None  # (when, runs by status)

    def run_counts(self) -> dict[str, int]:
        """Runs by status, counted by the store again only after an event that can change a
        run's status (or `COUNT_EVERY` seconds, for what no event says: a prune): scrapes in
        between cost nothing, however many runs the store holds."""
        now = time.monotonic()
        if self._counted is None or now - self._counted[0] >= COUNT_EVERY:
            self._counted = (now, self.store.count_runs())
        return self._counted[1]

    def stale(self) -> None:
        """A run's status may have changed: count again at the next scrape."""
        self._counted = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("interlock_runs", "Runs in the store by status", labels=["status"])
        counts = self.run_counts()
        for status in ("running", "waiting", "paused", "delivered", "failed", "cancelled"):
            runs.add_metric([status], counts.get(status, 0))
        yield runs
        tasks = GaugeMetricFamily(
            "interlock_tasks", "Tasks of runs driven here, by state", labels=["state"]
        )
        tally = Tally(
            t.status.value
            for d in list(self.orchestrator.drivers.values())
            for t in d.state.tasks.values()
        )
        for state in (
            "dispatched",
            "running",
            "retry_wait",
            "completed",
            "failed",
            "timed_out",
            "item_failed",
        ):
            tasks.add_metric([state], tally.get(state, 0))
        yield tasks
        waiting = GaugeMetricFamily(
            "interlock_runs_waiting",
            "Runs driven here that wait, by the signal they wait for ('' for a delay)",
            labels=["signal"],
        )
        waits = Tally(
            d.state.waiting.signal or ""
            for d in list(self.orchestrator.drivers.values())
            if d.state.waiting is not None and not d.state.status.ended
        )
        for signal, count in sorted(waits.items()):
            waiting.add_metric([signal], count)
        yield waiting
        driven = GaugeMetricFamily("interlock_runs_driven", "Runs this server holds leases of")
        driven.add_metric([], len(self.orchestrator.drivers))
        yield driven


class Metrics:
    """The server's metrics and the hooks that feed them."""

    def __init__(self, store: Store, orchestrator: Orchestrator) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.finished = Counter(
            "interlock_runs_finished", "Runs that ended, seen live", ["status"], registry=r
        )
        self.step = Histogram(
            "interlock_task_duration_seconds",
            "From a task attempt's start to its report",
            ["outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "interlock_task_queue_wait_seconds",
            "From dispatch (recorded) to start (a worker picked it up)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "interlock_provider_tokens", "Model tokens used", ["model", "direction"], registry=r
        )
        self.cost = Counter("interlock_provider_cost_usd", "Model cost", ["model"], registry=r)
        self.tick = Histogram(
            "interlock_orchestrator_tick_seconds",
            "Duration of one reconcile tick (record, then act)",
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.clients = Gauge("interlock_stream_clients", "Open stream clients", registry=r)
        self.dropped = Counter(
            "interlock_stream_dropped", "Stream clients dropped for falling behind", registry=r
        )
        self.notifications = Counter(
            "interlock_notifications", "Webhook sends", ["outcome"], registry=r
        )
        self.live = _Live(store, orchestrator)
        r.register(self.live)

    def on_event(self, stored: StoredEvent, state: RunState) -> None:
        """Hub hook: count what one committed event says."""
        if stored.kind not in TASK_KINDS:
            self.live.stale()
        if stored.kind in ENDED:
            self.finished.labels(ENDED[stored.kind]).inc()
            return
        task = state.tasks.get(stored.data.get("task_id", ""))
        if task is None:
            return
        if stored.kind == "task_started":
            self.queue_wait.observe(max(0.0, stored.at - task.dispatched_at))
        elif stored.kind in ("task_completed", "task_failed", "task_timed_out", "usage_recorded"):
            if task.started_at is not None and stored.kind != "usage_recorded":
                outcome = stored.kind.removeprefix("task_")
                self.step.labels(outcome).observe(max(0.0, stored.at - task.started_at))
            usage = stored.data.get("usage") or {}
            model = task.model or "none"
            for direction in ("input", "output"):
                count = int(usage.get(f"{direction}_tokens", 0) or 0)
                if count:
                    self.tokens.labels(model, direction).inc(count)
            if usage.get("cost_usd"):
                self.cost.labels(model).inc(float(usage["cost_usd"]))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
