"""The benchmark scripts keep working: each runs here at a tiny size (no figure is judged).

The suite is run by hand on a quiet machine, so a change that breaks one of its sections would
otherwise go unnoticed until the next measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
LOCAL_SECTIONS = [
    "sequential",
    "sequential_sync_normal",
    "disk",
    "floor",
    "concurrent",
    "scale",
    "recovery",
    "postgres",
    "check",
    "check_depth",
    "llm",
]


def run(
    script: str, *args: str, tmp: Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["TMPDIR"] = str(tmp)  # every scratch folder of the script lands here
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.timeout(300)
def test_every_local_section_runs_and_cleans_up(tmp_path: Path) -> None:
    """run.py's sections that need no peer environments, at tiny sizes, PostgreSQL included."""
    out = tmp_path / "results.json"
    done = run(
        "run.py",
        "--only",
        ",".join(LOCAL_SECTIONS),
        "--runs",
        "5",
        "--repeat",
        "1",
        "--concurrent",
        "20",
        "--scale",
        "30",
        "--recovery",
        "10",
        "--check-width",
        "50",
        "--check-depths",
        "5,20",
        "--llm-runs",
        "5",
        "--llm-latency",
        "0.05",
        "--llm-clients",
        "aiohttp",
        "--out",
        str(out),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    failed = {name: results[name] for name in LOCAL_SECTIONS if "error" in results[name]}
    assert failed == {}
    assert results["sequential"]["runs"] == 5 and results["sequential"]["runs_per_s"] > 0
    assert results["sequential"]["handoff_p99_ms"] > 0  # the handoff was observed
    assert results["concurrent"]["runs"] == 20 and results["concurrent"]["steps_per_s"] > 0
    assert results["scale"]["runs"] == 30 and results["scale"]["tick_ratio_long_over_short"] > 0
    assert results["recovery"]["runs"] == 10
    assert (
        results["llm"]["interlock"]["delivered"] == 5 and results["llm"]["interlock"]["lost"] == 0
    )
    assert results["llm"]["bare_aiohttp"]["completed"] == 15
    assert results["check"]["width"] == 50 and results["check"]["states"] > 0
    assert [row["phases"] for row in results["check_depth"]["depths"]] == [5, 20]
    assert results["postgres"]["concurrent_runs"] == 20
    assert results["floor"]["with_run_files_runs_per_s"] > 0
    assert results["machine"]["cores"] >= 1
    assert "machine: " in done.stdout and "\nrecovery\n" in done.stdout  # the table
    # Thousands of run folders per full invocation: none may be left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_unknown_section_is_refused_with_the_list(tmp_path: Path) -> None:
    done = run("run.py", "--only", "sequental", tmp=tmp_path)
    assert done.returncode == 2
    assert "no section 'sequental'" in done.stderr and "concurrent" in done.stderr
    done = run("run.py", "--runs", "0", tmp=tmp_path)
    assert done.returncode == 2 and "positive whole number" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(300)
def test_distributed_script_measures_one_worker(tmp_path: Path) -> None:
    """Two orchestrators and one worker process on a fresh PostgreSQL database: throughput,
    CPU per task summed over the processes, and how often the commit-order lock was waited."""
    args = ["--runs", "2", "--items", "2", "--workers", "1", "--latency", "0", "--json"]
    args += ["--orchestrators", "2"]
    done = run("distributed.py", *args, "--timeout", "120", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["tasks_per_run"] == 4
    assert figures["noop_tasks_per_s_1_workers"] > 0
    assert 0 < figures["noop_cpu_busy_1_workers"] <= 1
    assert figures["noop_cpu_ms_per_task_1_workers"] > 0
    assert 0 <= figures["noop_lock_waited_1_workers"] <= 1
    assert figures["orchestrators"] == 2
    bad = run("distributed.py", "--workers", "1,two", tmp=tmp_path)
    assert bad.returncode == 2 and "positive numbers" in bad.stderr


def test_pg_floor_script_times_statements_and_queue_operations(tmp_path: Path) -> None:
    """Bare statements, the least a queued task needs, and interlock's own queue operations,
    each with its client and server CPU, on a fresh database it drops afterwards."""
    done = run("pg_floor.py", "--count", "16", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for label in ("select 1:", "task shape:", "enqueue, 8 at once:", "worker turn:", "to_spec:"):
        assert label in done.stdout


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_instruction_count_workload_runs(tmp_path: Path, mode: str) -> None:
    """The workload instructions.py counts under valgrind, run here without it."""
    done = run("instructions.py", "--drive", mode, "--runs", "5", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_peer_driver_reports_a_missing_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer that is not installed is a row with its reason, never an exception."""
    monkeypatch.syspath_prepend(str(BENCH / "peers"))
    import run_peers  # type: ignore[import-not-found]

    monkeypatch.setattr(run_peers, "ENVS", tmp_path / "no-envs")
    missing = run_peers.run_one("celery", runs=1, concurrent=1)
    assert missing["sequential_runs_per_s"] is None
    assert "benchmarks/peers/setup.sh celery" in missing["error"]
    unknown = run_peers.run_one("airflow", runs=1, concurrent=1)
    assert "unknown peer" in unknown["error"] and "dbos-sqlite" in unknown["error"]


def test_history_and_watchers_scripts_run_tiny(tmp_path: Path) -> None:
    """history.py (a store with history, a wide run) and watchers.py (0 and N watchers)."""
    done = run("history.py", "--runs", "20", "--width", "6", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"prune"' in done.stdout and '"resume_to_end_s"' in done.stdout
    done = run("watchers.py", "--clients", "2", "--runs", "3", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "orchestration_slowed" in done.stdout.splitlines()[-1]


def test_spawn_script_measures_each_way_of_starting(tmp_path: Path) -> None:
    """spawn.py: CPU per start of `fork` + `preexec_fn`, the `setpriv` wrapper and bare."""
    done = run("spawn.py", "--starts", "3", "--rounds", "1", "--megabytes", "1", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ways = json.loads(done.stdout)["per_start"]
    assert set(ways) == {"fork + preexec_fn", "vfork + setpriv + sh", "vfork bare"}


def test_startup_script_times_the_commands_and_a_whole_run(tmp_path: Path) -> None:
    """startup.py times `--help`, `runs`, `status`, `check` of each example it names and a
    whole `run` against a state directory of its own, which it removes, and compares the
    CPU time of `runs`, `status` and `check` to the target."""
    done = run("startup.py", "--repeat", "1", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == {
        "python -c pass",
        "interlock --help",
        "interlock runs",
        "interlock status RUN",
        "interlock run",
        "interlock check research.json",
        "interlock check fanout.yaml",
        "interlock check taste.yaml",
        "interlock check taste.yaml --cost",
        "interlock check translate.yaml",
        "interlock check translate-plain.yaml",
    }
    assert all(f["min_ms"] > 0 for f in figures.values())
    # Each command of the target (0.3 s of CPU) has a line that compares its CPU time to it.
    targets = [x for x in done.stdout.splitlines() if x.startswith("target ")]
    assert [x.split()[2] for x in targets] == ["runs", "status", *["check"] * 6]
    assert all(" ms of 300 ms (" in x and " of the target): " in x for x in targets), targets
    assert list(tmp_path.iterdir()) == []


def test_task_keys_script_compares_keyed_and_plain_runs(tmp_path: Path) -> None:
    """task_keys.py drives keyed and plain runs to delivery and prints their CPU ratio, and
    removes its scratch folders."""
    done = run("task_keys.py", "--runs", "5", "--rounds", "1", tmp=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["keyed_over_plain"] > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(300)
def test_shared_limits_script_measures_each_store(tmp_path: Path) -> None:
    """The fleet rate-limit benchmark runs its server and clients for each store and says
    how many 429s the server answered and how much of the limit it served."""
    out = tmp_path / "limits.json"
    args = ["--seconds", "3", "--skip", "1", "--processes", "2", "--concurrency", "2"]
    done = run("shared_limits.py", *args, "--json", str(out), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert [row["limits"] for row in rows] == ["process", "postgres", "redis"]
    assert all(row["served_after_skip"] > 0 for row in rows)
    assert "429s after the first 1s" in done.stdout
