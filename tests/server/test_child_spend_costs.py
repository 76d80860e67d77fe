"""The attempts API's cost breakdown counts what a running child run has spent so far (cost
and tokens, from `child_spent` in the parent's history), as the run's status and total do."""

from __future__ import annotations

from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.helpers import write_workflow
from tests.server.test_child_runs import FLOW

from interlock.core.subpipelines import child_run_id

# An agent CLI that echoes its prompt: its tokens are estimated and priced.
PRICED = """
[providers.agent]
kind = "cli"
command = ["cat"]

[models.sonnet]
provider = "agent"
model = "echo"
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
"""


def test_costs_count_a_paused_childs_spend_like_the_status(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """While the child run waits for approval (its drafter has spent money, the child has not
    ended), the parent's cost breakdown gives the run, the delegating phase and task the
    same cost and tokens as the parent's status; after both deliver they still agree."""
    (tmp_path / "interlock.toml").write_text(PRICED)
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("parent", "Otters")
    child = child_run_id(run_id, "summary@1", 1)
    server.wait_status(child, "paused")
    server.wait_status(run_id, "paused")
    for ended in (False, True):
        status = server.http.get(f"/api/runs/{run_id}").json()
        costs = server.http.get(f"/api/runs/{run_id}/attempts").json()["costs"]
        kid = server.http.get(f"/api/runs/{child}").json()
        assert kid["cost_usd"] > 0
        assert costs["run"]["cost_usd"] == status["cost_usd"]
        run_tokens = costs["run"]["tokens"]
        counted = run_tokens["input_tokens"] + run_tokens["output_tokens"]
        assert counted + costs["run"]["child_tokens"] == status["tokens"]
        delegated = costs["tasks"]["summary@1"]
        if not ended:
            assert delegated["cost_usd"] == round(kid["cost_usd"], 6)
            assert delegated["child_tokens"] == kid["tokens"]
            assert costs["phases"]["delegate"]["cost_usd"] == delegated["cost_usd"]
            assert server.http.post(f"/api/runs/{run_id}/approve", json={}).status_code < 300
            server.wait_status(run_id, "delivered")
        else:
            assert delegated["child_tokens"] == 0  # the final usage counts instead
