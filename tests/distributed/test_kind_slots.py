"""A worker runs so many attempts of each kind at once (`interlock worker --concurrency
model=32`): its turns claim by kind, and a process never runs more of a kind than its slots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click
import psycopg
import pytest
from tests.distributed.helpers import Processes, statuses, wait_until

from interlock.distributed.queue import TaskQueue
from interlock.storage.postgres import PostgresStore


def put(queue: TaskQueue, task: str, kind: str, scopes: list[str] | None = None) -> int:
    """Enqueue attempt 1 of `task` (run r1), of `kind`."""
    return queue.enqueue(
        run_id="r1", task_id=task, attempt=1, kind=kind, payload={}, scopes=scopes or []
    )[0]


@pytest.fixture
def queue(pg_url: str) -> Iterator[TaskQueue]:
    store = PostgresStore(pg_url, pool_size=4)
    yield TaskQueue(store)
    store.close()


def test_concurrency_sets_every_kind_or_one(tmp_path: Path) -> None:
    """`-c N` sets every kind, `-c KIND=N` one, a later value winning; the others keep the
    defaults, where model calls are as many as the providers allow at once."""
    from interlock.cli.fleet import KindCount, worker_slots
    from interlock.distributed.cli import default_slots
    from interlock.runtime.models import ModelRunner

    def given(*values: str) -> dict[str, int]:
        return worker_slots(tuple(KindCount().convert(v, None, None) for v in values))

    assert given() == {}
    assert given("model=64") == {"model": 64}
    assert given("8", "command=2") == {"command": 2, "model": 8, "call": 8}
    with pytest.raises(click.BadParameter, match="no kind 'gpu'"):
        given("gpu=2")
    home = tmp_path / "home"
    home.mkdir()
    assert default_slots(ModelRunner(home)) == {"command": 4, "model": 8, "call": 32}
    (home / "interlock.toml").write_text(
        '[providers.fast]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        "max_concurrency = 64\n"
    )
    assert default_slots(ModelRunner(home))["model"] == 64


def test_a_claim_takes_up_to_so_many_of_each_kind(queue: TaskQueue) -> None:
    """One statement: the best entries of each kind up to its count, each naming its kind;
    a kind with none asked for is left alone, and an old-style claim still takes any kind."""
    for n in range(3):
        for kind in ("command", "model", "call"):
            put(queue, f"{kind}{n}", kind)
    claims = queue.claim_many(
        "w", kinds=(), tags=(), ttl=30, limit=0, per_kind={"command": 1, "call": 2, "model": 0}
    )
    assert Counter(c.kind for c in claims) == {"command": 1, "call": 2}
    assert sorted(c.task_id for c in claims) == ["call0", "call1", "command0"]
    rest = queue.claim_many("w", kinds=("command", "model", "call"), tags=(), ttl=30, limit=3)
    assert [(c.task_id, c.kind) for c in rest] == [
        ("model0", "model"),
        ("command1", "command"),
        ("model1", "model"),
    ]


def test_a_worker_of_an_earlier_version_claims_as_before(queue: TaskQueue) -> None:
    """The turn's new argument has a default: the call an earlier worker makes still works."""
    entry = put(queue, "a", "call")
    with psycopg.connect(queue.store.url) as db:
        rows = db.execute(
            "SELECT row_kind, id FROM interlock_queue_turn(1, '{}'::jsonb, '{}', '{}', '{}', "
            "'{}', '{}', '{}', ARRAY['call'], '{}', NULL, NULL, 'old', 30, false)"
        ).fetchall()
    assert rows == [("claim", entry)]


def test_an_entry_under_a_limit_is_claimed_only_for_a_kind_with_room(queue: TaskQueue) -> None:
    """An entry under a concurrency limit is claimed after the statement, one more, and only of
    a kind whose slots the statement left free: here the call, not a second command."""
    queue.set_limit("model:m", 5)
    put(queue, "k1", "command")
    put(queue, "k2", "command")
    limited = put(queue, "c1", "call", scopes=["model:m"])
    claims = queue.claim_many(
        "w", kinds=(), tags=(), ttl=30, limit=0, per_kind={"command": 1, "call": 1}
    )
    assert sorted((c.task_id, c.kind) for c in claims) == [("c1", "call"), ("k1", "command")]
    assert queue.get(limited).state == "claimed"


WORKFLOW = """
mixed:
  phases:
    - id: work
      workers:
{workers}
    - id: end
      workers:
        - role: last
          call: dist_tasks:merge_free
          final: true
"""
COMMAND = (
    '        - role: {role}\n          command: ["{{python}}", "{script}", "{log}", "{{output}}"]\n'
)
SCRIPT = """import sys, time
started = time.time()
time.sleep(0.6)
with open(sys.argv[1], "a") as log:
    log.write(f"command {started} {time.time()}\\n")
with open(sys.argv[2], "w") as output:
    output.write("x")
"""
CALL = "        - role: {role}\n          call: dist_tasks:timed\n"


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of `spans` (start, end) that overlap at one moment."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = top = 0
    for _, step in edges:
        now += step
        top = max(top, now)
    return top


@pytest.mark.slow
def test_a_worker_runs_each_kind_up_to_its_own_slots(procs: Processes) -> None:
    """`interlock worker -c command=1 -c call=3`, a phase of three commands and three calls of
    0.6 s each: the calls run together, the commands one at a time."""
    log, script = procs.root / "slots.log", procs.root / "timed.py"
    script.write_text(SCRIPT)
    workers = "".join(
        COMMAND.format(role=f"k{n}", script=script, log=log) for n in range(3)
    ) + "".join(CALL.format(role=f"c{n}") for n in range(3))
    workflow = procs.root / "mixed.yaml"
    workflow.write_text(WORKFLOW.format(workers=workers))
    procs.env["SLOTS_LOG"] = str(log)
    submit = procs.start("submit", "submit", str(workflow), "--topic", "t")
    assert submit.wait(60) == 0, procs.log("submit")
    procs.start("orchestrate", "orchestrate")
    procs.start("worker", "worker", "-c", "command=1", "-c", "call=3")
    wait_until(lambda: statuses(procs.url) == {"delivered": 1}, 90, "the run to be delivered")
    spans: dict[str, list[tuple[float, float]]] = {"command": [], "call": []}
    for line in Path(log).read_text().splitlines():
        kind, start, end = line.split()
        spans[kind].append((float(start), float(end)))
    assert len(spans["command"]) == 3 and len(spans["call"]) == 3
    assert most_at_once(spans["command"]) == 1, spans
    assert most_at_once(spans["call"]) == 3, spans


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "'0': expected a whole number from 1 to 100,000 (as in 8 or command=2"),
        ("model=0", "'0' for model: expected a whole number from 1 to 100,000"),
        ("call=99999999999999999999", "for call: expected a whole number from 1 to 100,000"),
        ("command=2.5", "'2.5' for command: expected a whole number"),
        ("abc", "'abc': expected a whole number"),
        ("gpu=3", "no kind 'gpu': use command, model or call"),
        ("=3", "'=3' names no kind"),
    ],
)
def test_a_bad_concurrency_is_refused_naming_the_fix(value: str, says: str, tmp_path: Path) -> None:
    """Exit 2 before anything is opened, naming the option, the value and what it takes."""
    from click.testing import CliRunner

    from interlock.cli.main import cli

    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["--home", str(home), "worker", "--concurrency", value])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--concurrency'" in result.output
    assert says in " ".join(result.output.split()), result.output
    assert not home.exists()


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["--kinds", "gpu,model"], "--kinds", "no kind 'gpu': name one or more of command, model"),
        (["--kinds", " , "], "--kinds", "' , ' names no kind"),
        (
            ["--kinds", "model", "-c", "4", "-c", "command=2"],
            "--concurrency",
            "command=2, but this worker takes no command tasks (--kinds model): add command "
            "to --kinds, or leave the value out",
        ),
    ],
)
def test_kinds_and_their_concurrency_must_agree(
    args: list[str], option: str, says: str, tmp_path: Path
) -> None:
    """A kind that does not exist, no kind at all, or a value for a kind the worker does not
    take (it would be ignored) exits 2 before anything is opened, naming the fix."""
    from click.testing import CliRunner

    from interlock.cli.main import cli

    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["--home", str(home), "worker", *args])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output
    assert says in " ".join(result.output.split()), result.output
    assert not home.exists()


def test_kinds_are_read_leniently() -> None:
    """Spaces, capitals and a kind named twice are understood; every kind may take `-c N`."""
    from interlock.cli.fleet import taken_kinds

    assert taken_kinds(" Model, call,model ", ((None, 8), ("call", 3))) == ("model", "call")


def test_concurrency_is_read_leniently() -> None:
    """Spaces around the parts and a kind in capitals are understood."""
    from interlock.cli.fleet import KindCount

    assert KindCount().convert(" Model = 12 ", None, None) == ("model", 12)


def test_a_worker_with_an_invalid_configuration_says_so_at_start(tmp_path: Path) -> None:
    """Its model slots come from its configuration: an invalid file stops it at once, exit 2,
    naming the file and the fix, before it connects to anything."""
    from click.testing import CliRunner

    from interlock.cli.main import cli

    (tmp_path / "interlock.toml").write_text(
        '[providers.x]\nkind = "openai"\nmax_concurrency = "lots"\n'
    )
    unreachable = "postgresql://nobody@127.0.0.1:9/none"
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "worker", "--store", unreachable])
    assert result.exit_code == 2, result.output
    assert "interlock.toml: [providers.x] is invalid" in result.output
    assert "start the worker again" in result.output
