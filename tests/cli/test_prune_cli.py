"""`interlock prune` end to end: files and rows go, the rest still verifies, receipts answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESEARCH = str(ROOT / "examples" / "research.json")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_prune_removes_old_runs_and_the_rest_verifies(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A delivered run is pruned with its directory; a run not ended is kept and verifies;
    doctor passes; verify of the pruned run names its receipt, and its exported copy matches."""
    home = Path(cli_env["INTERLOCK_HOME"])
    done = cli(cli_env, "run", RESEARCH, "research", "--topic", "old", "--run-id", "old-1")
    assert done.returncode == 0, done.stderr
    kept = cli(cli_env, "submit", RESEARCH, "research", "--topic", "waiting").stdout.strip()
    bundle = tmp_path / "old.tar.gz"
    assert cli(cli_env, "export", "old-1", "-o", str(bundle)).returncode == 0
    assert (home / "archive" / "old-1").is_dir()

    dry = cli(cli_env, "prune", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0 and "would prune 1 " in dry.stdout, dry.stdout
    assert (home / "archive" / "old-1").is_dir()

    (home / "interlock.toml").write_text('[retention]\nolder_than = "0s"\n')
    pruned = cli(cli_env, "prune")
    assert pruned.returncode == 0 and "pruned 1 " in pruned.stdout, pruned.stdout + pruned.stderr
    assert not (home / "archive" / "old-1").exists()

    listed = cli(cli_env, "runs", "--json").stdout
    assert "old-1" not in listed and kept in listed
    assert cli(cli_env, "verify", kept).returncode == 0
    doctor = cli(cli_env, "doctor")
    assert doctor.returncode == 0, doctor.stdout
    gone = cli(cli_env, "verify", "old-1")
    assert gone.returncode == 2 and "was pruned" in gone.stderr + gone.stdout
    copy = cli(cli_env, "verify", str(bundle))
    assert copy.returncode == 0 and "receipt of its prune" in copy.stdout, copy.stdout


def test_prune_refuses_what_it_cannot_prune(cli_env: dict[str, str]) -> None:
    """A bad duration, a live status or no age at all is a usage error naming the fix."""
    assert cli(cli_env, "run", RESEARCH, "research", "--topic", "t").returncode == 0
    bad = cli(cli_env, "prune", "--older-than", "ninety days")
    assert bad.returncode == 2 and "like 90d" in bad.stderr
    live = cli(cli_env, "prune", "--older-than", "1d", "--status", "running")
    assert live.returncode == 2
    none = cli(cli_env, "prune")
    assert none.returncode == 2 and "--older-than 90d" in none.stderr


def test_retention_keys_other_than_older_than_and_status_are_refused(
    cli_env: dict[str, str],
) -> None:
    """`[retention] max_age` (a name other tools use) is refused, not ignored: the error names
    the file, the key, the right key and its form; a misspelt `statuses` is pointed to
    `status`."""
    home = Path(cli_env["INTERLOCK_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    config = home / "interlock.toml"
    config.write_text('[retention]\nolder_than = "90d"\nmax_age = "30d"\n')
    refused = cli(cli_env, "prune", "--dry-run")
    assert refused.returncode == 2, refused.stderr
    text = " ".join(refused.stderr.split())
    assert f"{config}: [retention] has no key 'max_age': did you mean 'older_than'?" in text
    assert 'older_than = "<duration>"' in text
    config.write_text('[retention]\nolder_than = "90d"\nstatuses = ["failed"]\n')
    misspelt = cli(cli_env, "prune", "--dry-run")
    assert misspelt.returncode == 2 and "did you mean 'status'?" in misspelt.stderr
