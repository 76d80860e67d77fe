"""A batch's `--max-cost-usd` holds back each row's worst case while the row runs, so that ten
rows started at once against a real (local) paid model never spend past the budget; what
the batch then says of the rows it holds back, and of a run paused by its own budget."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import API_KEY
from .fake_llm_server import FakeServer

WORKFLOW = """\
ask:
  phases:
    - id: answer
      workers:
        - {role: answerer, final: true, model: m, retries: 0, task: "Answer about {{ topic }}"}
"""


def _project(tmp_path: Path, server: FakeServer, workflow: str = WORKFLOW) -> dict[str, str]:
    """A one-call pipeline priced as a paid model: USD 3 / 15 per million tokens, answers
    of at most 500 tokens; ten rows."""
    (tmp_path / "interlock.toml").write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"

[models.m]
provider = "local"
model = "gpt-test"
max_output_tokens = 500
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
""")
    (tmp_path / "wf.yaml").write_text(workflow)
    (tmp_path / "rows.csv").write_text("topic\n" + "".join(f"row {n}\n" for n in range(1, 11)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env.update(INTERLOCK_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    env.update(FAKE_API_KEY=API_KEY, PYTHONUNBUFFERED="1", COLUMNS="200")
    return env


def _interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def _row_worst_case(env: dict[str, str], cwd: Path) -> float:
    """The most one row's run can cost, as `batch --dry-run` quotes it."""
    quoted = _interlock(env, cwd, "batch", "wf.yaml", "--inputs", "rows.csv", "--dry-run")
    found = re.search(r"the dearest row is row \d+ \(\$([0-9.]+)\)", quoted.stdout + quoted.stderr)
    assert found, quoted.stdout + quoted.stderr
    return float(found.group(1))


def test_ten_rows_at_once_spend_within_a_budget_of_a_few_calls(
    tmp_path: Path, server: FakeServer
) -> None:
    """Concurrency 10, a budget of 3.2 rows' worst cases, answers as long as
    their limit allows (each call costs nearly its worst case): three rows start, the
    spend stays under the budget, and the seven others wait as `paused: batch budget`,
    the batch saying which row the budget holds back, why, and how to go on (exit 3).
    Before, all ten started at once and spent about 2.5 times the budget."""
    server.state.input_tokens, server.state.output_tokens = 10, 450
    env = _project(tmp_path, server)
    worst = _row_worst_case(env, tmp_path)
    budget = round(3.2 * worst, 6)
    driven = _interlock(
        env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "b",
        "--concurrency", "10", "--max-cost-usd", str(budget),
    )  # fmt: skip
    said = driven.stdout + driven.stderr
    assert driven.returncode == 3, said
    assert "rows not started wait for the batch's budget: row 4's worst case" in said
    assert "'interlock batch resume b --max-cost-usd X' raises it" in said
    body = json.loads(_interlock(env, tmp_path, "batch", "status", "b", "--json").stdout)
    assert body["cost_usd"] <= budget
    assert body["counts"] == {"delivered": 3, "paused: batch budget": 7}
    assert len(server.state.requests) == 3
    assert server.state.max_in_flight <= 3
    shown = _interlock(env, tmp_path, "batch", "status", "b").stdout
    # Each row is counted once: the seven held back are not "waiting" as well.
    assert "3/10 done, 3 delivered, 0 running, 0 failed, 0 waiting, 7 paused: batch budget" in (
        shown
    )
    assert f"of ${budget:.4f}" in shown
    assert "rows not started wait for the batch's budget: row 4's worst case" in shown
    listed = _interlock(env, tmp_path, "batches").stdout
    assert "over budget" not in listed


def test_raising_the_budget_starts_the_rows_it_held_back(
    tmp_path: Path, server: FakeServer
) -> None:
    """`batch resume --max-cost-usd` with room for every row's worst case runs the seven
    rows held back; the spend stays within the new budget."""
    server.state.input_tokens, server.state.output_tokens = 10, 450
    env = _project(tmp_path, server)
    worst = _row_worst_case(env, tmp_path)
    args = ["batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "b", "--concurrency", "10"]
    assert _interlock(env, tmp_path, *args, "--max-cost-usd", str(2.5 * worst)).returncode == 3
    raised = _interlock(env, tmp_path, "batch", "resume", "b", "--max-cost-usd", str(11 * worst))
    assert raised.returncode == 0, raised.stdout + raised.stderr
    body = json.loads(_interlock(env, tmp_path, "batch", "status", "b", "--json").stdout)
    assert body["counts"] == {"delivered": 10}
    assert body["cost_usd"] <= 11 * worst


def test_a_batch_that_went_over_is_flagged(tmp_path: Path, server: FakeServer) -> None:
    """A model without a price per output token leaves a row's worst case unknown: the
    budget holds the rows to the recorded spend only, so the batch can pass it; `batch
    status` and `batches` then say it went over."""
    server.state.input_tokens, server.state.output_tokens = 1000, 500
    env = _project(tmp_path, server)
    toml = tmp_path / "interlock.toml"
    toml.write_text(toml.read_text().replace("max_output_tokens = 500\n", ""))
    driven = _interlock(
        env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "over",
        "--concurrency", "10", "--max-cost-usd", "0.001",
    )  # fmt: skip
    said = driven.stdout + driven.stderr
    assert "batch over went over its budget: it spent $" in said
    assert "(over)" in _interlock(env, tmp_path, "batch", "status", "over").stdout
    assert "over (over budget)" in _interlock(env, tmp_path, "batches").stdout


def test_a_run_paused_by_its_budget_says_the_next_call_would_pass_what_is_left(
    tmp_path: Path, server: FakeServer
) -> None:
    """A run whose next call's worst case would pass what is left of its `budget:` pauses;
    `status` says what may be true, and does not call a budget with money left "spent"."""
    workflow = WORKFLOW.replace(
        "ask:\n", "ask:\n  budget: {max_cost_usd: 0.005, on_exceed: pause}\n"
    )
    env = _project(tmp_path, server, workflow)
    ran = _interlock(env, tmp_path, "run", "wf.yaml", "--topic", "t", "--run-id", "p")
    assert ran.returncode == 3, ran.stdout + ran.stderr
    shown = _interlock(env, tmp_path, "status", "p").stdout
    assert "paused on its budget: its spend reached it, or its next call's worst case" in shown
    assert "budget is spent" not in shown


def test_a_budget_under_one_rows_worst_case_starts_nothing_and_says_so_first(
    tmp_path: Path, server: FakeServer
) -> None:
    """A budget of half a row's worst case: the quote printed before the batch is recorded
    says no row like the dearest can start under it, no call is made, and the batch waits
    on the budget (exit 3), instead of every row starting and spending past it."""
    env = _project(tmp_path, server)
    worst = _row_worst_case(env, tmp_path)
    driven = _interlock(
        env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "b",
        "--concurrency", "10", "--max-cost-usd", str(worst / 2),
    )  # fmt: skip
    said = driven.stdout + driven.stderr
    assert driven.returncode == 3, said
    assert "more than --max-cost-usd: rows like it cannot start under this budget" in said
    assert "row 1's worst case" in said
    assert server.state.requests == []
