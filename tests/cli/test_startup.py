"""The command line starts fast: `--help` loads no engine, runtime or rich, and listing runs
loads neither the engine nor the runtime. (Figures: docs/reliability.md, "First contact".)"""

from __future__ import annotations

import subprocess
import sys

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

PROBE = """
import sys
from interlock.cli.main import cli
try:
    cli({args!r}, standalone_mode=False)
finally:
    print("LOADED", *sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def loaded(env: dict[str, str], *args: str) -> list[str]:
    """The heavy modules loaded by running `interlock ARGS` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args), heavy=HEAVY)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    line = next(x for x in result.stderr.splitlines() if x.startswith("LOADED"))
    return line.split()[1:]


def test_help_loads_nothing_heavy(cli_env: dict[str, str]) -> None:
    """`interlock --help` imports none of the engine, the runtime, rich or their libraries."""
    assert loaded(cli_env, "--help") == []
    probe = "import sys, interlock.cli.main; print([m for m in sys.modules if 'rich' in m])"
    result = subprocess.run(
        [sys.executable, "-c", probe], env=cli_env, capture_output=True, text=True
    )
    assert result.stdout.strip() == "[]"


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
    fast = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    status_file = next(Path(cli_env["INTERLOCK_HOME"]).glob(f"*/{run_id}/status.json"))
    status_file.unlink()  # the long way: folded from the ledger
    slow = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    assert fast == slow
