"""The dashboard's graph credits the `next:` rule that held, not every rule between the same
two phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock import Interlock, register
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Settings
from interlock.server.graph import describe, path_taken

FLOW = """
pairs:
  phases:
    - id: a
      workers: [{role: w, call: graph_rules.one}]
      next:
        - {if: "visits.a > 5", goto: c}
        - {goto: c}
    - id: b
      workers: [{role: v, call: graph_rules.one}]
    - id: c
      workers: [{role: u, call: graph_rules.one, final: true}]
"""


def _one(ctx: TaskContext) -> str:
    return "done\n"


def test_only_the_rule_that_held_is_counted_as_taken(tmp_path: Path) -> None:
    """Rules 1 and 2 both go from a to c; rule 1 never holds: its edge is not taken, rule 2's
    is taken once (both were "taken 1x" when counts were kept per pair of phases)."""
    register("graph_rules.one", _one)
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    app = Interlock(tmp_path / "home", settings=Settings(heartbeat=0.05))
    state = app.run(flow, topic="t")
    taken = path_taken(list(app.store.events(state.run_id)))["taken"]
    from interlock.core.loader import load_workflow

    edges = describe(load_workflow(flow).get("pairs").pipeline)["flow"]

    def key(edge: dict[str, Any]) -> str:  # as graph.js looks an edge up
        pair = f"{edge['from']}->{edge['to']}"
        return f"{pair}#{edge['rule']}" if edge["rule"] else pair

    counts = {(e["from"], e["to"], e["rule"]): taken.get(key(e), 0) for e in edges}
    assert counts[("a", "c", 1)] == 0
    assert counts[("a", "c", 2)] == 1
    assert counts[("c", "end", None)] == 1
