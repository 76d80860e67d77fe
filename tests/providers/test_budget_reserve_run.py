"""A run against the fake server under a cost budget: the calls whose worst case no longer
fits never start, so the spend the run records stays within its budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import RunStatus

from .fake_llm_server import FakeServer
from .project import app_for, make_project

# Three writers in parallel, each one call to `capped` (at most 500 output tokens at $8 per
# million, a prompt of about 310 tokens at $2): a worst case of about $0.0046 a call. The
# fake server answers 100 input and 400 output tokens: $0.0034 a call.
EXTRA = """
[models.capped]
provider = "oa"
model = "gpt-test"
input_price_per_mtok = 2.0
output_price_per_mtok = 8.0
max_output_tokens = 500
"""

FLOW = """
p:
  budget: {max_cost_usd: 0.010, on_exceed: fail}
  phases:
  - id: draft
    mode: parallel
    workers:
    - {role: a, model: capped, task: Draft part one}
    - {role: b, model: capped, task: Draft part two}
    - {role: c, model: capped, task: Draft part three}
  - id: publish
    workers:
    - {role: editor, command: ["{python}", "-c", "print('done')"], final: true}
"""


def test_recorded_spend_stays_within_the_budget(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls fit in $0.010, the third would not: it never starts, the run fails before
    it, and the recorded spend ($0.0068) is within the budget (all three: $0.0102)."""
    server.state.input_tokens, server.state.output_tokens = 100, 400
    project = make_project(tmp_path, server, monkeypatch, extra=EXTRA)
    flow = project / "flow.yaml"
    flow.write_text(FLOW)
    state = app_for(project).run(flow, topic="budgets", inputs={})
    assert state.status is RunStatus.FAILED
    assert len(server.state.requests) == 2
    assert state.cost_usd == pytest.approx(0.0068)
    assert state.cost_usd <= 0.010
    assert state.failure is not None
    assert "the next call of 'c' may cost up to $0.0046" in state.failure
    assert "$0.0032 is left of the budget $0.0100" in state.failure
