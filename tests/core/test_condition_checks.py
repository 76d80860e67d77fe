"""`check` warns about a `next:` condition that reads a worker of its own phase when that
phase may run no task (a fan-out over an empty list, a `before` wait that timed out): the
run would fail there with "reads b, which has no value yet". The warning names the line and
the fix, and the fix evaluates without failing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from interlock.core.condition_checks import condition_warnings
from interlock.core.expressions import evaluate
from interlock.core.loader import parse_workflow
from interlock.core.parse import locator

FLOW = """\
p:
  phases:
    - id: plan
      workers:
        - {role: a, model: m, extract: {items: {json: items, type: list}}}
    - id: fan
      for_each: {items: a.items}
      workers:
        - {role: b, model: m, extract: {ok: {json: ok, type: bool}}}
      next:
        - if: b.ok
          goto: plan
          max_visits: 2
    - id: gate
      wait_for: {signal: go, when: before, timeout: 60}
      workers:
        - {role: c, model: m, extract: {ok: {json: ok, type: bool}}}
      next:
        - if: '"c" in roles && roles.c.ok'
          goto: plan
          max_visits: 3
        - if: c.ok && a.items.size() > 0
          goto: fan
          max_visits: 3
    - id: end
      workers:
        - {role: d, model: m, final: true}
"""


def test_a_condition_on_a_worker_of_a_phase_that_may_run_no_task_is_warned_about() -> None:
    """The fan-out's rule and the signal-gated phase's second rule read their own workers;
    the guarded rule and the read of an earlier phase's worker are not warned about."""
    pipeline = parse_workflow(FLOW, "flow.yaml").get("p").pipeline
    fan, gate = condition_warnings("p", pipeline, locator(FLOW))
    assert fan == (
        "line 11: pipeline 'p', phase 'fan', next rule 1: expression 'b.ok' reads 'b', a "
        "worker of this phase, which runs no task when the list of for_each (a.items) is "
        "empty; the run then fails here (b has no value yet). Read it only when it is "
        "there: '\"b\" in roles && <the condition on roles.b>'"
    )
    assert gate.startswith(
        "line 22: pipeline 'p', phase 'gate', next rule 2: expression 'c.ok && "
        "a.items.size() > 0' reads 'c', a worker of this phase, which runs no task when "
        "signal 'go' does not arrive before its wait times out;"
    )


def test_the_suggested_guard_reads_false_while_the_worker_has_no_value() -> None:
    """`"b" in roles && roles.b.ok` is false with no value for b, and b's value once it has one."""
    guard = '"b" in roles && roles.b.ok'
    assert evaluate(guard, {"roles": {}}) is False
    assert evaluate(guard, {"roles": {"b": {"ok": True}}}) is True


def test_check_prints_the_warning_and_still_passes(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock check` exits 0 and prints the warning with the file and line (an empty
    fan-out is not a path it explores)."""
    # Without the gate phase, whose failing path `check` explores and reports on its own.
    start, end = FLOW.index("    - id: gate"), FLOW.index("    - id: end")
    (tmp_path / "flow.yaml").write_text(FLOW[:start] + FLOW[end:])
    result = subprocess.run(
        [sys.executable, "-m", "interlock", "check", "flow.yaml"],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "warning: flow.yaml: line 11: pipeline 'p', phase 'fan', next rule 1" in " ".join(
        result.stderr.split()
    )
