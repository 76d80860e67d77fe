"""Installed agent command-line tools as providers (e.g. ``claude -p``).

The command is an argv list from the configuration, run without a shell. Placeholders
inside its arguments are replaced: ``{prompt}``, ``{system}`` and ``{model}``. Without a
``{prompt}`` placeholder the prompt is written to stdin; without ``{system}`` the system
message is put in front of the prompt. Standard output is the document.

What it prints is bounded by the alias's ``max_answer_bytes``: past it, the agent is stopped
and the attempt fails, naming the key that raises it.

The process runs in its own process group so that a timeout kills the tool and anything it
started. POSIX only.

The agent does not inherit the environment: it gets the allow-list of
`interlock.providers.cli_env` plus what its provider table names (see `ModelConfig.agent_env`).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import os
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from interlock.providers.base import (
    ModelRequest,
    ModelResult,
    ProviderError,
    ProviderTimeout,
    TokenCallback,
)
from interlock.providers.bounds import AnswerMeter
from interlock.providers.cli_env import allowed_env
from interlock.providers.limits import ProviderLimiter
from interlock.providers.prompt import estimate_tokens
from interlock.providers.settings import ResolvedModel

STDERR_TAIL_BYTES = 2000
DRAIN_S = 1.0  # how long output is still read after the agent exited


def build_invocation(command: Sequence[str], request: ModelRequest) -> tuple[list[str], str | None]:
    """The argv to run and the text for stdin (None when the prompt is an argument)."""
    uses_prompt = any("{prompt}" in arg for arg in command)
    uses_system = any("{system}" in arg for arg in command)
    prompt = request.prompt
    if not uses_system and request.system:
        prompt = f"{request.system}\n\n{prompt}"
    argv = [
        arg.replace("{model}", request.model)
        .replace("{system}", request.system)
        .replace("{prompt}", prompt)
        for arg in command
    ]
    return argv, (None if uses_prompt else prompt)


class CliAgentProvider:
    """Runs one agent command per call and returns what it printed.

    Args:
        name: The provider name from the configuration.
        command: The argv template (see the module docstring).
        resolved: The alias served, for its prices.
        limiter: Shared limits; `max_concurrency` bounds how many agents run at once.
        cwd: Working directory for the command; the current one when None.
        kill_grace_s: After SIGTERM on timeout, how long to wait before SIGKILL.
        env: The agent's whole environment; None gives it the allow-listed variables of
            this process's environment.
    """

    def __init__(
        self,
        *,
        name: str,
        command: Sequence[str],
        resolved: ResolvedModel,
        limiter: ProviderLimiter,
        cwd: str | None = None,
        kill_grace_s: float = 2.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self._env = dict(allowed_env(os.environ) if env is None else env)
        self._command = tuple(command)
        self._resolved = resolved
        self._limiter = limiter
        self._cwd = cwd
        self._grace = kill_grace_s

    def __repr__(self) -> str:
        return f"CliAgentProvider(name={self.name!r}, command={self._command[0]!r})"

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Run the agent to completion; see `interlock.providers.base.Provider`."""
        started = time.perf_counter()
        argv, stdin_text = build_invocation(self._command, request)
        input_tokens = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        async with self._limiter.slot():
            await self._limiter.admit(input_tokens)
            process = await self._start(argv, stdin_text is not None)
            try:
                meter = AnswerMeter(self._resolved.limits, self.name, f"what {argv[0]} printed")
                text, stderr_tail, code = await asyncio.wait_for(
                    _communicate(process, stdin_text, on_token, meter), timeout=request.timeout
                )
            except TimeoutError:
                await self._kill_group(process)
                raise ProviderTimeout(
                    f"{self.name}: {argv[0]} did not finish within {request.timeout:g}s "
                    "and was stopped"
                ) from None
            except BaseException:
                await self._kill_group(process)  # cancelled: leave no agent running
                raise
        if code != 0:
            raise ProviderError(
                f"{self.name}: {argv[0]} exited with status {code}; stderr ends with:\n"
                f"{stderr_tail or '(nothing)'}",
                retryable=True,
            )
        if not text.strip():
            raise ProviderError(f"{self.name}: {argv[0]} printed nothing", retryable=True)
        output_tokens = estimate_tokens(text)
        self._limiter.settle(input_tokens, input_tokens + output_tokens)
        return ModelResult(
            text=text,
            provider=self.name,
            model=request.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_s=time.perf_counter() - started,
            cost_usd=self._resolved.cost_usd(input_tokens, output_tokens),
            finish_reason="stop",
            extra={"usage": "estimated"},
        )

    async def _start(self, argv: list[str], with_stdin: bool) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._cwd,
                env=self._env,
                start_new_session=True,  # its own process group, killed as a whole
            )
        except FileNotFoundError:
            raise ProviderError(
                f"{self.name}: command {argv[0]!r} not found; install it or fix "
                f"[providers.{self.name}] command in interlock.toml",
                retryable=False,
            ) from None
        except OSError as exc:
            hint = ""
            if exc.errno == errno.E2BIG:
                hint = "; the prompt is too long for an argument: remove {prompt} to use stdin"
            raise ProviderError(
                f"{self.name}: cannot start {argv[0]!r}: {exc.strerror}{hint}", retryable=False
            ) from None

    async def _kill_group(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after the grace period."""
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=self._grace)
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()
        # A pipe whose reader stopped (too much output) is closed only once its end is read.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_discard(process), DRAIN_S)


async def _discard(process: asyncio.subprocess.Process) -> None:
    """Read what is left on the process's pipes until they end."""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            while await stream.read(1 << 16):
                pass


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # Nothing to do when the group is already gone.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _communicate(
    process: asyncio.subprocess.Process,
    stdin_text: str | None,
    on_token: TokenCallback | None,
    meter: AnswerMeter | None = None,
) -> tuple[str, str, int]:
    """Feed stdin, stream stdout to `on_token`, keep the stderr tail; return all three.

    The agent's exit decides: a helper it started that still holds stdout open does not
    keep the call waiting. What was printed is read for `DRAIN_S` more, then the agent's
    process group is killed and what was read is the answer.

    Raises:
        AnswerTooLarge: The agent printed more than `meter` allows (it is not waited for).
    """
    assert process.stdout is not None and process.stderr is not None
    text: list[str] = []
    tail: list[bytes] = [b""]
    stdout_task = asyncio.ensure_future(_read_stdout(process.stdout, on_token, text, meter))
    stderr_task = asyncio.ensure_future(_read_tail(process.stderr, tail))
    readers = asyncio.gather(stdout_task, stderr_task)
    try:
        if stdin_text is not None and process.stdin is not None:
            try:
                process.stdin.write(stdin_text.encode())
                await process.stdin.drain()
                process.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the agent does not read stdin; its exit status tells the rest
        code = await _exit_unless_failed(process, stdout_task)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(readers), DRAIN_S)
        # Helpers the agent left behind would keep the pipes open forever.
        _signal_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(readers), DRAIN_S)
        return "".join(text), tail[0].decode("utf-8", errors="replace").strip(), code
    finally:
        for task in (stdout_task, stderr_task):
            task.cancel()
        with contextlib.suppress(BaseException):
            await readers


async def _exit_unless_failed(
    process: asyncio.subprocess.Process, reader: asyncio.Future[None]
) -> int:
    """The exit status, or the failure of `reader` (too much output) as soon as it fails."""
    waiter = asyncio.ensure_future(exited(process))
    either: set[asyncio.Future[Any]] = {waiter, reader}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if reader.done() and not reader.cancelled():
            failure = reader.exception()
            if failure is not None:
                raise failure
        return await waiter
    finally:
        waiter.cancel()


async def exited(process: asyncio.subprocess.Process) -> int:
    """The exit status, as soon as the process itself ended.

    `Process.wait()` also waits for its pipes to close, which a helper the process left
    running can hold open for ever.
    """
    delay = 0.005
    while process.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)
    return process.returncode


async def _read_stdout(
    stream: asyncio.StreamReader,
    on_token: TokenCallback | None,
    parts: list[str],
    meter: AnswerMeter | None = None,
) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := await stream.read(4096):
        text = decoder.decode(chunk)
        if text:
            parts.append(text if meter is None else meter.add(text))
            if on_token is not None:
                on_token(text)
    parts.append(decoder.decode(b"", final=True))


async def _read_tail(stream: asyncio.StreamReader, tail: list[bytes]) -> None:
    while chunk := await stream.read(4096):
        tail[0] = (tail[0] + chunk)[-STDERR_TAIL_BYTES:]
