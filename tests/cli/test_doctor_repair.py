"""`interlock doctor --repair` as a person meets it: a file changed by hand is kept, never
overwritten; an archived run whose folder was deleted is named and made again where it lives
(or each file it cannot write back is named with the reason); `status` says where final.md is."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.cli.test_cli import cli


def _flow(tmp_path: Path, first: str = "print('hi')", pause: bool = False) -> Path:
    """Two command workers: `w` writes w.md with `first`, then the final `v` writes v.md."""
    write = "import os, sys; sys.stdout = open(os.environ['INTERLOCK_OUTPUT'], 'w'); "
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n  phases:\n  - id: a\n"
        + ("    pause_after: true\n" if pause else "")
        + "    workers:\n    - role: w\n"
        f"      command: ['{sys.executable}', '-c', \"{write}{first}\"]\n"
        "  - id: b\n    workers:\n    - role: v\n      final: true\n"
        f"      command: ['{sys.executable}', '-c', \"{write}print('bye')\"]\n"
    )
    return flow


def _delivered(env: dict[str, str], flow: Path, run_id: str = "r-1") -> Path:
    done = cli(env, "run", str(flow), "p", "--topic", "x", "--run-id", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = Path(env["INTERLOCK_HOME"]) / "archive" / run_id
    assert folder.is_dir()
    return folder


def test_repair_keeps_a_file_changed_by_hand_as_unrecorded(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An output and final.md changed by hand in an archived run: `doctor` exits 6 and says
    `--repair` keeps such a file; `--repair` moves each aside to NAME.unrecorded, says where,
    writes back the recorded version, and doctor then passes."""
    folder = _delivered(cli_env, _flow(tmp_path))
    (folder / "w.md").write_text("my own words\n")
    (folder / "final.md").write_text("my own ending\n")
    checked = cli(cli_env, "doctor")
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert "run r-1: w.md: 13 bytes" in checked.stdout
    assert "keeping a file changed by hand as NAME.unrecorded" in checked.stdout
    repaired = cli(cli_env, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    for name, mine, recorded in (
        ("w.md", "my own words\n", "hi\n"),
        ("final.md", "my own ending\n", "bye\n"),
    ):
        kept = folder / f"{name}.unrecorded"
        assert kept.read_text() == mine and (folder / name).read_text() == recorded
        assert f"repaired: run r-1: {name}; the changed file that was there is kept as {kept}" in (
            repaired.stdout
        )
    assert "interlock edit" not in repaired.stdout + repaired.stderr  # an ended run takes none
    assert "ok: 1 runs, 3 outputs checked, 2 written back" in repaired.stdout
    assert cli(cli_env, "doctor").returncode == 0


def test_repair_tells_a_paused_run_how_to_record_the_kept_change(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A paused run's output changed by hand: `--repair` keeps it aside and names the
    `interlock edit` command that records it."""
    flow = _flow(tmp_path, pause=True)
    paused = cli(cli_env, "run", str(flow), "p", "--topic", "x", "--run-id", "q")
    assert paused.returncode == 3, paused.stdout + paused.stderr  # paused for approval
    output = Path(cli_env["INTERLOCK_HOME"]) / "runs" / "q" / "w.md"
    output.write_text("mine\n")
    repaired = cli(cli_env, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    kept = output.with_name("w.md.unrecorded")
    assert kept.read_text() == "mine\n" and output.read_text() == "hi\n"
    assert f"to record it: interlock edit q w.md --file {kept}" in repaired.stdout


def test_a_deleted_archived_run_is_named_and_made_again_in_the_archive(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A delivered run's archive folder deleted: `doctor` names that folder, not one under
    runs/; `status` says final.md is missing there; `--repair` writes the outputs, final.md
    and status.json back into it (nothing under runs/), and `status` then shows the file."""
    folder = _delivered(cli_env, _flow(tmp_path))
    home = Path(cli_env["INTERLOCK_HOME"])
    shutil.rmtree(folder)
    checked = cli(cli_env, "doctor")
    assert checked.returncode == 6, checked.stdout + checked.stderr
    assert f"run r-1: its directory is missing ({folder})" in checked.stdout
    status = cli(cli_env, "status", "r-1")
    assert status.returncode == 0, status.stderr
    assert f"final: missing, {folder / 'final.md'} is not there" in status.stdout
    repaired = cli(cli_env, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"repaired: run r-1: its directory, made again: {folder}" in repaired.stdout
    assert (folder / "w.md").read_text() == "hi\n" and (folder / "v.md").read_text() == "bye\n"
    assert (folder / "final.md").read_text() == "bye\n"
    assert '"status":"delivered"' in (folder / "status.json").read_text()
    assert not (home / "runs" / "r-1").exists()
    status = cli(cli_env, "status", "r-1")
    assert f"final: {folder / 'final.md'}" in status.stdout.replace("\n", "")
    assert cli(cli_env, "doctor").returncode == 0


def test_repair_names_each_file_the_ledger_cannot_give_back(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A deleted archived run with an output larger than the ledger keeps (1 MiB): `--repair`
    writes back the rest and names that file with its size and why, exiting 6."""
    folder = _delivered(cli_env, _flow(tmp_path, first="print('x' * 1100000, end='')"))
    shutil.rmtree(folder)
    repaired = cli(cli_env, "doctor", "--repair")
    assert repaired.returncode == 6, repaired.stdout + repaired.stderr
    assert (
        "not repaired: run r-1: w.md: 1100000 bytes, and the ledger keeps the bytes of outputs "
        "up to 1 MiB only: it must be produced again"
    ) in repaired.stdout
    assert (folder / "final.md").read_text() == "bye\n" and not (folder / "w.md").exists()
    assert "1 file(s) could not be written back" in repaired.stdout
