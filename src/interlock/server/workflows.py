"""The workflow files a server was given: which pipelines can be started, and their schedules.

Files are looked at again whenever a run is started, so an edited file takes effect without
a restart; a run stays pinned to the definition it started with. A file whose bytes (and
those of the schema and sub-pipeline files it names) are the ones last loaded is not parsed
and validated again: reading and hashing them is a few microseconds, a load milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.core.loader import Definition, Workflow, load_workflow, unchanged
from interlock.errors import PipelineNotFound, UsageError


class Workflows:
    """Pipelines by name, from the registered files."""

    def __init__(self, files: list[Path]) -> None:
        self.files = [f.absolute() for f in files]
        self._loaded: dict[Path, Workflow] = {}  # the last good load of each file
        self.load()  # fail at start, with the file's own message, if one is invalid

    def load(self) -> dict[str, Definition]:
        """Every pipeline of every file (names must be unique across files)."""
        found: dict[str, Definition] = {}
        for path in self.files:
            for name, definition in self._workflow(path).definitions.items():
                if name in found:
                    raise UsageError(
                        f"pipeline {name!r} is defined in both {found[name].source} and {path}"
                    )
                found[name] = definition
        return found

    def _workflow(self, path: Path) -> Workflow:
        """`path` as it is now: the last load while its files are unchanged, else loaded
        again (an invalid file raises, as it did before it was ever loaded)."""
        known = self._loaded.get(path)
        if known is not None and unchanged(known):
            return known
        self._loaded.pop(path, None)
        workflow = load_workflow(path)
        self._loaded[path] = workflow
        return workflow

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
