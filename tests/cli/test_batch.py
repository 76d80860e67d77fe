"""`interlock batch`: a CSV of rows delivered, a kill -9 and a resume that runs every row once,
bad input refused with exit 2 before anything is recorded, and what export writes."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock import Interlock
from interlock.cli.main import cli
from interlock.core.batches import RowInputs
from interlock.core.loader import load_workflow
from interlock.workloads.batches import record_batch

WORKFLOW = """\
summarize:
  inputs:
    n: {type: integer, required: true}
    language: English
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          command:
            - sh
            - -c
            - 'sleep SLEEP; echo "$1 $INTERLOCK_RUN_ID" >> "$2"; printf "Score: %s\\n" "$1" > "$3"'
            - sh
            - "{{ n }}"
            - COUNT
            - "{output}"
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def setup(tmp_path: Path, rows: int, sleep: float = 0.0) -> None:
    """A workflow whose one worker appends its row to count.txt, and a CSV of `rows` rows."""
    text = WORKFLOW.replace("COUNT", str(tmp_path / "count.txt")).replace("SLEEP", str(sleep))
    (tmp_path / "wf.yaml").write_text(text)
    with (tmp_path / "articles.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["topic", "n", "language"])
        writer.writerows([f"Article {n}", n, "French" if n % 2 else ""] for n in range(1, rows + 1))


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, which never shows a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def executions(tmp_path: Path) -> dict[int, list[str]]:
    """Row -> the run ids its command ran in, one entry per execution."""
    runs: dict[int, list[str]] = {}
    for line in (tmp_path / "count.txt").read_text().splitlines():
        row, run_id = line.split()
        runs.setdefault(int(row), []).append(run_id)
    return runs


def test_a_csv_batch_is_delivered_shown_and_exported(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """20 rows, 4 at a time: every row delivered once; status and export show each row."""
    setup(tmp_path, 20)
    done = interlock(
        cli_env, tmp_path, "batch", "wf.yaml", "--inputs", "articles.csv", "--batch-id", "b"
    )
    assert done.returncode == 0, done.stderr
    assert "batch b: 20 row(s) of pipeline 'summarize' recorded" in done.stderr
    assert "worst case of the batch (20 row(s)): at most $0.0000" in done.stderr
    assert "20/20 done, 20 delivered" in done.stdout
    assert executions(tmp_path) == {n: [f"b-r{n}"] for n in range(1, 21)}
    shown = interlock(cli_env, tmp_path, "batch", "status", "b", "--json")
    body = json.loads(shown.stdout)
    assert body["counts"] == {"delivered": 20}
    assert body["rows"][2] == {
        "row": 3,
        "topic": "Article 3",
        "inputs": {"n": 3, "language": "French"},
        "status": "delivered",
        "try": 1,
        "run_id": "b-r3",
        "cost_usd": 0.0,
        "tokens": 0,
        "estimated": False,
        "values": {"score": 3.0},
        "failure": None,
        "shown_status": "delivered",
        "mark": None,
        "driven": None,
        "waiting": None,
        "why": None,
    }
    assert (body["undriven"], body["spend_capped"], body["undriven_hint"]) == (0, 0, None)
    assert body["rows"][1]["inputs"] == {"n": 2}  # an empty cell: the input's default applies
    exported = interlock(cli_env, tmp_path, "batch", "export", "b", "-o", "out.csv")
    assert exported.returncode == 0, exported.stderr
    with (tmp_path / "out.csv").open(newline="") as stream:
        table = list(csv.DictReader(stream))
    assert len(table) == 20
    assert {k: table[0][k] for k in ("row", "status", "run_id", "input.n", "value.score")} == {
        "row": "1",
        "status": "delivered",
        "run_id": "b-r1",
        "input.n": "1",
        "value.score": "1.0",
    }
    assert table[0]["output"] == "Score: 1\n"
    interlock(cli_env, tmp_path, "batch", "export", "b", "-o", "out.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [x["output"] for x in lines[:2]] == ["Score: 1\n", "Score: 2\n"]
    listed = interlock(cli_env, tmp_path, "batches")
    assert "summarize" in listed.stdout and " 20 " in listed.stdout


def test_kill_9_then_resume_runs_every_row_once(cli_env: dict[str, str], tmp_path: Path) -> None:
    """The batch process killed mid-way: `batch resume` starts the rows not started, drives
    on those in flight and leaves the finished ones; no row ever gets a second run. A command
    cut short by the kill runs again inside its own run (that run shows two starts)."""
    setup(tmp_path, 20, sleep=0.2)
    args = [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "articles.csv"]
    args += ["--batch-id", "k", "--concurrency", "3"]
    first = subprocess.Popen(
        args, env=cli_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    count = tmp_path / "count.txt"
    deadline = time.monotonic() + 60
    while not count.exists() or len(count.read_text().splitlines()) < 7:
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.02)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    resumed = interlock(cli_env, tmp_path, "batch", "resume", "k")
    assert resumed.returncode == 0, resumed.stderr
    assert "20/20 done, 20 delivered" in resumed.stdout
    runs = executions(tmp_path)
    assert sorted(runs) == list(range(1, 21))
    assert all(set(ids) == {f"k-r{n}"} for n, ids in runs.items())  # one run per row
    again = {n for n, ids in runs.items() if len(ids) > 1}
    for n in again:  # cut short by the kill: its run records the second start
        events = interlock(cli_env, tmp_path, "events", f"k-r{n}").stdout
        assert events.count("task_started") == len(runs[n]) == 2
    assert len(again) <= 3  # at most the runs in flight at the kill


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("rows.txt", "n\n1\n", "rows.txt: is neither JSONL nor CSV"),
        ("rows.jsonl", '{"n": 1}\n{"n": \n', "rows.jsonl: bad JSON (line 2:"),
        ("rows.jsonl", '{"n": 1}\n[1]\n', "row 2: is a JSON list, not an object"),
        (
            "rows.csv",
            "n,langage\n1,fr\n",
            "row 1: column 'langage' is no input of pipeline 'summarize' (did you mean "
            "'language'?)",
        ),
        (
            "rows.csv",
            "topic,language\na,fr\nb,de\n",
            "rows 1, 2: needs input 'n': add a 'n' column to rows.csv",
        ),
        (
            "rows.csv",
            "n,language\n1,fr\n2\n",
            "ragged rows: the header has 2 columns but row(s) 2 (line 3: 1 cells)",
        ),
        ("rows.csv", "", "rows.csv: has no rows"),
        (
            "rows.csv",
            "Topic,n\na,1\n",
            "row 1: column 'Topic' is no input of pipeline 'summarize' (did you mean 'topic'?)",
        ),
        ("rows.csv", "n,LANGUAGE\n1,fr\n", "'LANGUAGE' is no input of pipeline 'summarize' (did"),
        (
            "rows.csv",
            "topic;language;n\na;fr;1\n",
            "rows.csv: the header (line 1) 'topic;language;n' has no comma but semicolons (;): "
            "the file is separated by semicolons",
        ),
        ("rows.csv", "topic\tn\na\t1\n", "has no comma but tabs: the file is separated by tabs"),
    ],
)
def test_bad_input_is_refused_before_anything_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str, says: str
) -> None:
    """Each bad file exits 2 with a message naming the file, the rows and the fix; no ledger
    is made."""
    setup(tmp_path, 1)
    (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["--home", str(home), "batch", "wf.yaml", "--inputs", name])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output
    assert not home.exists()


def test_a_batch_id_is_used_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second batch with a --batch-id already recorded is refused (exit 2), naming resume;
    --dry-run records nothing."""
    setup(tmp_path, 2)
    monkeypatch.chdir(tmp_path)
    base = ["--home", str(tmp_path / "home"), "batch", "wf.yaml", "--inputs", "articles.csv"]
    dry = CliRunner().invoke(cli, [*base, "--dry-run"])
    assert dry.exit_code == 0 and "nothing was recorded" in dry.output
    assert not (tmp_path / "home").exists()
    app = Interlock(tmp_path / "home")
    definition = load_workflow(tmp_path / "wf.yaml").get("summarize")
    rows = [RowInputs(number=1, topic="t", inputs={"n": 1})]
    record_batch(
        app,
        definition,
        rows,
        batch_id="same",
        inputs_file="articles.csv",
        concurrency=1,
        max_cost_usd=None,
        now=time.time(),
    )
    app.close()
    again = CliRunner().invoke(cli, [*base, "--batch-id", "same"])
    assert again.exit_code == 2
    assert "batch 'same' already exists: nothing was recorded" in again.output
    assert "interlock batch resume same" in again.output


def test_a_column_that_is_no_input_is_refused_or_ignored_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset's `id` and `notes` columns are refused with the fix that names
    --ignore-column; with it (repeated), the rows run without them."""
    setup(tmp_path, 0)
    (tmp_path / "rows.csv").write_text("id,topic,n,notes\n17,A,1,keep\n18,B,2,\n")
    monkeypatch.chdir(tmp_path)
    base = ["--home", str(tmp_path / "home"), "batch", "wf.yaml", "--inputs", "rows.csv"]
    refused = CliRunner().invoke(cli, base)
    assert refused.exit_code == 2, refused.output
    assert "pass --ignore-column id to leave it out" in " ".join(refused.output.split())
    assert not (tmp_path / "home").exists()
    ran = CliRunner().invoke(
        cli, [*base, "--ignore-column", "id", "--ignore-column", "notes", "--batch-id", "b"]
    )
    assert ran.exit_code == 0, ran.output
    assert "2/2 done" in ran.output and "2 delivered" in ran.output
    app = Interlock(tmp_path / "home")
    try:
        inputs = [sorted(app.state(f"b-r{n}").inputs) for n in (1, 2)]
    finally:
        app.close()
    assert inputs == [["language", "n"], ["language", "n"]]  # no id, no notes


def test_cancel_stops_a_running_batch(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`batch cancel` from another process: the runs in flight are cancelled by the process
    driving the batch, rows not started are marked cancelled, and the batch exits 1."""
    setup(tmp_path, 8, sleep=30.0)  # a cancel, however slow the machine, comes first
    args = [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "articles.csv"]
    args += ["--batch-id", "c", "--concurrency", "2"]
    driving = subprocess.Popen(args, env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    home = Path(cli_env["INTERLOCK_HOME"])
    deadline = time.monotonic() + 60
    while not (home / "runs" / "c-r2").is_dir():  # both first runs were made
        assert time.monotonic() < deadline and driving.poll() is None
        time.sleep(0.05)
    cancelled = interlock(cli_env, tmp_path, "batch", "cancel", "c")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "row(s) not started" in cancelled.stdout
    driving.communicate(timeout=90)
    assert driving.returncode == 1
    body = json.loads(interlock(cli_env, tmp_path, "batch", "status", "c", "--json").stdout)
    assert body["cancelled"] is True
    assert body["counts"] == {"cancelled": 8}
    stopped = [r for r in body["rows"] if r["run_id"] is not None]
    assert len(stopped) == 2  # the two in flight: cancelled, their commands stopped
    assert not (tmp_path / "count.txt").exists()


FLAKY = """\
summarize:
  inputs:
    n: {type: integer, required: true}
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          command:
            - sh
            - -c
            - |
              if [ $(($1 % 2)) -eq 0 ] && [ ! -e "$2" ]; then
                echo "row $1 broke" >&2; exit 3
              fi
              echo "Score: $1" > "$3"
            - sh
            - "{{ n }}"
            - FIXED
            - "{output}"
"""


def test_a_batch_fails_past_its_tolerance_and_a_retry_goes_on(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Even rows fail: with --tolerate 2 the third failed row stops the batch (rows not
    started stay so), which is failed naming its failed rows in status, the list and the
    JSON; once the cause is fixed, `retry --failed` runs them again and the rest start."""
    (tmp_path / "wf.yaml").write_text(FLAKY.replace("FIXED", str(tmp_path / "fixed")))
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(1, 11)))
    args = ["batch", "wf.yaml", "--inputs", "rows.jsonl", "--batch-id", "t", "--concurrency", "1"]
    done = interlock(cli_env, tmp_path, *args, "--tolerate", "2")
    assert done.returncode == 1, done.stderr
    reason = "3 of 10 rows failed, past tolerate 2; failed rows: 2, 4, 6"
    assert f"batch t failed: {reason}; no more rows start" in done.stderr
    assert "interlock batch retry t --failed" in done.stderr
    shown = interlock(cli_env, tmp_path, "batch", "status", "t")
    assert f"batch t failed: {reason}" in shown.stdout
    assert "not started: batch failed" in shown.stdout
    body = json.loads(interlock(cli_env, tmp_path, "batch", "status", "t", "--json").stdout)
    assert (body["tolerate"], body["allowed_failures"], body["failed"]) == (2, 2, True)
    assert body["failure"] == f"batch t failed: {reason}"
    assert body["counts"] == {"delivered": 3, "failed": 3, "not started: batch failed": 4}
    assert [r["run_id"] for r in body["rows"][6:]] == [None] * 4  # never started
    listed = interlock(cli_env, tmp_path, "batches")
    assert "t (failed: past tolerance)" in listed.stdout
    (tmp_path / "fixed").touch()
    again = interlock(cli_env, tmp_path, "batch", "retry", "t", "--failed")
    assert again.returncode == 0, again.stderr
    body = json.loads(interlock(cli_env, tmp_path, "batch", "status", "t", "--json").stdout)
    assert (body["counts"], body["failed"], body["failure"]) == ({"delivered": 10}, False, None)


def test_failed_rows_within_the_tolerance_let_the_batch_succeed(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`--tolerate 50%` of 10 rows lets the 5 even rows fail: every row runs and the batch
    exits 0, saying how many failed; without --tolerate the same batch runs every row too
    and exits 1, as it always did."""
    (tmp_path / "wf.yaml").write_text(FLAKY.replace("FIXED", str(tmp_path / "fixed")))
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(1, 11)))
    args = ["batch", "wf.yaml", "--inputs", "rows.jsonl", "--concurrency", "2"]
    within = interlock(cli_env, tmp_path, *args, "--batch-id", "w", "--tolerate", "50%")
    assert within.returncode == 0, within.stderr
    assert "5 row(s) failed, within the batch's --tolerate" in within.stderr
    assert "10/10 done, 5 delivered" in within.stdout
    plain = interlock(cli_env, tmp_path, *args, "--batch-id", "p")
    assert plain.returncode == 1, plain.stderr
    assert "10/10 done, 5 delivered" in plain.stdout


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("-1", "--tolerate -1 is negative"),
        ("150%", "--tolerate '150%' is more than 100% of the rows"),
        ("abc", "--tolerate 'abc' is neither a count nor a percentage"),
    ],
)
def test_a_bad_tolerance_is_refused_before_anything_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, says: str
) -> None:
    """A bad --tolerate exits 2 with the fix; no ledger is made."""
    setup(tmp_path, 2)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    args = ["--home", str(home), "batch", "wf.yaml", "--inputs", "articles.csv"]
    result = CliRunner().invoke(cli, [*args, "--tolerate", given])
    assert result.exit_code == 2, result.output
    assert says in result.output and "nothing was recorded" in result.output
    assert "Traceback" not in result.output
    assert not home.exists()


def test_status_of_10000_rows_takes_well_under_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`batch status` of a 10,000-row batch writes its table in under a second of CPU, as
    plain text, and takes out a row's control characters (an escape sequence in a row's
    inputs reached the terminal)."""
    setup(tmp_path, 1)
    monkeypatch.chdir(tmp_path)
    app = Interlock(tmp_path / "home")
    definition = load_workflow(tmp_path / "wf.yaml").get("summarize")
    rows = [RowInputs(number=n, topic=f"t{n}\x1b[2J", inputs={"n": n}) for n in range(1, 10_001)]
    record_batch(
        app, definition, rows, batch_id="big", inputs_file="articles.csv", concurrency=1,
        max_cost_usd=None, now=time.time(),
    )  # fmt: skip
    app.close()
    runner = CliRunner()
    runner.invoke(cli, ["--home", str(tmp_path / "home"), "batch", "status", "big"])  # warm
    started = time.process_time()
    shown = runner.invoke(cli, ["--home", str(tmp_path / "home"), "batch", "status", "big"])
    spent = time.process_time() - started
    assert shown.exit_code == 0, shown.output
    assert shown.output.count(" waiting  $0.0000") == 10_000
    # Recorded, never driven: the rows wait for `batch resume`, and the status says so.
    assert "10000 row(s) waiting to start and no process drives the batch" in shown.output
    assert spent < 1.0, f"{spent:.2f} s of CPU"
    assert "\x1b" not in shown.output and "t10000[2J; n=10000" in shown.output


def test_a_misspelt_subcommand_is_named_not_read_as_a_workflow_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`batch stauts B` names `batch status` (exit 2); a file that exists is still a workflow,
    even with a name close to a subcommand."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    typo = CliRunner().invoke(cli, ["--home", str(home), "batch", "stauts", "B1"])
    assert typo.exit_code == 2, typo.output
    assert "did you mean 'interlock batch status'" in typo.output
    setup(tmp_path, 1)
    (tmp_path / "wf.yaml").rename(tmp_path / "stauts")
    started = CliRunner().invoke(
        cli, ["--home", str(home), "batch", "stauts", "--inputs", "articles.csv", "--dry-run"]
    )
    assert started.exit_code == 0, started.output
    assert not home.exists()


def test_status_says_why_each_failed_row_failed(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Under each failed row the table says why (the `failure` of `--json`), its control
    characters escaped and cut to the terminal's width; delivered rows have no such line."""
    text = FLAKY.replace("FIXED", str(tmp_path / "fixed")).replace(
        'echo "row $1 broke"', r'printf "row %s \033[31mbroke\n" "$1"'
    )
    (tmp_path / "wf.yaml").write_text(text)
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(1, 4)))
    interlock(cli_env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.jsonl", "--batch-id", "f")
    wide = interlock({**cli_env, "COLUMNS": "300"}, tmp_path, "batch", "status", "f").stdout
    lines = wide.splitlines()
    under = lines[lines.index(next(line for line in lines if " f-r2 " in line)) + 1]
    assert under.strip().startswith("why: task writer@1 failed after 1 attempt(s)")
    assert "row 2 \\x1b[31mbroke" in under and "\x1b" not in wide
    assert sum("why:" in line for line in lines) == 1  # rows 1 and 3 delivered
    narrow = interlock({**cli_env, "COLUMNS": "60"}, tmp_path, "batch", "status", "f").stdout
    why = next(line for line in narrow.splitlines() if "why:" in line)
    assert len(why) == 60 and why.endswith("…")


@pytest.mark.parametrize(
    ("option", "value", "limit"),
    [
        ("--concurrency", "9223372036854775807", "1<=x<=10000"),
        ("--concurrency", "3000000000", "1<=x<=10000"),
        ("--batch-waiting", "9223372036854775807", "0<=x<=1000000"),
    ],
)
def test_limits_past_their_maximum_are_refused_naming_the_option(
    cli_env: dict[str, str], tmp_path: Path, option: str, value: str, limit: str
) -> None:
    """A --concurrency or --batch-waiting past what a batch allows is a usage error (exit 2)
    naming the option and its range, at start and at resume, before anything runs."""
    setup(tmp_path, 2)
    args = ["batch", "wf.yaml", "--inputs", "articles.csv", "--batch-id", "big"]
    refused = interlock(cli_env, tmp_path, *args, option, value)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"'{option}'" in refused.stderr and limit in refused.stderr
    assert not (tmp_path / "count.txt").exists()
    assert interlock(cli_env, tmp_path, *args).returncode == 0
    again = interlock(cli_env, tmp_path, "batch", "resume", "big", option, value)
    assert again.returncode == 2 and f"'{option}'" in again.stderr and limit in again.stderr


def test_rows_of_a_killed_driver_are_shown_not_driven(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """After kill -9 of the batch's process, `batch status` marks its rows in flight
    `running (not driven)`, as `interlock runs` marks their runs, and says how to go on."""
    setup(tmp_path, 4, sleep=10)
    args = [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "articles.csv"]
    args += ["--batch-id", "d", "--concurrency", "2"]
    driver = subprocess.Popen(
        args, env=cli_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while "2 running" not in interlock(cli_env, tmp_path, "batch", "status", "d").stdout:
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.2)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    shown = interlock(cli_env, tmp_path, "batch", "status", "d").stdout
    assert shown.count("running (not driven)") == 2, shown
    assert "2 row(s) in flight with no process driving them: 'interlock batch resume d'" in shown
    assert interlock(cli_env, tmp_path, "runs").stdout.count("(not driven)") == 2
    body = json.loads(interlock(cli_env, tmp_path, "batch", "status", "d", "--json").stdout)
    assert [r.get("driven") for r in body["rows"]] == [False, False, None, None]
