"""The samples in the README and the manual are checked against the code, so they cannot
drift: a workflow in a YAML or JSON block loads and passes `check`'s exploration (a block
that leaves part out says so with a `# ...` line, and must still parse), a TOML block parses
and its `[limits]`, `[models]` and `[providers]` tables are valid, and each `interlock ...`
command line names a command that exists and only options that command has."""

from __future__ import annotations

import re
import shlex
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from interlock.cli.main import cli
from interlock.core.explore import explore
from interlock.core.loader import build_workflow
from interlock.core.parse import parse_text

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def _blocks(kind: str) -> Iterator[tuple[str, str]]:
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match[1] == kind:
                line = text.count("\n", 0, match.start()) + 1
                yield f"{page.relative_to(ROOT)}:{line}", match[2]


def _is_workflow(data: object) -> bool:
    pipelines = (
        {k: v for k, v in data.items() if not str(k).startswith("$")}
        if isinstance(data, dict)
        else {}
    )
    return bool(pipelines) and all(
        isinstance(v, dict) and "phases" in v for v in pipelines.values()
    )


WORKFLOWS = [(where, text) for kind in ("yaml", "json") for where, text in _blocks(kind)]


@pytest.mark.parametrize(("where", "text"), WORKFLOWS, ids=[w for w, _ in WORKFLOWS])
def test_a_workflow_sample_loads(where: str, text: str) -> None:
    try:
        data = parse_text(textwrap.dedent(text) if text.startswith(" ") else text)
    except ValueError as exc:
        pytest.fail(f"{where}: the sample does not parse: {exc}")
    if not _is_workflow(data) or re.search(r"^\s*# \.\.\.", text, re.M):
        return  # not a whole workflow: a fragment, or a file of another kind
    workflow = build_workflow(data, where, base_dir=ROOT / "examples")
    for name, definition in workflow.definitions.items():  # what `check` explores
        report = explore(definition, max_states=20_000)
        assert not report.problems, f"{where}: pipeline {name!r}: {report.problems}"


TOMLS = list(_blocks("toml"))


@pytest.mark.parametrize(("where", "text"), TOMLS, ids=[w for w, _ in TOMLS])
def test_a_config_sample_is_valid(where: str, text: str, tmp_path: Path) -> None:
    from interlock.providers.config import ModelConfig
    from interlock.providers.spend import parse_limits

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{where}: not TOML: {exc}")
    if re.search(r"^\s*# \.\.\.", text, re.M):
        return
    (tmp_path / "interlock.toml").write_text(text)
    if "models" in data or "providers" in data:
        ModelConfig.load([tmp_path])
    if "limits" in data:
        parse_limits(data["limits"], where)


def _command_lines() -> Iterator[tuple[str, str]]:
    for kind in ("bash", "sh", "console", ""):
        for where, text in _blocks(kind):
            joined = re.sub(r"\\\n\s*", " ", text)
            for line in joined.splitlines():
                line = line.strip().removeprefix("$ ")
                for part in re.split(r"&&|\|\||;|\|", line.split(" #", 1)[0]):
                    part = part.strip()
                    if part.startswith("interlock "):
                        yield where, part


COMMANDS = list(_command_lines())


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[f"{w} {c}" for w, c in COMMANDS])
def test_a_command_sample_names_what_exists(where: str, line: str) -> None:
    try:
        words = shlex.split(line)[1:]
    except ValueError:
        words = line.split()[1:]
    context = click.Context(cli)
    command: click.Command = cli
    words = [w for w in words if not w.startswith("[")]
    # The group's own options first (`interlock --home DIR run ...`), with their values.
    valued = {opt for p in cli.params if not getattr(p, "is_flag", False) for opt in p.opts}
    while words and words[0].startswith("-"):
        words = words[2:] if words[0] in valued else words[1:]
    while isinstance(command, click.Group):
        names = [w for w in words if not w.startswith("-")]
        if not names:
            return
        found = command.get_command(context, names[0])
        if found is None:
            if command is cli:
                pytest.fail(f"{where}: `{line}`: no command {names[0]!r}")
            return  # an argument of the group's own, or a placeholder
        words = words[words.index(names[0]) + 1 :]
        command = found
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    known |= {"--help", "-h"}
    known |= {opt for param in cli.params for opt in param.opts}
    for word in words:
        option = word.split("=", 1)[0].rstrip(".,]")
        if option.startswith("--") and option not in known and option != "--":
            pytest.fail(f"{where}: `{line}`: {command.name} has no option {option}")


def test_the_readmes_links_lead_somewhere() -> None:
    """The README is read on its own (a repository page, an index), so its relative links
    name files of the repository, and an anchor into a page names one of its headings."""
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which is not there"
