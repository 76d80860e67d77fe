"""One simulated run: the real orchestrator, a simulated clock, workers, store and crashes."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core.state import RunState, RunStatus, fold
from interlock.errors import LeaseHeld
from interlock.providers import ModelConfig
from interlock.runtime import faults
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.runtime.orchestrator import Orchestrator, Settings
from interlock.sim.buggify import Buggify
from interlock.sim.clock import SimClock
from interlock.sim.invariants import end_problems
from interlock.sim.pipelines import for_seed
from interlock.sim.queueing import QueueFaults
from interlock.sim.rerun import maybe_rerun
from interlock.sim.review import maybe_review, review_rng
from interlock.sim.shadow import ShadowedChecker
from interlock.sim.signals import SignalPeople
from interlock.sim.store import FaultyStore
from interlock.sim.workers import Scheduler, SimDispatcher
from interlock.testing import MemoryStore

LEASE_TTL = 30.0
MAX_STEPS = 4000


class SimCrash(BaseException):
    """The simulated death of the orchestrator (a BaseException: no handler may swallow it)."""


@dataclass
class SimResult:
    """What one seed did and what it broke."""

    seed: int
    pipeline: str
    status: str = ""
    steps: int = 0
    events: int = 0
    crashes: int = 0
    sim_seconds: float = 0.0
    digest: str = ""  # sha256 of the stored history: equal digests, equal runs
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    reruns: int = 0  # the ended run was rerun (see `interlock.sim.rerun`)
    reused: int = 0  # tasks the rerun carried over

    @property
    def ok(self) -> bool:
        """No invariant was broken."""
        return not self.violations

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly view."""
        return {
            "seed": self.seed,
            "pipeline": self.pipeline,
            "status": self.status,
            "steps": self.steps,
            "events": self.events,
            "crashes": self.crashes,
            "sim_seconds": round(self.sim_seconds, 3),
            "history_sha256": self.digest,
            "faults": dict(sorted(self.faults.items())),
            "violations": self.violations,
            "reruns": self.reruns,
            "reused": self.reused,
            "rerun": f"python benchmarks/simulate.py --seed {self.seed}"
            + (" --pipeline children" if self.pipeline.startswith("children") else ""),
        }


def _scratch() -> str:
    """A fast place for run directories (memory-backed when the machine has one)."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="interlock-sim-", dir=base)


class Simulation:
    """Plays one seed to the end, checking every invariant after every step."""

    def __init__(self, seed: int, *, pipeline: str | None = None, faults: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        name, self.definition = for_seed(seed, self.rng, pipeline)
        self.result = SimResult(seed=seed, pipeline=name)
        self.buggify = Buggify(self.rng, faults=faults)
        self.clock = SimClock()
        self.scheduler = Scheduler()
        self.queue = QueueFaults(seed, faults=faults)
        self.dispatcher = SimDispatcher(
            self.rng, self.clock, self.scheduler, self.buggify, self.queue
        )
        self.store = MemoryStore()
        self.faulty = FaultyStore(self.store, self._storage_fault)
        self.checker = ShadowedChecker(self.definition.pipeline)
        self.run_id = f"sim-{seed}"
        self.generation = 0
        self.home: Home | None = None
        self.orchestrator: Orchestrator | None = None
        self.leave_paused = self.buggify("leave_paused", 0.3)
        self.review_rng = review_rng(seed)
        self.signal_people = SignalPeople.for_seed(seed, self.definition.pipeline, faults)
        self.creating = False

    # -- faults -------------------------------------------------------------------------------

    def _storage_fault(self, point: str) -> bool:
        if self.creating:
            return False  # a run that fails to be created is the CLI's error, not a run's
        return self.buggify(point, {"store_busy": 0.05}.get(point, 0.04))

    def _crash_hook(self, name: str) -> None:
        if self.buggify("crash", 0.03):
            raise SimCrash(name)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Play the seed; returns the result (violations empty when every invariant held)."""
        scratch = _scratch()
        previous = faults.set_hook(self._crash_hook)
        silenced = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # injected faults log warnings by design
        try:
            self.home = Home.at(scratch)
            self._play()
        except Exception as exc:  # any error escaping the loop is itself a violation
            self.result.violations.append(f"the orchestrator raised {type(exc).__name__}: {exc}")
        finally:
            faults.set_hook(previous)
            logging.disable(silenced)
            shutil.rmtree(scratch, ignore_errors=True)
        self.result.faults = self.buggify.fired + self.queue.fired
        return self.result

    def _new_orchestrator(self) -> Orchestrator:
        assert self.home is not None
        self.generation += 1
        return Orchestrator(
            self.faulty.as_store(),
            self.home,
            models=ModelRunner(None, config=ModelConfig(providers={}, models={})),
            settings=Settings(lease_ttl=LEASE_TTL, write_status=self.seed % 4 == 0),
            clock=self.clock,
            owner=f"sim-orchestrator-{self.generation}",
            dispatcher=self.dispatcher,
            cost_timer=self.clock,  # a rewrite takes no simulated time, however slow the host
        )

    def _play(self) -> None:
        orchestrator = self.orchestrator = self._new_orchestrator()
        self.creating = True
        orchestrator.create_run(
            self.definition, topic=f"seed {self.seed}", inputs={}, run_id=self.run_id
        )
        self.creating = False
        if self.play_steps():
            self._finish()
            maybe_rerun(self)

    def play_steps(self) -> bool:
        """Step the current run to its end; False when a violation cut it short."""
        for _ in range(MAX_STEPS):
            self.result.steps += 1
            if not self._step():
                return True
            if self.result.violations:
                return False
        self.result.violations.append(f"no end after {MAX_STEPS} steps")
        return True

    def finish(self) -> None:
        """Check how the current run ended (after `play_steps`)."""
        self._finish()

    def _step(self) -> bool:
        """One iteration of the orchestrator's loop plus the world around it; False: done."""
        orchestrator = self.orchestrator
        assert orchestrator is not None
        now = self.clock()
        self.scheduler.run_due(now)
        driver = orchestrator.drivers.get(self.run_id)
        if driver is not None:
            self._people(orchestrator, driver.state.status)
            if self.buggify("duplicate_report", 0.05):
                self.dispatcher.resend(orchestrator, driver, stale=False)
            if self.buggify("stale_report", 0.05):
                self.dispatcher.resend(orchestrator, driver, stale=True)
        try:
            # One iteration of the real loop (`run_until_settled` without its sleep), with a
            # look of every child run's supervision before and after it.
            self._before_iterate()
            self.dispatcher.children.step()
            orchestrator.step(now)
            self.dispatcher.children.step()
        except SimCrash:
            self._restart()
            return True
        self._check_step()
        driver = orchestrator.drivers.get(self.run_id)
        if driver is None:
            if self._done(self.checker.shadow):
                return False
            self._restart()  # the lease was lost: take the run again, as a new process would
            return True
        return self._advance(orchestrator)

    def _before_iterate(self) -> None:
        """A fault of a subclass that kills the orchestrator raises `SimCrash` here."""

    def _done(self, state: RunState) -> bool:
        """Whether a run let go has nothing left to do (else it is taken again, as
        `interlock resume` would)."""
        return state.status.ended and (state.archived or state.status is not RunStatus.DELIVERED)

    def _people(self, orchestrator: Orchestrator, status: RunStatus) -> None:
        store = self.store
        self.signal_people.act(self, orchestrator)
        if self.buggify("cancel", 0.005) and not status.ended:
            store.post_command(self.run_id, "cancel", "simulated cancel", "sim", self.clock())
        if status is not RunStatus.PAUSED or self.leave_paused:
            return
        if any(
            c.kind in ("approve", "edit", "reject") for c in store.pending_commands(self.run_id)
        ):
            return
        if maybe_review(self, orchestrator, self.review_rng):
            return  # approved (or paused again) at a later step
        if self.rng.random() < 0.5:
            return  # people take their time
        copies = 2 if self.buggify("double_approval", 0.5) else 1
        for _ in range(copies):
            store.post_command(self.run_id, "approve", "ok", "sim", self.clock())
        orchestrator.wake()
        if self.buggify("approval_across_crash", 0.5):
            self._restart()
            store.post_command(self.run_id, "approve", "again", "sim", self.clock())

    def _advance(self, orchestrator: Orchestrator) -> bool:
        """Move the clock to the next thing that can happen; False when nothing can.

        Only what the orchestrator itself scheduled (its timers, its heartbeat) and the
        simulated workers count: a deadline the engine knows of but the loop forgot to wake
        for would leave a real run waiting forever, and ends the simulation as stuck.
        """
        now = self.clock()
        if orchestrator.busy:
            return True  # the next iteration has work right away
        commands = bool(self.store.pending_commands(self.run_id))
        wakes = [
            self.scheduler.next_time(),
            self.signal_people.next_time(),
            orchestrator.next_wake(commands_waiting=commands),
        ]
        found = [w for w in wakes if w is not None]
        if not found:
            state = orchestrator.drivers[self.run_id].state
            if state.status is RunStatus.PAUSED and not self.leave_paused:
                self.clock.advance_to(now + 1)  # somebody will approve
                return True
            waiting = state.waiting
            if waiting is not None and self.signal_people.will_answer(waiting.signal):
                self.clock.advance_to(now + 1)  # somebody will send the signal
                return True
            return False
        # Never jump further than a third of the lease, as the real loop's heartbeat renews it.
        self.clock.advance_to(min(min(found), now + LEASE_TTL / 3))
        return True

    def restart(self) -> None:
        """The orchestrator dies now (a person's action crossed a crash)."""
        self._restart()

    def _restart(self) -> None:
        """The orchestrator died: its workers die too; a new one waits out the lease."""
        self.result.crashes += 1
        self.dispatcher.kill_all()
        self.scheduler.clear()
        self._read_new_events()
        self.clock.advance_to(self.clock() + LEASE_TTL + 0.5)
        # Even an ended run is taken again, as `interlock resume` does: acting on it finishes
        # whatever the dead process left undone (final.md, the move to the archive).
        orchestrator = self.orchestrator = self._new_orchestrator()
        for _ in range(3):
            try:
                orchestrator.take(self.run_id)
                return
            except LeaseHeld:
                self.clock.advance_to(self.clock() + LEASE_TTL)
        raise RuntimeError("could not take the run back after its holder died")

    # -- checks -------------------------------------------------------------------------------

    def _read_new_events(self) -> None:
        for stored in self.store.events(self.run_id, self.checker.seen):
            self.checker.feed(stored.seq, stored.event)
        self.result.violations += self.checker.problems
        self.checker.problems = []

    def _check_step(self) -> None:
        self._read_new_events()
        assert self.orchestrator is not None
        driver = self.orchestrator.drivers.get(self.run_id)
        if driver is None or driver.dirty:
            return
        if driver.state != self.checker.shadow:
            self.result.violations.append(
                f"live state differs from the folded history at seq {self.checker.seen}"
            )
        if driver.state.status.ended:
            return
        for task in driver.state.in_flight():
            handle: Any = driver.workers.handles.get(task.task_id)
            live = handle is not None and handle.live and handle.attempt == task.attempt
            if not live and not driver.reports:
                self.result.violations.append(
                    f"{task.task_id} attempt {task.attempt} is recorded as dispatched but no "
                    "worker runs it"
                )

    def _finish(self) -> None:
        self._read_new_events()
        records = self.store.events(self.run_id)
        stored = [s.event for s in records]
        text = json.dumps([(s.kind, s.data, s.rule, s.why) for s in records], sort_keys=True)
        self.result.digest = hashlib.sha256(text.encode()).hexdigest()
        folded = fold(stored)
        if folded != self.checker.shadow:
            self.result.violations.append("the stored history folds to another state")
        assert self.home is not None
        run_dir = self.home.run_dir(self.run_id)
        executions, starts = self.dispatcher.executions, self.dispatcher.starts
        self.result.violations += end_problems(
            self.checker, self.run_id, run_dir, executions, starts
        )
        self.result.violations += self.checker.state_problems(folded)
        self.result.status = folded.status.value
        self.result.events = len(stored)
        self.result.sim_seconds = self.clock() - SimClock().now


def simulate(seed: int, *, pipeline: str | None = None, faults: bool = True) -> SimResult:
    """Run one seed and return what happened (`pipeline="children"`: a parent running a
    sub-pipeline, `interlock.sim.child_world`)."""
    if pipeline == "children":
        from interlock.sim.child_world import ChildSimulation

        return ChildSimulation(seed, faults=faults).run()
    return Simulation(seed, pipeline=pipeline, faults=faults).run()
