"""The real `interlock` command: exit codes, clear one-line errors, never a traceback."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = str(ROOT / "examples" / "research.json")


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def run_id_of(result: subprocess.CompletedProcess[str]) -> str:
    return next(line.split()[1] for line in result.stderr.splitlines() if line.startswith("run "))


def test_run_delivers_and_prints_the_final_path(cli_env: dict[str, str]) -> None:
    """`interlock run` exits 0 and prints where final.md is."""
    result = cli(cli_env, "run", RESEARCH, "research", "--topic", "FSA")
    assert result.returncode == 0, result.stderr
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.name == "final.md" and final.is_file()


def test_missing_workflow_file(cli_env: dict[str, str]) -> None:
    """A missing file is exit 2 with a message naming it and suggesting init."""
    result = cli(cli_env, "run", "nope.yaml", "research", "--topic", "x")
    assert result.returncode == 2
    assert "nope.yaml: no such workflow file" in result.stderr and "interlock init" in result.stderr


def test_invalid_workflow_lists_problems(cli_env: dict[str, str], tmp_path: Path) -> None:
    """An invalid workflow is exit 2 with each problem in the file's own words."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "t:\n  phases:\n  - id: a\n    workers: [{role: w, model: m, timout: 5, final: true}]\n"
    )
    result = cli(cli_env, "check", str(bad))
    assert result.returncode == 2
    assert "pipeline 't', phase 'a', worker 'w', key 'timout': unknown key" in result.stderr


def test_unknown_pipeline(cli_env: dict[str, str]) -> None:
    """An unknown pipeline name is exit 2 and lists the pipelines that exist."""
    result = cli(cli_env, "run", RESEARCH, "reserch", "--topic", "x")
    assert result.returncode == 2 and "pipelines are research" in result.stderr


def test_unknown_run(cli_env: dict[str, str]) -> None:
    """An unknown run id is exit 2, names the ledger searched and points to `interlock runs`,
    with or without a ledger there."""
    result = cli(cli_env, "status", "no-such-run")
    assert result.returncode == 2 and "interlock runs" in result.stderr
    assert cli(cli_env, "run", RESEARCH, "research", "--topic", "x").returncode == 0
    result = cli(cli_env, "status", "no-such-run")
    ledger = str(Path(cli_env["INTERLOCK_HOME"]) / "ledger.db")
    assert result.returncode == 2
    assert f"no run matches 'no-such-run' in {ledger} (runs started elsewhere" in result.stderr


def test_unknown_input(cli_env: dict[str, str]) -> None:
    """An input the pipeline does not declare is exit 2 and lists the declared ones."""
    result = cli(cli_env, "run", RESEARCH, "research", "--topic", "x", "--input", "lang=fr")
    assert result.returncode == 2 and "has no input 'lang'" in result.stderr
    translate = str(Path(RESEARCH).parent / "translate.yaml")
    result = cli(cli_env, "run", translate, "translate", "--topic", "x", "--input", "langage=fr")
    assert result.returncode == 2
    assert "has no input 'langage' (did you mean 'language'?)" in result.stderr


def test_approve_a_run_that_is_not_paused(cli_env: dict[str, str]) -> None:
    """Approving a delivered run is exit 2 and says why."""
    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    result = cli(cli_env, "approve", run_id[:12])
    assert result.returncode == 2 and "is not paused (it is delivered)" in result.stderr


def test_pause_exit_code_and_approve(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A paused run exits 3; approving it continues it to delivery (exit 0)."""
    flow = tmp_path / "pause.yaml"
    flow.write_text(
        "p:\n  phases:\n"
        "  - {id: a, pause_after: true, workers: [{role: w, model: m}]}\n"
        "  - {id: b, workers: [{role: f, model: m, final: true, reads: [w.md]}]}\n"
    )
    paused = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert paused.returncode == 3 and "interlock approve" in paused.stdout
    run_id = run_id_of(paused)
    approved = cli(cli_env, "approve", run_id, "-m", "ok")
    assert approved.returncode == 0, approved.stderr
    explain = cli(cli_env, "explain", run_id)
    assert "pause" in explain.stdout and "deliver" in explain.stdout


def test_failed_run_exit_code(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A run whose task fails for good exits 1 with the reason."""
    flow = tmp_path / "fail.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      command: ['{sys.executable}', '-c', 'raise SystemExit(3)']\n"
    )
    result = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert result.returncode == 1 and "exited with code 3 (nothing on stderr)" in result.stdout


def test_a_failed_commands_summary_is_the_last_line_it_wrote(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A script that dies with a traceback fails its run with one line: the exception it
    raised (the traceback's last line) and where the rest of its stderr is."""
    flow = tmp_path / "fail.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      command: ['{sys.executable}', '-c', 'import json; json.loads(\"{{bad\")']\n"
    )
    result = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert result.returncode == 1
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("failed: task w@1 failed after 1 attempt(s): exited with code 1: ")
    assert "JSONDecodeError: Expecting property name" in last
    logs = Path(cli_env["INTERLOCK_HOME"]) / "runs" / run_id_of(result) / "logs"
    assert last.endswith(f"(the rest of its stderr: {logs / 'w@1.1.stderr'})")
    assert "Traceback" not in result.stdout


def test_corrupted_database(cli_env: dict[str, str]) -> None:
    """A ledger file that is not a database is exit 5 with a fix, and is left untouched."""
    home = Path(cli_env["INTERLOCK_HOME"])
    home.mkdir(parents=True)
    garbage = b"this is not a database at all" * 100
    (home / "ledger.db").write_bytes(garbage)
    result = cli(cli_env, "runs")
    assert result.returncode == 5 and "corrupted or not a SQLite file" in result.stderr
    assert (home / "ledger.db").read_bytes() == garbage


def test_foreign_database(cli_env: dict[str, str]) -> None:
    """Another application's SQLite file is refused (exit 5) and not modified."""
    home = Path(cli_env["INTERLOCK_HOME"])
    home.mkdir(parents=True)
    db = sqlite3.connect(home / "ledger.db")
    db.execute("CREATE TABLE invoices (id INTEGER)")
    db.commit()
    db.close()
    result = cli(cli_env, "runs")
    assert result.returncode == 5 and "not an interlock ledger" in result.stderr
    tables = sqlite3.connect(home / "ledger.db").execute("SELECT name FROM sqlite_master")
    assert [t[0] for t in tables] == ["invoices"]


def test_unusable_state_directory(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A state directory that cannot be created is exit 5 with the reason."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = dict(cli_env, INTERLOCK_HOME=str(blocker / "home"))
    result = cli(env, "run", RESEARCH, "research", "--topic", "x")
    assert result.returncode == 5 and "cannot create the state directory" in result.stderr


def test_read_only_state_directory(cli_env: dict[str, str]) -> None:
    """A state directory that cannot be written is exit 5 and nothing recorded is lost."""
    home = Path(cli_env["INTERLOCK_HOME"])
    assert cli(cli_env, "run", RESEARCH, "research", "--topic", "x").returncode == 0
    # The immutable flag holds even for root, unlike permission bits.
    frozen = [str(home), str(home / "ledger.db"), str(home / "runs")]
    subprocess.run(["chattr", "+i", *frozen], check=True)
    try:
        result = cli(cli_env, "run", RESEARCH, "research", "--topic", "y")
        assert result.returncode == 5 and "not writable" in result.stderr
    finally:
        subprocess.run(["chattr", "-i", *frozen], check=True)
    listing = cli(cli_env, "runs")
    assert listing.returncode == 0 and "delivered" in listing.stdout


@pytest.mark.usefixtures("sigint_default")
def test_interrupt_is_resumable(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Ctrl-C exits 130 and `interlock resume` finishes the run."""
    flow = tmp_path / "slow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        f"      command: ['{sys.executable}', '-c', 'import time,os; time.sleep(1.5); "
        'open(os.environ["INTERLOCK_OUTPUT"], "w").write("ok")\']\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", str(flow), "p", "--topic", "x"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    while "task_started" not in process.stdout.readline():
        pass
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    run_id = next(line.split()[1] for line in stderr.splitlines() if line.startswith("run "))
    resumed = cli(cli_env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr


def test_init_writes_a_starter_that_checks(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock init` writes a file that `interlock check` accepts, and never overwrites."""
    target = tmp_path / "flow.yaml"
    assert cli(cli_env, "init", str(target)).returncode == 0
    assert cli(cli_env, "check", str(target)).returncode == 0
    again = cli(cli_env, "init", str(target))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_ledger_and_events_as_json(cli_env: dict[str, str]) -> None:
    """`ledger` prints the dispatch ledger and `events --json` one object per line."""
    import json

    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    ledger = json.loads(cli(cli_env, "ledger", run_id, "--json").stdout)
    assert ledger["pipeline_id"] == run_id and len(ledger["tasks"]) == 3
    lines = cli(cli_env, "events", run_id, "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(lines) + 1))


def test_check_reports_unconfigured_models(cli_env: dict[str, str], tmp_path: Path) -> None:
    """With an interlock.toml present, `check` names each model alias it does not resolve."""
    flow = tmp_path / "research.json"
    flow.write_text(Path(RESEARCH).read_text())
    (tmp_path / "interlock.toml").write_text(
        '[models.sonnet]\nprovider = "openai"\nmodel = "gpt-4o"\n'
    )
    result = cli(cli_env, "check", str(flow))
    assert result.returncode == 2
    assert "model 'opus' is not configured" in result.stderr
    assert "add [models.opus] to interlock.toml" in result.stderr


def test_brackets_in_messages_are_printed_as_written(cli_env: dict[str, str]) -> None:
    """Topics and messages with square brackets are data, not terminal markup."""
    result = cli(cli_env, "run", RESEARCH, "research", "--topic", "[bold]x[/bold] [red]")
    assert result.returncode == 0
    run_id = run_id_of(result)
    status = cli(cli_env, "status", run_id)
    assert "topic: [bold]x[/bold] [red]" in status.stdout
