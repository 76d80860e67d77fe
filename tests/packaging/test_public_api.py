"""The public API is what `interlock.__all__` lists and `interlock.Interlock` offers: a
change to either is a change to the package's contract (docs/releases.md says how such
changes are made), so it is made here on purpose, never by accident."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import interlock
from interlock import Interlock

PUBLIC = [
    "BudgetExceeded",
    "Completion",
    "Decision",
    "Definition",
    "Event",
    "ExitCode",
    "Extract",
    "ForEach",
    "Interlock",
    "InterlockError",
    "InvalidSignal",
    "LeaseHeld",
    "LeaseLost",
    "ModelCallError",
    "Phase",
    "Pipeline",
    "Rule",
    "RuleName",
    "RunNotFound",
    "RunState",
    "RunStatus",
    "Settings",
    "SignalReceipt",
    "StorageError",
    "TaskContext",
    "TaskStatus",
    "UsageError",
    "Worker",
    "Workflow",
    "WorkflowError",
    "decide",
    "fold",
    "load_workflow",
    "next_wake",
    "parse_workflow",
    "register",
    "settle",
]

METHODS = {
    "approve": [
        "self",
        "run_id: 'str'",
        "message: 'str' = ''",
        "by: 'str | None' = None",
        "-> str",
    ],
    "cancel": ["self", "run_id: 'str'", "reason: 'str' = ''", "by: 'str | None' = None", "-> str"],
    "close": ["self", "-> None"],
    "decide_call": [
        "self",
        "run_id: 'str'",
        "call: 'str'",
        "approved: 'bool'",
        "note: 'str' = ''",
        "by: 'str | None' = None",
        "-> str",
    ],
    "definition_of": ["self", "pipeline: 'str'", "definition_hash: 'str'", "-> Definition"],
    "diff": ["self", "a: 'str'", "b: 'str'", "outputs: 'bool' = False", "-> RunDiff"],
    "drive": ["self", "*run_ids: 'str'", "stop_when_paused: 'bool' = True", "-> RunState"],
    "drive_async": ["self", "*run_ids: 'str'", "stop_when_paused: 'bool' = True", "-> None"],
    "edit": [
        "self",
        "run_id: 'str'",
        "output: 'str'",
        "body: 'str'",
        "note: 'str' = ''",
        "by: 'str | None' = None",
        "-> str",
    ],
    "events": ["self", "run_id: 'str'", "since: 'int' = 0", "-> list[StoredEvent]"],
    "final_path": ["self", "run_id: 'str'", "-> Path | None"],
    "ledger": ["self", "run_id: 'str'", "-> dict[str, Any]"],
    "message": ["self", "run_id: 'str'", "text: 'str'", "by: 'str | None' = None", "-> str"],
    "plan_rerun": [
        "self",
        "source: 'str'",
        "from_phase: 'str | None' = None",
        "workflow: 'str | Path | None' = None",
        "pipeline: 'str | None' = None",
        "topic: 'str | None' = None",
        "inputs: 'dict[str, Any] | None' = None",
        "no_cache: 'bool' = False",
        "definition: 'Definition | None' = None",
        "trust_bundle: 'bool' = False",
        "-> Plan",
    ],
    "reject": [
        "self",
        "run_id: 'str'",
        "to: 'str'",
        "feedback: 'str'",
        "by: 'str | None' = None",
        "-> str",
    ],
    "rerun": [
        "self",
        "source: 'str'",
        "from_phase: 'str | None' = None",
        "workflow: 'str | Path | None' = None",
        "pipeline: 'str | None' = None",
        "topic: 'str | None' = None",
        "inputs: 'dict[str, Any] | None' = None",
        "run_id: 'str | None' = None",
        "no_cache: 'bool' = False",
        "definition: 'Definition | None' = None",
        "trust_bundle: 'bool' = False",
        "-> str",
    ],
    "resolve": ["self", "prefix: 'str'", "-> str"],
    "resume": ["self", "run_id: 'str'", "-> RunState"],
    "run": [
        "self",
        "workflow: 'str | Path | Workflow | Definition'",
        "pipeline: 'str | None' = None",
        "topic: 'str'",
        "inputs: 'dict[str, Any] | None' = None",
        "-> RunState",
    ],
    "run_dir": ["self", "run_id: 'str'", "-> Path"],
    "signal": [
        "self",
        "run_id: 'str'",
        "name: 'str'",
        "data: 'Any' = None",
        "key: 'str | None' = None",
        "by: 'str | None' = None",
        "-> SignalReceipt",
    ],
    "start": [
        "self",
        "workflow: 'str | Path | Workflow | Definition'",
        "pipeline: 'str | None' = None",
        "topic: 'str'",
        "inputs: 'dict[str, Any] | None' = None",
        "run_id: 'str | None' = None",
        "no_cache: 'bool' = False",
        "-> str",
    ],
    "state": ["self", "run_id: 'str'", "-> RunState"],
    "status": ["self", "run_id: 'str'", "-> dict[str, Any]"],
    "submit": [
        "self",
        "workflow: 'str | Path | Workflow | Definition'",
        "pipeline: 'str | None' = None",
        "topic: 'str'",
        "inputs: 'dict[str, Any] | None' = None",
        "run_id: 'str | None' = None",
        "-> str",
    ],
    "watch": [
        "self",
        "run_id: 'str'",
        "since: 'int' = 0",
        "poll: 'float' = 0.2",
        "-> Iterator[StoredEvent]",
    ],
}


def test_the_public_names_are_the_pinned_ones() -> None:
    assert sorted(interlock.__all__) == PUBLIC


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in interlock.__all__:
        value = getattr(interlock, name)
        assert value is not None, name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"interlock.{name} has no docstring"


def _shape(method: object) -> list[str]:
    """A method's parameters as written, then its return annotation."""
    signature = inspect.signature(method)  # type: ignore[arg-type]
    return [str(p) for p in signature.parameters.values()] + [f"-> {signature.return_annotation}"]


def test_the_api_methods_keep_their_signatures() -> None:
    found = {
        name: _shape(member)
        for name, member in inspect.getmembers(Interlock)
        if not name.startswith("_") and callable(member)
    }
    assert found == METHODS


def test_the_version_is_the_installed_distributions() -> None:
    assert interlock.__version__ == importlib.metadata.version("interlock")
    shown = subprocess.run(
        [Path(sys.executable).with_name("interlock"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == f"interlock, version {interlock.__version__}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        getattr(interlock, "Nothing")  # noqa: B009
