"""The command line starts fast: `--help` loads no engine, ledger, runtime or rich, a command
loads only its own module, and listing runs loads neither the engine nor the runtime. Counted
by the modules imported, not timed, so a busy machine cannot fail them. (Figures:
docs/reliability.md, "First contact"; `python benchmarks/startup.py`.)"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import interlock.cli
from interlock.cli.main import COMMAND_MODULES

HEAVY = (
    "aiohttp",
    "asyncio",
    "celpy",
    "httpx",
    "jinja2",
    "jsonschema",
    "pydantic",
    "interlock.api",
    "interlock.core.workflow",
    "interlock.runtime.orchestrator",
)
# What `--help` must not import either: it needs no ledger, no event types and no rich.
NOT_FOR_HELP = (*HEAVY, "rich", "sqlite3", "interlock.core.events", "interlock.storage")

PROBE = """
import sys
from interlock.cli.main import cli
try:
    cli({args!r}, standalone_mode=False)
finally:
    found = [m for m in {heavy!r} if any(n == m or n.startswith(m + ".") for n in sys.modules)]
    print("LOADED", *sorted(found), file=sys.stderr)
"""


def loaded(env: dict[str, str], *args: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of `heavy` running `interlock ARGS` in a fresh interpreter imports (a name
    counts for its submodules too)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args), heavy=heavy)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    line = next(x for x in result.stderr.splitlines() if x.startswith("LOADED"))
    return line.split()[1:]


def test_help_loads_nothing_heavy(cli_env: dict[str, str]) -> None:
    """`interlock --help` imports none of the engine, the ledger, the event types, the runtime,
    rich or their libraries."""
    assert loaded(cli_env, "--help", heavy=NOT_FOR_HELP) == []
    assert loaded(cli_env, "run", "--help", heavy=NOT_FOR_HELP) == []


def test_a_command_loads_only_its_own_module(cli_env: dict[str, str]) -> None:
    """`interlock schema --help` imports the module of `schema` and no other command's."""
    modules = tuple(f"interlock.cli.{name}" for name in set(COMMAND_MODULES.values()))
    assert loaded(cli_env, "schema", "--help", heavy=modules) == ["interlock.cli.schema"]


def test_the_command_table_names_every_command_of_every_module() -> None:
    """`COMMAND_MODULES` in cli/main.py lists each command of each command module under its
    module, and nothing else: a command missing from it could not be run."""
    found = {}
    for info in pkgutil.iter_modules(interlock.cli.__path__):
        module = importlib.import_module(f"interlock.cli.{info.name}")
        for command in getattr(module, "COMMANDS", ()):
            found[command.name] = info.name
    assert found == COMMAND_MODULES


def test_statuses_spelled_out_for_options_match_the_engine() -> None:
    """The statuses `runs --status` and `prune --status` offer, written out so that building
    the options imports neither the engine nor the ledger, are the engine's and the ledger's."""
    from interlock.cli import inspect, prune
    from interlock.core.state import RunStatus
    from interlock.storage.base import ENDED_STATUSES

    assert [status.value for status in RunStatus] + ["waiting"] == inspect.STATUSES
    assert prune.ENDED_STATUSES == ENDED_STATUSES


def test_listing_runs_loads_no_engine(cli_env: dict[str, str]) -> None:
    """`interlock runs` reads the ledger without loading the engine, runtime or model clients,
    as a table or as JSON."""
    assert loaded(cli_env, "runs", "--json") == []
    assert loaded(cli_env, "runs") == []


def test_status_of_a_settled_run_loads_no_engine(cli_env: dict[str, str]) -> None:
    """`interlock status` of a run whose status.json holds its whole history reads that file
    and the ledger only, and shows the same view as the long way."""
    import json
    from pathlib import Path

    from tests.cli.test_cli import RESEARCH, cli, run_id_of

    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    assert loaded(cli_env, "status", run_id) == []
    # No lease held: no process to look for, and the module that looks (subprocess, socket)
    # is not loaded.
    assert loaded(cli_env, "status", run_id, heavy=("interlock.runtime.processes",)) == []
    fast = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    status_file = next(Path(cli_env["INTERLOCK_HOME"]).glob(f"*/{run_id}/status.json"))
    status_file.unlink()  # the long way: folded from the ledger
    slow = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    assert fast == slow


def test_explain_of_a_run_without_conditions_loads_no_engine(cli_env: dict[str, str]) -> None:
    """`interlock explain` of a run whose pipeline has no conditions (a wide fan-out, say)
    lists its decisions from the ledger alone, by a prefix of its id as by the whole id."""
    from tests.cli.test_cli import RESEARCH, cli, run_id_of

    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    assert loaded(cli_env, "explain", run_id) == []
    whole = cli(cli_env, "explain", run_id)
    assert whole.returncode == 0 and "run_created" in whole.stdout, whole.stderr
    assert "the result was delivered" in whole.stdout
    assert cli(cli_env, "explain", run_id[:-3]).stdout == whole.stdout


def test_a_run_loads_only_what_its_pipeline_uses(cli_env: dict[str, str]) -> None:
    """`interlock run` of a pipeline without conditions or schemas, whose models have no
    HTTP provider here, loads neither CEL, jsonschema nor an HTTP client; one with a
    condition loads CEL for it, and still no HTTP client."""
    from tests.cli.test_cli import RESEARCH

    unused = ("aiohttp", "httpx", "httpx_sse", "celpy", "lark", "jsonschema")
    assert loaded(cli_env, "run", RESEARCH, "research", "--topic", "x", heavy=unused) == []
    looped = Path(cli_env["INTERLOCK_HOME"]).parent / "looped.yaml"
    looped.write_text(LOOPED)
    found = loaded(cli_env, "run", str(looped), "p", "--topic", "x", heavy=unused)
    assert found == ["celpy", "lark"]


LOOPED = """
p:
  phases:
    - id: draft
      workers:
        - {role: writer, model: sonnet, task: "Draft {{ topic }}"}
    - id: review
      workers:
        - {role: reviewer, model: sonnet, task: "Score it", reads: [writer.md]}
      next:
        - {if: "visits.review < 1", goto: draft, max_visits: 2}
        - {goto: publish}
    - id: publish
      workers:
        - {role: editor, model: sonnet, task: "Publish", reads: [writer.md], final: true}
"""


def test_check_imports_the_mcp_library_only_for_a_pipeline_with_tools(
    cli_env: dict[str, str],
) -> None:
    """`interlock check` of the README's examples, which have no `tools:`, does not import
    the MCP library (most of a second); a pipeline with tools still has it checked."""
    from tests.cli.test_cli import ROOT

    for example in ("research.json", "fanout.yaml", "translate.yaml"):
        path = str(ROOT / "examples" / example)
        assert loaded(cli_env, "check", path, heavy=("mcp",)) == [], example
    tooled = Path(cli_env["INTERLOCK_HOME"]).parent / "tooled.yaml"
    tooled.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      model: m\n"
        "      final: true\n      tools: [{mcp: [some-server]}]\n"
    )
    assert loaded(cli_env, "check", str(tooled), heavy=("mcp",)) == ["mcp"]


def test_check_loads_no_runtime_driver(cli_env: dict[str, str]) -> None:
    """`interlock check` (with its cost quote too) finds a pipeline's model aliases without
    importing the orchestrator and the driver below it (most of a second of CPU)."""
    from tests.cli.test_cli import ROOT

    runtime = ("interlock.runtime.orchestrator", "interlock.runtime.driver")
    path = str(ROOT / "examples" / "research.json")
    for extra in ((), ("--cost",)):
        assert loaded(cli_env, "check", path, *extra, heavy=runtime) == [], extra


def test_check_of_plain_tasks_loads_no_template_engine_nor_event_loop(
    cli_env: dict[str, str],
) -> None:
    """`interlock check` of pipelines whose tasks are plain text and which have no `call:`
    worker imports neither jinja2 nor asyncio (nor the runtime's executors); a task with a
    template beyond bare names still has jinja2 parse it, and a `call:` still has its target
    resolved."""
    from tests.cli.test_cli import ROOT

    heavy = ("jinja2", "asyncio", "interlock.runtime.executors")
    path = str(ROOT / "examples" / "research.json")
    for extra in ((), ("--cost",)):
        assert loaded(cli_env, "check", path, *extra, heavy=heavy) == [], extra
    templated = Path(cli_env["INTERLOCK_HOME"]).parent / "templated.yaml"
    templated.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      model: m\n"
        "      final: true\n      task: 'About {{ topic | title }}'\n"
    )
    assert loaded(cli_env, "check", str(templated), heavy=heavy) == ["jinja2"]
    called = Path(cli_env["INTERLOCK_HOME"]).parent / "called.yaml"
    called.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n"
        "      call: 'json:nothing_here'\n      final: true\n"
    )
    found = loaded(cli_env, "check", str(called), heavy=heavy)
    assert "interlock.runtime.executors" in found


BUILDS = """
import sys
from lark.parsers import lalr_analysis

built = []
build = lalr_analysis.LALR_Analyzer.compute_lalr


def counted(self):
    built.append(self)
    return build(self)


lalr_analysis.LALR_Analyzer.compute_lalr = counted
from interlock.cli.main import main

sys.argv = ["interlock", *{args!r}]
try:
    main()
finally:
    print("BUILT", len(built), file=sys.stderr)
"""


def test_the_parse_tables_of_conditions_are_built_once_per_machine(
    cli_env: dict[str, str],
) -> None:
    """The first `interlock check` of a pipeline with conditions builds CEL's parse tables
    (a sixth of a second) and keeps them in the user's cache folder; the next command loads
    them instead, and says the same of the pipeline."""
    from tests.cli.test_cli import ROOT, cli

    folder = Path(cli_env["XDG_CACHE_HOME"]) / "interlock"
    assert cli(cli_env, "check", str(ROOT / "examples" / "research.json")).returncode == 0
    assert not folder.exists()  # no condition compiled: nothing kept, no folder made
    args = ["check", str(ROOT / "examples" / "translate.yaml")]
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", BUILDS.format(args=args)],
            env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        built = next(x for x in done.stderr.splitlines() if x.startswith("BUILT"))
        runs.append((int(built.split()[1]), done.stdout))
    (first, said), (second, again) = runs
    assert first > 0 and second == 0
    assert said == again and "ok" in said
    kept = list(folder.glob("cel-parser-*.cache"))
    assert len(kept) == 1, kept


def test_listing_top_level_runs_loads_no_event_types(cli_env: dict[str, str]) -> None:
    """`interlock runs` of runs that have no parent reads their summaries alone: the event
    types (most of a tenth of a second) are not loaded; `check` of a pipeline whose command
    files are there loads neither the ledger nor the reuse machinery."""
    from tests.cli.test_cli import RESEARCH, ROOT, cli

    assert cli(cli_env, "run", RESEARCH, "research", "--topic", "x").returncode == 0
    assert loaded(cli_env, "runs", heavy=("interlock.core.events",)) == []
    assert loaded(cli_env, "runs", "--json", heavy=("interlock.core.events",)) == []
    unused = ("interlock.storage", "interlock.runtime.reuse", "interlock.runtime.models")
    for example in ("research.json", "fanout.yaml", "translate.yaml"):
        path = str(ROOT / "examples" / example)
        assert loaded(cli_env, "check", path, heavy=unused) == [], example


def test_check_loads_cel_evaluator_and_template_engine_only_when_needed(
    cli_env: dict[str, str],
) -> None:
    """`interlock check` of the README's examples loads no jinja2 (their templates are bare
    names) and no CEL evaluator (celpy and the pendulum and dateutil it loads): conditions
    are parsed by lark, and only a file with `if:` loads lark. A template with a filter still
    has jinja2 read it, and a condition that does not parse still gets CEL's message."""
    from tests.cli.test_cli import ROOT, cli

    heavy = ("jinja2", "celpy", "pendulum", "dateutil", "lark")
    for example, found in (
        ("research.json", []),
        ("fanout.yaml", []),
        ("taste.yaml", ["lark"]),
        ("translate.yaml", ["lark"]),
        ("translate-plain.yaml", ["lark"]),
    ):
        path = str(ROOT / "examples" / example)
        assert loaded(cli_env, "check", path, heavy=heavy) == found, example
    assert loaded(cli_env, "check", str(ROOT / "examples" / "taste.yaml"), "--cost",
                  heavy=heavy) == ["lark"]  # fmt: skip
    folder = Path(cli_env["INTERLOCK_HOME"]).parent
    filtered = folder / "filtered.yaml"
    filtered.write_text(
        "p:\n  phases:\n  - id: a\n    workers:\n    - role: w\n      model: m\n"
        "      final: true\n      task: 'About {{ topic | upper }}'\n"
    )
    assert loaded(cli_env, "check", str(filtered), heavy=heavy) == ["jinja2"]
    broken = folder / "broken.yaml"
    broken.write_text(LOOPED.replace("visits.review < 1", "visits.review <"))
    assert loaded(cli_env, "check", str(broken), heavy=("celpy",)) == ["celpy"]
    done = cli(cli_env, "check", str(broken))
    assert done.returncode != 0
    assert "expression 'visits.review <' does not parse at" in done.stdout + done.stderr


BUILT_PROBE = """
import sys
from interlock.cli.main import cli
try:
    cli({args!r}, standalone_mode=False)
finally:
    from interlock.core import params, tools, workflow
    from interlock.providers import settings
    models = [getattr(m, n) for m in (params, tools, workflow, settings) for n in dir(m)]
    built = {{m.__name__ for m in models
             if isinstance(m, type) and issubclass(m, workflow.BaseModel)
             and m.__module__.startswith("interlock.")
             and m.__dict__.get("__pydantic_complete__")}}
    print("BUILT", *sorted(built), file=sys.stderr)
"""


def test_check_builds_only_the_validators_it_uses(cli_env: dict[str, str]) -> None:
    """`interlock check` of the README's examples builds the validator of a pipeline (which
    holds its workers', phases' and tools' schemas) once, and of the whole file, but no
    worker's or phase's of their own, no tool server's and no `[models]` table's: those are
    built at their first use."""
    from tests.cli.test_cli import ROOT

    for example in ("research.json", "fanout.yaml", "taste.yaml", "translate.yaml"):
        path = str(ROOT / "examples" / example)
        result = subprocess.run(
            [sys.executable, "-c", BUILT_PROBE.format(args=["check", path])],
            env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        line = next(x for x in result.stderr.splitlines() if x.startswith("BUILT"))
        built = set(line.split()[1:])
        assert "Pipeline" in built and "WorkflowFile" in built, example
        assert not built & {"Worker", "Phase", "ToolServer", "ModelEntry"}, (example, built)


def test_check_prints_its_plain_lines_without_rich(cli_env: dict[str, str]) -> None:
    """`interlock check` of the README's examples (with their cost quote too) prints its
    lines without loading rich; a line that rich would change (an emoji code) still goes
    through rich, and comes out as rich prints it."""
    from tests.cli.test_cli import ROOT, cli

    for example, *extra in (
        ("research.json",),
        ("fanout.yaml",),
        ("taste.yaml",),
        ("taste.yaml", "--cost"),
        ("translate.yaml",),
        ("translate-plain.yaml",),
    ):
        path = str(ROOT / "examples" / example)
        assert loaded(cli_env, "check", path, *extra, heavy=("rich",)) == [], example
    emoji = Path(cli_env["INTERLOCK_HOME"]).parent / "emoji.yaml"
    emoji.write_text(
        "p:\n  description: 'a :smile: today'\n  phases:\n  - id: a\n    workers:\n"
        "    - role: w\n      model: m\n      final: true\n"
    )
    assert loaded(cli_env, "check", str(emoji), heavy=("rich",)) == ["rich"]
    shown = cli(cli_env, "check", str(emoji)).stdout
    assert "p: a \N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES} today" in shown, shown


@pytest.mark.parametrize(
    "text",
    ["plain", "a: b: c", "", "two\nlines", "x :smile: y", "tab\there", "[bold]b[/bold]", "é 漢"],
)
def test_a_plain_line_prints_as_rich_prints_it(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line the lazy console writes itself comes out byte for byte as rich's Console
    writes it, with soft wrap asked for or by default off a terminal, on stdout and stderr."""
    from interlock.cli.base import _LazyConsole

    choices: list[dict[str, Any]] = [{"soft_wrap": True}, {}, {"soft_wrap": True, "markup": False}]
    for stderr in (False, True):
        for options in choices:
            _LazyConsole(stderr=stderr).print(text, **options)
            fast = capsys.readouterr()
            _LazyConsole(stderr=stderr).real().print(text, **options)
            assert capsys.readouterr() == fast, (text, stderr, options)


COLLECTOR = """
import gc
import sys

from interlock.cli.main import cli, main

sys.argv = ["interlock", *{args!r}]
try:
    {call}
finally:
    print("THRESHOLDS", *gc.get_threshold(), file=sys.stderr)
"""


def test_brief_commands_skip_full_collections_and_the_one_at_exit(
    cli_env: dict[str, str],
) -> None:
    """`interlock check`, `runs` and `status`, run as commands, raise the collector's
    thresholds (their start-up's objects live to the end: full collections find nothing)
    and skip the collection at exit; a run keeps CPython's own, and a program calling
    `cli` keeps its own."""
    from tests.cli.test_cli import RESEARCH, ROOT, cli, run_id_of

    from interlock.cli.main import BRIEF_THRESHOLDS

    def thresholds(*args: str, call: str = "main()") -> tuple[int, ...]:
        done = subprocess.run(
            [sys.executable, "-c", COLLECTOR.format(args=list(args), call=call)],
            env=cli_env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        line = next(x for x in done.stderr.splitlines() if x.startswith("THRESHOLDS"))
        return tuple(int(n) for n in line.split()[1:])

    run_id = run_id_of(cli(cli_env, "run", RESEARCH, "research", "--topic", "x"))
    for args in (["check", str(ROOT / "examples" / "translate.yaml")], ["runs"],
                 ["status", run_id]):  # fmt: skip
        assert thresholds(*args) == BRIEF_THRESHOLDS, args
    assert thresholds("pipelines", RESEARCH) == (700, 10, 10)
    in_process = "cli(sys.argv[1:], standalone_mode=False)"
    assert thresholds("check", RESEARCH, call=in_process) == (700, 10, 10)
