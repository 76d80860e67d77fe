"""Every named crash point, armed in the real CLI: killed there, resumed, nothing lost."""

from __future__ import annotations

import os
from pathlib import Path

from interlock.runtime.faults import CRASH_POINTS

from .crash_points import crash_every_point

PER_POINT = int(os.environ.get("INTERLOCK_CRASH_PER_POINT", "5"))


def test_every_crash_point_kills_and_resumes_cleanly(tmp_path: Path) -> None:
    """Each crash point (at its 1st, 2nd and 3rd pass) kills the CLI; resume delivers every
    run once, with committed outputs, no repeated completion and a sound SQLite file."""
    tallies, repeats = crash_every_point(PER_POINT, tmp_path)
    for point in CRASH_POINTS:
        tally = tallies[point]
        print(f"{point}: {tally.iterations} iterations, {tally.killed} killed")
        assert tally.iterations == PER_POINT
        assert tally.killed >= 1, f"{point} was never reached"
        assert tally.violations == [], f"{point}: {tally.violations[:5]}"
    print(f"worker runs repeated (killed after the work, before its commit): {repeats}")
