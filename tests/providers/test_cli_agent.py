"""Command-line agents run as providers: argv templates, stdin, exit codes, timeouts."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import psutil
import pytest

from interlock.providers import (
    CliAgentProvider,
    ProviderError,
    ProviderLimiter,
    ProviderTimeout,
)
from interlock.providers.cli_agent import build_invocation

from .helpers import request, resolved

SCRIPT = str(Path(__file__).with_name("agent_script.py"))


def agent(*args: str, grace: float = 2.0) -> CliAgentProvider:
    """A provider running the test agent script with `args`."""
    return CliAgentProvider(
        name="agent",
        command=[sys.executable, SCRIPT, *args],
        resolved=resolved("cli"),
        limiter=ProviderLimiter(max_concurrency=2),
        kill_grace_s=grace,
    )


def test_prompt_placeholder_becomes_one_argument() -> None:
    """{prompt}, {system} and {model} are substituted inside arguments and stdin stays unused."""
    argv, stdin = build_invocation(
        ["tool", "--model={model}", "--system", "{system}", "{prompt}"], request()
    )
    assert argv == ["tool", "--model=gpt-test", "--system", "You are careful.", "Write the plan."]
    assert stdin is None


def test_system_is_prepended_when_it_has_no_placeholder() -> None:
    """Without {system} the system message goes in front of the prompt."""
    argv, stdin = build_invocation(["tool", "-p", "{prompt}"], request())
    assert argv == ["tool", "-p", "You are careful.\n\nWrite the plan."]
    assert stdin is None


def test_prompt_goes_to_stdin_without_placeholder() -> None:
    """Without {prompt} the argv is unchanged and the prompt is meant for stdin."""
    argv, stdin = build_invocation(["tool", "--quiet"], request(system=""))
    assert argv == ["tool", "--quiet"] and stdin == "Write the plan."


def test_runs_the_agent_with_the_prompt_as_argument() -> None:
    """The agent receives the prompt as a single argument and its stdout is the output."""
    result = asyncio.run(agent("report", "{prompt}").complete(request()))
    seen = json.loads(result.text)
    assert seen == {"argv": ["You are careful.\n\nWrite the plan."], "stdin": ""}
    assert result.provider == "agent" and result.extra["usage"] == "estimated"
    assert result.cost_usd == pytest.approx(
        (result.input_tokens * 2.0 + result.output_tokens * 8.0) / 1e6
    )


def test_runs_the_agent_with_the_prompt_on_stdin() -> None:
    """Without a placeholder the agent reads the prompt from stdin; shell syntax stays literal."""
    prompt = "Quote $HOME and `ls`; rm -rf / # not a shell"
    result = asyncio.run(agent("report").complete(request(system="", prompt=prompt)))
    assert json.loads(result.text) == {"argv": [], "stdin": prompt}


def test_streams_stdout_to_on_token() -> None:
    """Output chunks are forwarded to on_token as they arrive, decoded as UTF-8."""
    fragments: list[str] = []
    result = asyncio.run(agent("stream").complete(request(), fragments.append))
    assert "".join(fragments) == result.text == "first line\nsecond line\ndéjà vu\n"


def test_nonzero_exit_reports_the_stderr_tail() -> None:
    """A failing agent raises ProviderError with its exit status and the end of stderr."""
    with pytest.raises(ProviderError) as caught:
        asyncio.run(agent("fail").complete(request()))
    message = str(caught.value)
    assert "exited with status 3" in message
    assert message.rstrip().endswith("fatal: model quota exhausted")
    assert len(message) < 2500  # only the tail, not all of stderr


def test_empty_output_is_an_error() -> None:
    """An agent that exits 0 without printing anything does not produce an empty document."""
    with pytest.raises(ProviderError, match="printed nothing"):
        asyncio.run(agent("silent").complete(request()))


def test_missing_command_is_a_permanent_error() -> None:
    """A command that is not installed fails, not retryable, naming the command."""
    provider = CliAgentProvider(
        name="ghost",
        command=["interlock-no-such-agent", "{prompt}"],
        resolved=resolved("cli"),
        limiter=ProviderLimiter(),
    )
    with pytest.raises(ProviderError, match="'interlock-no-such-agent' not found") as caught:
        asyncio.run(provider.complete(request()))
    assert not caught.value.retryable


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """On timeout the agent and the helper it started are both killed."""
    pid_file = tmp_path / "helper.pid"
    started = time.monotonic()
    with pytest.raises(ProviderTimeout, match="did not finish within 1s"):
        asyncio.run(agent("hang", str(pid_file), grace=0.5).complete(request(timeout=1.0)))
    assert time.monotonic() - started < 10
    helper_pid = int(pid_file.read_text(encoding="utf-8"))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(helper_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the helper process outlived the timeout")
