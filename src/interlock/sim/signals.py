"""Signals and delays in the simulator: people who send signals early, in time, late, twice or
never, and a clock that jumps around a delay.

Drawn from a random stream of their own, so that seeds without waits make the same draws as
before. Each signal the pipeline waits for is planned once per seed: sent before the run waits
for it ("signal_early"), while it waits ("signal_during"), after its timeout passed
("signal_late") or never ("signal_never", only where a timeout ends the wait); a plan may
send it twice with one idempotency key ("duplicate_signal"), once across a crash. While a
delay runs, the clock may jump forward ("clock_jump").

What must stay true of waits is judged apart, from the history alone (`sim.waits_check`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from interlock.core.observe import SignalMessage
from interlock.core.waits import waited_signals
from interlock.core.workflow import Pipeline

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator
    from interlock.sim.world import Simulation

MODES = ("signal_early", "signal_during", "signal_late", "signal_never")


def signals_rng(seed: int) -> random.Random:
    """The stream signals and clock jumps draw from."""
    return random.Random(f"signals-{seed}")


@dataclass
class Plan:
    """When one signal is sent, and whether twice."""

    name: str
    mode: str
    twice: bool
    across_crash: bool
    delay: float  # seconds after the wait began (or timed out) before it is sent
    sent: int = 0  # how many sends (a visit's wait, each loop visit, takes a new one)
    due: float | None = None
    answered: tuple[str, int, str] | None = None  # the wait a send answered


@dataclass
class SignalPeople:
    """Sends the pipeline's signals as planned, and jumps the clock around delays."""

    rng: random.Random
    plans: dict[str, Plan] = field(default_factory=dict)
    jumps: bool = False
    run_id: str = ""  # the run the plans were made for (a rerun starts them again)

    @classmethod
    def for_seed(cls, seed: int, pipeline: Pipeline, faults: bool) -> SignalPeople:
        """The plans of one seed (without faults: every signal sent while the run waits)."""
        rng = signals_rng(seed)
        people = cls(rng=rng, jumps=faults and rng.random() < 0.5)
        for name, phases in sorted(waited_signals(pipeline).items()):
            timed = all(p.wait_for is not None and p.wait_for.timeout for p in phases)
            modes = MODES if timed else MODES[:3]
            mode = rng.choice(modes) if faults else "signal_during"
            if mode == "signal_late" and not timed:
                mode = "signal_during"
            twice = faults and rng.random() < 0.4
            people.plans[name] = Plan(
                name=name,
                mode=mode,
                twice=twice,
                across_crash=twice and rng.random() < 0.5,
                delay=rng.choice([0.0, 1.0, 4.0, 10.0]),
            )
        return people

    def act(self, sim: Simulation, orchestrator: Orchestrator) -> None:
        """Send what is due now, and perhaps jump the clock over (or toward) a delay's end."""
        if self.run_id != sim.run_id:
            self.run_id = sim.run_id
            for plan in self.plans.values():
                plan.sent, plan.due, plan.answered = 0, None, None
        driver = orchestrator.drivers.get(sim.run_id)
        if driver is None:
            return
        state, now = driver.state, sim.clock()
        if state.status.ended:
            return
        waiting = state.waiting
        for plan in self.plans.values():
            if plan.mode == "signal_never" or plan.sent >= 8:
                continue
            for_it = waiting is not None and waiting.signal == plan.name
            kept = any(s.name == plan.name for s in state.inbox)
            if plan.mode != "signal_during" and for_it and plan.sent and not kept:
                plan.mode = "signal_during"  # a later visit waits again: answer it in time
            wait = None if waiting is None else (waiting.phase, waiting.visit, waiting.gate)
            if not for_it or plan.answered == wait:
                plan.due = None
            timed_out = plan.name in state.signals and state.signals[plan.name] is None
            if plan.mode == "signal_early" and plan.sent == 0:
                self._send(sim, orchestrator, plan, now)
            elif plan.mode == "signal_during" and for_it and plan.answered != wait:
                if plan.due is None:
                    plan.due = now + plan.delay
                elif now >= plan.due:
                    plan.due, plan.answered = None, wait
                    self._send(sim, orchestrator, plan, now)
            elif plan.mode == "signal_late" and plan.sent == 0 and not for_it and timed_out:
                self._send(sim, orchestrator, plan, now)  # after its timeout: kept
        delaying = waiting is not None and waiting.signal is None and waiting.until is not None
        if delaying and self.jumps and self.rng.random() < 0.2:
            assert waiting is not None and waiting.until is not None
            sim.buggify.fired["clock_jump"] += 1
            span = max(0.0, waiting.until - now)
            sim.clock.advance_to(now + span * self.rng.choice([0.5, 0.99, 1.0, 3.0]))

    def _send(self, sim: Simulation, orchestrator: Orchestrator, plan: Plan, now: float) -> None:
        plan.sent += 1
        sim.buggify.fired[plan.mode] += 1
        key = f"{plan.name}-{plan.sent}"
        message = SignalMessage(name=plan.name, data={"n": plan.sent}, key=key, sent_at=now)
        sim.store.post_command(sim.run_id, "signal", message.to_message(), "sim", now)
        if plan.twice:
            sim.buggify.fired["duplicate_signal"] += 1
            if plan.across_crash:
                sim.restart()
            sim.store.post_command(sim.run_id, "signal", message.to_message(), "sim", now)
        (sim.orchestrator or orchestrator).look_now()

    def will_answer(self, name: str | None) -> bool:
        """Whether somebody is yet to send signal `name` (a wait for it is not left stuck)."""
        plan = self.plans.get(name or "")
        return plan is not None and plan.mode != "signal_never" and plan.sent < 8

    def next_time(self) -> float | None:
        """When a planned signal is next due (None: none is)."""
        dues = [p.due for p in self.plans.values() if p.due is not None]
        return min(dues) if dues else None
