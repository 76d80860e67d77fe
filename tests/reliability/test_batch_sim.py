"""Batches under the simulator: thousands of seeds of the real batch driver over the memory
store, killed before or after any of its calls and resumed, keep every invariant (no row
twice, no row lost, cancel and retry as documented, the budget failing no finished row, no
row started past the tolerance)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.reliability.test_simulation import seed_base

from interlock.sim.batches import simulate_batch

SEEDS = int(os.environ.get("INTERLOCK_SIM_BATCH_SEEDS", "3000"))


@pytest.mark.timeout(600)  # 30 s on an idle 2-core machine; minutes on a busy one
def test_thousands_of_batch_seeds_keep_every_invariant(tmp_path: Path) -> None:
    """Each seed a batch of 1-8 rows, random outcomes, costs, a budget, a cancel or retries,
    and crashes at random calls; the window moves with each commit (as test_simulation's,
    offset by a million so as not to replay its seeds) and is printed."""
    first = seed_base() + 1_000_000
    window = (
        f"batch seeds {first}..{first + SEEDS - 1}: again with "
        f"INTERLOCK_SIM_SEED_BASE={first - 1_000_000} pytest tests/reliability/test_batch_sim.py"
    )
    print(window)
    failures = []
    counts: Counter[str] = Counter()
    crashes = beyond = 0
    for seed in range(first, first + SEEDS):
        result = simulate_batch(seed, tmp_path)
        counts.update(result.counts)
        crashes += result.crashes
        beyond += result.beyond_concurrency
        if result.violations:
            failures.append(f"seed {seed}: {result.violations[:3]}")
    print(f"{SEEDS} seeds: rows {dict(counts)}; {crashes} crashes")
    assert failures == [], window + "\n" + "\n".join(failures[:10])
    # The seeds reach every ending: delivered, failed, cancelled and held by the budget.
    endings = (
        "delivered",
        "failed",
        "cancelled",
        "paused: batch budget",
        "not started: batch failed",
    )
    assert all(counts[s] for s in endings), counts
    assert crashes > SEEDS // 2
    # Rows waiting in a provider batch let more than --concurrency rows fly in some seeds
    # (not under a budget: the simulated rows' cost is not known, so those start one at a
    # time).
    assert beyond > SEEDS // 25, beyond


def test_the_checks_catch_a_ledger_that_claims_a_started_row_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ledger whose claim forgets that a row started (its state and try unchecked) gives a
    row a second start under the same id: the seeds say so."""
    from interlock.core.batches import RowState
    from interlock.storage.batches_memory import MemoryBatches

    def careless(self: MemoryBatches, batch_id: str, claims: Any, now: float) -> list[int]:
        rows = self._rows.get(batch_id, {})
        for number, _, run_id in claims:
            rows[number].state, rows[number].run_id = RowState.STARTED, run_id
        for row in rows.values():  # and every started row is claimable again
            if row.state is RowState.STARTED and row.result is None:
                row.state = RowState.PENDING
        return [number for number, _, _ in claims]

    monkeypatch.setattr(MemoryBatches, "claim_rows", careless)
    broken = [s for s in range(50) if simulate_batch(s).violations]
    assert len(broken) > 25, broken


def test_a_row_claimed_before_a_cancel_gets_its_run_stopped() -> None:
    """A driver killed between claiming rows and making their runs, `batch cancel` run while
    no driver lives (it finds no run of those rows to stop), then a resume: the runs made for
    those rows are cancelled, not run to their end (seeds 84, 146, 227, 232 of these did)."""
    broken = {s: r.violations for s in range(300) if (r := simulate_batch(s)).violations}
    assert broken == {}


def test_the_checks_catch_a_driver_that_ignores_the_tolerance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver that starts rows whatever failed before (its `--tolerate` forgotten when it
    chooses rows): the seeds that tolerate failures say so."""
    import interlock.workloads.batches as batches

    real = batches.next_starts  # type: ignore[attr-defined]

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "tolerate": None})

    monkeypatch.setattr(batches, "next_starts", forgetful)
    broken = [s for s in range(300) if simulate_batch(s).violations]
    assert len(broken) > 5, broken
    assert any("tolerates" in v for s in broken for v in simulate_batch(s).violations)


def test_the_checks_catch_a_driver_that_lets_every_parked_row_wait_uncounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver that counts no row waiting in a provider batch against --concurrency (its
    --batch-waiting forgotten, as if unbounded): the seeds with a small one say so."""
    import interlock.workloads.batches as batches

    real = batches.next_starts  # type: ignore[attr-defined]

    def unbounded(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "batch_waiting": 10**6})

    monkeypatch.setattr(batches, "next_starts", unbounded)
    broken = [s for s in range(300) if simulate_batch(s).violations]
    assert len(broken) > 5, broken
    assert any("--batch-waiting" in v for s in broken for v in simulate_batch(s).violations)
