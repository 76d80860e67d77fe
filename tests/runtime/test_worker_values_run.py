"""A command worker printing a value the ledger cannot record exactly fails its task with the
reason, while other runs go on; a value it can record is delivered exactly."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from interlock import Interlock, RunStatus
from interlock.errors import UsageError
from interlock.storage import chain

PRINTS = "import sys; print(open(sys.argv[1], encoding='utf-8').read())"


def _workflow(tmp_path: Path, name: str, output: str) -> Path:
    printed = tmp_path / f"{name}.json"
    printed.write_text(output, encoding="utf-8")
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""
        p:
          phases:
            - id: a
              workers:
                - role: counter
                  final: true
                  command: ["{sys.executable}", "-c", "{PRINTS}", "{printed}"]
                  extract:
                    n: {{json: n, type: list}}
                    label: {{json: label, type: string}}
        """)
    )
    return path


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ('{"n": [18446744073709551616], "label": "x"}', "value 'n', item 0: the integer"),
        ('{"n": [-9223372036854775809], "label": "x"}', "value 'n', item 0: the integer"),
        ('{"n": [1], "label": "bad \\ud800"}', "value 'label': the text holds a lone surrogate"),
        ('{"n": [NaN], "label": "x"}', "is not a finite number"),
        ('{"n": ' + "[" * 100_000 + "]" * 100_000 + ', "label": "x"}', "nested too deeply"),
    ],
)
def test_a_value_the_ledger_cannot_record_fails_only_its_task(
    app: Interlock, tmp_path: Path, output: str, reason: str
) -> None:
    """The task fails with `output rejected:` and the reason; a run beside it, driven by the
    same orchestrator, delivers its exact values; both chains verify."""
    bad = app.start(_workflow(tmp_path, "bad", output), topic="t")
    exact = '{"n": [18446744073709551615, -9223372036854775808, -0.0], "label": "\\ud83d\\ude00"}'
    good = app.start(_workflow(tmp_path, "good", exact), topic="t")
    app.drive(bad, good)
    failed = app.state(bad)
    assert failed.status is RunStatus.FAILED
    errors = [e.data["error"] for e in app.events(bad) if e.kind == "task_failed"]
    assert errors and all(e.startswith("output rejected: ") and reason in e for e in errors)
    assert "Traceback" not in (failed.failure or "") and reason in (failed.failure or "")
    assert app.state(good).status is RunStatus.DELIVERED
    done = next(e for e in app.events(good) if e.kind == "task_completed")
    assert done.data["values"] == {"n": [2**64 - 1, -(2**63), 0.0], "label": "\U0001f600"}
    for run_id in (bad, good):
        assert chain.verify_events(app.store.events(run_id)).ok


def test_a_persons_message_with_a_lone_surrogate_is_refused_with_why(
    app: Interlock, tmp_path: Path
) -> None:
    """A note whose text holds a lone surrogate (a terminal's undecodable byte in argv) is
    refused as a usage error naming the problem; the run's history is unchanged."""
    run_id = app.start(_workflow(tmp_path, "w", '{"n": [1], "label": "x"}'), topic="t")
    before = len(app.events(run_id))
    with pytest.raises(UsageError, match="lone UTF-16 surrogate"):
        app.message(run_id, "checked \udcff sources")
    assert len(app.events(run_id)) == before and not app.store.pending_commands(run_id)
