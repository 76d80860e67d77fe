"""A child run that ended while no process finished acting on its end is taken once more
(`interlock.runtime.children._tidy`), as `interlock resume` would take a run: a delivered one
still in runs/, and any ended one missing an output its ledger records (a process that died
between the commit and the write of its files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.state import RunState, fold
from interlock.runtime.children import ChildPorts, ChildStart, _tidy
from interlock.runtime.home import Home
from interlock.testing import MemoryStore

CHILD = "parent-sub-1"


class Host:
    """What `_tidy` uses of the orchestrator's child ports: its runs, its home, and `take`."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.driven: dict[str, RunState] = {}
        self.taken: list[str] = []

    def ports(self) -> ChildPorts:
        def create(child: ChildStart, child_id: str, origin: dict[str, Any]) -> None:
            raise AssertionError("no child is created here")

        return ChildPorts(
            store=MemoryStore(),
            home=self.home,
            clock=lambda: 0.0,
            lease_ttl=30.0,
            idle=set(),
            live_state=self.driven.get,
            take=self.taken.append,
            create=create,
        )


def failed_child(*, completed: bool = True) -> RunState:
    """A child whose first draft completed (d1.md), then whose second failed the run."""
    events: list[ev.Event] = [
        ev.RunCreated(at=0.0, run_id=CHILD, pipeline="kid", definition_hash="h", topic="t"),
        ev.PhaseStarted(at=0.0, phase="draft", visit=1),
    ]
    for role in ("d1", "d2"):
        events += [
            ev.TaskDispatched(
                at=0.0,
                task_id=f"{role}@1",
                phase="draft",
                role=role,
                visit=1,
                item=None,
                attempt=1,
                model="m",
            ),
            ev.TaskStarted(at=0.0, task_id=f"{role}@1", attempt=1),
        ]
    if completed:
        events.append(
            ev.TaskCompleted(
                at=1.0, task_id="d1@1", attempt=1, artifact="d1.md", sha256="0" * 64, size=2
            )
        )
    events += [
        ev.TaskFailed(at=2.0, task_id="d2@1", attempt=1, error="boom", retryable=False),
        ev.RunFailed(at=2.0, reason="task d2@1 failed", task_id="d2@1"),
    ]
    return fold(events)


def host(tmp_path: Path) -> Host:
    home = Home.at(tmp_path)
    home.live_dir(CHILD).mkdir(parents=True)
    return Host(home=home)


def test_a_failed_child_missing_a_recorded_output_is_taken_again(tmp_path: Path) -> None:
    """Its commit recorded d1.md, its process died before writing it: taken again, whose
    take rewrites the output from the ledger."""
    orchestrator = host(tmp_path)
    _tidy(orchestrator.ports(), CHILD, failed_child())
    assert orchestrator.taken == [CHILD]


def test_a_failed_child_with_its_outputs_in_place_is_left_alone(tmp_path: Path) -> None:
    """Every recorded output in its folder (or none recorded): nothing to finish."""
    orchestrator = host(tmp_path)
    (orchestrator.home.live_dir(CHILD) / "d1.md").write_text("ok")
    _tidy(orchestrator.ports(), CHILD, failed_child())
    _tidy(orchestrator.ports(), CHILD, failed_child(completed=False))
    assert orchestrator.taken == []


def test_a_child_driven_here_is_finished_by_its_own_driver(tmp_path: Path) -> None:
    """Driven by this orchestrator (or with no folder at all): not taken."""
    orchestrator = host(tmp_path)
    orchestrator.driven[CHILD] = failed_child()
    _tidy(orchestrator.ports(), CHILD, failed_child())
    assert orchestrator.taken == []
    elsewhere = Host(home=Home.at(tmp_path / "other"))
    _tidy(elsewhere.ports(), CHILD, failed_child())
    assert elsewhere.taken == []
