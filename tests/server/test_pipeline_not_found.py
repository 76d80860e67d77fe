"""An unknown pipeline is `pipeline_not_found`, not `run_not_found`, over HTTP and MCP alike,
so a client can tell a misspelt pipeline from a run that is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.errors import PipelineNotFound
from interlock.mcpserver.pipelines import Pipelines
from interlock.server.errors import from_interlock
from interlock.server.workflows import Workflows

FLOW = """
announce:
  phases:
    - id: a
      workers:
        - {role: w, final: true, command: ["echo", "hi"]}
"""


def test_an_unknown_pipeline_answers_pipeline_not_found(tmp_path: Path) -> None:
    """The server's and the MCP server's registries raise it, and the API answers 404 with
    its own code and the pipelines there are."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    for registry in (Workflows([flow]), Pipelines(Workflows([flow]))):
        with pytest.raises(PipelineNotFound) as info:
            registry.get("anounce")
        error = from_interlock(info.value)
        assert (error.status, error.code) == (404, "pipeline_not_found")
        assert "announce" in error.message
