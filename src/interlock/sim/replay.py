"""Replaying recorded histories through the current engine.

A fixture holds a pinned definition and a run's stored events, each decision with its rule and
why. Replaying folds the observations and, at each point where the engine decided, settles
the table again at the recorded time: the same decisions must come out, in the same order,
with the same rule and reason. The one decision whose timing the runtime chooses, archiving
a delivered run (once its files are durable), is allowed where the history recorded it.
Anything else is a behaviour change, shown as a diff.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.core.decide import settle
from interlock.core.events import from_record, to_record
from interlock.core.loader import Definition
from interlock.core.state import RunState, apply
from interlock.storage.base import StoredEvent


def canonical(definition: dict[str, Any]) -> str:
    """The pinned text of a definition, as `interlock.core.loader` hashes it."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))


def fixture_of(
    name: str, source: str, definition: Definition, events: list[StoredEvent]
) -> dict[str, Any]:
    """A fixture (JSON-ready) from a run's pinned definition and stored events."""
    return {
        "name": name,
        "source": source,
        "pipeline": definition.name,
        "definition_hash": definition.hash,
        "definition": json.loads(definition.canonical),
        "events": [
            {"seq": s.seq, "kind": s.kind, "data": s.data, "rule": s.rule, "why": s.why}
            for s in events
        ],
    }


@dataclass(frozen=True)
class Mismatch:
    """Where a replay parted from the recorded history."""

    seq: int
    diff: str

    def __str__(self) -> str:
        return f"decisions from seq {self.seq} differ:\n{self.diff}"


def _line(kind: str, data: dict[str, Any], rule: str | None, why: str | None) -> str:
    fields = {k: v for k, v in data.items() if k != "v"}
    return f"{kind} {json.dumps(fields, sort_keys=True)} rule={rule} why={why!r}"


def replay(fixture: dict[str, Any]) -> list[Mismatch]:
    """Every group of decisions the current engine makes differently (empty: identical)."""
    text = canonical(fixture["definition"])
    if hashlib.sha256(text.encode()).hexdigest() != fixture["definition_hash"]:
        raise ValueError(f"{fixture['name']}: the pinned definition does not match its hash")
    pipeline = Definition.from_canonical(fixture["pipeline"], text).pipeline
    records = fixture["events"]
    state = RunState()
    mismatches = []
    index = 0
    while index < len(records):
        first = records[index]
        if first["rule"] is None:  # an observation: fold it and go on
            apply(state, from_record(first["kind"], first["data"]))
            index += 1
            continue
        # One settle: the consecutive decisions recorded at the same instant.
        end = index
        while (
            end < len(records)
            and records[end]["rule"] is not None
            and records[end]["data"]["at"] == first["data"]["at"]
        ):
            end += 1
        recorded = records[index:end]
        # When a delivered run is archived is the runtime's choice (once its folder is
        # durable): the recorded group says whether it was allowed at that instant.
        archive = any(r["kind"] == "archived" for r in recorded)
        made = settle(pipeline, state.copy(), first["data"]["at"], archive=archive)
        want = [_line(r["kind"], r["data"], r["rule"], r["why"]) for r in recorded]
        got = [_line(*to_record(d.event), d.rule.value, d.why) for d in made]
        if want != got:
            diff = difflib.unified_diff(want, got, "recorded", "replayed", lineterm="", n=1)
            mismatches.append(Mismatch(first["seq"], "\n".join(diff)))
        for record in recorded:
            apply(state, from_record(record["kind"], record["data"]))
        index = end
    return mismatches


def load(path: Path) -> dict[str, Any]:
    """Read one fixture file."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
