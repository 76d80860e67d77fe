"""What a run step observes: frozen values the runtime builds from what happened.

Each input is an observation, never an instruction: the machine checks it against the run's
state and may drop it (a stale attempt, a duplicate delivery, a command the run refuses). The
runtime builds them from its reports, the files it found on disk and the commands posted to
the run's inbox; the simulator and the engine-level tests build them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from interlock.core import events as ev

TaskResult = ev.TaskStarted | ev.TaskCompleted | ev.TaskFailed | ev.TaskTimedOut


@dataclass(frozen=True, kw_only=True, slots=True)
class Reported:
    """A worker's report on an attempt: it started, completed, failed or timed out.

    A completion's output is either committed to its final path already (its hash and size
    in `event`; `body` the bytes to store with it in the ledger, when small) or held in
    memory (`body`, `on_disk` False): the machine then names and hashes it, stores it with the
    completion and asks for it to be written once the completion is recorded.
    """

    event: TaskResult
    body: bytes | None = None
    on_disk: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Reused:
    """An earlier output carried over to an attempt (a rerun's source, or the cache); its
    file is placed once the reuse is recorded. `stored` says whether the body goes into the
    ledger with the event (small outputs)."""

    event: ev.TaskReused
    body: bytes
    stored: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildChanged:
    """A child run's status changed (running, paused, waiting)."""

    event: ev.ChildUpdated


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildSpend:
    """A running child run's spend so far."""

    event: ev.ChildSpent


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchWait:
    """An attempt's model call went into a provider batch, or came back from one."""

    event: ev.TaskBatchWaited


@dataclass(frozen=True, kw_only=True, slots=True)
class Begun:
    """A worker began an attempt while no orchestrator recorded its start (its process or
    prompt record was found on taking the run)."""

    task_id: str
    attempt: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Adopted:
    """An output found committed on disk for an attempt in flight (its orchestrator died
    before recording it); `event` has `adopted` set, `body` is stored with it when small."""

    event: ev.TaskCompleted
    body: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Noted:
    """Something a person should read in the run's history (a reuse that could not be used)."""

    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class PersonCommand:
    """A command from the run's inbox: approve, cancel, message, signal, edit or reject
    (`core.observe.CommandKind`)."""

    kind: str
    message: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Granted:
    """Slots the store granted the run this turn (a pipeline's or a worker's `concurrency`).

    The store decides them, across runs, and the slot keeper folds each into the run's state
    as it is taken; the machine records them in their place among this step's events.
    """

    events: tuple[tuple[ev.Event, str | None, str | None], ...]  # (event, rule, why)


@dataclass(frozen=True, kw_only=True, slots=True)
class Tick:
    """Time passed: nothing was observed (timeouts and due retries may fire)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Handles:
    """What the runtime runs for the run now, so that the machine says what to start and what
    to stop: the attempt each worker runs, tasks whose reuse is claimed and not yet recorded,
    tasks stopping because the run ended, and whether the children were asked to stop.

    `since` is the number of events the state held when the effects were last carried out
    (0: never): only tasks dispatched after it need a look, unless one lacks a worker.
    """

    running: Mapping[str, int] = field(default_factory=dict)
    claiming: frozenset[str] = frozenset()
    stopping: frozenset[str] = frozenset()
    since: int = 0
    children_stopped: bool = False
    final_placed: bool = False  # final.md was found in place or handed over for writing


Input = (
    Reported
    | Reused
    | ChildChanged
    | ChildSpend
    | BatchWait
    | Begun
    | Adopted
    | Noted
    | PersonCommand
    | Granted
    | Tick
)
