"""A SQLite ledger and a PostgreSQL store given the same state directory: a run id one of
them holds is refused to the other (exit 5, the folder named, its files untouched), for new
runs and imports alike; different run ids live side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FLOW = """
p:
  phases:
    - id: one
      workers:
        - {role: w, model: any, final: true, task: "Write."}
"""


def _cli(home: Path, *args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    extra = ["--store", store] if store else []
    command = [sys.executable, "-m", "interlock", "--home", str(home), *extra, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_a_run_id_of_one_store_is_refused_to_the_other(tmp_path: Path, pg_database: str) -> None:
    """SQLite delivers run `same`; PostgreSQL is refused `same` as a new run and as an
    import of its bundle (exit 5, no internal error, nothing recorded, final.md as it was),
    and delivers `other` beside it; every later command on both works."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    assert _cli(home, "run", str(flow), "p", "-t", "lite", "--run-id", "same").returncode == 0
    final = home / "archive" / "same" / "final.md"
    before = final.read_bytes()
    clash = _cli(home, "run", str(flow), "p", "-t", "pg", "--run-id", "same", store=pg_database)
    assert clash.returncode == 5, clash.stdout + clash.stderr
    assert f"run id 'same' is taken in {home}: {home / 'archive' / 'same'}" in clash.stderr
    assert "internal error" not in clash.stderr
    assert "no runs" in _cli(home, "runs", store=pg_database).stdout
    assert not (home / "runs" / "same").exists()
    bundle = tmp_path / "same.tar.gz"
    assert _cli(home, "export", "same", "-o", str(bundle)).returncode == 0
    imported = _cli(home, "import", str(bundle), store=pg_database)
    assert imported.returncode == 5, imported.stdout + imported.stderr
    assert "is taken" in imported.stderr
    assert final.read_bytes() == before
    other = _cli(home, "run", str(flow), "p", "-t", "pg", "--run-id", "other", store=pg_database)
    assert other.returncode == 0, other.stderr
    assert _cli(home, "status", "other", store=pg_database).returncode == 0
    assert _cli(home, "status", "same").returncode == 0
    assert _cli(home, "verify", "same").returncode == 0
    assert final.read_bytes() == before


def test_a_postgresql_run_first_refuses_the_same_id_to_sqlite(
    tmp_path: Path, pg_database: str
) -> None:
    """PostgreSQL holds `first` and SQLite holds another run in the same state directory:
    a SQLite run `first` is refused (exit 5), PostgreSQL's files untouched."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    assert _cli(home, "run", str(flow), "p", "-t", "a", "--run-id", "lite").returncode == 0
    made = _cli(home, "run", str(flow), "p", "-t", "pg", "--run-id", "first", store=pg_database)
    assert made.returncode == 0, made.stderr
    before = (home / "archive" / "first" / "final.md").read_bytes()
    clash = _cli(home, "run", str(flow), "p", "-t", "b", "--run-id", "first")
    assert clash.returncode == 5, clash.stdout + clash.stderr
    assert "is taken" in clash.stderr
    assert (home / "archive" / "first" / "final.md").read_bytes() == before
    assert _cli(home, "status", "first", store=pg_database).returncode == 0
