"""The pipelines an MCP client may start: those of the workflow files it was given (as a
server's are), or, when none were given, of every workflow file in the working directory.

Files are read again on every call, so an edited or new file is seen without a restart; a run
stays pinned to the definition it started with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.core.loader import Definition, load_workflow
from interlock.errors import InterlockError, PipelineNotFound
from interlock.server.workflows import Workflows, describe

SUFFIXES = (".yaml", ".yml", ".json")


class Pipelines:
    """Pipelines by name, from named files or from the workflow files of one directory."""

    def __init__(self, named: Workflows | None, directory: Path | None = None) -> None:
        self.named = named  # None: the workflow files of `directory` (default: here)
        self.directory = (directory or Path.cwd()).absolute()

    @classmethod
    def of_files(cls, files: list[Path]) -> Pipelines:
        """The pipelines of `files` (an invalid file is an error now), or of this directory's
        workflow files when none are named."""
        return cls(Workflows(files) if files else None)

    def _read(self) -> tuple[dict[str, Definition], list[str]]:
        """The pipelines, and why each file of the directory that was skipped is not a
        valid workflow (a pipeline name found twice keeps its first file's)."""
        if self.named is not None:
            return self.named.load(), []
        found: dict[str, Definition] = {}
        skipped: list[str] = []
        for path in sorted(self.directory.iterdir()):
            if path.suffix not in SUFFIXES or path.name.endswith(".schema.json"):
                continue
            if not path.is_file():
                continue
            try:
                definitions = load_workflow(path).definitions
            except InterlockError as exc:
                skipped.append(exc.message.splitlines()[0])
                continue
            for name, definition in definitions.items():
                if name in found:
                    skipped.append(f"{path}: pipeline {name!r} is also in {found[name].source}")
                    continue
                found[name] = definition
        return found, skipped

    def get(self, name: str) -> Definition:
        """The current definition of `name`."""
        definitions = self._read()[0]
        if name not in definitions:
            known = ", ".join(sorted(definitions)) or "none"
            raise PipelineNotFound(
                f"no pipeline {name!r} in {self.where()}; known: {known} (see list_pipelines)"
            )
        return definitions[name]

    def where(self) -> str:
        """Where pipelines come from, for messages."""
        if self.named is not None:
            return ", ".join(str(f) for f in self.named.files)
        return f"the workflow files of {self.directory}"

    def describe(self) -> dict[str, Any]:
        """Each pipeline with its description, declared inputs and phases."""
        definitions, skipped = self._read()
        return {
            "pipelines": [describe(name, d) for name, d in sorted(definitions.items())],
            "from": self.where(),
            "skipped": skipped,
        }
