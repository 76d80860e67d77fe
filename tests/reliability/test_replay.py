"""Recorded histories replayed through the current engine must give the same decisions."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from interlock.sim.replay import load, replay

HISTORIES = Path(__file__).resolve().parents[1] / "fixtures" / "histories"
FILES = sorted(HISTORIES.glob("*.json"))
RERECORD = "python -m tests.reliability.record_histories"


def test_fixtures_cover_examples_and_every_kind_of_decision() -> None:
    """The fixtures hold the examples and decisions of every rule that matters."""
    names = {path.stem for path in FILES}
    assert {"research", "translate-polish-loop", "fanout-article"} <= names
    rules = {e["rule"] for path in FILES for e in load(path)["events"] if e["rule"]}
    wanted = {"start", "dispatch", "retry", "retry_due", "fallback", "timeout", "give_up"}
    assert wanted | {"pause", "loop_bound", "branch", "phase_done", "deliver", "archive"} <= rules


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_replay_gives_the_recorded_decisions(path: Path) -> None:
    """Folding the observations and settling at each recorded instant reproduces every
    decision with its rule and reason; a change shows as a diff."""
    mismatches = replay(load(path))
    report = "\n\n".join(str(m) for m in mismatches)
    assert not mismatches, (
        f"{path.name}: the engine now decides differently.\n{report}\n"
        f"If the change is intended, re-record with: {RERECORD}"
    )


def test_a_changed_decision_is_reported_with_a_diff() -> None:
    """Editing one recorded reason makes the replay fail, naming the seq and both lines."""
    fixture = copy.deepcopy(load(HISTORIES / "translate-polish-loop.json"))
    decided = next(e for e in fixture["events"] if e["rule"] == "branch")
    decided["why"] = "a reason the engine never gives"
    mismatches = replay(fixture)
    assert len(mismatches) == 1
    text = str(mismatches[0])
    assert "a reason the engine never gives" in text and "--- recorded" in text


def test_a_changed_definition_changes_decisions() -> None:
    """A loop bound edited in the pinned definition is caught (its hash no longer matches)."""
    fixture = copy.deepcopy(load(HISTORIES / "translate-polish-loop.json"))
    fixture["definition"]["phases"][2]["next"][0]["max_visits"] = 1
    with pytest.raises(ValueError, match="does not match its hash"):
        replay(fixture)


def test_an_engine_change_fails_replay_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A different backoff in the engine changes recorded retry decisions: replay says where."""
    monkeypatch.setattr("interlock.core.decide.backoff_delay", lambda *args: 99.0)
    mismatches = replay(load(HISTORIES / "sim-retries.json"))
    assert mismatches
    assert "retry_scheduled" in str(mismatches[0]) and "+++ replayed" in str(mismatches[0])
