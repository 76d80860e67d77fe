"""What `runs`, `status`, `check` and `events` print for a person: run ids whole on a narrow
terminal, control characters from a topic or a description escaped, and a waiting run whose
wait has passed without an orchestrator marked "not driven"."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.cli.test_cli import cli

PY = sys.executable
FLOW = f"""
long-pipeline-name-for-a-narrow-terminal:
  description: "colours \\x1b[31mred\\x1b[0m and a bell \\x07"
  phases:
    - id: a
      workers:
        - {{role: w, final: true, command: ['{PY}', '-c', 'print(1)']}}
"""


def _flow(tmp_path: Path, text: str = FLOW) -> str:
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    return str(path)


def on_terminal(env: dict[str, str], columns: int, *args: str) -> str:
    """What `interlock ARGS` prints on a terminal `columns` wide (a pseudo-terminal)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(
        [PY, "-m", "interlock", *args],
        env={**env, "COLUMNS": str(columns)},
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    text = b"".join(chunks).decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r\n", "\n")


def test_run_ids_are_never_cut_on_a_narrow_terminal(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """At 80 columns and at 50, every run id is printed whole; the topic gives way."""
    name = "long-pipeline-name-for-a-narrow-terminal"
    ran = cli(cli_env, "run", _flow(tmp_path), name, "--topic", "a topic " * 10)
    run_id = next(line.split()[1] for line in ran.stderr.splitlines() if line.startswith("run "))
    assert len(run_id) > 40
    for columns in (200, 120, 80, 50):
        listing = on_terminal(cli_env, columns, "runs")
        assert run_id in listing, (columns, listing)
        assert "a topic" in listing or columns < 120
        assert all(len(line) <= max(columns, len(run_id) + 2) for line in listing.splitlines())


def test_control_characters_are_escaped_in_every_human_readable_output(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A topic and a description holding an escape sequence, a bell and a carriage return
    reach the terminal as visible escapes in `run`, `runs`, `status`, `check`, `events` and
    `watch`."""
    flow = _flow(tmp_path)
    topic = "evil \x1b]0;owned\x07 topic\rX"
    ran = cli(cli_env, "run", flow, "--topic", topic)
    run_id = next(line.split()[1] for line in ran.stderr.splitlines() if line.startswith("run "))
    outputs = {
        "run": ran.stdout + ran.stderr,
        "runs": cli({**cli_env, "COLUMNS": "200"}, "runs").stdout,
        "status": cli(cli_env, "status", run_id).stdout,
        "check": cli(cli_env, "check", flow).stdout,
        "events": cli(cli_env, "events", run_id).stdout,
        "watch": cli(cli_env, "watch", run_id).stdout,
    }
    for command, text in outputs.items():
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", text), (command, text)
    assert "evil \\x1b]0;owned\\x07 topic\\rX" in outputs["status"]
    assert "colours \\x1b[31mred\\x1b[0m and a bell \\x07" in outputs["check"]
    assert "topic=evil \\x1b]0;owned\\x07 topic\\rX" in outputs["run"]
    assert "evil \\x1b]0;owned\\x07 topic\\rX" in outputs["watch"]


def test_the_command_check_suggests_shows_a_control_character_as_the_shell_reads_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A pipeline named with an escape sequence: `check`'s `run:` line quotes it as $'...'
    with the escape spelled out, a command that runs that pipeline when pasted."""
    flow = _flow(tmp_path, FLOW.replace("long-pipeline-name-for-a-narrow-terminal", '"p\\e[1mq"'))
    checked = cli(cli_env, "check", flow).stdout
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", checked), checked
    assert f"run: interlock run {flow} $'p\\x1b[1mq' --topic TEXT" in checked, checked


WAITS = f"""
shipping:
  phases:
    - id: ship
      delay: 6s
      workers:
        - {{role: shipper, final: true, command: ['{PY}', '-c', 'print(1)']}}
"""


def test_a_waiting_run_past_its_time_without_an_orchestrator_is_not_driven(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The process driving a 6 s delay ends; once the time has passed, `runs` and `status`
    mark the run "not driven", as they do a running run nobody drives, and say how to go on
    (as a run that was driven, not one submitted and never taken up)."""
    process = subprocess.Popen(
        [PY, "-m", "interlock", "run", _flow(tmp_path, WAITS), "shipping", "--topic", "t"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = cli(cli_env, "runs")
            if " waiting" in listing.stdout:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the run never waited")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    time.sleep(6.5)
    shown = " ".join(cli(cli_env, "runs").stdout.split())
    assert "(not driven)" in shown and "interlock resume" in shown
    run_id = shown.split("shipping-")[1].split()[0]
    status = " ".join(cli(cli_env, "status", f"shipping-{run_id}").stdout.split())
    assert "waiting (not driven)" in status
    # It was driven until its process ended: not called a submitted run nobody took up, nor
    # listed among the running ones.
    assert "not driven yet" not in status and "no orchestrator holds this run" in status
    assert "running run(s)" not in shown and "1 run(s) that should be going on" in shown


NARROW = f"""
p:
  phases:
    - id: gather-the-sources
      workers:
        - {{role: researcher-of-primary-sources, command: ['{PY}', '-c', 'print(1)']}}
        - {{role: fact-checker, command: ['{PY}', '-c', 'print(2)']}}
    - id: write
      workers:
        - {{role: writer, final: true, command: ['{PY}', '-c', 'print(3)']}}
"""


def test_status_never_cuts_a_phase_a_worker_or_a_status_on_a_narrow_terminal(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """At 100 columns the workers are a table; at 80 and at 40, too narrow for its columns,
    a line per worker: in every width each phase, worker, status word and cost is printed
    whole (none cut to `researc…` or `complet…`), and no line is wider than the terminal."""
    ran = cli(cli_env, "run", _flow(tmp_path, NARROW), "p", "--topic", "t")
    run_id = next(line.split()[1] for line in ran.stderr.splitlines() if line.startswith("run "))
    words = [
        "gather-the-sources", "researcher-of-primary-sources", "fact-checker", "write",
        "writer", "completed", "$0.0000",
    ]  # fmt: skip
    for columns in (100, 80, 40):
        shown = on_terminal(cli_env, columns, "status", run_id)
        assert "…" not in shown, (columns, shown)
        for word in words:
            assert re.search(rf"(^|\s){re.escape(word)}(\s|$)", shown, re.M), (columns, word)
        long = [line for line in shown.splitlines() if len(line) > columns and "/" not in line]
        assert not long, (columns, long)
        assert ("phase gather-the-sources" in shown) is (columns < 100), (columns, shown)
