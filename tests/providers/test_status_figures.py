"""The figures `status` and the summary show: each worker's total over its visits and
attempts (visits broken out) adding up to the run's cost, estimates marked as such, and the
paid calls that gave no output counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock import RunStatus
from interlock.cli.foreground import spent_line
from interlock.cli.main import cli
from interlock.storage.base import fold_history

from .fake_llm_server import FakeServer, Fault
from .project import app_for, make_project

LOOP = """
p:
  phases:
  - id: review
    workers:
    - role: reviewer
      model: gpt
      schema: {type: object, properties: {score: {type: number}}, required: [score]}
    next:
    - {if: "reviewer.score < 8.0", goto: revise, max_visits: 2}
    - {goto: publish}
  - id: revise
    workers:
    - {role: reviser, model: gpt, reads: [reviewer.md]}
    next:
    - {goto: review}
  - id: publish
    workers:
    - {role: publisher, model: claude, final: true, reads: [reviewer.md]}
"""


def test_worker_rows_show_their_total_over_visits_and_add_up_to_the_run(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer visited three times shows every visit's cost, broken out by visit; the
    rows add up to the run's total (the last visit alone left $0.012 out)."""
    server.state.reply = ['{"score": 5}']
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "loop.yaml"
    flow.write_text(LOOP)
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    view = app.status(state.run_id)
    workers = {r: w for phase in view["phases"] for r, w in phase["workers"].items()}
    reviewer = workers["reviewer"]
    assert reviewer["visit"] == 3
    assert reviewer["cost_usd"] == pytest.approx(0.018)  # 3 calls of $0.006
    assert reviewer["visit_costs"] == {str(v): pytest.approx(0.006) for v in (1, 2, 3)}
    assert sum(w["cost_usd"] for w in workers.values()) == pytest.approx(view["cost_usd"])
    shown = CliRunner().invoke(cli, ["--home", str(project / "home"), "status", state.run_id])
    assert shown.exit_code == 0, shown.output
    assert "$0.0180 (by visit 1: $0.0060, 2: $0.0060, 3: $0.0060)" in shown.output
    assert view["retry_count"] == 0


def test_estimated_figures_are_marked_in_status_and_the_summary(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream without usage counts tokens at four characters a token: `status` and the
    summary mark those figures as estimates instead of stating them as counts."""
    server.fail_next(Fault(no_usage=True))
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "one.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: w, model: gpt, final: true}\n"
    )
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.DELIVERED, state.failure
    view = app.status(state.run_id)
    assert view["estimated"] is True
    assert view["phases"][0]["workers"]["w"]["estimated"] is True
    shown = CliRunner().invoke(cli, ["--home", str(project / "home"), "status", state.run_id])
    assert "(estimated)" in shown.output
    assert "cost ~$" in shown.output and "tokens ~" in shown.output
    assert spent_line(state).startswith("spent ~$")


def test_the_summary_counts_paid_calls_that_gave_no_output(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two refused answers (empty) that were paid for are said with what they cost ($0.006
    each), not "0 task(s) completed" alone."""
    server.fail_next(Fault(empty=True), Fault(empty=True))
    project = make_project(tmp_path, server, monkeypatch)
    flow = project / "one.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: w, model: gpt, final: true, retries: 1}\n"
    )
    app = app_for(project)
    state = app.run(flow, topic="t")
    assert state.status is RunStatus.FAILED
    folded = fold_history(app.store.events(state.run_id))
    line = spent_line(folded)
    assert "0 task(s) completed; 2 paid call(s) failed or were refused ($0.0120)" in line, line
