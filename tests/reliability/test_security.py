"""Names cannot escape the state directory, values cannot become commands, secrets stay out
of everything interlock writes, and model output is only ever data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock import Interlock
from interlock.core.state import artifact_name
from interlock.core.workflow import check_safe_name
from interlock.errors import UsageError
from interlock.runtime.home import Home, check_run_id
from interlock.runtime.orchestrator import Settings

from .helpers import definition

SETTINGS = Settings(heartbeat=0.05, lease_ttl=5)
TRAVERSAL = st.one_of(
    st.sampled_from(
        [
            "..",
            "../x",
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "a\x00b",
            "\\..\\x",
            "\u2025/x",
            "\uff0e\uff0e/x",
            "\u2024\u2024",
            "a/b",
            "~",
            ".",
            "",
            "x\n",
            "-rf",
        ]
    ),
    st.text(min_size=0, max_size=40),
    st.lists(st.sampled_from(["..", "/", "a", "\x00", "\uff0f", ".", "\u2215"])).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(TRAVERSAL)
def test_run_ids_never_name_a_path_outside_the_state_directory(name: str) -> None:
    """Any run id is refused, or its run and archive directories sit inside the home."""
    home = Home.at("/srv/interlock-home")
    try:
        check_run_id(name)
    except UsageError:
        return
    for path in (home.live_dir(name), home.archive_dir(name)):
        assert path.resolve().is_relative_to(home.root)
        assert path.parent.name in ("runs", "archive")


@settings(max_examples=400, deadline=None)
@given(TRAVERSAL, st.integers(1, 5), st.none() | st.integers(0, 5))
def test_roles_and_output_names_stay_one_plain_segment(
    name: str, visit: int, item: int | None
) -> None:
    """A role or output name is refused, or every file named after it stays in the run dir."""
    try:
        check_safe_name(name, "output")
    except ValueError:
        return
    run_dir = Path("/srv/run")
    file = artifact_name(name, visit, item)
    assert "/" not in file and "\x00" not in file and ".." not in file
    assert (run_dir / file).resolve().parent == run_dir


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(TRAVERSAL)
def test_artifact_names_resolve_inside_the_run_directory(tmp_path: Path, name: str) -> None:
    """`Home.inside` refuses '..', absolute paths, NUL and symlinks pointing out."""
    base = tmp_path / "run"
    base.mkdir(exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    link = base / "escape"
    if not link.is_symlink():
        link.symlink_to(outside)
    home = Home.at(tmp_path)
    for candidate in (name, f"escape/{name}", "escape"):
        try:
            target = home.inside(base, candidate)
        except UsageError:
            continue
        assert target.is_relative_to(base.resolve()), candidate


def test_a_symlink_planted_at_an_output_path_is_not_adopted(tmp_path: Path) -> None:
    """After a restart, an output path that is a symlink to a file outside the state
    directory is not taken as the task's output; the task runs and its own output wins."""
    secret = tmp_path / "outside.txt"
    secret.write_text("outside the state directory\n")
    flow = definition(f"""
    p:
      phases:
        - id: one
          workers:
            - {{role: a, command: [{json.dumps(sys.executable)}, -c, "print('own output')"],
               final: true}}
    """)
    home = tmp_path / "home"
    first = Interlock(home, settings=SETTINGS)
    run_id = first.start(flow, topic="t")  # recorded as dispatched, never acted on: a crash
    first.store.release_lease(first.orchestrator.drivers[run_id].lease)  # as if it expired
    first.close()
    (home / "runs" / run_id / "a.md").symlink_to(secret)
    second = Interlock(home, settings=SETTINGS)
    state = second.resume(run_id)
    assert state.status.value == "delivered"
    completed = [s.data for s in second.store.events(run_id) if s.kind == "task_completed"]
    assert [c["adopted"] for c in completed] == [False]
    final = second.final_path(run_id)
    assert final is not None and final.read_text() == "own output\n"
    assert secret.read_text() == "outside the state directory\n"
    second.close()


HOSTILE = [
    "; touch CANARY",
    "$(touch CANARY)",
    "`touch CANARY`",
    "a\ntouch CANARY",
    "-rf",
    "--output=/etc/passwd",
    "{output}",
    "{python}",
    "{{ 7*7 }}",
    "' \" && touch CANARY",
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_reach_commands_as_single_argv_items(tmp_path: Path, hostile: str) -> None:
    """Topic, inputs and fan-out items holding shell syntax, placeholders or leading dashes
    arrive in a command's argv unchanged, one item each; the canary file is never made."""
    dump = tmp_path / "dump.py"
    dump.write_text(
        "import json, os, sys\n"
        "out = os.environ['INTERLOCK_OUTPUT']\n"
        "open(out, 'w').write(json.dumps({'argv': sys.argv[1:], 'items': [os.environ['H']]}))\n"
    )
    py, script = json.dumps(sys.executable), json.dumps(str(dump))
    flow = definition(f"""
    p:
      inputs: {{extra: x}}
      env: [H]
      phases:
        - id: plan
          workers:
            - role: planner
              command: [{py}, {script}, "{{topic}}", "{{{{ extra }}}}"]
              extract: {{items: {{json: items, type: list}}}}
        - id: each
          for_each: planner.items
          workers:
            - {{role: worker, command: [{py}, {script}, "{{item}}", "{{topic}}"]}}
        - id: end
          workers:
            - {{role: end, command: [{py}, {script}], reads: [worker.md], final: true}}
    """)
    os.environ["H"] = hostile
    try:
        app = Interlock(tmp_path / "home", settings=SETTINGS)
        state = app.run(flow, topic=hostile, inputs={"extra": hostile})
    finally:
        del os.environ["H"]
    assert state.status.value == "delivered", state.failure
    run_dir = app.run_dir(state.run_id)
    planner = json.loads((run_dir / "planner.md").read_text())
    worker = json.loads((run_dir / "worker.0.md").read_text())
    assert planner["argv"] == [hostile, hostile]
    assert worker["argv"] == [hostile, hostile]
    assert not list(tmp_path.rglob("CANARY")), "a value was run as a shell command"
    app.close()


def test_model_output_with_template_cel_and_shell_syntax_is_only_data(tmp_path: Path) -> None:
    """A reviewer's output full of template, CEL and shell text changes nothing but the
    value it carries: the branch follows the extracted number, and the text is passed on
    verbatim, never rendered or run."""
    payload = (
        "{{ 7*7 }} {% for x in range(3) %}X{% endfor %} reviewer.score > 0 || true $(touch CANARY)"
    )
    review = tmp_path / "review.py"
    review.write_text(
        "import json, os\n"
        f"text = {payload!r}\n"
        "open(os.environ['INTERLOCK_OUTPUT'], 'w').write(json.dumps({'score': 3, 'note': text}))\n"
    )
    echo = tmp_path / "echo.py"
    echo.write_text(
        "import os, sys\n"
        "data = open(sys.argv[1]).read()\n"
        "open(os.environ['INTERLOCK_OUTPUT'], 'w').write(data)\n"
    )
    py = json.dumps(sys.executable)
    flow = definition(f"""
    p:
      phases:
        - id: review
          workers:
            - role: reviewer
              command: [{py}, {json.dumps(str(review))}]
              extract: {{score: {{json: score, type: number}}, note: {{json: note}}}}
          next:
            - {{if: "reviewer.score >= 8.0", goto: publish}}
            - {{goto: fix}}
        - id: fix
          workers:
            - {{role: fixer, command: [{py}, {json.dumps(str(echo))}, "{{inputs}}"],
                reads: [reviewer.md], task: "Fix: {{{{ topic }}}}"}}
        - id: publish
          workers:
            - {{role: publisher, command: [{py}, {json.dumps(str(echo))}, "{{inputs}}"],
                reads: [reviewer.md], final: true}}
    """)
    app = Interlock(tmp_path / "home", settings=SETTINGS)
    state = app.run(flow, topic="{{ 7*7 }}")
    assert state.status.value == "delivered"
    assert state.values["reviewer"]["note"] == payload
    branches = [s.data for s in app.store.events(state.run_id) if s.kind == "branch_taken"]
    assert branches[0]["goto"] == "fix"  # score 3: the text claiming otherwise is ignored
    final = app.final_path(state.run_id)
    assert final is not None and payload in final.read_text() and "49" not in final.read_text()
    assert not list(tmp_path.rglob("CANARY"))
    app.close()


API_KEY = "canary-api-key-7f3a9c1e5b"
DB_PASSWORD = "canary-db-password-2d8e4f6a"
CONFIG = """
[providers.fake]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "RELIABILITY_CANARY_KEY"
max_attempts = 1

[models.m]
provider = "fake"
model = "x"
"""


def _everything_written(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file())


def test_secrets_never_appear_in_logs_ledger_status_or_events(tmp_path: Path) -> None:
    """With a canary API key, database password and a failing run at debug log level (a
    traceback in a worker, a refused model call), no canary is in any output or file."""
    (tmp_path / "interlock.toml").write_text(CONFIG)
    crash = tmp_path / "crash.py"
    crash.write_text("raise RuntimeError('worker blew up')\n")
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        textwrap.dedent(f"""
    p:
      phases:
        - id: one
          workers:
            - {{role: caller, model: m, task: "hello", timeout: 5}}
            - {{role: broken, command: [{json.dumps(sys.executable)}, {json.dumps(str(crash))}]}}
        - id: two
          workers:
            - {{role: last, model: m, final: true}}
    """)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["RELIABILITY_CANARY_KEY"] = API_KEY
    home = tmp_path / "home"
    outputs = []
    commands = [
        ["--debug", "run", str(flow), "p", "--topic", "t", "--run-id", "secret-run"],
        ["--debug", "status", "secret-run", "--json"],
        ["--debug", "events", "secret-run", "--json"],
        ["--debug", "ledger", "secret-run"],
        ["--debug", "explain", "secret-run"],
        ["--debug", "--log-format", "json", "resume", "secret-run"],
        ["--debug", "--store", f"postgresql://interlock:{DB_PASSWORD}@127.0.0.1:9/x", "runs"],
    ]
    for args in commands:
        done = subprocess.run(
            [sys.executable, "-m", "interlock", "--home", str(home), *args],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        outputs.append(done.stdout + done.stderr)
    assert b"failed" in outputs[0] or b"RuntimeError" in outputs[0]
    assert b"postgresql" in outputs[-1] or b"127.0.0.1" in outputs[-1] or outputs[-1]
    written = _everything_written(home)
    for canary in (API_KEY, DB_PASSWORD):
        for number, text in enumerate(outputs):
            assert canary.encode() not in text, f"{canary} in the output of {commands[number]}"
        assert canary.encode() not in written, f"{canary} in a file of the state directory"
