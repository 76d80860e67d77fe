"""Run files that are not part of the commit protocol (status.json, prompt records) may be
stale or short after a kill; resume regenerates them. Outputs written in a batch stay
durable: each fsynced before its rename, each folder after."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

FLOW = """
p:
  phases:
    - id: one
      workers:
        - role: writer
          command: [{py}, "-c", {script}, "{{output}}"]
    - id: two
      workers:
        - {{role: summary, model: any, final: true, reads: [writer.md], task: "Summarize."}}
"""


def _flow(tmp_path: Path) -> Path:
    path = tmp_path / "flow.yaml"
    script = "import sys; open(sys.argv[1], 'w').write('hello\\n')"
    path.write_text(FLOW.format(py=json.dumps(sys.executable), script=json.dumps(script)))
    return path


def _cli(
    home: Path, *args: str, crash_at: str | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    command = [*prefix, sys.executable, "-m", "interlock", "--home", str(home), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _recorded(home: Path, run_id: str) -> int:
    with sqlite3.connect(home / "ledger.db") as db:
        row = db.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()
    return int(row[0])


def test_a_kill_while_status_json_is_stale_is_repaired_by_resume(tmp_path: Path) -> None:
    """Killed right after a commit, before status.json was rewritten for it: the file shows
    fewer events than the ledger holds, `interlock status` answers from the ledger instead,
    and resume rewrites status.json from the ledger, delivered and complete."""
    home, run_id = tmp_path / "home", "stale-1"
    first = _cli(
        home, "run", str(_flow(tmp_path)), "p", "-t", "x", "--run-id", run_id,
        crash_at="after_append:2",
    )  # fmt: skip
    assert first.returncode == -9, first.stderr
    status_file = home / "runs" / run_id / "status.json"
    stale = json.loads(status_file.read_text())
    recorded = _recorded(home, run_id)
    assert stale["events"] < recorded, (stale["events"], recorded)
    shown = _cli(home, "status", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["events"] == recorded
    resumed = _cli(home, "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    archived = json.loads((home / "archive" / run_id / "status.json").read_text())
    assert archived["status"] == "delivered"
    assert archived["events"] == _recorded(home, run_id)
    assert (home / "archive" / run_id / "final.md").read_bytes()


def test_a_prompt_record_cut_short_by_a_kill_is_written_anew(tmp_path: Path) -> None:
    """The prompt record is written in place, without a temporary file: killed after the
    model task started and before its start was recorded, with the record left short (what
    a kill while writing it leaves), resume sends the attempt again and the record holds
    the whole prompt, with no temporary file beside it."""
    home, run_id = tmp_path / "home", "prompt-1"
    first = _cli(
        home, "run", str(_flow(tmp_path)), "p", "-t", "x", "--run-id", run_id,
        crash_at="after_dispatch:2",
    )  # fmt: skip
    assert first.returncode == -9, first.stderr
    prompts = home / "runs" / run_id / "prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    (prompts / "summary@1.1.md").write_text("<!-- model any")
    resumed = _cli(home, "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    folder = home / "archive" / run_id / "prompts"
    assert sorted(p.name for p in folder.iterdir()) == ["summary@1.1.md"]
    record = (folder / "summary@1.1.md").read_text()
    assert record.startswith("<!-- model any") and "Summarize." in record and "hello" in record
    shown = _cli(home, "explain", run_id, "--prompt", "summary@1")
    assert shown.returncode == 0 and "Summarize." in shown.stdout, shown.stderr


BATCH = """
import sys
from pathlib import Path
from interlock.runtime.artifacts import write_files
base = Path(sys.argv[1])
write_files([(base / f"d{i % 3}" / f"f{i}.md", f"body {i}".encode()) for i in range(20)])
"""
SYSCALL = re.compile(r"^(\d+)\s+(fsync|rename)\((.*)\)\s+= 0")


def test_a_batch_of_outputs_is_fsynced_before_renames_and_folders_after(tmp_path: Path) -> None:
    """Traced system calls of one batch of 20 outputs in 3 folders, written by several
    threads: every file is complete at its path, each was fsynced before its rename, each
    folder fsynced after the last rename into it, and no temporary file is left."""
    base, trace = tmp_path / "out", tmp_path / "trace.txt"
    for index in range(3):
        (base / f"d{index}").mkdir(parents=True)
    strace = ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,rename", "-o", str(trace)]
    env = dict(os.environ)
    done = subprocess.run(
        [*strace, sys.executable, "-c", BATCH, str(base)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    calls: list[tuple[str, list[str]]] = []
    pending: dict[str, str] = {}  # pid -> the fsync it began, until it is resumed
    for line in trace.read_text().splitlines():
        pid = line.split(" ", 1)[0]
        if " fsync(" in line and "<unfinished ...>" in line:
            pending[pid] = re.findall(r"<([^>]+)>", line)[0]
            continue
        if "<... fsync resumed>" in line and pid in pending:
            calls.append(("fsync", [pending.pop(pid)]))
            continue
        match = SYSCALL.match(line)
        if match:
            names = [a or b for a, b in re.findall(r'"([^"]+)"|<([^>]+)>', match.group(3))]
            calls.append((match.group(2), names))
    synced = [(i, names[0]) for i, (call, names) in enumerate(calls) if call == "fsync"]
    renames = [(i, names) for i, (call, names) in enumerate(calls) if call == "rename"]
    assert len(renames) == 20, calls
    for position, (source, target) in renames:
        assert any(i < position and path == source for i, path in synced), target
        folder = str(Path(target).parent)
        last = max(i for i, (_, t) in renames if str(Path(t).parent) == folder)
        assert any(i > last and path == folder for i, path in synced), folder
    for index in range(20):
        path = base / f"d{index % 3}" / f"f{index}.md"
        assert path.read_text() == f"body {index}"
    assert sorted(p.name for p in base.rglob(".*")) == []
