"""interlock: deterministic, crash-safe orchestration for multi-agent pipelines.

The public surface is re-exported here; everything else is internal and may change.

Importing the package is cheap: each name is imported from its module on first use, so the
command line starts quickly and `import interlock` does not load the whole runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interlock.api import Interlock, SignalReceipt
    from interlock.core.decide import Decision, RuleName, decide, next_wake, settle
    from interlock.core.events import Event
    from interlock.core.loader import Definition, Workflow, load_workflow, parse_workflow
    from interlock.core.state import RunState, RunStatus, TaskStatus, fold
    from interlock.core.workflow import Extract, ForEach, Phase, Pipeline, Rule, Worker
    from interlock.errors import (
        ExitCode,
        InterlockError,
        InvalidSignal,
        LeaseHeld,
        LeaseLost,
        RunNotFound,
        StorageError,
        UsageError,
        WorkflowError,
    )
    from interlock.runtime.executors import TaskContext, register
    from interlock.runtime.model_calls import BudgetExceeded, Completion, ModelCallError
    from interlock.runtime.orchestrator import Settings

__all__ = [
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

_EXPORTS = {
    "BudgetExceeded": "interlock.runtime.model_calls",
    "Completion": "interlock.runtime.model_calls",
    "Decision": "interlock.core.decide",
    "Definition": "interlock.core.loader",
    "Event": "interlock.core.events",
    "ExitCode": "interlock.errors",
    "Extract": "interlock.core.workflow",
    "ForEach": "interlock.core.workflow",
    "Interlock": "interlock.api",
    "InterlockError": "interlock.errors",
    "InvalidSignal": "interlock.errors",
    "SignalReceipt": "interlock.api",
    "Settings": "interlock.runtime.orchestrator",
    "LeaseHeld": "interlock.errors",
    "LeaseLost": "interlock.errors",
    "ModelCallError": "interlock.runtime.model_calls",
    "Phase": "interlock.core.workflow",
    "Pipeline": "interlock.core.workflow",
    "Rule": "interlock.core.workflow",
    "RuleName": "interlock.core.decide",
    "RunNotFound": "interlock.errors",
    "RunState": "interlock.core.state",
    "RunStatus": "interlock.core.state",
    "StorageError": "interlock.errors",
    "TaskContext": "interlock.runtime.executors",
    "TaskStatus": "interlock.core.state",
    "UsageError": "interlock.errors",
    "Worker": "interlock.core.workflow",
    "Workflow": "interlock.core.loader",
    "WorkflowError": "interlock.errors",
    "decide": "interlock.core.decide",
    "fold": "interlock.core.state",
    "load_workflow": "interlock.core.loader",
    "next_wake": "interlock.core.decide",
    "parse_workflow": "interlock.core.loader",
    "register": "interlock.runtime.executors",
    "settle": "interlock.core.decide",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use."""
    if name == "__version__":
        from importlib.metadata import version

        return version("interlock")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'interlock' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
