"""A cancelled batch: cancelling a finished one changes nothing, resume and retry --failed
say why they do not go on, and `batch retry --cancelled` runs its cancelled rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

WORKFLOW = """\
echo:
  phases:
    - id: write
      workers:
        - role: writer
          final: true
          command:
            - sh
            - -c
            # Blocks while the file `hold` exists: a run in flight until the test lets go.
            - 'while [ -e "$1" ]; do sleep 0.05; done; echo "$2" > "$3"'
            - sh
            - HOLD
            - "{{ topic }}"
            - "{output}"
"""


def _setup(tmp_path: Path, rows: int) -> None:
    (tmp_path / "wf.yaml").write_text(WORKFLOW.replace("HOLD", str(tmp_path / "hold")))
    (tmp_path / "rows.csv").write_text("topic\n" + "".join(f"row {n}\n" for n in range(rows)))


def _interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def _status(env: dict[str, str], cwd: Path, batch_id: str) -> dict[str, object]:
    body: dict[str, object] = json.loads(
        _interlock(env, cwd, "batch", "status", batch_id, "--json").stdout
    )
    return body


def test_cancelling_a_finished_batch_changes_nothing_and_says_so(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Every row delivered: `batch cancel` records nothing, says the batch has finished,
    and `batches` does not call it cancelled."""
    _setup(tmp_path, 3)
    args = ["batch", "wf.yaml", "--inputs", "rows.csv", "--batch-id", "done"]
    assert _interlock(cli_env, tmp_path, *args).returncode == 0
    cancelled = _interlock(cli_env, tmp_path, "batch", "cancel", "done")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "batch done has finished (every row ended): nothing to cancel" in cancelled.stdout
    assert "(cancelled)" not in _interlock(cli_env, tmp_path, "batches").stdout
    body = _status(cli_env, tmp_path, "done")
    assert body["cancelled"] is False
    assert body["counts"] == {"delivered": 3}


def test_a_cancelled_batch_says_how_to_go_on_and_retry_cancelled_runs_its_rows(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A batch cancelled with two runs in flight and two rows not started: its driver says
    how to run them (exit 1); `batch resume` and `batch retry --failed` refuse with that
    reason (exit 2, not a silent 1); `batch retry --cancelled` gives the four rows their
    runs again and every row is delivered, the two stopped ones on their second try. The
    progress line does not count the cancelled rows as done."""
    _setup(tmp_path, 4)
    (tmp_path / "hold").write_text("")
    args = [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "rows.csv"]
    args += ["--batch-id", "cx", "--concurrency", "2"]
    driving = subprocess.Popen(
        args, env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    home = Path(cli_env["INTERLOCK_HOME"])
    deadline = time.monotonic() + 60
    while not (home / "runs" / "cx-r2").is_dir():  # both first runs were made
        assert time.monotonic() < deadline and driving.poll() is None
        time.sleep(0.05)
    assert _interlock(cli_env, tmp_path, "batch", "cancel", "cx").returncode == 0
    said, _ = driving.communicate(timeout=90)
    assert driving.returncode == 1
    assert "batch cx: 0/4 done, 0 delivered" in said
    assert "4 row(s) cancelled: 'interlock batch retry cx --cancelled' gives them" in said

    for command in (["resume", "cx"], ["retry", "cx", "--failed"]):
        refused = _interlock(cli_env, tmp_path, "batch", *command)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "batch cx was cancelled" in refused.stderr
        assert "'interlock batch retry cx --cancelled'" in refused.stderr

    (tmp_path / "hold").unlink()
    again = _interlock(cli_env, tmp_path, "batch", "retry", "cx", "--cancelled")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "batch cx: 4 cancelled row(s) given their runs again" in again.stderr
    body = _status(cli_env, tmp_path, "cx")
    assert body["cancelled"] is False
    assert body["counts"] == {"delivered": 4}
    rows = body["rows"]
    assert isinstance(rows, list)
    assert sorted(r["try"] for r in rows) == [1, 1, 2, 2]


def test_retry_cancelled_of_a_batch_not_cancelled_says_what_goes_on(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`--cancelled` of a batch that was not cancelled is refused, naming `resume`; `retry`
    with neither flag names both."""
    _setup(tmp_path, 1)
    assert _interlock(cli_env, tmp_path, "batch", "wf.yaml", "--inputs", "rows.csv",
                      "--batch-id", "b").returncode == 0  # fmt: skip
    refused = _interlock(cli_env, tmp_path, "batch", "retry", "b", "--cancelled")
    assert refused.returncode == 2
    assert "batch b was not cancelled" in refused.stderr
    assert "'interlock batch resume b'" in refused.stderr
    bare = _interlock(cli_env, tmp_path, "batch", "retry", "b")
    assert bare.returncode == 2
    assert "needs --failed (the failed rows) or --cancelled" in bare.stderr
