"""Running one task attempt: a command, a Python callable, or a model call.

An executor gets a `TaskSpec` (the rendered task, the inputs it reads, one temporary output
path) and returns an `Outcome`. It never touches run state; the orchestrator decides what the
outcome means and commits the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.placeholders import COMMAND_PLACEHOLDERS, NOT_SHELL, READ_PREFIXES
from interlock.core.workflow import Worker
from interlock.providers.cli_env import allowed_env, unlisted_variables
from interlock.runtime import processes
from interlock.runtime.artifacts import INLINE_LIMIT
from interlock.runtime.processes import GUARD

if TYPE_CHECKING:
    from interlock.runtime.model_calls import AsyncModelClient, ModelCalls, ModelClient
    from interlock.runtime.models import ModelRunner

ProgressCallback = Callable[[str, str], None]
"""Called with (task_id, text fragment) as a model streams."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Everything a worker receives for one attempt."""

    run_id: str
    task_id: str
    attempt: int
    worker: Worker
    task: str  # the rendered task text
    topic: str
    inputs: dict[str, Any]
    item: Any
    reads: list[tuple[str, Path]]  # (file name, path) of each output it reads
    output: Path  # temporary path to write; committed by the orchestrator on success
    run_dir: Path
    model: str | None
    idempotency_key: str
    workflow_dir: Path | None = None  # the workflow file's directory, for relative scripts
    pipeline: str = ""  # the run's pipeline, for spend caps scoped to one
    # What the run's budget had left when the attempt was dispatched (None: no such limit),
    # which the calls of a `call:` worker's `ctx.model` are held to.
    budget_usd_left: float | None = None
    budget_tokens_left: int | None = None
    # Tool calls a person decided (`approve` tools), by "turn/call": {tool, approved, note}.
    tool_decisions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        """Where a command's stdout and stderr are kept (made when a command starts)."""
        return self.run_dir / "logs"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How an attempt ended."""

    ok: bool
    error: str = ""
    retryable: bool = True
    retry_after: float | None = None  # seconds the provider asked to wait before a new call
    timed_out: bool = False
    usage: dict[str, Any] | None = None
    durable: bool = False  # the output file is already fsynced
    # A small output held in memory instead of a file: it is stored in the ledger with the
    # completion and written into the run directory once that is recorded.
    body: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Cancelled (its run ended) while its model was answering: `usage` is what the call had
    # cost by then. Whoever awaited the attempt records that and goes on cancelled.
    stopped: bool = False


STOPPED = "stopped: the run ended while the model was answering"


def stopped_outcome(usage: dict[str, Any]) -> Outcome:
    """The outcome of an attempt cancelled after its model call had begun to cost."""
    return Outcome(ok=False, error=STOPPED, usage=usage, stopped=True)


@dataclass(frozen=True, kw_only=True)
class TaskContext:
    """What a `call:` worker function receives."""

    spec: TaskSpec
    models: ModelRunner | None = None  # what `model` calls through (the process's runner)
    loop: asyncio.AbstractEventLoop | None = None  # the loop the providers' clients are on

    @property
    def task(self) -> str:
        """The rendered task text."""
        return self.spec.task

    @property
    def topic(self) -> str:
        """The run's topic."""
        return self.spec.topic

    @property
    def inputs(self) -> dict[str, Any]:
        """The run's inputs."""
        return self.spec.inputs

    @property
    def item(self) -> Any:
        """The fan-out item (None outside for_each)."""
        return self.spec.item

    @functools.cached_property
    def output_path(self) -> Path:
        """Where to write the output (or return it as a string instead).

        Its folder is made, and a leftover of an interrupted earlier try of this attempt
        removed, when a function first asks: returning a string needs no file at all.
        """
        output = self.spec.output
        output.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            output.unlink()
        return output

    def read(self, name: str) -> str:
        """The text of one of the files the worker `reads` (fan-in: joined in item order)."""
        parts = [p.read_text(encoding="utf-8") for n, p in self.spec.reads if n == name]
        if not parts:
            raise KeyError(f"{name!r} is not among this worker's reads")
        return "\n\n".join(parts)

    @functools.cached_property
    def calls(self) -> ModelCalls:
        """The attempt's model calls: their journal and usage (`interlock.runtime.model_calls`)."""
        from interlock.runtime.model_calls import ModelCalls
        from interlock.runtime.models import ModelRunner

        return ModelCalls(self.spec, self.models or ModelRunner(), self.loop)

    def model(self, alias: str, *, fallbacks: tuple[str, ...] = ()) -> ModelClient:
        """A client calling the model behind `alias` through interlock's providers, its
        calls journaled, priced and counted in the attempt's usage; `fallbacks` are tried in
        order when a call fails. For plain functions; see `async_model` in coroutines."""
        from interlock.runtime.model_calls import ModelClient

        return ModelClient(self.calls, alias, fallbacks)

    def async_model(self, alias: str, *, fallbacks: tuple[str, ...] = ()) -> AsyncModelClient:
        """`model`, with calls to be awaited (for `async def` workers)."""
        from interlock.runtime.model_calls import AsyncModelClient

        return AsyncModelClient(self.calls, alias, fallbacks)

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float | None = None,
        provider: str = "",
    ) -> None:
        """Count a model call made some other way in the attempt's usage (priced from
        interlock.toml or the price table when `cost_usd` is not given)."""
        self.calls.record_usage(
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=cost_usd,
            provider=provider,
        )


CallTarget = Callable[[TaskContext], str | Awaitable[str | None] | None]
_REGISTRY: dict[str, CallTarget] = {}


def register(name: str, function: CallTarget) -> None:
    """Make `function` available to workflow files as `call: <name>`."""
    _REGISTRY[name] = function


def registered_call(name: str) -> CallTarget | None:
    """The function registered under `name`, if any."""
    return _REGISTRY.get(name)


def resolve_call(reference: str) -> CallTarget:
    """A registered name, or `package.module:function`."""
    if reference in _REGISTRY:
        return _REGISTRY[reference]
    module_name, _, attribute = reference.partition(":")
    if not attribute:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise LookupError(f"call {reference!r} is not registered (registered: {known})")
    module = importlib.import_module(module_name)
    target: CallTarget = getattr(module, attribute)
    return target


# `${output}` is the shell's variable, not a placeholder: no `$` right before the brace.
_PLACEHOLDER = re.compile(NOT_SHELL + r"\{(" + "|".join(COMMAND_PLACEHOLDERS) + r")\}")
# Braces of values rendered into an argument travel as two private-use characters until the
# placeholders are filled, so they can never form one; they become braces again at the end.
_HIDDEN = str.maketrans("{}", "\ue000\ue001")
_SHOWN = str.maketrans("\ue000\ue001", "{}")


def escape_braces(value: str) -> str:
    """Hide the braces of a value rendered into a command argument from placeholder filling."""
    return value.translate(_HIDDEN)


def expand_argv(argv: list[str], spec: TaskSpec) -> list[str]:
    """Fill placeholders; each value stays one argv item (never split, never a shell).

    One pass per argument: text that a value brings in is never read as a placeholder again,
    so a topic of '{output}' stays '{output}'.
    """
    values = {
        "output": str(spec.output),
        "task": spec.task,
        "topic": spec.topic,
        "run_dir": str(spec.run_dir),
        "workflow_dir": str(spec.workflow_dir or spec.run_dir),
        "python": sys.executable,
        "item": "" if spec.item is None else str(spec.item),
    }
    # `{read:NAME}` and its older spelling `{input:NAME}`: the path of the read file NAME.
    reads = {f"{{{p}{name}}}": str(path) for name, path in spec.reads for p in READ_PREFIXES}

    def fill(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in reads:
            return reads[token]
        return values[match.group(1)]

    pattern = _PLACEHOLDER
    if reads:
        names = "|".join(re.escape(k) for k in sorted(reads, key=len, reverse=True))
        pattern = re.compile(f"{NOT_SHELL}(?:{names})|{_PLACEHOLDER.pattern}")
    expanded: list[str] = []
    for arg in argv:
        if arg == "{inputs}":
            expanded += [str(path) for _, path in spec.reads]
            continue
        expanded.append(pattern.sub(fill, arg).translate(_SHOWN))
    return expanded


def command_env(environ: Mapping[str, str], spec: TaskSpec) -> dict[str, str]:
    """The environment of a `command:` worker: what every started program gets (the
    allow-list of `interlock.providers.cli_env`), the variables its worker and pipeline name
    under `env:`, and its own INTERLOCK_* variables. Nothing else of this process's
    environment (the server's auth secret, hook secrets, database passwords, other
    programs' keys) reaches a command that did not ask for it by name."""
    env = allowed_env(environ, spec.worker.env)
    env.update(
        {
            "INTERLOCK_OUTPUT": str(spec.output),
            "INTERLOCK_TASK": spec.task,
            "INTERLOCK_TOPIC": spec.topic,
            "INTERLOCK_RUN_ID": spec.run_id,
            "INTERLOCK_TASK_ID": spec.task_id,
            "INTERLOCK_ATTEMPT": str(spec.attempt),
            "INTERLOCK_INPUTS": os.pathsep.join(str(p) for _, p in spec.reads),
            "INTERLOCK_ITEM": "" if spec.item is None else str(spec.item),
            "INTERLOCK_IDEMPOTENCY_KEY": spec.idempotency_key,
            "INTERLOCK_RUN_DIR": str(spec.run_dir),
        }
    )
    return env


async def run_command(spec: TaskSpec) -> Outcome:
    """Run a `command:` worker in its own process group; kill the group on timeout or cancel."""
    assert spec.worker.command is not None
    argv = expand_argv(spec.worker.command, spec)
    env = command_env(os.environ, spec)
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    base = spec.log_dir / f"{spec.task_id}.{spec.attempt}"
    with open(f"{base}.stdout", "wb") as out, open(f"{base}.stderr", "wb") as err:
        try:
            process = processes.spawn(
                argv, env=env, cwd=spec.run_dir, stdout=out.fileno(), stderr=err.fileno()
            )
        except OSError as exc:
            return Outcome(ok=False, error=f"cannot start {argv[0]!r}: {exc}", retryable=False)
    # Until the group is gone, the guard kills it if this process dies, and the record lets
    # the next orchestrator of the run kill it if even the guard is gone.
    GUARD.watch(process.pid)
    noted: Path | None = None
    try:
        noted = processes.record(spec.run_dir, spec.task_id, spec.attempt, spec.run_id, process.pid)
        code = await asyncio.wait_for(processes.exit_code(process), spec.worker.timeout)
    except TimeoutError:
        await _kill_group(process)
        return Outcome(ok=False, timed_out=True, error=f"timed out after {spec.worker.timeout:g}s")
    except (asyncio.CancelledError, OSError):  # cancelled, or no record (a full disk)
        await _kill_group(process)
        raise
    finally:
        # The command's exit decides; helpers it left running go with it.
        processes.kill_group(process.pid)
        GUARD.release(process.pid)
        if noted is not None:
            noted.unlink(missing_ok=True)
    if code != 0:
        last = _last_line(Path(f"{base}.stderr"))
        where = f"logs/{spec.task_id}.{spec.attempt}.stderr"
        said = f": {last} (the rest of its stderr: {where})" if last else " (nothing on stderr)"
        hints = env_hints(spec.worker.command, spec.worker.env, os.environ, env, last)
        return Outcome(ok=False, error=f"exited with code {code}{said}{hints}")
    if not spec.output.exists():
        stdout = Path(f"{base}.stdout")
        if stdout.stat().st_size == 0:
            return Outcome(ok=False, error="exited 0 but wrote no output ($INTERLOCK_OUTPUT)")
        os.replace(stdout, spec.output)  # a command that prints its output is fine too
    return Outcome(ok=True)


_KEY_ERROR = re.compile(r"""KeyError: ['"]([A-Za-z_][A-Za-z0-9_]*)['"]""")


def env_hints(
    argv: list[str],
    listed: list[str],
    environ: Mapping[str, str],
    given: Mapping[str, str],
    last: str,
) -> str:
    """What to add to a failed command's error about the environment it ran in: the names
    under `env:` that are not set, and a variable its last line of stderr names that it read
    (its own text reads it, or a `KeyError: 'NAME'`) which is set here but was not passed."""
    hints = ""
    unset = [name for name in dict.fromkeys(listed) if name not in environ]
    if unset:
        names = " and ".join([", ".join(unset[:-1]), unset[-1]] if len(unset) > 1 else unset)
        verb = "is" if len(unset) == 1 else "are"
        hints += f"; note: {names}, listed under env:, {verb} not set"
    candidates = [*unlisted_variables(argv, listed), *_KEY_ERROR.findall(last)]
    withheld = [
        name
        for name in dict.fromkeys(candidates)
        if name in environ
        and name not in given
        and re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", last)
    ]
    if withheld:
        names = ", ".join(withheld)
        verb = "is" if len(withheld) == 1 else "are"
        hints += (
            "; commands get only the allow-listed variables and those under env: "
            f"({names} {verb} not passed)"
        )
    return hints


async def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(processes.exit_code(process), 5)


def _last_line(path: Path, limit: int = 4000) -> str:
    """The last line a failed command wrote to stderr (the exception, after a traceback),
    cut to 500 characters: one line for the failure's summary."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - limit))
            data = log.read()
    except OSError:
        return ""
    lines = [line.strip() for line in data.decode("utf-8", errors="replace").splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return last if len(last) <= 500 else last[:499] + "…"


async def run_call(spec: TaskSpec, models: ModelRunner | None = None) -> Outcome:
    """Run a `call:` worker: coroutines on the loop, plain functions in a thread. What its
    `ctx.model` calls spent is the outcome's usage, failed or not, and stopped too (a
    `stopped` outcome instead of the cancellation, when they spent anything)."""
    assert spec.worker.call is not None
    try:
        function = resolve_call(spec.worker.call)
    except (LookupError, ImportError, AttributeError) as exc:
        return Outcome(ok=False, error=f"call {spec.worker.call!r}: {exc}", retryable=False)
    context = TaskContext(spec=spec, models=models, loop=asyncio.get_running_loop())
    try:
        outcome = await _call(function, context)
    except asyncio.CancelledError:
        usage = await _settled(context)
        if usage:
            return stopped_outcome(usage)
        raise
    usage = await _settled(context)
    return outcome if usage is None else dataclasses.replace(outcome, usage=usage)


async def _call(function: CallTarget, context: TaskContext) -> Outcome:
    spec = context.spec
    try:
        async with asyncio.timeout(spec.worker.timeout):
            if inspect.iscoroutinefunction(function):
                return keep_output(spec.output, await function(context), durable=False)
            # A large output is written and fsynced in the worker's own thread: one hop.
            return await asyncio.to_thread(
                _own_loops_closed, lambda: keep_output(spec.output, function(context), durable=True)
            )
    except TimeoutError:
        return Outcome(ok=False, timed_out=True, error=f"timed out after {spec.worker.timeout:g}s")
    except Exception as exc:  # a worker's own failure is data for the ledger, not a crash
        retryable = getattr(exc, "retryable", True) if _is_call_error(exc) else True
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}", retryable=retryable)


def _own_loops_closed(work: Callable[[], Outcome]) -> Outcome:
    """`work` in a pool thread, closing the event loop it left set on the thread: a plain
    function that ran async code (Pydantic AI's `run_sync` makes a loop and keeps it) would
    otherwise leave the loop, and its sockets, to the thread for good."""
    try:
        return work()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                loop = asyncio.get_event_loop_policy().get_event_loop()
            except RuntimeError:  # none set on this thread
                loop = None
        if loop is not None and not loop.is_running():
            loop.close()
            asyncio.set_event_loop(None)


def _is_call_error(exc: BaseException) -> bool:
    from interlock.runtime.model_calls import ModelCallError

    return isinstance(exc, ModelCallError)


async def _settled(context: TaskContext) -> dict[str, Any] | None:
    """The usage of the attempt's model calls (None when it made none), its journal told
    that the ledger is about to count them."""
    calls = context.__dict__.get("calls")  # made only when the function asked for a model
    if calls is None:
        return None
    usage: dict[str, Any] | None = calls.usage()
    await asyncio.to_thread(calls.settle)
    return usage


def keep_output(output: Path, result: object, *, durable: bool) -> Outcome:
    """The outcome of a worker that returned `result`: text up to `INLINE_LIMIT` stays in
    memory (the ledger will hold it); larger text is written to `output` (fsynced when
    `durable`); None means the worker wrote `output` itself."""
    if isinstance(result, str):
        data = result.encode("utf-8")
        if len(data) <= INLINE_LIMIT:
            return Outcome(ok=True, body=data)
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        return Outcome(ok=True, durable=durable)
    if not output.exists():
        return Outcome(ok=False, error="returned no text and wrote no output")
    return Outcome(ok=True)
