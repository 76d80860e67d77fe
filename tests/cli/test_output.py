"""What the CLI prints when its output is a pipe, a closed pipe or a file, and what reads
create: every event from the first, one a line, a quiet 141 for `| head`, nothing on disk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.test_cli import RESEARCH, cli, run_id_of

ROOT = Path(__file__).resolve().parents[2]
TRANSLATE = str(ROOT / "examples" / "translate.yaml")


def test_run_off_a_terminal_prints_every_event_from_the_first(cli_env: dict[str, str]) -> None:
    """Piped, `interlock run` shows run_created, the offline warnings and the first
    dispatches, numbered from 1 without a gap."""
    result = cli(cli_env, "run", RESEARCH, "research", "--topic", "x")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if re.match(r"^\s*\d+ ", line)]
    assert lines[0].split()[:2] == ["1", "run_created"]
    assert "warned" in lines[1] and "offline provider" in lines[1]
    seqs = [int(line.split()[0]) for line in lines]
    assert seqs == list(range(1, len(seqs) + 1))
    assert any("task_dispatched" in line and "researcher-a@1" in line for line in lines[:6])


def test_rerun_off_a_terminal_prints_every_event_from_the_first(cli_env: dict[str, str]) -> None:
    """Piped, `interlock rerun` shows the new run from its run_created on, reuses included."""
    source = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    result = cli(cli_env, "rerun", source, "--from", "synthesis")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if re.match(r"^\s*\d+ ", line)]
    assert lines[0].split()[:2] == ["1", "run_created"]
    seqs = [int(line.split()[0]) for line in lines]
    assert seqs == list(range(1, len(seqs) + 1))
    assert any("task_reused" in line for line in lines)


def test_piped_events_are_one_line_each(cli_env: dict[str, str]) -> None:
    """`interlock events RUN | cat` prints one unwrapped line per event, however long."""
    topic = "a long topic " * 40
    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", topic))
    stored = cli(cli_env, "events", run_id, "--json").stdout.splitlines()
    plain = cli(cli_env, "events", run_id).stdout.splitlines()
    assert len(plain) == len(stored)
    assert topic.strip() in plain[0]


def closed_pipe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with stdout a pipe whose reader has already gone away."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=env, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "command",
    [["events", "--json"], ["events"], ["status"], ["status", "--json"], ["explain"],
     ["ledger"], ["watch"], ["runs"]],
)  # fmt: skip
def test_a_closed_pipe_ends_quietly_with_141(cli_env: dict[str, str], command: list[str]) -> None:
    """`| head` closing the pipe ends each reading command with 141 (as git) and no message."""
    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    args = command if command == ["runs"] else [command[0], run_id, *command[1:]]
    result = closed_pipe(cli_env, *args)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""


def test_run_into_a_closed_pipe_goes_on_to_its_end(cli_env: dict[str, str]) -> None:
    """`interlock run ... | head -0` runs to its end with its output discarded, says so once
    on stderr and exits 0, without a trace."""
    result = closed_pipe(cli_env, "run", RESEARCH, "research", "--topic", "x")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("output closed: the work goes on to its end") == 1
    assert "spent $" in result.stderr  # stderr is still written
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_unknown_status_filter_is_refused(cli_env: dict[str, str]) -> None:
    """`runs --status bogus` is exit 2 naming the statuses that exist, not "no runs yet"."""
    assert cli(cli_env, "run", RESEARCH, "research", "--topic", "x").returncode == 0
    result = cli(cli_env, "runs", "--status", "bogus")
    assert result.returncode == 2
    assert "'bogus' is not one of" in result.stderr and "'delivered'" in result.stderr
    assert "no runs" not in result.stdout


def test_reading_commands_create_nothing(cli_env: dict[str, str], tmp_path: Path) -> None:
    """In a directory without a ledger, reading commands answer and create nothing."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in cli_env.items() if k != "INTERLOCK_HOME"}
    for args in (["runs"], ["runs", "--json"], ["status", "x"], ["events", "x"],
                 ["explain", "x"], ["ledger", "x"], ["watch", "x"], ["resume", "x"],
                 ["cancel", "x"], ["approve", "x"]):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=env, cwd=empty, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr
        if args[0] == "runs":
            assert result.returncode == 0, result.stderr
        else:
            assert result.returncode == 2 and "no ledger at" in result.stderr, result.stderr
    assert list(empty.iterdir()) == []


def test_watch_progress_never_goes_back(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`watch` shows a non-decreasing progress over a sequential phase and a review loop."""
    flow = tmp_path / "seq.yaml"
    flow.write_text(Path(TRANSLATE).read_text().replace("phases:\n", "phases:\n", 1))
    # A sequential phase of two workers after the first phase: 1 of 1 done was 1 of 2 later.
    text = flow.read_text().replace(
        "    - id: translate\n      workers:\n",
        "    - id: translate\n      mode: sequential\n      workers:\n"
        "        - role: pre\n          command: ['{python}', '-c', 'print(1)']\n",
    )
    flow.write_text(text)
    (tmp_path / "scripts").symlink_to(ROOT / "examples" / "scripts")
    run_id = run_id_of(cli(cli_env, "run", str(flow), "translate", "--topic", "x"))
    result = cli(cli_env, "watch", run_id)
    assert result.returncode == 0, result.stderr
    shown = [int(m) for m in re.findall(r"^\s*\d+ \w+\s+(\d+)%", result.stdout, re.M)]
    assert len(shown) > 20 and shown == sorted(shown) and shown[-1] == 100


def test_explain_shows_the_values_a_rule_read(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`explain` prints `reviewer.score = 5` under the branch it decided."""
    flow = tmp_path / "loop.yaml"
    flow.write_text(
        "p:\n  phases:\n"
        "  - id: review\n    workers:\n    - role: reviewer\n"
        f"      command: ['{sys.executable}', '-c', 'print(\"{{\\\"score\\\": 5}}\")']\n"
        "      extract: {score: {json: score, type: number}}\n"
        "    next:\n    - {if: 'reviewer.score < 8.0', goto: polish, max_visits: 1}\n"
        "    - {goto: publish}\n"
        "  - id: polish\n    workers: [{role: polisher, model: m}]\n"
        "    next: [{goto: review}]\n"
        "  - id: publish\n    workers: [{role: publisher, model: m, final: true}]\n"
    )
    run_id = run_id_of(cli(cli_env, "run", str(flow), "p", "--topic", "x"))
    result = cli(cli_env, "explain", run_id)
    assert result.returncode == 0, result.stderr
    assert "rule 1 (reviewer.score < 8.0) held: reviewer.score = 5" in result.stdout
    assert "held, but its max_visits was reached: reviewer.score = 5" in result.stdout


def test_a_condition_that_cannot_be_evaluated_says_why(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A condition reading a value the worker did not extract fails the run with what is
    missing and what exists, in words, not CEL's error tuple."""
    flow = tmp_path / "missing.yaml"
    flow.write_text(
        "p:\n  phases:\n"
        "  - id: review\n    workers:\n    - role: reviewer\n"
        f"      command: ['{sys.executable}', '-c', 'print(\"{{\\\"notes\\\": 1}}\")']\n"
        "      extract:\n"
        "        score: {json: score, type: number, required: false}\n"
        "        notes: {json: notes, type: number}\n"
        "    next:\n    - {if: 'reviewer.score < 8.0', goto: publish}\n"
        "  - id: publish\n    workers: [{role: publisher, model: m, final: true}]\n"
    )
    result = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert result.returncode == 1
    status = json.loads(cli(cli_env, "status", run_id_of(result), "--json").stdout)
    assert "reviewer.score is null: nothing was extracted for it" in status["failure"]
    assert "KeyError" not in status["failure"] and "<class" not in status["failure"]


@pytest.mark.parametrize(
    ("hidden", "args", "extra"),
    [
        ("psycopg", ["--store", "postgresql://127.0.0.1:9/x", "runs"], "postgres"),
        ("uvicorn", ["serve", "--port", "0"], "server"),
        (
            "redis",
            ["--store", "postgresql://127.0.0.1:9/x", "worker", "--redis", "redis://x"],
            "redis",
        ),
    ],
)
def test_a_missing_extra_is_named_with_exit_69(
    cli_env: dict[str, str], tmp_path: Path, hidden: str, args: list[str], extra: str
) -> None:
    """Without an optional dependency installed, the command that needs it names the extra
    to install and exits 69, the exit code the README gives for it."""
    hide = (
        f"import sys; sys.modules[{hidden!r}] = None; sys.argv = ['interlock', *{args!r}];"
        "from interlock.cli.main import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 69, done.stderr
    assert f"pip install 'interlock[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
