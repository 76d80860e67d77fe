"""`check --cost` prints the worst case of each pipeline, and a worst case over the budget is
a warning at `check` and `run`, or an error with its own exit code under `--strict`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from interlock.errors import ExitCode

PRICED = """
[providers.oa]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[models.m]
provider = "oa"
model = "some-model"
input_price_per_mtok = 1.0
output_price_per_mtok = 2.0
max_output_tokens = 1000
"""
# One worker, two retries: three calls of 1,300 prompt tokens (300 + a topic assumed to be
# 1,000 tokens) and 1,000 answer tokens: 6,900 tokens and 3 * $0.0033.
FLOW = """
p:
  {budget}
  phases:
  - id: a
    workers:
    - {{role: w, final: true, model: m, retries: 2}}
"""


def interlock(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def project(tmp_path: Path, config: str, budget: str = "") -> Path:
    """A folder with interlock.toml and flow.yaml; returns the workflow file."""
    (tmp_path / "interlock.toml").write_text(config)
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW.format(budget=budget))
    return flow


def test_check_cost_prints_the_worst_case(tmp_path: Path) -> None:
    """`check --cost` says the most a run can spend and use, and each worker's share."""
    flow = project(tmp_path, PRICED)
    done = interlock(tmp_path / "home", "check", str(flow), "--cost")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "p: at most $0.0099 and 6,900 tokens (worst case; topic and each input" in text
    assert "w (phase a): up to 3 call(s), prompt up to 1,300 tokens" in text


def test_check_cost_json(tmp_path: Path) -> None:
    """`check --cost --json` gives one JSON object per pipeline."""
    flow = project(tmp_path, PRICED)
    done = interlock(tmp_path / "home", "check", str(flow), "--cost", "--json")
    assert done.returncode == 0, done.stderr
    quote = json.loads(done.stdout)
    assert quote["pipeline"] == "p" and quote["max_tokens"] == 6900
    assert abs(quote["max_cost_usd"] - 0.0099) < 1e-9
    assert quote["dearest_path"] == {"a": 1} and quote["cost_unbounded"] == []


def test_check_names_the_worker_without_an_output_limit(tmp_path: Path) -> None:
    """Without max_output_tokens the quote has no bound, and says where to set it."""
    flow = project(tmp_path, PRICED.replace("max_output_tokens = 1000\n", ""))
    done = interlock(tmp_path / "home", "check", str(flow), "--cost")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "p: no bound on cost or tokens" in text
    assert (
        "no bound: phase 'a', worker 'w': model 'm' has no output limit: set "
        "max_output_tokens in [models.m] or in the worker's params"
    ) in text
    assert "dearest path" not in text  # the way to the first unbounded call is no dearest
    bounded = interlock(tmp_path / "home", "check", str(project(tmp_path, PRICED)), "--cost")
    assert "dearest path: a x1" in bounded.stdout


def test_over_budget_warns_at_check_and_fails_under_strict(tmp_path: Path) -> None:
    """A worst case over max_cost_usd is a warning, and exit code 7 with --strict."""
    flow = project(tmp_path, PRICED, "budget: {max_cost_usd: 0.005}")
    warned = interlock(tmp_path / "home", "check", str(flow))
    assert warned.returncode == 0, warned.stderr
    text = " ".join(warned.stderr.split())
    assert (
        "warning: pipeline 'p': a run can use up to $0.0099, over its budget (max_cost_usd "
        "0.005): the budget would fail such a run"
    ) in text
    strict = interlock(tmp_path / "home", "check", str(flow), "--strict")
    assert strict.returncode == ExitCode.OVER_BUDGET == 7
    assert "the worst case is over the budget (--strict)" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_run_warns_or_refuses_under_strict(tmp_path: Path) -> None:
    """`run` quotes with its own topic: over the budget it warns and runs, or, with
    --strict, refuses before recording anything."""
    offline = '[models.m]\nprovider = "offline"\nmax_output_tokens = 50\n'
    flow = project(tmp_path, offline, "budget: {max_tokens: 100}")
    home = tmp_path / "home"
    refused = interlock(home, "run", str(flow), "--topic", "x", "--strict")
    assert refused.returncode == ExitCode.OVER_BUDGET, refused.stderr
    # 3 calls of 301 prompt tokens (the topic is one token) and 50 answer tokens
    assert "a run can use up to 1,053 tokens, over its budget (max_tokens 100)" in " ".join(
        refused.stderr.split()
    )
    assert not refused.stderr.startswith("run ")
    listed = interlock(home, "runs", "--json")
    assert json.loads(listed.stdout or "[]") == [], listed.stdout
    ran = interlock(home, "run", str(flow), "--topic", "x")
    assert "warning: pipeline 'p': a run can use up to 1,053 tokens" in " ".join(ran.stderr.split())
    assert "\nrun " in ran.stderr  # started after the warning


def test_check_cost_counts_a_child_pipeline_once_per_attempt(tmp_path: Path) -> None:
    """A worker running the pipeline `p` with one retry can spend two of its worst cases."""
    flow = project(tmp_path, PRICED)
    flow.write_text(
        flow.read_text()
        + "parent:\n  phases:\n  - id: d\n    workers:\n"
        + "    - {role: sub, pipeline: p, retries: 1, final: true}\n"
    )
    done = interlock(tmp_path / "home", "check", str(flow), "--cost")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "parent: at most $0.0198 and 13,800 tokens (worst case" in text
    assert "sub (phase d): up to 6 call(s)" in text


def test_the_headline_says_which_call_workers_model_calls_it_leaves_out(tmp_path: Path) -> None:
    """A `call:` worker's own model calls are not in the amounts: the headline itself says
    so, naming the worker; a pipeline without one has no such words."""
    (tmp_path / "interlock.toml").write_text(PRICED)
    (tmp_path / "agentmod.py").write_text("def solve(ctx):\n    return 'done'\n")
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - {role: w, model: m}\n"
        "    - {role: agent, call: 'agentmod:solve', final: true}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home"), "check",
         str(flow), "--cost"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [headline] = [line for line in done.stdout.splitlines() if line.startswith("  p: ")]
    assert "at most $0.0033 and 2,300 tokens, not counting the model calls of call: worker " \
        "'agent' (worst case" in headline  # fmt: skip
    plain = interlock(tmp_path / "home", "check", str(project(tmp_path, PRICED)), "--cost")
    assert "not counting" not in plain.stdout
