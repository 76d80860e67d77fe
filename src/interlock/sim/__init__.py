"""A deterministic simulator for the orchestrator: one seed decides everything.

Time, worker outcomes, storage faults and crashes all come from one seeded random source, so a
seed that breaks an invariant breaks it again, step for step, when rerun
(`python benchmarks/simulate.py --seed N`). The real `Orchestrator` and `RunDriver` are driven;
only the clock, the dispatcher and a store wrapper are simulated.
"""

from interlock.sim.world import SimResult, Simulation, simulate

__all__ = ["SimResult", "Simulation", "simulate"]
