"""Outputs are durable before their run is archived, a power loss before that is repaired from
the ledger, and an empty file left at a final path (what a power loss makes of an unsynced
rename) is never taken as done."""

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


SYSCALL = re.compile(r"^\d+\s+(fsync|fdatasync|rename|renameat2?)\((.*)\)\s+= 0")


def test_every_output_is_durable_before_its_run_is_archived(tmp_path: Path) -> None:
    """Traced system calls of a real run: each file renamed into a run directory (a command's
    output, a model's answer written from the ledger, final.md) was made durable before the
    run directory moved to the archive (an archived run is never resumed, and a resume is
    what rewrites outputs a power loss damaged): fsynced before its rename, or fsynced at its
    path after its last rename; and its folder fsynced after that rename."""
    home, trace = tmp_path / "home", tmp_path / "trace.txt"
    prefix = ("strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2")
    done = _cli(
        home, "run", str(_flow(tmp_path)), "p", "-t", "x", prefix=(*prefix, "-o", str(trace))
    )
    assert done.returncode == 0, done.stderr
    synced: list[str] = []  # paths fsynced so far, in order of completion
    renames: list[tuple[int, str, str]] = []
    unfinished: dict[str, str] = {}  # pid -> path of an fsync another thread interrupted
    for line in trace.read_text().splitlines():
        pid = line.split(" ", 1)[0]
        if "<unfinished ...>" in line and " fsync(" in line:
            unfinished[pid] = re.findall(r"<([^>]+)>", line)[0]
            continue
        if re.search(r"<\.\.\. fsync resumed>.*= 0", line) and pid in unfinished:
            synced.append(unfinished.pop(pid))
            continue
        match = SYSCALL.match(line)
        if match is None:
            continue
        call, args = match.groups()
        names = [a or b for a, b in re.findall(r'"([^"]+)"|<([^>]+)>', args)]
        if call.startswith(("fsync", "fdatasync")):
            synced.append(names[0])
        else:
            renames.append((len(synced), names[0], names[-1]))
    runs = str(home / "runs")
    moves = [position for position, _, target in renames if Path(target).parent == home / "archive"]
    assert len(moves) == 1, renames
    moved = moves[0]  # the run directory's move into the archive
    last: dict[str, tuple[int, str]] = {}  # each output's last rename into place
    for position, source, target in renames:
        in_run = target.startswith(runs) and Path(target).parent.parent == home / "runs"
        if in_run and not target.endswith("status.json"):  # status.json: a projection
            last[target] = (position, source)
    assert {Path(t).name for t in last} >= {"writer.md", "summary.md", "final.md"}, renames
    for target, (position, source) in last.items():
        before = source in synced[:position]
        after = target in synced[position:moved]
        assert before or after, f"{target} was not fsynced before the run was archived"
        folder = str(Path(target).parent)
        assert folder in synced[position:moved], f"{target}'s folder not fsynced before"


def test_outputs_a_power_loss_cut_short_are_whole_again_after_resume(tmp_path: Path) -> None:
    """Killed once the delivery is recorded and the outputs written (not yet made durable),
    with the answers written from the ledger then cut short (what a power loss may leave of
    files never fsynced): the resume rewrites them from the ledger before it archives the
    run, and moves nothing aside as a change made by hand."""
    home, flow = tmp_path / "home", _flow(tmp_path)
    first = _cli(
        home, "run", str(flow), "p", "-t", "x", "--run-id", "cut-1", crash_at="after_deliver"
    )
    assert first.returncode == -9, first.stderr
    live = home / "runs" / "cut-1"
    whole = {name: (live / name).read_bytes() for name in ("summary.md", "final.md")}
    assert whole["summary.md"] == whole["final.md"] and len(whole["final.md"]) > 2
    (live / "summary.md").write_bytes(whole["summary.md"][:2])
    (live / "final.md").write_bytes(b"")
    resumed = _cli(home, "resume", "cut-1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    archived = home / "archive" / "cut-1"
    assert {name: (archived / name).read_bytes() for name in whole} == whole
    assert not list(archived.glob("*.unrecorded*"))


def test_an_empty_file_left_at_a_final_path_is_not_adopted(tmp_path: Path) -> None:
    """Killed after a command's output was renamed into place and before its completion was
    recorded, with the file then emptied (a power loss on an unsynced rename): resume runs the
    task again instead of adopting the empty file, and delivers its real output."""
    home, flow = tmp_path / "home", _flow(tmp_path)
    first = _cli(
        home,
        "run",
        str(flow),
        "p",
        "-t",
        "x",
        "--run-id",
        "empty-1",
        crash_at="after_commit_output",
    )
    assert first.returncode == -9, first.stderr
    output = home / "runs" / "empty-1" / "writer.md"
    assert output.read_text() == "hello\n"
    output.write_bytes(b"")
    resumed = _cli(home, "resume", "empty-1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    archived = home / "archive" / "empty-1"
    assert (archived / "writer.md").read_text() == "hello\n"
    with sqlite3.connect(home / "ledger.db") as db:
        rows = db.execute(
            "SELECT data FROM events WHERE run_id = 'empty-1' AND kind = 'task_completed'"
        ).fetchall()
    completions = [json.loads(r[0]) for r in rows]
    writer = [c for c in completions if c["artifact"] == "writer.md"]
    assert len(writer) == 1 and not writer[0].get("adopted") and writer[0]["size"] == 6


def test_a_path_given_twice_in_one_batch_gets_its_last_body(tmp_path: Path) -> None:
    """An output written and edited within one tick is one file with the later text, and no
    temporary file is left behind."""
    from interlock.runtime.artifacts import write_files

    out, other = tmp_path / "b.md", tmp_path / "c.md"
    write_files([(out, b"first"), (other, b"other"), (out, b"edited")])
    assert out.read_bytes() == b"edited" and other.read_bytes() == b"other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.md", "c.md"]
