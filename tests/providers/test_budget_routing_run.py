"""A run against the fake server whose budget rule picks its path: with little budget left
after the draft it takes the short path, with plenty the full one, and `explain` shows the
rule and the budget value it read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from interlock import RunStatus

from .fake_llm_server import FakeServer
from .project import app_for, make_project

# Each call to `gpt` on the fake server: 1,000 input and 500 output tokens at $2 and $8 per
# million, so $0.006.
FLOW = """
p:
  budget: {{max_cost_usd: {limit}}}
  phases:
  - id: draft
    workers:
    - {{role: writer, model: gpt, task: Draft the article}}
    next:
    - {{if: "budget.remaining_usd < 0.01", goto: short}}
  - id: full
    workers:
    - {{role: expander, model: gpt, reads: [writer.md], task: Expand the draft}}
    next:
    - {{goto: publish}}
  - id: short
    workers:
    - {{role: summarizer, command: ["{{python}}", "-c", "print('short')"]}}
  - id: publish
    workers:
    - {{role: editor, command: ["{{python}}", "-c", "print('done')"], final: true}}
"""


def explain(home: Path, run_id: str) -> str:
    """`interlock explain RUN` from the real command line, whitespace folded."""
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), "explain", run_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("limit", "path", "verdict"),
    [
        (0.012, ["draft", "short", "publish"], "held: budget.remaining_usd = 0.006"),
        (1.0, ["draft", "full", "publish"], "did not hold: budget.remaining_usd = 0.994"),
    ],
)
def test_a_budget_rule_switches_the_path(
    tmp_path: Path,
    server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    limit: float,
    path: list[str],
    verdict: str,
) -> None:
    """The remaining budget after the draft decides the path, as `explain` shows."""
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "flow.yaml"
    flow.write_text(FLOW.format(limit=limit))
    app = app_for(project)
    state = app.run(flow, topic="budgets", inputs={})
    assert state.status is RunStatus.DELIVERED, state.failure
    assert list(state.visits) == path
    text = explain(project / "home", state.run_id)
    assert f"rule 1 (budget.remaining_usd < 0.01) {verdict}" in text
