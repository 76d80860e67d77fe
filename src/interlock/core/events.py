"""The typed, versioned event records that make up a run's history.

A run has no mutable "current step": its state is the fold of these events
(`interlock.core.state.fold`). Observations (a task completed, a person approved) and the
engine's decisions (dispatch, branch, deliver) are both events; a decision's event is stored
with the rule that produced it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

EVENT_VERSION = 1  # bump with an upgrade function in `from_record` when a field changes meaning


# Dataclass writes each method it generates as source and compiles it: six for a frozen
# class. The event types have only their constructor and frozen guards generated; `Event`
# defines the one `__repr__`, `__eq__` and `__hash__` they share, which behave as dataclass's
# (the fields in order; equal only to an event of the same type), so loading the event types
# compiles half as much.
_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Event:
    """Base of all events. `at` is the orchestrator's clock (epoch seconds) when recorded."""

    kind: ClassVar[str] = "event"
    at: float

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _names(type(self)))
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = _names(type(self))
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in _names(type(self))))


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class RunCreated(Event):
    """A run began, pinned to the definition with this content hash."""

    kind: ClassVar[str] = "run_created"
    run_id: str
    pipeline: str
    definition_hash: str
    topic: str
    inputs: dict[str, Any] = field(default_factory=dict)
    rerun_of: str | None = None  # the run this one reruns (its outputs may be reused)
    rerun_from: str | None = None  # the phase from which every task runs again
    no_cache: bool = False  # never reuse other runs' outputs through `cache:`
    # A child run (`core.subpipelines`): the run and the task whose output it makes.
    parent_run: str | None = None
    parent_task: str | None = None
    # Where its models were configured when it was created: `files`, the interlock.toml
    # files read, first winning, each {path, sha256}, and `explicit`, whether the first was
    # named by --config or INTERLOCK_CONFIG (`runtime.run_config`). None: not recorded.
    config: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class SlotAwaited(Event):
    """The run waits for a slot of its concurrency key: `limit` runs of `key` hold them."""

    kind: ClassVar[str] = "slot_awaited"
    key: str  # the key's value for this run
    limit: int


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class SlotTaken(Event):
    """The run got one of its concurrency key's slots: it may start (see `concurrency`)."""

    kind: ClassVar[str] = "slot_taken"
    key: str  # the key's value for this run


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskSlotAwaited(Event):
    """A task's attempt is ready but waits, before dispatch, for a slot of its worker's
    concurrency key: `limit` attempts of `key` hold them (see `Worker.concurrency`)."""

    kind: ClassVar[str] = "task_slot_awaited"
    task_id: str
    role: str
    attempt: int
    key: str  # the key's value for this attempt
    limit: int


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskSlotTaken(Event):
    """The attempt got a slot of its key: it may be dispatched. It holds the slot until the
    attempt ends (completed, failed, timed out) or the run does."""

    kind: ClassVar[str] = "task_slot_taken"
    task_id: str
    attempt: int
    key: str


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class PhaseStarted(Event):
    """A phase began its `visit`-th run; `items` are the fan-out items when it has for_each."""

    kind: ClassVar[str] = "phase_started"
    phase: str
    visit: int
    items: list[Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskDispatched(Event):
    """A task attempt was recorded as dispatched; only then may anything start it."""

    kind: ClassVar[str] = "task_dispatched"
    task_id: str
    phase: str
    role: str
    visit: int
    item: int | None
    attempt: int
    model: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskStarted(Event):
    """A worker began the attempt (`worker` names the process or session running it)."""

    kind: ClassVar[str] = "task_started"
    task_id: str
    attempt: int
    worker: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskCompleted(Event):
    """The attempt's output was committed at `artifact` (relative to the run directory)."""

    kind: ClassVar[str] = "task_completed"
    task_id: str
    attempt: int
    artifact: str
    sha256: str
    size: int
    values: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    adopted: bool = False  # found committed on disk after a restart, not reported live
    fingerprint: str | None = None  # what the output depends on (`core.fingerprint`)
    fingerprint_parts: dict[str, str] | None = None  # a short hash per part of it
    # The SHA-256 of each record the attempt left beside its output (its prompt, a tool
    # loop's transcript, a command's logs), by path in the run directory, as kept (masked).
    records: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskReused(Event):
    """The attempt was not run: an earlier run's output with the same fingerprint was carried
    over (`via` "rerun": the source run of a rerun; "cache": any earlier run of the store).

    It completes the task at no cost; the file at `artifact` is placed after this is recorded.
    """

    kind: ClassVar[str] = "task_reused"
    task_id: str
    attempt: int
    source_run: str
    source_task: str
    artifact: str
    sha256: str
    size: int
    values: dict[str, Any] = field(default_factory=dict)
    fingerprint: str | None = None
    fingerprint_parts: dict[str, str] | None = None
    via: str = "rerun"


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskFailed(Event):
    """The attempt failed; `retryable` says whether another attempt of the same model may help."""

    kind: ClassVar[str] = "task_failed"
    task_id: str
    attempt: int
    error: str
    retryable: bool = True
    usage: dict[str, Any] | None = None
    # Seconds after `at` before which the provider takes no new call (its Retry-After).
    retry_after: float | None = None
    records: dict[str, str] | None = None  # as in `TaskCompleted`
    # The attempt ended because its tool loop reached a call that waits for a person: turn
    # and call (both from 1), tool and arguments. No failure: the run pauses until the call
    # is decided (`ToolCallDecided`), then the task's next attempt continues the loop.
    approval: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class UsageRecorded(Event):
    """What an answered call cost, reported after its attempt stopped counting (the run
    ended, or the attempt was superseded): spent all the same, so recorded all the same."""

    kind: ClassVar[str] = "usage_recorded"
    task_id: str
    attempt: int
    usage: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskTimedOut(Event):
    """The attempt ran past its limit (reported by the worker, or seen by the engine)."""

    kind: ClassVar[str] = "task_timed_out"
    task_id: str
    attempt: int
    detail: str = ""
    records: dict[str, str] | None = None  # as in `TaskCompleted`


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class TaskBatchWaited(Event):
    """The attempt's model call went into a provider batch (`waiting` true), or its answer
    came back (false): the hours between count in no timeout of the attempt."""

    kind: ClassVar[str] = "task_batch_waited"
    task_id: str
    attempt: int
    waiting: bool


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class RetryScheduled(Event):
    """Attempt `attempt` of the task will be dispatched at `not_before`."""

    kind: ClassVar[str] = "retry_scheduled"
    task_id: str
    attempt: int
    not_before: float
    model: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class ItemFailed(Event):
    """Item `item` of a fan-out failed for good (task `task_id` has no attempt left) and its
    phase's `tolerate` still holds: the item is recorded as failed and the phase goes on
    without its output. `failed` counts the visit's failed items with this one."""

    kind: ClassVar[str] = "item_failed"
    task_id: str
    phase: str
    visit: int
    item: int
    error: str = ""
    failed: int = 1


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class PhaseCompleted(Event):
    """Every task of the phase's visit completed."""

    kind: ClassVar[str] = "phase_completed"
    phase: str
    visit: int


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class BranchTaken(Event):
    """After `phase`, the run goes to `goto`, chosen by `next` rule `rule` (None: default)."""

    kind: ClassVar[str] = "branch_taken"
    phase: str
    visit: int
    goto: str
    rule: int | None = None
    condition: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Warned(Event):
    """Something a person should know that did not stop the run."""

    kind: ClassVar[str] = "warned"
    message: str


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Paused(Event):
    """The run waits for a person's approval."""

    kind: ClassVar[str] = "paused"
    phase: str
    visit: int
    reason: str = "pause_after"


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Approved(Event):
    """A person approved the paused run."""

    kind: ClassVar[str] = "approved"
    message: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Rejected(Event):
    """A person sent the paused run back to phase `to` (a new visit) with `feedback`."""

    kind: ClassVar[str] = "rejected"
    to: str
    feedback: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class ToolCallDecided(Event):
    """A person let the tool call `call` of turn `turn` of task `task_id` run (`approved`),
    or refused it, the model then told so with `note`."""

    kind: ClassVar[str] = "tool_call_decided"
    task_id: str
    turn: int
    call: int
    tool: str
    approved: bool
    note: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class OutputEdited(Event):
    """A person replaced a completed task's output while the run was paused.

    The new body is stored in the ledger with this event and written to `artifact` after it;
    `values` are extracted again from it. Tasks that read the old version run again when the
    run goes on (`core.review`).
    """

    kind: ClassVar[str] = "output_edited"
    task_id: str
    artifact: str
    old_sha256: str
    sha256: str
    size: int
    values: dict[str, Any] = field(default_factory=dict)
    by: str = ""
    note: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class WaitStarted(Event):
    """The run waits before phase `phase` starts or after it ends (`core.waits`).

    `gate` is "delay" (a `delay:` or `not_before:`), "before" or "after" (a `wait_for:`);
    `until` is when the wait ends on its own (the delay's due time, the signal's timeout),
    fixed here once from the engine's clock so that restarts neither shorten nor lengthen it.
    """

    kind: ClassVar[str] = "wait_started"
    phase: str
    visit: int
    gate: str
    signal: str | None = None
    until: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class SignalReceived(Event):
    """A signal sent to the run (kept until a wait for it takes it, if none does yet).

    `sent_at` is when it was sent (the sender's clock): a signal sent before a wait's timeout
    counts even when no orchestrator was recording at the time.
    """

    kind: ClassVar[str] = "signal_received"
    name: str
    data: Any = None
    key: str | None = None  # the idempotency key: a second signal with it is ignored
    by: str = ""
    sent_at: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class WaitEnded(Event):
    """The wait ended: the signal arrived (`outcome` "signal", with its data), its timeout
    passed ("timeout") or the delay's due time came ("due")."""

    kind: ClassVar[str] = "wait_ended"
    phase: str
    visit: int
    gate: str
    outcome: str
    signal: str | None = None
    data: Any = None
    key: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class ChildUpdated(Event):
    """The child run that attempt `attempt` of a `pipeline` worker's task started changed:
    it was started ("running"), paused for a person ("paused"), waits for a signal or a time
    ("waiting"), or went on again ("running"). `detail` says what it waits for.

    Its end is not recorded here: the task completes (its final.md) or fails with it.
    """

    kind: ClassVar[str] = "child_updated"
    task_id: str
    attempt: int
    child_run: str
    status: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class ChildSpent(Event):
    """What the child run of attempt `attempt` has spent so far, all told (its own calls and
    its children's), recorded while it runs so that the parent's budget sees it.

    A later record of the same attempt replaces an earlier one; the attempt's final usage
    (its result, or `UsageRecorded` once the parent ended) replaces them all.
    """

    kind: ClassVar[str] = "child_spent"
    task_id: str
    attempt: int
    child_run: str
    cost_usd: float
    tokens: int


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Resumed(Event):
    """The run went on without a person: the child run that had paused it went on."""

    kind: ClassVar[str] = "resumed"
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class MessageNoted(Event):
    """A person's message, kept with the run's history."""

    kind: ClassVar[str] = "message_noted"
    message: str
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class RunCancelled(Event):
    """A person cancelled the run; in-flight tasks are stopped."""

    kind: ClassVar[str] = "run_cancelled"
    reason: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class RunFailed(Event):
    """The run cannot go on."""

    kind: ClassVar[str] = "run_failed"
    reason: str
    task_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Delivered(Event):
    """The final worker's output is the run's result."""

    kind: ClassVar[str] = "delivered"
    task_id: str
    artifact: str


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class RunImported(Event):
    """The run was added to this store from a bundle (`interlock import`), its history up to
    `chain_head` as exported. A bundle is code (its definition names commands and `call:`
    targets): unless `trusted`, the run is inert, and nothing of it runs until a person
    trusts it (`BundleTrusted`)."""

    kind: ClassVar[str] = "run_imported"
    bundle: str  # the file's name
    chain_head: str | None = None
    signer: str | None = None  # the fingerprint of the public key its signature matched
    trusted: bool = False
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class BundleTrusted(Event):
    """A person trusted the imported run's definition: it may be driven like any other."""

    kind: ClassVar[str] = "bundle_trusted"
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True, repr=False, eq=False)
class Archived(Event):
    """The delivered run's directory moved to the archive."""

    kind: ClassVar[str] = "archived"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RunCreated,
        SlotAwaited,
        SlotTaken,
        TaskSlotAwaited,
        TaskSlotTaken,
        PhaseStarted,
        TaskDispatched,
        TaskStarted,
        TaskCompleted,
        TaskReused,
        TaskFailed,
        TaskTimedOut,
        UsageRecorded,
        TaskBatchWaited,
        RetryScheduled,
        ItemFailed,
        PhaseCompleted,
        BranchTaken,
        Warned,
        Paused,
        Approved,
        Rejected,
        ToolCallDecided,
        OutputEdited,
        WaitStarted,
        SignalReceived,
        WaitEnded,
        ChildUpdated,
        ChildSpent,
        Resumed,
        MessageNoted,
        RunCancelled,
        RunFailed,
        Delivered,
        Archived,
        RunImported,
        BundleTrusted,
    )
}

_FIELDS = {
    kind: tuple(f.name for f in dataclasses.fields(cls)) for kind, cls in EVENT_TYPES.items()
}


# Optional fields added after version 1 are written only when set, so that interlock
# versions that predate them still read every record that does not use them.
_SPARSE = frozenset({"retry_after", "parent_run", "parent_task", "records", "approval", "config"})


def to_record(event: Event) -> tuple[str, dict[str, Any]]:
    """(kind, data) ready for JSON; `data` holds `v`, the record version."""
    encode = _RECORDERS.get(event.kind)
    if encode is None:
        encode = _RECORDERS[event.kind] = _recorder(event.kind)
    return encode(event)


_RECORDERS: dict[str, Callable[[Event], tuple[str, dict[str, Any]]]] = {}


def _recorder(kind: str) -> Callable[[Event], tuple[str, dict[str, Any]]]:
    """The function that writes an event of `kind` as its record: its fields in order, as
    one dict display and plain attribute reads, each sparse one only when set.

    Every event appended is encoded, so this is written out per kind, as `dataclasses` writes
    constructors, the first time a kind is encoded: a comprehension over the field names with
    `getattr` costs three times as much per event.
    """
    names = _FIELDS[kind]  # a KeyError for a kind that is not an event type, as before
    # The fields before the first sparse one in a dict display, the rest one by one: the
    # record's keys stay in the order of the fields.
    leading = list(itertools.takewhile(lambda name: name not in _SPARSE, names))
    lines = ["def record(event):"]
    lines.append("    data = {" + ", ".join(f"{n!r}: event.{n}" for n in leading) + "}")
    for name in names[len(leading) :]:
        if name in _SPARSE:
            lines.append(f"    if (value := event.{name}) is not None: data[{name!r}] = value")
        else:
            lines.append(f"    data[{name!r}] = event.{name}")
    lines += [f"    data['v'] = {EVENT_VERSION!r}", f"    return {kind!r}, data"]
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # the text is built above from field names alone
    return namespace["record"]  # type: ignore[no-any-return]


def from_record(kind: str, data: dict[str, Any]) -> Event:
    """Rebuild an event; unknown fields from a newer writer are an error, not dropped."""
    try:
        cls = EVENT_TYPES[kind]
    except KeyError:
        raise ValueError(f"unknown event kind {kind!r} (written by a newer interlock?)") from None
    if data.get("v", EVENT_VERSION) > EVENT_VERSION:
        raise ValueError(
            f"event {kind!r} is version {data['v']}, newer than this interlock "
            f"understands ({EVENT_VERSION})"
        )
    fields = {k: v for k, v in data.items() if k != "v"}
    unknown = sorted(set(fields) - set(_FIELDS[kind]))
    if unknown:
        raise ValueError(
            f"event {kind!r} has unknown field(s) {', '.join(unknown)} "
            "(written by a newer interlock?)"
        )
    try:
        return cls(**fields)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"event {kind!r} record is incomplete: {exc}") from None
