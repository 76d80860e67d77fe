"""Numbers on the command line outside what they can mean are bad input: exit 2 naming the
option and its range, never an overflow deep in the ledger or the socket (exit 70)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli.main import cli

HUGE = "99999999999999999999"  # past what SQLite and PostgreSQL store in an integer


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["runs", "--limit", HUGE], "--limit"),
        (["runs", "--limit", "0"], "--limit"),  # said "no runs yet" although runs existed
        (["runs", "--limit", "-1"], "--limit"),
        (["events", "some-run", "--since", HUGE], "--since"),
        (["events", "some-run", "--since", "-3"], "--since"),
        (["watch", "some-run", "--since", HUGE], "--since"),
        (["cache", "list", "--limit", HUGE], "--limit"),
        (["serve", "--port", "99999"], "--port"),
        (["serve", "--port", "-1"], "--port"),
        (["orchestrate", "--capacity", "0"], "--capacity"),
    ],
)
def test_a_number_out_of_range_is_refused(args: list[str], option: str, tmp_path: Path) -> None:
    """Each of these used to overflow (exit 70), or be taken silently; now exit 2 names the
    option and the range it accepts, before anything is opened or created."""
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output
    assert "is not in the range" in result.output
    assert not home.exists()
