"""A worker's `system:` prompt is a template like its task: rendered before it is sent,
checked when the workflow is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import RunStatus
from interlock.core.fingerprint import worker_part
from interlock.core.loader import parse_workflow
from interlock.errors import WorkflowError

from .fake_llm_server import FakeServer
from .project import app_for, make_project, one_worker


def test_the_system_prompt_reaches_the_model_rendered(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`{{ topic }}` and an input in `system:` are sent as their values, not as written."""
    project = make_project(tmp_path, server, monkeypatch)
    worker = "      model: gpt\n      system: 'Expert on {{ topic }}, {{ tone }}.'\n"
    flow = one_worker(project, worker)
    flow.write_text("p:\n  inputs:\n    tone: {default: terse}\n" + flow.read_text()[3:])
    app = app_for(project)
    state = app.run(flow, topic="tides")
    assert state.status is RunStatus.DELIVERED, state.failure
    [system] = [m for m in server.requests[-1].body["messages"] if m["role"] == "system"]
    assert system["content"] == "Expert on tides, terse."


def test_a_system_prompt_naming_an_unknown_value_is_refused_at_load() -> None:
    """A misspelt name in `system:` is found before a run, as it is in a task."""
    text = (
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      final: true\n"
        "      model: m\n      task: hi\n      system: 'About {{ topc }}.'\n"
    )
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(text, source="flow.yaml")
    assert "key 'system' uses {{ topc }}, which is not defined" in str(caught.value)


def test_the_rendered_system_prompt_is_part_of_the_cache_key() -> None:
    """Two runs whose system prompts render differently never share a cached answer."""
    text = (
        "p:\n  inputs:\n    tone: {default: terse}\n  phases:\n  - id: a\n    workers:\n"
        "    - role: w\n      final: true\n      model: m\n      task: hi\n"
        "      system: 'Be {{ tone }}.'\n"
    )
    worker = parse_workflow(text, source="f.yaml").get("p").pipeline.worker("w")
    terse = worker_part(worker, None, {"tone": "terse", "inputs": {"tone": "terse"}})
    warm = worker_part(worker, None, {"tone": "warm", "inputs": {"tone": "warm"}})
    assert terse != warm
