"""A run resumed from another folder than the one it was started from: `{workflow_dir}`
still names the workflow file's own folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STEP = """\
import os, signal, sys
out, marker = sys.argv[1], sys.argv[2]
if not os.path.exists(marker):  # the first try: the orchestrator dies while it runs
    open(marker, "w").close()
    os.kill(os.getppid(), signal.SIGKILL)
    signal.pause()
with open(out, "w") as f:
    f.write("done\\n")
"""

WORKFLOW = """\
$language: 1
moved:
  phases:
    - id: only
      workers:
        - role: step
          command: ["{python}", "{workflow_dir}/step.py", "{output}", "{workflow_dir}/tried"]
          timeout: 60
          final: true
"""


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def test_a_run_resumed_from_another_folder_finds_its_workflow_folder(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Started as `interlock run moved.yaml` in its folder, killed, resumed from elsewhere:
    the command still finds `{workflow_dir}/step.py` and the run is delivered."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "step.py").write_text(STEP)
    (folder / "moved.yaml").write_text(WORKFLOW)
    started = interlock(cli_env, folder, "run", "moved.yaml", "moved", "--topic", "t")
    assert started.returncode != 0 and (folder / "tried").exists(), started.stderr
    runs = interlock(cli_env, folder, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_id = runs.stdout.split('"run_id": "', 1)[1].split('"', 1)[0]
    resumed = interlock(cli_env, elsewhere, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    final = Path(resumed.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text() == "done\n"
