"""A seed's history depends on the seed alone: not on the seeds run before it in the process,
the process's string hashing, or how fast or loaded the host is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import interlock.runtime.status_file
from interlock.sim import simulate

# Seed 60 ("pause", status.json kept current) once changed its history when a status.json
# rewrite happened to take longer than 50 ms of wall time (a stall of a loaded host).
SEED = 60
SRC = Path(interlock.__file__).resolve().parents[1]


def test_a_slow_host_does_not_change_a_seeds_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every status.json rewrite taking 60 ms of wall time leaves the seed's history as it is
    on a fast host: what the host's speed spaces out is measured on the simulated clock."""
    fast = simulate(SEED)
    real = interlock.runtime.status_file.status_view  # type: ignore[attr-defined]  # the name it calls

    def slow_view(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.06)  # a host stalled in the middle of the rewrite
        return real(*args, **kwargs)

    monkeypatch.setattr(interlock.runtime.status_file, "status_view", slow_view)
    slow = simulate(SEED)
    assert slow.summary() == fast.summary()
    assert fast.digest


def test_a_seed_in_a_batch_matches_it_alone_in_another_process() -> None:
    """Seed 60 after seeds 0-59 in this process has the history it has alone in a fresh
    process with another PYTHONHASHSEED (no state carries over from seed to seed)."""
    batch = [simulate(seed) for seed in range(SEED + 1)]
    code = f"from interlock.sim import simulate; print(simulate({SEED}).digest)"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(SRC)}
    alone = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert batch[SEED].digest == alone.stdout.strip()
    again = simulate(SEED)
    assert again.summary() == batch[SEED].summary()
