"""(Re)record the replay fixtures in tests/fixtures/histories/, deliberately.

    python -m tests.reliability.record_histories            # rewrite every fixture
    python -m tests.reliability.record_histories --check    # only say which would change

Run it only when a change to the engine's decisions is intended; review the diff of the JSON
files like any other change. Histories come from the examples (run for real, offline) and from
simulator seeds chosen because they exercise a rule (retries, timeouts, pauses, loops...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interlock import Interlock
from interlock.runtime.orchestrator import Settings
from interlock.sim.replay import fixture_of
from interlock.sim.world import Simulation

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "histories"
EXAMPLES = [
    ("research", "examples/research.json", "research", "FSA architecture"),
    ("translate-polish-loop", "examples/translate.yaml", "translate", "A short note"),
    ("fanout-article", "examples/fanout.yaml", "article", "Durable workflows"),
]
# Simulated histories: (fixture name, pipeline, decision rules and event kinds it must show).
WANTED = [
    ("sim-retries", "retries", {"retry", "retry_due"}),
    ("sim-timeout", "retries", {"timeout", "retry"}),
    ("sim-fallbacks", "fallbacks", {"fallback"}),
    ("sim-give-up", "sequential", {"give_up"}),
    ("sim-pause-approve", "pause", {"pause", "approved"}),
    ("sim-polish-loop-bound", "loop", {"loop_bound"}),
    ("sim-fanout", "fanout", {"dispatch", "deliver"}),
    ("sim-random-pause-branch", "random", {"pause", "branch"}),
    ("sim-cancelled", "random", {"run_cancelled"}),
    ("sim-adopted-after-crash", "random", {"adopted"}),
]


def _example(name: str, path: str, pipeline: str, topic: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        app = Interlock(home, settings=Settings(heartbeat=0.05))
        try:
            state = app.run(ROOT / path, pipeline, topic=topic)
            run_id = state.run_id
            record = app.store.get_run(run_id)
            definition = app.orchestrator.definition(record.pipeline, record.definition_hash)
            return fixture_of(name, path, definition, app.store.events(run_id))
        finally:
            app.close()


def _features(events: list[Any]) -> set[str]:
    found = set()
    for stored in events:
        found.add(stored.kind)
        if stored.rule:
            found.add(stored.rule)
        if stored.kind == "task_completed" and stored.data.get("adopted"):
            found.add("adopted")
    return found


def _simulated() -> Iterator[dict[str, Any]]:
    used: set[tuple[str, int]] = set()  # one history per seed and shape: no duplicates
    for name, pipeline, wanted in WANTED:
        for seed in range(5000):
            if (pipeline, seed) in used:
                continue
            sim = Simulation(seed, pipeline=pipeline)
            result = sim.run()
            events = sim.store.events(sim.run_id)
            if result.ok and wanted <= _features(events):
                used.add((pipeline, seed))
                yield fixture_of(name, f"simulator seed {seed}", sim.definition, events)
                break
        else:
            raise SystemExit(f"no seed below 5000 shows {sorted(wanted)} for {pipeline}")


def record() -> list[dict[str, Any]]:
    """Every fixture, freshly recorded."""
    for name in [n for n in os.environ if n.startswith("INTERLOCK_")]:
        del os.environ[name]  # a developer's configuration must not leak into fixtures
    fixtures = [_example(*spec) for spec in EXAMPLES]
    return fixtures + list(_simulated())


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list changes")
    args = parser.parse_args()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    changed = []
    for fixture in record():
        path = FIXTURES / f"{fixture['name']}.json"
        text = json.dumps(fixture, indent=1, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            changed.append(path.name)
            if not args.check:
                path.write_text(text)
        print(f"{path.relative_to(ROOT)}: {len(fixture['events'])} events ({fixture['source']})")
    print(f"{'would change' if args.check else 'changed'}: {changed or 'nothing'}")
    sys.exit(1 if args.check and changed else 0)


if __name__ == "__main__":
    main()
