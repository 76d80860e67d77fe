"""Crash test: SIGKILL the real orchestrator at random moments, resume, and check every run."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from .crash_harness import crash_loop

KILLS = int(os.environ.get("INTERLOCK_CRASH_KILLS", "100"))


@pytest.mark.timeout(2700)  # 100 real kills and resumes: many runs end before their kill
def test_kill_nine_anywhere_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    """After random kill -9s (100 by default) and resumes, every run is delivered whole."""
    seed = int(os.environ.get("INTERLOCK_CRASH_SEED", random.randrange(1 << 30)))
    print(f"crash seed {seed}: rerun with INTERLOCK_CRASH_SEED={seed}")
    tally = crash_loop(KILLS, seed, tmp_path)
    print(
        f"kills={tally.kills} runs={tally.runs} resumes={tally.resumes} "
        f"reexecuted_before_commit={tally.reexecuted}"
    )
    assert tally.kills >= KILLS
    assert tally.violations == [], f"seed {seed}: {tally.violations[:10]}"
