"""The `tools:`, `max_turns` and `accept_max_turns` keys of a worker: checked, fingerprinted,
refused with a clear error when the MCP library is missing."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from interlock.cli.main import cli
from interlock.core.fingerprint import worker_part
from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError
from interlock.providers import mcp_tools

HEAD = "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"


def parse(lines: str) -> Any:
    """The worker `w` of a one-worker pipeline whose definition ends with `lines`."""
    return parse_workflow(HEAD + lines).get("p").pipeline.worker("w")


def test_tools_entries_are_checked_with_did_you_mean(tmp_path: Path) -> None:
    """A misspelt key of a tools entry, an entry with neither or both of mcp and url, a url
    that is not http, and tools on a command worker are workflow errors naming the place."""
    with pytest.raises(
        WorkflowError, match=r"unknown tools key 'timout' \(did you mean 'timeout'\?\)"
    ):
        parse("      model: m\n      tools: [{mcp: [srv], timout: 5}]\n")
    with pytest.raises(WorkflowError, match="exactly one of 'mcp'"):
        parse("      model: m\n      tools: [{mcp: [srv], url: 'http://x/mcp'}]\n")
    with pytest.raises(WorkflowError, match="must start with http:// or https://"):
        parse("      model: m\n      tools: [{url: 'ftp://x'}]\n")
    with pytest.raises(WorkflowError, match="'tools' only applies to 'model' workers"):
        parse("      command: [echo]\n      tools: [{mcp: [srv]}]\n")
    with pytest.raises(WorkflowError, match="bound a tool loop: give the worker 'tools'"):
        parse("      model: m\n      max_turns: 3\n")
    with pytest.raises(WorkflowError, match="worker 'w', key 'max_turns'"):
        parse("      model: m\n      tools: [{mcp: [srv]}]\n      max_turns: 0\n")
    worker = parse(
        "      model: m\n      tools: [{mcp: [srv, -v], timeout: 5}]\n      max_turns: 4\n"
    )
    assert (worker.tools[0].mcp, worker.tools[0].timeout, worker.max_turns) == (["srv", "-v"], 5, 4)
    flow = tmp_path / "flow.yaml"
    flow.write_text(HEAD + "      model: m\n      tools: [{mcp: [srv]}]\n      max_turn: 3\n")
    result = CliRunner().invoke(cli, ["check", str(flow)])
    assert result.exit_code == 2
    assert "key 'max_turn': unknown key" in result.output
    assert "(did you mean 'max_turns'?)" in result.output


def test_a_change_in_tools_changes_the_fingerprint_and_no_tools_keeps_old_hashes() -> None:
    """Another server, argument, timeout or turn limit is another worker; a worker without
    tools hashes as it did before tools existed."""
    plain = parse("      model: m\n")
    assert "tools" not in plain.model_dump(mode="json", by_alias=True)
    parts = {
        worker_part(parse("      model: m\n" + lines), None, {})
        for lines in (
            "",
            "      tools: [{mcp: [srv]}]\n",
            "      tools: [{mcp: [srv, --fast]}]\n",
            "      tools: [{url: 'http://localhost:9/mcp'}]\n",
            "      tools: [{mcp: [srv]}]\n      max_turns: 3\n",
            "      tools: [{mcp: [srv]}]\n      max_turns: 3\n      accept_max_turns: true\n",
        )
    }
    assert len(parts) == 6


def test_without_the_mcp_library_tools_fail_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment without the `mcp` package gets the pip command of the extra, from
    `interlock check` as well, and `run` refuses before anything is paid."""
    real_import = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "mcp" or name.startswith("mcp."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "mcp", raising=False)
    monkeypatch.setattr(builtins, "__import__", refuse)
    assert mcp_tools.sdk_missing() == (
        "tools need the MCP client library, which is not installed: pip install "
        "'interlock[mcp]' (in a clone of the repository: pip install -e '.[mcp]')"
    )
    flow = tmp_path / "flow.yaml"
    flow.write_text(HEAD + "      model: m\n      tools: [{mcp: [srv]}]\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", str(flow)])
    assert result.exit_code == 2
    assert "worker 'w': tools need the MCP client library" in result.output
    assert "pip install 'interlock[mcp]'" in result.output
    home = str(tmp_path / "home")
    for args in (["run", str(flow), "p", "--topic", "t"],):
        refused = CliRunner().invoke(cli, ["--home", home, *args])
        assert refused.exit_code == 2, refused.output  # before any call is paid
        assert "nothing was recorded" in refused.output
        assert "worker 'w': tools need the MCP client library" in refused.output
    assert not (tmp_path / "home" / "runs").exists()


def test_check_refuses_tools_on_an_agent_command_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent command makes its own calls: `check` says the worker's tools cannot run."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "interlock.toml").write_text(
        '[providers.agent]\nkind = "cli"\ncommand = ["cat"]\n\n'
        '[models.m]\nprovider = "agent"\nmodel = "x"\n'
    )
    flow = tmp_path / "flow.yaml"
    flow.write_text(HEAD + "      model: m\n      tools: [{mcp: [srv]}]\n")
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "check", str(flow)])
    assert result.exit_code == 2, result.output
    assert "model 'm' is an agent command, which cannot call the worker's tools" in result.output


def test_an_edited_tool_server_script_changes_the_workers_identity(tmp_path: Path) -> None:
    """The script a stdio server runs is hashed into the worker's identity: an edited server
    (which may offer other tools) is not reused from an earlier run; a worker without tools
    keeps the identity it had."""
    from interlock.runtime.models import ModelRunner
    from interlock.runtime.reuse import model_identity

    script = tmp_path / "server.py"
    script.write_text("# version 1\n")
    models = ModelRunner(home=tmp_path / "home")
    worker = parse("      model: m\n      tools: [{mcp: [python, server.py]}]\n")
    before = model_identity(models, worker, tmp_path)
    script.write_text("# version 2\n")
    after = model_identity(models, worker, tmp_path)
    assert before != after
    assert worker_part(worker, before, {}) != worker_part(worker, after, {})
    plain = parse("      model: m\n")
    assert not any("tool_files" in part for part in model_identity(models, plain, tmp_path))


def test_check_warns_when_a_tool_server_command_is_not_found(tmp_path: Path) -> None:
    """A stdio server command found neither on PATH nor beside the workflow is a warning
    (the host that runs the pipeline may have it); one that is found says nothing."""
    flow = tmp_path / "flow.yaml"
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "server.sh").write_text("#!/bin/sh\n")
    workers = (
        "      model: m\n      tools: [{mcp: [no-such-mcp-server-here]}, "
        "{mcp: [tools/server.sh]}, {mcp: [python, server.py]}]\n"
    )
    flow.write_text(HEAD + workers)
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "check", str(flow)])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if "is not found on PATH" in line]
    assert len(warned) == 1 and "'no-such-mcp-server-here'" in warned[0]
