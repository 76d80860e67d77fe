"""The workflow files a server was given: which pipelines can be started, and their schedules.

Files are read again whenever a run is started, so an edited file takes effect without a
restart; a run stays pinned to the definition it started with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.core.loader import Definition, load_workflow
from interlock.errors import PipelineNotFound, UsageError


class Workflows:
    """Pipelines by name, from the registered files."""

    def __init__(self, files: list[Path]) -> None:
        self.files = [f.absolute() for f in files]
        self.load()  # fail at start, with the file's own message, if one is invalid

    def load(self) -> dict[str, Definition]:
        """Every pipeline of every file (names must be unique across files)."""
        found: dict[str, Definition] = {}
        for path in self.files:
            for name, definition in load_workflow(path).definitions.items():
                if name in found:
                    raise UsageError(
                        f"pipeline {name!r} is defined in both {found[name].source} and {path}"
                    )
                found[name] = definition
        return found

    def get(self, name: str) -> Definition:
        """The current definition of `name`."""
        definitions = self.load()
        if name not in definitions:
            known = ", ".join(sorted(definitions)) or "none (start the server with --workflows)"
            raise PipelineNotFound(f"no pipeline {name!r} is registered; registered: {known}")
        return definitions[name]

    def describe(self) -> list[dict[str, Any]]:
        """What `GET /api/workflows` lists."""
        return [describe(name, d) for name, d in sorted(self.load().items())]


def describe(name: str, definition: Definition) -> dict[str, Any]:
    """A pipeline as a client starting it needs it: description, declared inputs (default,
    whether required), phases and schedule."""
    pipeline = definition.pipeline
    return {
        "pipeline": name,
        "source": definition.source,
        "description": pipeline.description,
        "schedule": pipeline.schedule,
        "inputs": {k: v.model_dump() for k, v in pipeline.inputs.items()},
        "phases": [p.id for p in pipeline.phases],
    }
