"""What a new user runs into on the command line: an empty note, waiting runs counted as
stopped, a misspelt signal, a budget warning said twice, and a `not_before` that reads an
input the pipeline does not declare. Each is a clear message with the project's exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_cli import cli

PY = sys.executable
WAITS = f"""
shipping:
  inputs: {{start_at: {{default: 0}}}}
  phases:
    - id: ship
      wait_for: {{signal: payment}}
      workers:
        - {{role: shipper, final: true, command: ['{PY}', '-c', 'print(1)']}}
"""


def _flow(tmp_path: Path, text: str = WAITS, name: str = "flow.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_empty_message_is_refused(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock message RUN ""` (or only blanks) exits 2 saying what to give; a real note
    is queued."""
    submitted = cli(cli_env, "submit", _flow(tmp_path), "shipping", "--topic", "t")
    run_id = submitted.stdout.strip()
    for text in ("", "   "):
        refused = cli(cli_env, "message", run_id, text)
        assert refused.returncode == 2, refused.stdout
        assert "the message is empty: give the note's text" in refused.stderr
    assert cli(cli_env, "message", run_id, "checked").returncode == 0


def test_a_misspelt_signal_name_gets_a_did_you_mean(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock signal RUN paymnet` exits 2 naming the signal the pipeline waits for."""
    run_id = cli(cli_env, "submit", _flow(tmp_path), "shipping", "--topic", "t").stdout.strip()
    sent = cli(cli_env, "signal", run_id, "paymnet", "--no-drive")
    assert sent.returncode == 2, sent.stdout
    assert "waits for no signal 'paymnet' (did you mean 'payment'?)" in sent.stderr


def test_a_waiting_run_without_an_orchestrator_is_not_called_a_stopped_running_one(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A run left waiting for a signal when its process stopped: `runs` does not count it
    among running runs no orchestrator holds; it says how such a waiting run goes on."""
    process = subprocess.Popen(
        [PY, "-m", "interlock", "run", _flow(tmp_path), "shipping", "--topic", "t"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = json.loads(cli(cli_env, "runs", "--json").stdout)
            if rows and rows[0]["status"] == "waiting" and rows[0]["driven_by"]:
                break
            time.sleep(0.3)
        else:
            raise AssertionError("the run never waited")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    listing = cli(cli_env, "runs")
    text = " ".join(listing.stdout.split())
    assert "no orchestrator holds" not in text and "(not driven)" not in text
    assert "1 waiting run(s) have no orchestrator to go on when the wait ends" in text
    assert "'interlock signal RUN NAME' sends a signal and continues the run" in text


def test_check_cost_strict_says_each_budget_problem_once(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A model without a price under a cost budget: `check --cost --strict` fails (exit 7)
    naming it once; `check --cost` warns once and lets the quote's lines give the reason."""
    (tmp_path / "interlock.toml").write_text(
        '[models.cheap]\nprovider = "openai"\nmodel = "c"\nmax_output_tokens = 100\n'
    )
    flow = _flow(
        tmp_path,
        "p:\n  budget: {max_cost_usd: 1}\n  phases:\n    - id: a\n      workers:\n"
        "        - {role: w, model: cheap, task: x, final: true}\n",
        "budget.yaml",
    )
    strict = cli(cli_env, "check", flow, "--cost", "--strict")
    assert strict.returncode == 7, strict.stdout + strict.stderr
    said = strict.stdout + strict.stderr
    assert said.count("no known price") == 1, said
    assert "warning:" not in said
    loose = cli(cli_env, "check", flow, "--cost")
    assert loose.returncode == 0, loose.stderr
    said = loose.stdout + loose.stderr
    assert said.count("no known price") == 1, said
    assert said.count("may be reached") == 1, said


def test_not_before_reading_an_undeclared_input_is_a_validation_error(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`not_before: inputs.start_ta` where the input is `start_at`: check exits 2 naming the
    pipeline, phase and key, the close declared input, and where to declare one."""
    flow = _flow(
        tmp_path, WAITS.replace("wait_for: {signal: payment}", "not_before: inputs.start_ta")
    )
    checked = cli(cli_env, "check", flow)
    assert checked.returncode == 2, checked.stdout
    text = " ".join(checked.stderr.split())
    assert (
        "pipeline 'shipping', phase 'ship', not_before: expression 'inputs.start_ta' reads "
        "inputs.start_ta, which is not a declared input (did you mean 'start_at'?)"
    ) in text
    assert "declare it under the pipeline's 'inputs'" in text
