"""interlock: deterministic, crash-safe orchestration for multi-agent pipelines.

The public surface is re-exported here; everything else is internal and may change.
"""

from interlock.api import Interlock
from interlock.core.decide import Decision, RuleName, decide, next_wake, settle
from interlock.core.events import Event
from interlock.core.loader import Definition, Workflow, load_workflow, parse_workflow
from interlock.core.state import RunState, RunStatus, TaskStatus, fold
from interlock.core.workflow import Extract, ForEach, Phase, Pipeline, Rule, Worker
from interlock.errors import (
    ExitCode,
    InterlockError,
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    StorageError,
    UsageError,
    WorkflowError,
)
from interlock.runtime.executors import TaskContext, register

__all__ = [
    "Decision",
    "Definition",
    "Event",
    "ExitCode",
    "Extract",
    "ForEach",
    "Interlock",
    "InterlockError",
    "LeaseHeld",
    "LeaseLost",
    "Phase",
    "Pipeline",
    "Rule",
    "RuleName",
    "RunNotFound",
    "RunState",
    "RunStatus",
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
