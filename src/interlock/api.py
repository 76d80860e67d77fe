"""The Python API: everything the CLI does, for applications that embed interlock.

from interlock import Interlock
app = Interlock(home=".interlock")
run_id = app.start("examples/research.json", "research", topic="FSA architecture")
state = app.drive(run_id)          # blocks until delivered, failed or paused
print(state.status, app.final_path(run_id))
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from interlock.core.observe import CommandKind
from interlock.core.review import (
    EditRequest,
    RejectRequest,
    check_edit,
    check_reject,
    edited_values,
)
from interlock.core.state import RunState, RunStatus, listed_status
from interlock.core.workflow import Pipeline
from interlock.errors import InterlockError, InvalidSignal, UsageError
from interlock.runtime.diff import RunDiff, compare
from interlock.runtime.edits import hand_edit_message, unrecorded_changes
from interlock.runtime.home import Home, check_run_id
from interlock.storage import Store, StoredEvent, open_store
from interlock.storage.base import fold_history

# The engine, the runtime and the model clients are imported when first needed: reading a
# run (`interlock runs`, `status`) should not pay for loading what drives one.
if TYPE_CHECKING:
    from interlock.core.loader import Definition, Workflow
    from interlock.runtime.models import ModelRunner
    from interlock.runtime.orchestrator import Orchestrator, Settings
    from interlock.runtime.rerun import PreparedRerun
    from interlock.runtime.rerun_plan import Plan

ENDED = ("delivered", "failed", "cancelled")


class Interlock:
    """One state directory (or store URL) and the operations on its runs."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        store: str | Store | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        settings: Settings | None = None,
        models: ModelRunner | None = None,
    ) -> None:
        self.home = Home.at(home)
        self._store_url = store if isinstance(store, str) else None
        if isinstance(store, str) or store is None:
            options: dict[str, Any] = {}
            if store is None or store.startswith("sqlite:"):
                options["synchronous"] = synchronous
            self.store: Store = open_store(store, self.home.root, **options)
        else:
            self.store = store
        self._settings = settings
        self.models = models
        self._orchestrator: Orchestrator | None = None

    @property
    def settings(self) -> Settings:
        """How the orchestrator behaves (made on first use: a command that only reads a run
        does not load the runtime for it)."""
        if self._settings is None:
            from interlock.runtime.orchestrator import Settings

            self._settings = Settings()
        return self._settings

    @property
    def orchestrator(self) -> Orchestrator:
        """The in-process orchestrator (created on first use)."""
        if self._orchestrator is None:
            from interlock.runtime.orchestrator import Orchestrator
            from interlock.runtime.tracing import configured_tracer

            self._orchestrator = Orchestrator(
                self.store, self.home, models=self.models, settings=self.settings
            )
            tracer = configured_tracer()  # spans when OTEL_EXPORTER_OTLP_ENDPOINT is set
            if tracer is not None:
                self._orchestrator.listeners.append(
                    tracer.listener_at(self.home.run_dir, self.store.artifact)
                )
        return self._orchestrator

    @orchestrator.setter
    def orchestrator(self, orchestrator: Orchestrator) -> None:
        """Record and drive the runs started here with `orchestrator` (a server's own, which
        runs its loop): commands posted here wake it."""
        self._orchestrator = orchestrator

    # -- starting and driving -----------------------------------------------------------------

    def start(
        self,
        workflow: str | Path | Workflow | Definition,
        pipeline: str | None = None,
        *,
        topic: str,
        inputs: dict[str, Any] | None = None,
        run_id: str | None = None,
        no_cache: bool = False,
    ) -> str:
        """Record a new run and hold its lease; `drive` carries it out (`no_cache`: reuse no
        other run's outputs, whatever `cache:` says)."""
        definition = self._definition(workflow, pipeline)
        return self._create(definition, topic, inputs, run_id, no_cache=no_cache)

    def submit(
        self,
        workflow: str | Path | Workflow | Definition,
        pipeline: str | None = None,
        *,
        topic: str,
        inputs: dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> str:
        """Record a new run and leave it to whoever drives runs (a server, a fleet).

        The lease is handed back at once, and no run directory is made here: whoever takes
        the run makes its own, in its own state directory, and keeps its status.json.
        """
        definition = self._definition(workflow, pipeline)
        run_id = self._create(definition, topic, inputs, run_id, files=False)
        with contextlib.suppress(InterlockError):
            self.orchestrator.release(self.orchestrator.drivers[run_id])
        return run_id

    def _create(
        self,
        definition: Definition,
        topic: str,
        inputs: dict[str, Any] | None,
        run_id: str | None,
        *,
        no_cache: bool = False,
        files: bool = True,
    ) -> str:
        from interlock.runtime.run_config import config_origin

        if run_id is not None:
            check_run_id(run_id)
        orchestrator = self.orchestrator
        # Which interlock.toml its models use, recorded with the run (`status` names it).
        origin = {"no_cache": no_cache, **config_origin(orchestrator.models, definition)}
        specs = [(definition, topic, inputs, run_id)]
        return orchestrator.create_runs(specs, origin=origin, files=files)[0]

    def drive(self, *run_ids: str, stop_when_paused: bool = True) -> RunState:
        """Drive runs (taking their leases if needed) until they end or pause; returns the
        state of the first. A run that waits (for a signal, or a delay) is driven on through
        the wait: the loop sleeps until the wait's time or a posted signal."""
        asyncio.run(self.drive_async(*run_ids, stop_when_paused=stop_when_paused))
        return self.state(run_ids[0])

    async def drive_async(self, *run_ids: str, stop_when_paused: bool = True) -> None:
        """The asynchronous form of `drive`."""
        from interlock.providers import aclose_providers
        from interlock.runtime.shared_limits import limits_shared_for

        orchestrator = self.orchestrator
        for run_id in run_ids:
            if run_id not in orchestrator.drivers:
                orchestrator.take(run_id)
        # Runs of a shared ledger (PostgreSQL) share their providers' rate limits too.
        with limits_shared_for(self._store_url, store=self.store):
            try:
                await orchestrator.run_until_settled(stop_when_paused=stop_when_paused)
            finally:
                await orchestrator.shutdown()
                await aclose_providers()  # HTTP clients belong to this event loop

    def run(
        self,
        workflow: str | Path | Workflow | Definition,
        pipeline: str | None = None,
        *,
        topic: str,
        inputs: dict[str, Any] | None = None,
    ) -> RunState:
        """Start a run and drive it until it ends or pauses."""
        return self.drive(self.start(workflow, pipeline, topic=topic, inputs=inputs))

    def rerun(
        self,
        source: str,
        *,
        from_phase: str | None = None,
        workflow: str | Path | None = None,
        pipeline: str | None = None,
        topic: str | None = None,
        inputs: dict[str, Any] | None = None,
        run_id: str | None = None,
        no_cache: bool = False,
        definition: Definition | None = None,
        trust_bundle: bool = False,
    ) -> str:
        """Record a rerun of a finished run; `drive` carries it out.

        Each task whose fingerprint matches the source run's task (and that comes before
        `from_phase`) carries the source's output over at no cost; the rest run. The source
        run is only read. `definition` (instead of `workflow`) runs a definition at hand, such
        as a server's registered pipeline.
        """
        from interlock.runtime import rerun

        if run_id is not None:
            check_run_id(run_id)
        request = rerun.RerunRequest(
            source=self.resolve(source),
            from_phase=from_phase,
            workflow=workflow,
            pipeline=pipeline,
            topic=topic,
            inputs=inputs,
            run_id=run_id,
            no_cache=no_cache,
            definition=definition,
            trust_bundle=trust_bundle,
        )
        return self._start_rerun(rerun.prepare(self.store, self.orchestrator, request), run_id)

    def _prepare_rerun(self, source: str, **changes: Any) -> PreparedRerun:
        """Check a rerun as `rerun` does, recording nothing: its notes (an input dropped, a
        file missing, the configuration it reads) can be shown before `_start_rerun` (the
        command line's two steps; not part of the public API)."""
        from interlock.runtime import rerun

        request = rerun.RerunRequest(source=self.resolve(source), **changes)
        return rerun.prepare(self.store, self.orchestrator, request)

    def _start_rerun(self, prepared: PreparedRerun, run_id: str | None = None) -> str:
        """Record a rerun `_prepare_rerun` checked; `drive` carries it out."""
        from interlock.runtime import rerun

        if run_id is not None:
            check_run_id(run_id)
        return rerun.create(self.orchestrator, prepared, run_id)

    def plan_rerun(
        self,
        source: str,
        *,
        from_phase: str | None = None,
        workflow: str | Path | None = None,
        pipeline: str | None = None,
        topic: str | None = None,
        inputs: dict[str, Any] | None = None,
        no_cache: bool = False,
        definition: Definition | None = None,
        trust_bundle: bool = False,
    ) -> Plan:
        """What `rerun` would reuse and run, task by task, and why; nothing is recorded or
        called."""
        from interlock.runtime import rerun, rerun_plan

        request = rerun.RerunRequest(
            source=self.resolve(source),
            from_phase=from_phase,
            workflow=workflow,
            pipeline=pipeline,
            topic=topic,
            inputs=inputs,
            no_cache=no_cache,
            definition=definition,
            trust_bundle=trust_bundle,
        )
        return rerun_plan.dry_run(self.orchestrator, request)

    def diff(self, a: str, b: str, *, outputs: bool = False) -> RunDiff:
        """How run `b` differs from run `a`: tasks, outputs, values, cost and decisions
        (`outputs`: with a unified diff of each changed output's text)."""
        return compare(self.store, self.home, self.resolve(a), self.resolve(b), outputs=outputs)

    def resume(self, run_id: str) -> RunState:
        """Drive an existing run again (after a crash, an interrupt or an approval)."""
        return self.drive(self.resolve(run_id))

    # -- people's commands --------------------------------------------------------------------

    def approve(self, run_id: str, message: str = "", by: str | None = None) -> str:
        """Approve a paused run; its driver records it (exactly once) at the next tick. A run
        paused because its child run paused approves the child (both go on)."""
        run_id = self.resolve(run_id)
        state = self.state(run_id)
        if state.status is RunStatus.RUNNING and not self._driven(run_id):
            # Nothing to approve, but something to do: what this person wants is the run
            # going on, and nothing drives it.
            raise UsageError(
                f"run {run_id} is not paused (it is {listed_status(state)}, not driven: no "
                f"orchestrator holds it); nothing to approve: 'interlock resume {run_id}' "
                "continues it"
            )
        if state.status is not RunStatus.PAUSED:
            raise UsageError(
                f"run {run_id} is not paused (it is {state.status.value}); nothing to approve"
            )
        if state.inert:  # nothing recorded: the approval would wait for a trust
            from interlock.errors import RunInert
            from interlock.runtime.orchestrator import inert_message

            raise RunInert(inert_message(run_id, state.status.value))
        if state.pause_reason == "tool":
            from interlock.core.tool_calls import waiting_calls

            refs = ", ".join(c["ref"] for c in waiting_calls(state)) or "none"
            raise UsageError(
                f"run {run_id} is paused for a tool call that waits for a decision ({refs}): "
                f"'interlock approve {run_id} --call REF' lets it run, 'interlock reject "
                f"{run_id} --call REF --reason TEXT' refuses it"
            )
        target = run_id
        # A run paused by its child run goes on when that child does: the approval is the
        # child's (the deepest paused one, when children nest).
        while state.pause_reason == "child" and (child := state.held_by_child("paused")):
            target, state = child.run, self.state(child.run)
        waiting = self.store.pending_commands(target)
        if any(c.kind == CommandKind.APPROVE.value for c in waiting):
            raise UsageError(f"run {target} already has an approval waiting to be recorded")
        changes = unrecorded_changes(state, self.run_dir(target))
        if changes:  # never let the run go on over a change it would not read
            raise UsageError(hand_edit_message(target, changes))
        self._post(target, CommandKind.APPROVE, message, by)
        return run_id

    def decide_call(
        self, run_id: str, call: str, *, approved: bool, note: str = "", by: str | None = None
    ) -> str:
        """Let the tool call `call` (``TASK/TURN/CALL``, as `status` lists it) that waits for
        a person run (`approved`), or refuse it: the model is then told `note` and its loop
        goes on. Recorded by the run's driver at its next tick.

        Raises:
            CallNotWaiting: The call does not wait (decided already, unknown, run ended).
        """
        from interlock.core.tool_calls import CallDecision, call_refusal
        from interlock.errors import CallNotWaiting

        run_id = self.resolve(run_id)
        state = self.state(run_id)
        refused = call_refusal(state, call)
        if refused is not None:
            raise CallNotWaiting(refused)
        for command in self.store.pending_commands(run_id):
            posted = CallDecision.from_message(command.message)
            if command.kind == CommandKind.DECIDE_CALL.value and posted and posted.call == call:
                raise CallNotWaiting(
                    f"run {run_id}: tool call {call} already has a decision waiting to be "
                    "recorded; it no longer waits"
                )
        decision = CallDecision(call=call, approved=approved, note=note)
        self._post(run_id, CommandKind.DECIDE_CALL, decision.to_message(), by)
        return run_id

    def edit(
        self, run_id: str, output: str, body: str, *, note: str = "", by: str | None = None
    ) -> str:
        """Replace an output of a paused run (a file name such as `synthesis.md`, or a role).

        Checked now (the run is paused, the output is current, the worker's `extract:` finds
        its values in `body`); recorded by the run's driver at its next tick, with the body.
        Tasks that read the old version run again when the run goes on.
        """
        run_id = self.resolve(run_id)
        pipeline, state = self._review(run_id)
        request = EditRequest(output=output, body=body, note=note)
        task = check_edit(pipeline, state, request)
        if isinstance(task, str):
            raise UsageError(task)
        values = edited_values(pipeline, task, body)
        if isinstance(values, str):
            raise UsageError(values)
        self._post(run_id, CommandKind.EDIT, request.to_message(), by)
        return run_id

    def reject(self, run_id: str, to: str, feedback: str, by: str | None = None) -> str:
        """Send a paused run back to phase `to` (a new visit). Its model workers are told
        `feedback` after their task (unless the task places `{{ feedback }}` itself); it is
        `{{ feedback }}` in task templates and `feedback` in conditions from then on."""
        run_id = self.resolve(run_id)
        pipeline, state = self._review(run_id)
        problem = check_reject(pipeline, state, to)
        if problem is not None:
            raise UsageError(problem)
        self._post(
            run_id, CommandKind.REJECT, RejectRequest(to=to, feedback=feedback).to_message(), by
        )
        return run_id

    def signal(
        self,
        run_id: str,
        name: str,
        data: Any = None,
        *,
        key: str | None = None,
        by: str | None = None,
    ) -> SignalReceipt:
        """Send signal `name` (with JSON `data`) to a run; its driver records it at its next
        tick, and the phase waiting for it (now or later) goes on with `signals.NAME`.

        A signal is accepted while the run is running, waiting or paused, and kept until a
        wait takes it. `data` must match the `schema` of the `wait_for` that names it. A
        second signal with the same idempotency `key` is ignored (the receipt says so). A run
        that waits because its child run waits passes a signal it does not wait for itself to
        that child (the receipt names the child).

        Raises:
            UsageError: the run ended, or the pipeline waits for no such signal.
            InvalidSignal: `data` does not match the signal's schema.
        """
        from interlock.core.observe import SignalMessage, signal_refusal
        from interlock.core.waits import waited_signals

        run_id = self.resolve(run_id)
        state = self.state(run_id)
        record = self.store.get_run(run_id)
        pipeline = self.definition_of(record.pipeline, record.definition_hash).pipeline
        child = state.held_by_child("waiting")
        if child is not None and name not in waited_signals(pipeline):
            # The run waits because its child run does: a signal only the child waits for
            # is the child's.
            return self.signal(child.run, name, data, key=key, by=by)
        if key is not None and key in state.signal_keys:
            # A retry of a delivery already recorded, perhaps after the run went on to end:
            # the sender is told it arrived, not that the run is over.
            note = f"run {run_id} already received a signal with key {key!r}: ignored"
            return SignalReceipt(run_id=run_id, name=name, key=key, duplicate=True, note=note)
        refused = signal_refusal(state, name, None)
        if refused is not None:
            raise UsageError(refused)
        check_signal(pipeline, record.pipeline, name, data)
        if key is not None:
            duplicate = signal_refusal(state, name, key)
            if duplicate is None and key in _pending_keys(self.store, run_id):
                duplicate = f"run {run_id} already has a signal with key {key!r} to record: ignored"
            if duplicate is not None:
                return SignalReceipt(
                    run_id=run_id, name=name, key=key, duplicate=True, note=duplicate
                )
        message = SignalMessage(name=name, data=data, key=key, sent_at=time.time())
        self._post(run_id, CommandKind.SIGNAL, message.to_message(), by)
        note = f"signal {name!r} sent to run {run_id}"
        return SignalReceipt(run_id=run_id, name=name, key=key, duplicate=False, note=note)

    def _review(self, run_id: str) -> tuple[Pipeline, RunState]:
        """The pinned pipeline and state of a run a person reviews (nothing else waiting)."""
        waiting = {c.kind for c in self.store.pending_commands(run_id)}
        busy = waiting & {CommandKind.APPROVE.value, CommandKind.REJECT.value, "cancel"}
        if busy:
            raise UsageError(
                f"run {run_id} has a {sorted(busy)[0]} waiting to be recorded; wait for it"
            )
        record = self.store.get_run(run_id)
        definition = self.orchestrator.definition(record.pipeline, record.definition_hash)
        return definition.pipeline, self.state(run_id)

    def cancel(self, run_id: str, reason: str = "", by: str | None = None) -> str:
        """Ask for a run to be cancelled; in-flight tasks are stopped."""
        run_id = self.resolve(run_id)
        state = self.state(run_id)
        if state.status.ended:
            raise UsageError(f"run {run_id} already ended ({state.status.value})")
        self._post(run_id, CommandKind.CANCEL, reason, by)
        return run_id

    def message(self, run_id: str, text: str, by: str | None = None) -> str:
        """Add a person's note to the run's history (an empty note says nothing: refused).

        A run that ended records nothing more, as a cancellation of it is refused: a note to
        it would wait for a driver that never comes, so it is refused, not queued.
        """
        if not text.strip():
            raise UsageError(
                "the message is empty: give the note's text, e.g. "
                'interlock message RUN "checked the sources"'
            )
        run_id = self.resolve(run_id)
        state = self.state(run_id)
        if state.status.ended:
            raise UsageError(
                f"run {run_id} already ended ({state.status.value}); its history takes no "
                "more notes, so nothing was recorded"
            )
        self._post(run_id, CommandKind.MESSAGE, text, by)
        return run_id

    def _driven(self, run_id: str) -> bool:
        """True when a live orchestrator holds the run's lease (this one included)."""
        from interlock.runtime.processes import holder_is_dead

        record = self.store.get_run(run_id)
        owner = record.lease_owner
        alive = bool(owner) and (record.lease_expires or 0) > time.time()
        return alive and not holder_is_dead(owner or "")

    def _post(self, run_id: str, kind: CommandKind, message: str, by: str | None) -> None:
        by = by or _user()
        if _LONE_SURROGATE.search(message) or _LONE_SURROGATE.search(by):
            # What a terminal's undecodable byte becomes in argv: no store can keep it.
            raise UsageError(
                f"the {kind.value}'s text holds a lone UTF-16 surrogate (a byte that is not "
                "UTF-8, or an unpaired \\ud800-\\udfff escape), which cannot be recorded: "
                "give the text as valid UTF-8"
            )
        self.store.post_command(run_id, kind.value, message, by, time.time())
        if self._orchestrator is not None:
            self._orchestrator.look_now()

    # -- reading ------------------------------------------------------------------------------

    def resolve(self, prefix: str) -> str:
        """The run id an unambiguous prefix names."""
        from interlock.runtime.lookup import resolve

        return resolve(self.store, prefix)

    def events(self, run_id: str, since: int = 0) -> list[StoredEvent]:
        """A run's history from `since` on."""
        return self.store.events(self.resolve(run_id), since)

    def state(self, run_id: str) -> RunState:
        """The run's state, folded from its history."""
        run_id = self.resolve(run_id)
        return fold_history(self.store.events(run_id))

    def status(self, run_id: str) -> dict[str, Any]:
        """The `status.json` view of a run."""
        from interlock.runtime.projection import (
            capped_waits,
            live_batch_waits,
            status_view,
            with_batch_waits,
            with_spend_wait,
        )

        run_id = self.resolve(run_id)
        record = self.store.get_run(run_id)
        definition = self.definition_of(record.pipeline, record.definition_hash)
        view = status_view(definition.pipeline, self.state(run_id), run_id)
        # A wait of the running attempts is no event: the driving orchestrator's file has it.
        now = time.time()
        found = capped_waits(self.home.live_dir, [record], now).get(run_id)
        batched = live_batch_waits(self.home.live_dir, record, now)
        return with_batch_waits(with_spend_wait(view, found), batched)

    def definition_of(self, pipeline: str, definition_hash: str) -> Definition:
        """The definition a run is pinned to."""
        if self._orchestrator is not None:
            return self._orchestrator.definition(pipeline, definition_hash)
        from interlock.core.loader import Definition

        return Definition.from_canonical(pipeline, self.store.definition(definition_hash))

    def ledger(self, run_id: str) -> dict[str, Any]:
        """The dispatch-ledger view of a run."""
        from interlock.runtime.projection import ledger_view

        run_id = self.resolve(run_id)
        events = self.store.events(run_id)
        return ledger_view(self.store.get_run(run_id), fold_history(events), events)

    def run_dir(self, run_id: str) -> Path:
        """Where the run's files are (the archive, once archived)."""
        return self.home.run_dir(self.resolve(run_id))

    def final_path(self, run_id: str) -> Path | None:
        """`final.md` of a delivered run."""
        path = self.run_dir(run_id) / "final.md"
        return path if path.exists() else None

    def watch(self, run_id: str, since: int = 0, poll: float = 0.2) -> Iterator[StoredEvent]:
        """Yield the run's events as they are recorded, until it ends."""
        run_id = self.resolve(run_id)
        while True:
            batch = self.store.events(run_id, since)
            yield from batch
            if batch:
                since = batch[-1].seq
            ended = self.store.get_run(run_id).summary.status in ENDED
            if ended and not self.store.events(run_id, since):
                return
            time.sleep(poll)

    def close(self) -> None:
        """Hand back the leases of ended runs, then close the store."""
        if self._orchestrator is not None:
            self._orchestrator.flush_releases()
            self._orchestrator.leases.close()
        self.store.close()

    def _definition(
        self, workflow: str | Path | Workflow | Definition, pipeline: str | None
    ) -> Definition:
        from interlock.core.loader import Definition, Workflow, load_workflow

        if isinstance(workflow, Definition):
            return workflow
        loaded = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
        if pipeline is None:
            if len(loaded.definitions) != 1:
                names = ", ".join(sorted(loaded.definitions))
                raise UsageError(f"{loaded.source}: name the pipeline to run ({names})")
            pipeline = next(iter(loaded.definitions))
        return loaded.get(pipeline)


@dataclass(frozen=True, kw_only=True)
class SignalReceipt:
    """What became of a signal sent with `Interlock.signal`."""

    run_id: str
    name: str
    key: str | None
    duplicate: bool  # True: a signal with the same key was received before; this one is ignored
    note: str  # the same in words


def check_signal(pipeline: Pipeline, pipeline_name: str, name: str, data: Any) -> None:
    """Refuse a signal the pipeline never waits for, or data its schema does not accept."""
    from interlock.core.waits import waited_signals

    waits = waited_signals(pipeline)
    if name not in waits:
        import difflib

        known = ", ".join(sorted(waits)) or "none (no phase has wait_for)"
        close = difflib.get_close_matches(name, sorted(waits), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(
            f"pipeline {pipeline_name!r} waits for no signal {name!r}{hint}; it waits for: {known}"
        )
    for phase in waits[name]:
        schema = phase.wait_for.data_schema if phase.wait_for else None
        if schema is None:
            continue
        import jsonschema
        from referencing.exceptions import Unresolvable

        from interlock.core.schemas import local_validator

        validator = local_validator(schema, default=jsonschema.Draft202012Validator)
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        except Unresolvable as exc:  # a definition read before references were checked
            raise InvalidSignal(
                f"the schema of phase {phase.id!r}'s wait_for refers to {exc.ref!r}, which is "
                "not inside it, and nothing is retrieved: the signal cannot be checked; "
                "start the run from a workflow whose schema is whole"
            ) from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the whole data)"
            raise InvalidSignal(
                f"signal {name!r} data does not match the schema of phase {phase.id!r}'s "
                f"wait_for at {where}: {error.message}; send data that matches it"
            )


def _pending_keys(store: Store, run_id: str) -> set[str]:
    """Idempotency keys of signals posted to the run and not yet recorded."""
    from interlock.core.observe import SignalMessage

    keys = set()
    for command in store.pending_commands(run_id):
        if command.kind == CommandKind.SIGNAL.value:
            message = SignalMessage.from_message(command.message)
            if message is not None and message.key is not None:
                keys.add(message.key)
    return keys


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers: commands still work
        return "unknown"
