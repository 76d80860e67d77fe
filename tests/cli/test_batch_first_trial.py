"""What a new user's first batch runs into: no configuration said at start and in `batch
status`, a batch looked for in the wrong ledger, `--home` after the command, a misspelt
command, `check --json` without `--cost`, and `country: NO` read as false by `run`, `batch`
and `submit`. Each is said on stderr with the place and the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

GREET = """\
greet:
  inputs:
    country: NO
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          model: sonnet
          task: "Write about {{ topic }} in {{ country }} (en)"
"""

ECHO = """\
echo:
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          command: [sh, -c, 'echo "$1" > "$2"', sh, "{topic}", "{output}"]
"""

TYPED = "line 3: NO is read by YAML as the boolean false"
OFFLINE = "rows ran on the offline stand-in"


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command in `cwd`, which never shows a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def project(tmp_path: Path) -> Path:
    """A folder with the two workflows and a CSV of two rows, and no interlock.toml."""
    (tmp_path / "greet.yaml").write_text(GREET)
    (tmp_path / "echo.yaml").write_text(ECHO)
    (tmp_path / "rows.csv").write_text("topic\nfjords\nglaciers\n")
    return tmp_path


def test_a_batch_without_configuration_says_so_at_start_and_in_its_status(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """With no interlock.toml, `batch` names the configuration it used (none) and warns that
    every row answers with the offline stand-in; `batch status` and its JSON say the rows
    ran on it. A batch that calls no model has no such warning."""
    folder = project(tmp_path)
    started = interlock(cli_env, folder, "batch", "greet.yaml", "--inputs", "rows.csv",
                        "--batch-id", "nc")  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "config: none found" in started.stderr
    assert "warning: no model is configured: 'sonnet' will answer every row" in started.stderr
    shown = interlock(cli_env, folder, "batch", "status", "nc")
    assert shown.returncode == 0 and OFFLINE in shown.stderr, shown.stderr
    as_json = json.loads(interlock(cli_env, folder, "batch", "status", "nc", "--json").stdout)
    assert len(as_json["warnings"]) == 1 and OFFLINE in as_json["warnings"][0]
    plain = interlock(cli_env, folder, "batch", "echo.yaml", "--inputs", "rows.csv",
                      "--batch-id", "plain")  # fmt: skip
    assert plain.returncode == 0 and "offline" not in plain.stderr, plain.stderr
    shown = json.loads(interlock(cli_env, folder, "batch", "status", "plain", "--json").stdout)
    assert shown["warnings"] == []


def test_a_batch_not_found_names_the_ledger_and_where_home_goes(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`batch resume tiny` from the wrong folder names the ledger looked in and `--home`;
    `--home` given after the command says it goes before it, not 'Did you mean --help?'."""
    env = {k: v for k, v in cli_env.items() if k != "INTERLOCK_HOME"}
    missing = interlock(env, tmp_path, "batch", "resume", "tiny")
    assert missing.returncode == 2
    assert f"no ledger at {tmp_path / '.interlock' / 'ledger.db'}" in missing.stderr
    assert "--home DIR" in missing.stderr
    after = interlock(env, tmp_path, "batch", "status", "tiny", "--home", str(tmp_path / "x"))
    assert after.returncode == 2
    assert "interlock' itself and goes before the command" in after.stderr
    assert "interlock --home VALUE batch status ...'" in after.stderr
    assert "Did you mean" not in after.stderr


def test_a_misspelt_command_suggests_the_nearest(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock rn` suggests `run` and `runs`."""
    result = interlock(cli_env, tmp_path, "rn")
    assert result.returncode == 2
    assert re.search(r"did you mean '[^']*interlock run' or '[^']*interlock runs'\?", result.stderr)


def test_check_json_without_cost_is_refused_with_the_fix(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`check --json` alone printed text with exit 0; it is refused with the command that
    gives JSON."""
    folder = project(tmp_path)
    result = interlock(cli_env, folder, "check", "echo.yaml", "--json")
    assert result.returncode == 2
    assert "'interlock check FILE --cost --json'" in result.stderr


def test_run_batch_and_submit_say_what_yaml_reads_as_other_than_written(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`country: NO` is the boolean false: `run`, `batch` and `submit` say so once on
    stderr, naming the file and the line, as `check` does."""
    folder = project(tmp_path)
    commands = [
        ["run", "greet.yaml", "-t", "fjords"],
        ["batch", "greet.yaml", "--inputs", "rows.csv", "--dry-run"],
        ["submit", "greet.yaml", "-t", "fjords"],
    ]
    for command in commands:
        result = interlock(cli_env, folder, *command)
        assert result.returncode == 0, result.stderr
        assert result.stderr.count(f"warning: greet.yaml: {TYPED}") == 1, command
