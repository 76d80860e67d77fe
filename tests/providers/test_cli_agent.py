"""Command-line agents run as providers: argv templates, stdin, exit codes, timeouts."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import psutil
import pytest

from interlock.core.workflow import Worker
from interlock.providers import (
    CliAgentProvider,
    ModelConfig,
    ProviderError,
    ProviderLimiter,
    ProviderRegistry,
    ProviderTimeout,
)
from interlock.providers.cli_agent import build_invocation
from interlock.providers.cli_env import ALLOWED
from interlock.runtime.executors import TaskSpec
from interlock.runtime.models import ModelRunner

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


AGENT_CONFIG = """
secrets_file = "secrets.toml"

[providers.agent]
kind = "cli"
command = ["{python}", "{script}", "{mode}", "AGENT_KEY"]
env = ["AGENT_SETTINGS_DIR"]
api_key_env = "AGENT_KEY"

[models.a]
provider = "agent"
"""
OTHER_KEY = "sk-other-provider-0f9e8d7c6b5a4"
AGENT_KEY = "agent-key-from-the-secrets-file-77"


def _agent_config(tmp_path: Path, mode: str) -> ModelConfig:
    """A cli provider running the test agent, its key in a secrets file, and an environment
    holding another provider's key and a database password."""
    (tmp_path / "secrets.toml").write_text(f'AGENT_KEY = "{AGENT_KEY}"\n')
    text = AGENT_CONFIG.format(python=sys.executable, script=SCRIPT, mode=mode)
    (tmp_path / "interlock.toml").write_text(text)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
        "AGENT_SETTINGS_DIR": str(tmp_path / "agent"),
        "OPENAI_API_KEY": OTHER_KEY,
        "PGPASSWORD": "database-password",
        "INTERLOCK_CONFIG": "",
    }
    return ModelConfig.load([tmp_path], env=env)


def test_an_agent_gets_the_allow_list_and_what_its_own_table_names(tmp_path: Path) -> None:
    """The agent sees PATH, HOME, the locale, its own variables and its key, and neither
    another provider's key nor anything else of the environment."""
    config = _agent_config(tmp_path, "env")
    provider = ProviderRegistry().build(config.resolve("a"), config)
    seen = json.loads(asyncio.run(provider.complete(request())).text)
    assert seen["AGENT_KEY"] == AGENT_KEY
    assert seen["AGENT_SETTINGS_DIR"] == str(tmp_path / "agent")
    assert {"PATH", "HOME", "LC_ALL"} <= set(seen)
    assert "OPENAI_API_KEY" not in seen and "PGPASSWORD" not in seen
    assert set(seen) - {"AGENT_KEY", "AGENT_SETTINGS_DIR"} <= set(ALLOWED) | {"LC_ALL", "LC_CTYPE"}


def test_an_agent_quoting_its_key_in_stderr_fails_without_the_key(tmp_path: Path) -> None:
    """Where the failure becomes the task's, the key the agent printed is masked."""
    config = _agent_config(tmp_path, "leak")
    runner = ModelRunner(None, config=config)
    worker = Worker(role="w", model="a", final=True)
    spec = TaskSpec(
        run_id="r", task_id="w@1", attempt=1, worker=worker, task="t", topic="t", inputs={},
        item=None, reads=[], output=tmp_path / "out.part", run_dir=tmp_path, model="a",
        idempotency_key="k",
    )  # fmt: skip
    outcome = asyncio.run(runner.run(spec, None))
    assert not outcome.ok and "auth failed for key [redacted]" in outcome.error
    assert AGENT_KEY not in outcome.error
