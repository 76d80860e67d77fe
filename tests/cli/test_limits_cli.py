"""`interlock limits` end to end: the caps, their spend in the window, the open
reservations, and a bad `[limits]` refused with the file, the key and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from interlock.providers.spend import Window, keys_at, parse_limits
from interlock.storage.spend_sqlite import SQLiteSpend


def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_limits_shows_spend_and_open_reservations(cli_env: dict[str, str], tmp_path: Path) -> None:
    """What was settled and what is held show against the cap, with what is left."""
    home = Path(cli_env["INTERLOCK_HOME"])
    home.mkdir()
    (home / "interlock.toml").write_text("[limits]\nmax_cost_usd_per_day = 1\n")
    limits = parse_limits({"max_cost_usd_per_day": 1}, "interlock.toml")
    assert limits.caps[0].window is Window.DAY
    now = time.time()
    keys = keys_at(limits.caps, now)
    ledger = SQLiteSpend(home / "ledger.db")
    ledger.reserve(hold="a", keys=keys, amount_usd=0.3, now=now, expires=now + 600)
    ledger.reserve(hold="b", keys=keys, amount_usd=0.4, now=now, expires=now + 600)
    ledger.settle(hold="b", keys=keys, spent_usd=0.2)
    ledger.close()
    shown = cli(cli_env, tmp_path, "limits")
    assert shown.returncode == 0, shown.stderr
    assert (
        "daily: USD 0.20 spent of 1.00 per day (every call); USD 0.30 held by 1 open "
        "reservation(s); USD 0.50 left; resets 00:00 UTC"
    ) in shown.stdout
    [row] = [
        json.loads(line)
        for line in cli(cli_env, tmp_path, "limits", "--json").stdout.split("\n")
        if line
    ]
    assert (row["spent_usd"], row["open_reservations"]) == (0.2, 1)


def test_limits_shows_spend_below_a_cent(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A call's spend is a fraction of a cent: 0.0015 spent shows as such, not as 0.00."""
    home = Path(cli_env["INTERLOCK_HOME"])
    home.mkdir()
    (home / "interlock.toml").write_text("[limits]\nmax_cost_usd_per_day = 1\n")
    limits = parse_limits({"max_cost_usd_per_day": 1}, "interlock.toml")
    now = time.time()
    keys = keys_at(limits.caps, now)
    ledger = SQLiteSpend(home / "ledger.db")
    ledger.reserve(hold="a", keys=keys, amount_usd=0.01, now=now, expires=now + 600)
    ledger.settle(hold="a", keys=keys, spent_usd=0.0015)
    ledger.close()
    shown = cli(cli_env, tmp_path, "limits")
    assert shown.returncode == 0, shown.stderr
    assert "daily: USD 0.0015 spent of 1.00 per day" in shown.stdout
    assert "USD 0.9985 left" in shown.stdout


def test_a_bad_cap_is_refused_naming_the_file_and_the_fix(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A negative cap stops the command with exit 2, no traceback, no ledger made."""
    (tmp_path / "interlock.toml").write_text("[limits]\nmax_cost_usd_per_month = -5\n")
    shown = cli(cli_env, tmp_path, "limits")
    assert shown.returncode == 2
    assert str(tmp_path / "interlock.toml") in shown.stderr
    assert "max_cost_usd_per_month = -5 is negative: give 0 or more US dollars" in shown.stderr
    assert not (Path(cli_env["INTERLOCK_HOME"]) / "ledger.db").exists()


WORKFLOW = """
draft:
  phases:
    - id: write
      workers:
        - role: writer
          model: main
          task: "Write about {topic}."
          final: true
"""


def test_check_names_a_model_that_no_cap_would_let_start(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A model whose output limit alone costs more than a cap is a problem at check time."""
    (tmp_path / "draft.yaml").write_text(WORKFLOW)
    (tmp_path / "interlock.toml").write_text(
        '[providers.local]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[models.main]\nprovider = "local"\nmodel = "m"\nmax_output_tokens = 1000\n'
        "output_price_per_mtok = 80.0\n\n[limits]\nmax_cost_usd_per_day = 0.05\n"
    )
    shown = cli(cli_env, tmp_path, "check", "draft.yaml")
    assert shown.returncode == 2
    assert "worker 'writer': model 'main': 1000 output tokens alone can cost USD 0.0800" in (
        shown.stderr
    )
    assert "over spend cap 'daily' (USD 0.05" in shown.stderr
