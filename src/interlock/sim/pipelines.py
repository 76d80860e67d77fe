"""The pipelines the simulator runs: a fixed catalog of shapes, and random ones.

The catalog covers each feature on its own (parallel, sequential, retries, fallbacks, pause,
bounded loops, fan-out, budget) and all of them together (`combined`); random pipelines mix
them, a third of them under a budget.
"""

from __future__ import annotations

import json
import random
import zlib
from functools import cache
from typing import Any

from interlock.core.loader import Definition, build_workflow
from interlock.errors import WorkflowError

SCORE = {"score": {"json": "score", "type": "number"}}
OK = {"ok": {"json": "ok", "type": "bool"}}
ITEMS = {"items": {"json": "items", "type": "list"}}


def _w(role: str, **extra: Any) -> dict[str, Any]:
    # A start_timeout of a minute: a lost dispatch is found within the simulated run.
    return {"role": role, "model": "m", "timeout": 20, "grace": 5, "start_timeout": 60, **extra}


CATALOG: dict[str, dict[str, Any]] = {
    "parallel": {
        "phases": [
            {"id": "collect", "workers": [_w("a"), _w("b"), _w("c")]},
            {"id": "merge", "workers": [_w("d", reads=["a.md", "b.md", "c.md"], final=True)]},
        ]
    },
    "sequential": {
        "phases": [
            {
                "id": "chain",
                "mode": "sequential",
                "workers": [_w("a"), _w("b", reads=["a.md"]), _w("c", reads=["b.md"], final=True)],
            }
        ]
    },
    "retries": {
        "phases": [
            {
                "id": "work",
                "workers": [
                    _w("a", retries=3, backoff={"initial": 1, "max": 10}),
                    _w("b", retries=1, backoff={"initial": 0}, final=True),
                ],
            }
        ]
    },
    "fallbacks": {
        "phases": [
            {
                "id": "work",
                "workers": [
                    _w("a", retries=1, fallback_models=["f1", "f2"], final=True, extract=OK)
                ],
            }
        ]
    },
    "pause": {
        "phases": [
            {"id": "draft", "workers": [_w("a", retries=1)], "pause_after": True},
            {"id": "review", "workers": [_w("b", reads=["a.md"])], "pause_after": True},
            {"id": "publish", "workers": [_w("c", reads=["b.md"], final=True)]},
        ]
    },
    "loop": {
        "phases": [
            {"id": "draft", "workers": [_w("writer", retries=1)]},
            {
                "id": "review",
                "workers": [_w("reviewer", extract=SCORE, retries=1)],
                "next": [
                    {"if": "reviewer.score < 8.0", "goto": "polish", "max_visits": 3},
                    {"goto": "publish"},
                ],
            },
            {"id": "polish", "workers": [_w("polisher")], "next": [{"goto": "review"}]},
            {"id": "publish", "workers": [_w("publisher", final=True)]},
        ]
    },
    "fanout": {
        "phases": [
            {"id": "plan", "workers": [_w("planner", extract=ITEMS, retries=2)]},
            {
                "id": "write",
                "for_each": {"items": "planner.items", "concurrency": 2},
                "workers": [_w("writer", retries=1), _w("checker", reads=["writer.md"])],
                "mode": "sequential",
            },
            {"id": "assemble", "workers": [_w("editor", reads=["writer.md"], final=True)]},
        ]
    },
    "budget": {
        "budget": {"max_tokens": 1, "on_exceed": "pause"},
        "phases": [
            {"id": "one", "workers": [_w("a"), _w("b")]},
            {"id": "two", "workers": [_w("c", final=True)]},
        ],
    },
    # Features together: a budget reached mid-run beside pause_after phases, a loop back into
    # a fan-out, retries everywhere. A budget pause and a pause_after pause must each be
    # approved for what they are.
    "combined": {
        "budget": {"max_tokens": 60, "on_exceed": "pause"},
        "phases": [
            {
                "id": "plan",
                "workers": [_w("planner", extract=ITEMS, retries=2)],
                "pause_after": True,
            },
            {
                "id": "write",
                "for_each": {"items": "planner.items", "concurrency": 2},
                "workers": [_w("writer", retries=1)],
                "pause_after": True,
            },
            {
                "id": "review",
                "workers": [_w("reviewer", extract=SCORE, retries=1, reads=["writer.md"])],
                "next": [
                    {"if": "reviewer.score < 8.0", "goto": "write", "max_visits": 2},
                    {"goto": "publish"},
                ],
            },
            {"id": "publish", "workers": [_w("publisher", final=True)], "pause_after": True},
        ],
    },
    # Durable waits: a delay and a signal with a timeout before a phase (a timeout skips it),
    # and a signal after the last phase that holds the delivery.
    "waits": {
        "phases": [
            {"id": "draft", "workers": [_w("a", retries=1)], "delay": 8},
            {
                "id": "hold",
                "wait_for": {"signal": "go", "timeout": 20, "schema": {"type": "object"}},
                "workers": [_w("b", reads=["a.md"], retries=1)],
                "next": [{"if": "signals.go == null", "goto": "publish"}],
            },
            {"id": "fix", "workers": [_w("c", retries=1)], "delay": 3},
            {
                "id": "publish",
                "wait_for": {"signal": "ship", "when": "after"},
                "workers": [_w("d", final=True, retries=1)],
                "pause_after": True,
            },
        ]
    },
}
# Edits of fan-out items that later tasks read: a review after the task that reads every item,
# and after the final one, which reads both the items and what was made of them.
CATALOG["revise"] = {
    "phases": [
        {"id": "plan", "workers": [_w("planner", extract=ITEMS, retries=1)]},
        {
            "id": "write",
            "for_each": {"items": "planner.items", "concurrency": 2},
            "workers": [_w("writer", retries=1)],
        },
        {
            "id": "assemble",
            "workers": [_w("editor", reads=["writer.md"], retries=1)],
            "pause_after": True,
        },
        {
            "id": "publish",
            "workers": [_w("publisher", reads=["writer.md", "editor.md"], final=True, retries=1)],
            "pause_after": True,
        },
    ]
}
# A fan-out that tolerates failed items, with retries that often run out: a run goes on with
# up to two failed items (of a list of any length), and fails past them; a sequential lane
# stops at its failed worker; a review after it may send the run back for a new visit.
CATALOG["tolerate"] = {
    "phases": [
        {"id": "plan", "workers": [_w("planner", extract=ITEMS, retries=2)]},
        {
            "id": "write",
            "for_each": {"items": "planner.items", "concurrency": 2, "tolerate": 2},
            "workers": [_w("writer"), _w("checker", reads=["writer.md"])],
            "mode": "sequential",
            "pause_after": True,
        },
        {"id": "assemble", "workers": [_w("editor", reads=["writer.md?"], final=True)]},
    ]
}
# Drawn for seeds that name no pipeline: the shapes that existed before waits, so that each
# seed draws what it always drew (one seed in eight plays `waits` instead, see `wait_seed`;
# one in four of the others a generated mix of features, see `mixed_seed`; one in eight of
# the rest the tolerating fan-out, see `tolerate_seed`).
DRAWN = [name for name in CATALOG if name not in ("waits", "revise", "tolerate")]


def wait_seed(seed: int) -> bool:
    """Whether a seed that names no pipeline plays `waits` (a hash, not a draw)."""
    return zlib.crc32(f"waits:{seed}".encode()) % 8 == 0


MIXED_SHAPES = 16  # generated mixes per 4,000 consecutive seeds (each validated once)


def mixed_seed(seed: int) -> bool:
    """Whether a seed that names no pipeline (and is no `waits` seed) plays a generated mix
    of features (`mixed_spec`): a hash, not a draw, so that other seeds draw what they drew."""
    return not wait_seed(seed) and zlib.crc32(f"mixture:{seed}".encode()) % 8 == 0


def tolerate_seed(seed: int) -> bool:
    """Whether a seed that names no pipeline (no `waits` or mix seed) plays `tolerate`."""
    return (
        not wait_seed(seed)
        and not mixed_seed(seed)
        and zlib.crc32(f"tolerate:{seed}".encode()) % 8 == 0
    )


# What a generated fan-out tolerates, picked by a hash of its phase (not drawn, so that every
# seed draws what it drew before): none for half of them, else a count or a percentage.
TOLERANCES: tuple[int | str, ...] = (0, 1, 2, "50%", "34%", "100%")


def with_tolerance(phase: dict[str, Any]) -> None:
    """Give a generated fan-out phase a `tolerate` derived from its shape (or none)."""
    shape = zlib.crc32(json.dumps(phase, sort_keys=True).encode())
    if shape % 2 == 0:
        phase["for_each"]["tolerate"] = TOLERANCES[shape // 2 % len(TOLERANCES)]


def for_seed(seed: int, rng: random.Random, name: str | None) -> tuple[str, Definition]:
    """The pipeline a seed plays: `name`, or one drawn; `waits` or a mix for some seeds."""
    if (name is None and mixed_seed(seed)) or name == "mixed":
        # Validating a workflow costs more than playing it: seeds share a few shapes each
        # (another few in every window of 4,000 seeds), and play them under their own faults.
        shape = f"mixed-{seed // 4000}-{seed % MIXED_SHAPES}"
        return "mixed", mixed(random.Random(shape))
    drawn = choose(rng, name)  # drawn even when replaced: the seed's later draws stay put
    if name is None and wait_seed(seed):
        return "waits", definition("waits", CATALOG["waits"])
    if name is None and tolerate_seed(seed):
        return "tolerate", definition("tolerate", CATALOG["tolerate"])
    return drawn


@cache
def _definition(name: str, spec_json: str) -> Definition:
    return build_workflow({name: json.loads(spec_json)}, f"<sim:{name}>").get(name)


def definition(name: str, spec: dict[str, Any]) -> Definition:
    """A validated, pinned definition (parsed once per shape per process)."""
    return _definition(name, json.dumps(spec, sort_keys=True))


def random_spec(rng: random.Random) -> dict[str, Any]:
    """A random pipeline: 1-4 phases mixing modes, retries, fallbacks, pauses, loops, fan-out."""
    count = rng.randint(1, 4)
    phases: list[dict[str, Any]] = []
    listers: list[str] = []
    for index in range(count):
        workers = []
        for number in range(rng.randint(1, 3)):
            extra: dict[str, Any] = {
                "retries": rng.randint(0, 2),
                "backoff": {"initial": rng.choice([0, 1, 4]), "max": 8},
                "extract": {**OK, **ITEMS},
                "timeout": rng.choice([5, 20]),
            }
            if rng.random() < 0.3:
                extra["fallback_models"] = ["fb"]
            workers.append(_w(f"w{index}{number}", **extra))
        phase: dict[str, Any] = {
            "id": f"p{index}",
            "mode": rng.choice(["parallel", "sequential"]),
            "workers": workers,
            "pause_after": rng.random() < 0.2,
        }
        last = index == count - 1
        if not last and listers and rng.random() < 0.4:
            phase["for_each"] = {
                "items": f"{rng.choice(listers)}.items",
                "concurrency": rng.choice([None, 1, 2]),
            }
            with_tolerance(phase)
        if not last and rng.random() < 0.5:
            role = rng.choice(workers)["role"]
            phase["next"] = [
                {
                    "if": f"{role}.ok",
                    "goto": f"p{rng.randint(0, count - 1)}",
                    "max_visits": rng.randint(1, 2),
                }
            ]
        listers += [w["role"] for w in workers]
        phases.append(phase)
    phases[-1]["workers"][-1]["final"] = True
    spec: dict[str, Any] = {"phases": phases}
    # One random pipeline in three has a budget it reaches mid-run. Derived from the shape
    # drawn, not drawn itself, so that every other draw of a seed stays what it was.
    shape = zlib.crc32(json.dumps(phases, sort_keys=True).encode())
    if shape % 3 == 0:
        spec["budget"] = {"max_tokens": 20 + shape % 100, "on_exceed": "pause"}
    return spec


def choose(rng: random.Random, name: str | None = None) -> tuple[str, Definition]:
    """A catalog pipeline (by name, or drawn), or a random one when drawn as 'random'."""
    if name is None:
        name = rng.choice([*DRAWN, "random", "random"])
    if name == "mixed":
        return choose(rng, "parallel")  # `for_seed` makes it from a stream of its own
    if name != "random":
        return name, definition(name, CATALOG[name])
    for _ in range(20):
        try:
            return "random", definition("random", random_spec(rng))
        except WorkflowError:
            continue  # e.g. a fan-out reading a list no earlier phase guarantees; draw again
    return "parallel", definition("parallel", CATALOG["parallel"])


def mixed(rng: random.Random) -> Definition:
    """A generated pipeline combining features (`mixed_spec`), valid (drawn again if not)."""
    for _ in range(20):
        try:
            return definition("mixed", mixed_spec(rng))
        except WorkflowError:
            continue
    return definition("revise", CATALOG["revise"])


def mixed_spec(rng: random.Random) -> dict[str, Any]:
    """Features together: delays and signal waits (with and without timeouts) beside a
    budget, fan-out and bounded loops; up to 5 workers a phase; task concurrency keys and the
    cache; outputs read by later phases and reviews after them, so edits make work again."""
    count = rng.randint(2, 4)
    phases: list[dict[str, Any]] = []
    roles: list[str] = []
    listers: list[str] = []
    signals = 0
    for index in range(count):
        last = index == count - 1
        fan_out = bool(listers) and not last and rng.random() < 0.5
        workers = []
        for number in range(rng.randint(1, 5)):
            extra: dict[str, Any] = {
                "retries": rng.randint(1, 2),
                "backoff": {"initial": rng.choice([0, 1]), "max": 4},
                "timeout": rng.choice([5, 20]),
            }
            if rng.random() < 0.5:
                extra["extract"] = {**OK, **ITEMS}
            if roles and rng.random() < 0.4:
                # Optional: a phase whose signal wait times out is skipped, writing nothing.
                extra["reads"] = [f"{r}.md?" for r in rng.sample(roles, min(2, len(roles)))]
            if rng.random() < 0.25:
                key = rng.choice(['"k"', "string(item)"]) if fan_out else '"k"'
                extra["concurrency"] = {"key": key, "limit": 1}
            workers.append(_w(f"m{index}{number}", **extra))
        phase: dict[str, Any] = {
            "id": f"q{index}",
            "mode": rng.choice(["parallel", "parallel", "sequential"]),
            "workers": workers,
            "pause_after": rng.random() < 0.35,
        }
        if fan_out:
            phase["for_each"] = {
                "items": f"{rng.choice(listers)}.items",
                "concurrency": rng.choice([None, 1, 3]),
            }
            with_tolerance(phase)
        gate = rng.random()
        if gate < 0.25:
            phase["delay"] = rng.choice([2, 8])
        elif gate < 0.5:
            signals += 1
            when = rng.choice(["before", "after"])
            wait: dict[str, Any] = {"signal": f"s{signals}", "when": when}
            if rng.random() < 0.6 and not last:  # a last phase cannot be skipped
                wait["timeout"] = rng.choice([5, 20])
            phase["wait_for"] = wait
        if not last and index and rng.random() < 0.4:
            rule: dict[str, Any] = {"goto": f"q{rng.randint(0, index)}"}
            rule["max_visits"] = rng.randint(1, 2)
            # A condition only where the phase always runs its worker: a phase skipped by its
            # wait's timeout, or a fan-out over an empty list, leaves it no value to read (and
            # the run fails saying so, though the workflow was accepted).
            skippable = "timeout" in phase.get("wait_for", {}) or fan_out
            if "extract" in workers[0] and not skippable:
                rule["if"] = f"{workers[0]['role']}.ok"
            phase["next"] = [rule]
        listers += [w["role"] for w in workers if "extract" in w]
        roles += [w["role"] for w in workers]
        phases.append(phase)
    phases[-1]["workers"][-1]["final"] = True
    spec: dict[str, Any] = {"phases": phases}
    if rng.random() < 0.5:
        spec["budget"] = {"max_tokens": rng.randint(30, 150), "on_exceed": "pause"}
    if rng.random() < 0.3:
        spec["cache"] = True
    return spec
