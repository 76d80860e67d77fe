"""What a newcomer reads from the real `interlock` command: an interrupted run says nothing
drives it and how to continue it, a cancelled run says so once, moments are local times,
log paths open from where the user is, a missing editor names its fix, and `diff` shows no
cost for a task a run never had."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.test_cli import cli, run_id_of

SLOW = "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n" + (
    "      command: ['sh', '-c', 'sleep 30; echo hi > {output}']\n"
)
PAUSING = (
    "p:\n  phases:\n"
    "  - id: a\n    pause_after: true\n    workers:\n"
    "    - {role: w, command: ['sh', '-c', 'echo hi > {output}']}\n"
    "  - id: b\n    workers:\n"
    "    - {role: f, final: true, reads: [w.md], command: ['sh', '-c', 'echo fin > {output}']}\n"
)
FAILING = (
    "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
    "      command: ['sh', '-c', 'echo first >&2; echo it broke >&2; exit 3']\n"
)


def started(env: dict[str, str], flow: Path) -> tuple[subprocess.Popen[str], str]:
    """`interlock run` of `flow` in the background, once its task has started."""
    process = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", str(flow), "p", "--topic", "x"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    seen = ""
    while "task_started" not in seen:
        line = process.stdout.readline()
        if not line:
            ended(process)
            raise AssertionError(f"the run ended early: {seen}")
        seen += line
    return process, seen.split("run_id=")[1].split()[0]


def ended(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The rest of `process`'s stdout once it exits. One that does not exit in time is
    killed and reaped before the test fails: left running, its pipes' ResourceWarning
    would fail whichever test comes next."""
    try:
        stdout, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return stdout


@pytest.mark.usefixtures("sigint_default")
def test_an_interrupted_run_says_it_is_not_driven_and_how_to_continue_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """After Ctrl-C, `status` says "running (not driven)" on its first line as `runs` does,
    and `approve` refuses with exit 2 pointing to `interlock resume RUN`."""
    flow = tmp_path / "slow.yaml"
    flow.write_text(SLOW)
    process, run_id = started(cli_env, flow)
    process.send_signal(signal.SIGINT)
    ended(process)
    assert process.returncode == 130
    listing = cli(cli_env, "runs")
    assert "running (not driven)" in listing.stdout
    status = cli(cli_env, "status", run_id)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].split()[2:5] == ["running", "(not", "driven)"]
    assert f"continue it with 'interlock resume {run_id}'" in status.stdout
    approve = cli(cli_env, "approve", run_id)
    assert approve.returncode == 2
    assert "is not paused (it is running, not driven: no orchestrator holds it)" in approve.stderr
    assert f"'interlock resume {run_id}' continues it" in approve.stderr


def test_a_cancelled_run_says_its_reason_once(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A run cancelled without a reason ends with "cancelled" alone (the run's last line,
    `status`, `events`), never "cancelled: cancelled"; a reason given is shown after it."""
    flow = tmp_path / "slow.yaml"
    flow.write_text(SLOW)
    process, run_id = started(cli_env, flow)
    cancel = cli(cli_env, "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    stdout = ended(process)
    assert process.returncode == 1
    assert stdout.strip().splitlines()[-1] == "cancelled"
    status = cli(cli_env, "status", run_id)
    events = cli(cli_env, "events", run_id)
    for text in (cancel.stdout, status.stdout, events.stdout):
        assert "cancelled: cancelled" not in text and "reason=cancelled" not in text
    assert status.stdout.strip().splitlines()[-1] == "cancelled"
    submitted = cli(cli_env, "submit", str(flow), "p", "--topic", "x").stdout.strip()
    assert cli(cli_env, "cancel", submitted, "--reason", "too slow").returncode == 0
    assert cli(cli_env, "status", submitted).stdout.strip().endswith("cancelled: too slow")


def test_events_show_moments_as_local_times(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A retry's `not_before` and a wait's `until` are printed as local times, like the time
    at the start of each line, not as seconds since 1970."""
    flow = tmp_path / "wait.yaml"
    once = tmp_path / "once"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      retries: 1\n"
        f"      command: ['sh', '-c', 'test -f {once} && echo hi > {{output}} || "
        f"{{ touch {once}; exit 1; }}']\n"
        "  - id: b\n    delay: 1s\n    workers:\n"
        "    - {role: f, final: true, command: ['sh', '-c', 'echo fin > {output}']}\n"
    )
    run = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert run.returncode == 0, run.stdout + run.stderr
    run_id = run_id_of(run)
    events = cli(cli_env, "events", run_id).stdout
    moment = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    for key in ("not_before", "until"):
        assert re.search(rf"\b{key}={moment}", events), events
        assert re.search(rf"\b{key}=\d{{6,}}", run.stdout + events) is None


def stderr_log(text: str) -> str:
    """The log path a failure message names."""
    found = re.search(r"the rest of its stderr: (\S+)\)", text)
    assert found, text
    return found.group(1)


def test_a_failures_log_path_opens_from_the_current_directory(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The stderr log a failure names (the run's last line, `status`, `events`, `explain`)
    is a path that opens from the directory the command ran in, relative to it when the
    state directory is under it."""
    flow = tmp_path / "fail.yaml"
    flow.write_text(FAILING)

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr + result.stdout, result.stderr
        return result

    run = here("run", str(flow), "p", "--topic", "x")
    assert run.returncode == 1
    run_id = run_id_of(run)
    last = run.stdout.strip().splitlines()[-1]
    texts = [last, *(here(command, run_id).stdout for command in ("status", "events", "explain"))]
    for text in texts:
        path = stderr_log(text)
        assert path == f"home/runs/{run_id}/logs/w@1.1.stderr", text
        assert (tmp_path / path).read_text().endswith("it broke\n")
    elsewhere = cli(cli_env, "status", run_id).stdout  # from a directory the home is not under
    assert stderr_log(elsewhere) == str(tmp_path / "home" / "runs" / run_id / "logs/w@1.1.stderr")


def test_a_child_runs_log_path_is_in_the_child_runs_folder(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A parent that fails because its child run failed names the child's log in the child's
    folder, where the file is."""
    flow = tmp_path / "nested.yaml"
    flow.write_text(
        "outer:\n  phases:\n  - id: a\n    workers:\n"
        "    - {role: s, pipeline: inner, task: x, final: true}\n"
        + FAILING.replace("p:", "inner:", 1)
    )
    run = cli(cli_env, "run", str(flow), "outer", "--topic", "x")
    assert run.returncode == 1, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    child = re.search(r"child run (\S+) failed", last)
    assert child, last
    path = Path(stderr_log(last))
    assert path.parent.parent.name == child.group(1) and path.is_file()


def test_an_editor_that_does_not_exist_names_the_fix(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`edit --editor` with $EDITOR naming no program is exit 2 naming the editor and both
    fixes (set EDITOR, or --file); $VISUAL, which comes first, is the one named when set."""
    flow = tmp_path / "pause.yaml"
    flow.write_text(PAUSING)
    paused = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert paused.returncode == 3, paused.stdout + paused.stderr
    run_id = run_id_of(paused)
    env = {k: v for k, v in cli_env.items() if k not in ("VISUAL", "EDITOR")}
    missing = cli({**env, "EDITOR": "no-such-editor-here"}, "edit", run_id, "w.md", "--editor")
    assert missing.returncode == 2
    assert "$EDITOR is 'no-such-editor-here', which is not a program on PATH" in missing.stderr
    assert "set EDITOR to an editor that exists" in missing.stderr
    assert "--file FILE" in missing.stderr
    visual = cli({**env, "VISUAL": "nope-edit --wait"}, "edit", run_id, "w.md", "--editor")
    assert visual.returncode == 2
    assert "'nope-edit' is not a program on PATH; set VISUAL" in visual.stderr
    failing = cli({**env, "EDITOR": "false"}, "edit", run_id, "w.md", "--editor")
    assert failing.returncode == 2 and "the editor 'false' exited with an error" in failing.stderr


def test_diff_shows_no_cost_where_a_task_did_not_exist(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A task only one run has shows "-" as its cost in the other run's column, and its
    cost in the run that has it."""
    flow = tmp_path / "pause.yaml"
    flow.write_text(PAUSING)
    paused = cli(cli_env, "run", str(flow), "p", "--topic", "x")
    assert paused.returncode == 3
    a = run_id_of(paused)
    approved = cli(cli_env, "approve", a)
    assert approved.returncode == 0, approved.stderr
    b = run_id_of(cli(cli_env, "run", str(flow), "p", "--topic", "x"))
    result = cli(cli_env, "diff", a, b)
    assert result.returncode == 0, result.stderr
    row = next(line.split() for line in result.stdout.splitlines() if line.startswith("  f@1"))
    assert row[1:3] == ["ran", "-"] and row[-2:] == ["$0.0000", "-"], result.stdout


def test_an_events_fields_are_written_as_the_file_and_json_write_them() -> None:
    """`interlock events` shows true/false and JSON mappings, not Python's `False` and
    `{'n': None}`; empty fields are left out."""
    from interlock.cli.display import describe
    from interlock.core import events as ev
    from interlock.storage.base import NewEvent

    created = ev.RunCreated(
        at=0.0,
        run_id="r",
        pipeline="p",
        definition_hash="h",
        topic="t",
        inputs={"n": 4, "loud": True, "ratio": None},
        no_cache=True,
    )
    line = describe(NewEvent(event=created))
    assert 'inputs={"n":4,"loud":true,"ratio":null}' in line
    assert "no_cache=true" in line and "rerun_of" not in line
    assert "False" not in line and "None" not in line


def test_a_submitted_run_not_yet_taken_up_says_what_takes_it_up(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A run recorded by `submit` and never driven is not "interrupted": `status` says it
    waits for an orchestrator and names the commands that drive it."""
    flow = tmp_path / "fail.yaml"
    flow.write_text(FAILING)
    submitted = cli(cli_env, "submit", str(flow), "p", "--topic", "x")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    status = cli(cli_env, "status", run_id)
    assert status.returncode == 0, status.stderr
    said = " ".join(status.stdout.split())
    assert "not driven yet: the run is recorded and waits for an orchestrator" in said
    assert "interrupted" not in said and f"'interlock resume {run_id}'" in said
    listing = " ".join(cli(cli_env, "runs").stdout.split())
    assert "(interrupted, or submitted and not yet taken up)" in listing
    assert "or all of them with 'interlock serve'" in listing
