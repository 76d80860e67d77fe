"""The deterministic simulator over thousands of seeds: every invariant after every step."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from interlock.core import observe
from interlock.sim import simulate
from interlock.sim.child_mix import NAME as CHILDREN_MIXED
from interlock.sim.child_mix import MixedChildSimulation
from interlock.sim.pipelines import CATALOG
from interlock.sim.world import Simulation

SEEDS = int(os.environ.get("INTERLOCK_SIM_SEEDS", "4000"))
ROOT = Path(__file__).resolve().parents[2]


def seed_base() -> int:
    """The first seed of the window: `INTERLOCK_SIM_SEED_BASE` (or the older
    `INTERLOCK_SIM_START`) when set, else a number taken from the commit checked out, so each
    commit plays another 4,000 seeds and the same commit always the same ones (0 outside git)."""
    for name in ("INTERLOCK_SIM_SEED_BASE", "INTERLOCK_SIM_START"):
        if os.environ.get(name):
            return int(os.environ[name])
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return 0
    # Below a billion, in steps of the window, clear of the fixed windows other tests play.
    return 100_000_000 + int(head[:12], 16) % 900_000 * 1000 if head else 0


def test_thousands_of_seeds_keep_every_invariant() -> None:
    """Seeds over every catalog pipeline, random and generated mixes, with faults on, break
    nothing; the window moves with each commit and is printed, to be played again with
    `INTERLOCK_SIM_SEED_BASE`."""
    first = seed_base()
    window = (
        f"seeds {first}..{first + SEEDS - 1}: again with INTERLOCK_SIM_SEED_BASE={first} "
        "pytest tests/reliability/test_simulation.py -k thousands"
    )
    print(window)
    failures = []
    statuses: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    for seed in range(first, first + SEEDS):
        result = simulate(seed)
        statuses[result.status] += 1
        fired.update(result.faults)
        if result.violations:
            failures.append(
                f"seed {seed}: {result.violations[:3]} (rerun: {result.summary()['rerun']})"
            )
    print(f"{SEEDS} seeds: {dict(statuses)}; faults {dict(fired)}")
    assert failures == [], window + "\n" + "\n".join(failures[:10])
    assert statuses["delivered"] and statuses["failed"] and statuses["paused"]
    assert all(fired[point] for point in ("crash", "commit_ambiguous", "commit_failed"))
    assert fired["slot_wait"] and fired["lost_dispatch"]


def test_waits_for_a_slot_and_lost_dispatches_keep_the_invariants() -> None:
    """Seeds whose attempts wait past their timeout for a slot, or are lost before they
    start, keep every invariant (no attempt is timed out before the deadline that applies to
    it); a lost one is timed out as not started and dispatched again."""
    lost = 0
    for seed in range(300):
        sim = Simulation(seed)
        if not any(sim.queue.enabled.values()):
            continue
        result = sim.run()
        assert result.ok, result.summary()
        details = [
            s.data.get("detail", "")
            for s in sim.store.events(sim.run_id)
            if s.kind == "task_timed_out"
        ]
        lost += any(d.startswith("not started within start_timeout") for d in details)
    assert lost, "no seed lost a dispatch"


@pytest.mark.parametrize("pipeline", [*CATALOG, "random", "mixed"])
def test_each_pipeline_shape_survives_faults(pipeline: str) -> None:
    """Every catalog shape (parallel, sequential, retries, fallbacks, pause, loop, fan-out,
    budget, waits, revise), random ones and generated mixes keep the invariants on their own
    seeds."""
    count = 50 if pipeline == "mixed" else 100  # a mix's shape costs more to validate
    bad = [s for s in range(count) if not simulate(10_000_000 + s, pipeline=pipeline).ok]
    assert bad == [], f"rerun: python benchmarks/simulate.py --seed {bad[0]} --pipeline {pipeline}"


@pytest.mark.parametrize("pipeline", [*CATALOG, "random", "mixed"])
def test_without_faults_every_run_is_delivered(pipeline: str) -> None:
    """With every fault point off, each pipeline shape delivers its result."""
    for seed in range(30):
        result = simulate(seed, pipeline=pipeline, faults=False)
        assert result.ok, result.summary()
        assert result.status == "delivered", result.summary()


@pytest.mark.parametrize(
    "seed",
    [
        # A worker's start and completion reached an orchestrator that died before recording
        # them; the completion arrived again at the next one, which recorded it without a start.
        2024377,
        # The final worker's output edited at a budget pause: final.md was written from the
        # text kept at completion, not the edited one.
        1597,
        # An output written and then edited within one tick: both writes staged the same
        # temporary file, and the second rename found it gone.
        1352,
        # A task slot granted in the tick that observed a cancel was folded before it but
        # recorded after it: on replay an ended run held the slot.
        300001897,
        228157808,
        # A fan-out item failed for good (tolerated) while its lane's other workers waited for
        # a task slot: they kept waiting, one was granted a slot it would never use, and a
        # retry of another item waited behind it for good.
        477362234,
    ],
)
def test_seeds_that_once_broke_an_invariant(seed: int) -> None:
    """Each seed that once found a bug keeps every invariant."""
    result = simulate(seed)
    assert result.ok, result.summary()


@pytest.mark.parametrize(
    ("seed", "pipeline"),
    [
        # A commit reported as failed had landed, ending an attempt that held a task slot:
        # the run rebuilt from its ledger never told the store, and its next attempt waited
        # for a slot nothing held.
        (310099967, "mixed"),
        # An attempt waiting for a task slot when a budget pause came did not ask again once
        # the pause was approved, and nothing woke the run.
        (310129171, "mixed"),
        # A child run's last commit recorded an output and the run's failure; the process
        # died before writing the file, and nobody took the failed child again to write it.
        (300000232, CHILDREN_MIXED),
        (300004169, CHILDREN_MIXED),
        (300005123, CHILDREN_MIXED),
    ],
)
def test_generated_seeds_that_once_broke_an_invariant(seed: int, pipeline: str) -> None:
    """Each seed of a generated pipeline that once found a bug keeps every invariant."""
    if pipeline == CHILDREN_MIXED:
        result = MixedChildSimulation(seed).run()
    else:
        result = simulate(seed, pipeline=pipeline)
    assert result.ok, result.summary()


def test_a_seed_reproduces_exactly() -> None:
    """Running a seed twice gives the same history, byte for byte, and the same faults."""
    for seed in (3, 207, 4242):
        first, second = simulate(seed), simulate(seed)
        assert first.summary() == second.summary()
        assert first.digest and first.digest == second.digest


def test_the_simulator_catches_a_broken_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """If stale and duplicate reports were accepted, the invariants would say so."""
    monkeypatch.setattr("interlock.engine.machine.accept_result", lambda state, result: True)
    broken = [s for s in range(200) if not simulate(s).ok]
    assert broken, "a driver that records every report must break an invariant"
    assert observe.accept_result is not None


def _mutate_module() -> Any:
    """benchmarks/mutate.py, imported by path (benchmarks is not a package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mutate.py"
    spec = importlib.util.spec_from_file_location("interlock_mutate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_mutant_of_the_engine_is_valid_python_and_differs() -> None:
    """The mutator finds points in each engine file, and each mutant compiles and changes
    exactly what it says."""
    mutate = _mutate_module()
    for file in mutate.FILES:
        source = (Path(mutate.ROOT) / "src" / "interlock" / file).read_text()
        made = mutate.mutants(source, file)
        assert len(made) > 100, file
        normal = ast.unparse(ast.parse(source))
        for mutant in made[:: max(1, len(made) // 25)]:
            text = mutate.mutated(source, mutant)
            compile(text, file, "exec")
            assert text != normal, mutant


def test_a_tiny_mutation_run_reports_its_score(tmp_path: Path) -> None:
    """Two mutants of state.py against the decision tests: the run reports a score."""
    mutate = _mutate_module()
    out = tmp_path / "mutation.json"
    argv = ["--files", "core/state.py", "--mutants", "2", "--seed", "3", "--json", str(out)]
    assert mutate.main([*argv, "--tests", "tests/core/test_decide.py"]) == 0
    report = json.loads(out.read_text())["core/state.py"]
    assert report["mutants"] == 2 and 0 <= report["killed"] <= 2
    assert report["score"] == 100.0 * report["killed"] / 2
    assert report["points"] > 100


def test_the_invariants_catch_a_budget_waived_by_any_approval(tmp_path: Path) -> None:
    """A fold that waives the budget when any pause is approved (not only a budget pause)
    breaks the simulator's invariants on the combined pipeline."""
    mutate = _mutate_module()
    package = tmp_path / "interlock"
    source_root = Path(mutate.ROOT) / "src" / "interlock"
    shutil.copytree(source_root, package, ignore=shutil.ignore_patterns("__pycache__"))
    state = package / "core" / "state.py"
    text = state.read_text()
    anchor = "    state.approvals += 1\n"
    assert anchor in text
    state.write_text(text.replace(anchor, anchor + "    state.budget_waived = True\n"))
    check = (
        "from interlock.sim import simulate\n"
        "bad = [s for s in range(40) if simulate(s, pipeline='combined').violations]\n"
        "print(len(bad))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=True
    )
    assert int(done.stdout) > 0, "the mutant survived the simulator"
