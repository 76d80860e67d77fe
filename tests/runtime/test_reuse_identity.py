"""Each part of a task's identity (`runtime.reuse`) counts in its fingerprint, and only there.

A fingerprint decides whether an earlier output is carried over instead of paid for again:
an input it misses reuses a stale output, an input it wrongly counts never reuses. Each test
changes one input (the task text, the model alias and what it resolves to, an alias that does
not resolve, params, fallbacks, a file read, the topic and inputs, code files and the size
past which one is not hashed, tool scripts, env names) and checks that exactly the expected
part of the fingerprint changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from interlock.core import events as ev
from interlock.core.fingerprint import Fingerprint
from interlock.core.loader import build_workflow
from interlock.core.state import RunState, fold
from interlock.runtime import reuse
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.testing import MemoryStore

CONFIG = """
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[models.fast]
provider = "local"
model = "{fast}"

[models.slow]
provider = "local"
model = "model-slow"
"""
LIMIT = 1 << 20  # the size up to which a code file is hashed (1 MiB)


def run_state(topic: str, inputs: dict[str, Any], read_sha: str) -> RunState:
    """A run whose phase `a` wrote `notes.md` (with `read_sha`) and whose phase `b` has
    dispatched `w@1`."""
    history: list[ev.Event] = [
        ev.RunCreated(at=0, run_id="r", pipeline="p", definition_hash="0" * 64, topic=topic,
                      inputs=inputs),
        ev.PhaseStarted(at=0, phase="a", visit=1, items=None),
        ev.TaskDispatched(at=0, task_id="writer@1", phase="a", role="writer", visit=1,
                          item=None, attempt=1, model="fast"),
        ev.TaskCompleted(at=1, task_id="writer@1", attempt=1, artifact="notes.md",
                         sha256=read_sha, size=1),
        ev.PhaseCompleted(at=1, phase="a", visit=1),
        ev.PhaseStarted(at=1, phase="b", visit=1, items=None),
        ev.TaskDispatched(at=1, task_id="w@1", phase="b", role="w", visit=1, item=None,
                          attempt=1, model="fast"),
    ]  # fmt: skip
    return fold(history)


def reuser_of(
    folder: Path, w: dict[str, Any], *, fast: str = "model-fast", config: str | None = CONFIG
) -> reuse.Reuser:
    """A fresh process's `Reuser` of a pipeline whose phase `b` has worker `w`, in the
    workflow folder `folder` (with `config` as its interlock.toml, if any)."""
    if config is not None:
        (folder / "interlock.toml").write_text(config.replace("{fast}", fast))
    else:
        (folder / "interlock.toml").unlink(missing_ok=True)
    data = {
        "inputs": {"x": {"type": "string", "required": False}},
        "phases": [
            {"id": "a", "workers": [{"role": "writer", "model": "fast", "output": "notes.md"}]},
            {"id": "b", "workers": [{"role": "w", "final": True, **w}]},
        ],
    }
    return reuse.Reuser(
        store=MemoryStore(),
        home=Home(folder / "home"),
        models=ModelRunner(home=folder / "home"),
        definition=build_workflow({"p": data}).get("p"),
        workflow_dir=folder,
    )


def print_of(
    folder: Path,
    w: dict[str, Any],
    *,
    topic: str = "a topic",
    inputs: dict[str, Any] | None = None,
    read_sha: str = "a" * 64,
    fast: str = "model-fast",
    config: str | None = CONFIG,
) -> Fingerprint:
    """The fingerprint of worker `w` (phase `b`, after a writer of notes.md), as a fresh
    process would make it from the workflow folder `folder`."""
    reuser = reuser_of(folder, w, fast=fast, config=config)
    state = run_state(topic, inputs or {}, read_sha)
    return reuser.fingerprint(state, state.tasks["w@1"])


def changed(before: Fingerprint, after: Fingerprint) -> set[str]:
    """The parts (and named files) in which two fingerprints differ; the digests must agree
    with them: equal exactly when nothing differs."""
    keys = before.parts.keys() | after.parts.keys()
    parts = {k for k in keys if before.parts.get(k) != after.parts.get(k)}
    assert (before.digest == after.digest) == (not parts - {k for k in parts if ":" in k})
    return parts


MODEL = {"model": "fast", "task": "Summarise {{ topic }}.", "reads": ["notes.md"]}


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configuration comes from the workflow's folder only."""
    for name in ("INTERLOCK_CONFIG", "INTERLOCK_MODELS", "INTERLOCK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_the_same_task_has_the_same_fingerprint(tmp_path: Path) -> None:
    """Nothing changed: the same digest from a new process (no memo shared)."""
    assert changed(print_of(tmp_path, MODEL), print_of(tmp_path, MODEL)) == set()


def test_the_task_text_counts_in_the_task_part_only(tmp_path: Path) -> None:
    """Another task text changes the task part, and nothing else."""
    other = {**MODEL, "task": "Summarise {{ topic }} briefly."}
    assert changed(print_of(tmp_path, MODEL), print_of(tmp_path, other)) == {"task"}


def test_the_model_alias_counts_in_the_worker_part(tmp_path: Path) -> None:
    """Another alias is another worker."""
    other = {**MODEL, "model": "slow"}
    assert changed(print_of(tmp_path, MODEL), print_of(tmp_path, other)) == {"worker"}


def test_what_an_alias_resolves_to_counts(tmp_path: Path) -> None:
    """The same alias pointing at another model id (a configuration change) is another worker."""
    before = print_of(tmp_path, MODEL, fast="model-fast")
    assert changed(before, print_of(tmp_path, MODEL, fast="model-fast-2")) == {"worker"}


def test_an_unresolved_alias_is_named_as_such_in_the_identity(tmp_path: Path) -> None:
    """An alias the configuration does not define is kept in the identity, marked
    unresolved, beside the fallbacks that resolve: neither is dropped."""
    (tmp_path / "interlock.toml").write_text(CONFIG.replace("{fast}", "model-fast"))
    definition = build_workflow(
        {"p": {"phases": [{"id": "a", "workers": [
            {"role": "w", "model": "ghost", "fallback_models": ["slow", "phantom"], "final": True}
        ]}]}}
    ).get("p")  # fmt: skip
    identity = reuse.model_identity(
        ModelRunner(home=tmp_path / "home"), definition.pipeline.worker("w"), tmp_path
    )
    assert identity[0] == {"alias": "ghost", "unresolved": True}
    assert identity[1]["alias"] == "slow" and identity[1]["model"] == "model-slow"
    assert "unresolved" not in identity[1]
    assert identity[2] == {"alias": "phantom", "unresolved": True}
    assert len(identity) == 3


def test_an_unresolved_alias_counts_in_the_fingerprint(tmp_path: Path) -> None:
    """Two aliases that do not resolve differ, and neither matches a resolved alias nor the
    same worker without its unresolved fallback."""
    ghost = print_of(tmp_path, {**MODEL, "model": "ghost"})
    phantom = print_of(tmp_path, {**MODEL, "model": "phantom"})
    assert changed(ghost, phantom) == {"worker"}
    assert changed(ghost, print_of(tmp_path, MODEL)) == {"worker"}
    with_fallback = print_of(tmp_path, {**MODEL, "fallback_models": ["phantom"]})
    assert changed(print_of(tmp_path, MODEL), with_fallback) == {"worker"}
    fallback_resolved = print_of(tmp_path, {**MODEL, "fallback_models": ["slow"]})
    assert changed(with_fallback, fallback_resolved) == {"worker"}


def test_params_count_in_the_worker_part(tmp_path: Path) -> None:
    """Request settings laid over the alias's are part of what the worker is."""
    warm = print_of(tmp_path, {**MODEL, "params": {"temperature": 0.7}})
    cold = print_of(tmp_path, {**MODEL, "params": {"temperature": 0.1}})
    assert changed(print_of(tmp_path, MODEL), warm) == {"worker"}
    assert changed(warm, cold) == {"worker"}


def test_the_contents_of_a_file_read_count_in_the_reads_part_only(tmp_path: Path) -> None:
    """Another output of the phase it reads changes the reads part, and nothing else."""
    before = print_of(tmp_path, MODEL, read_sha="a" * 64)
    assert changed(before, print_of(tmp_path, MODEL, read_sha="b" * 64)) == {"reads"}


def test_the_topic_counts_and_inputs_count_for_a_model_only_as_its_task_renders_them(
    tmp_path: Path,
) -> None:
    """The topic changes the inputs part (and the task it renders); an input a model's task
    does not render changes nothing; one it renders changes the task part."""
    before = print_of(tmp_path, MODEL)
    assert changed(before, print_of(tmp_path, MODEL, topic="another")) == {"inputs", "task"}
    assert changed(before, print_of(tmp_path, MODEL, inputs={"x": "1"})) == set()
    rendering = {**MODEL, "task": "Summarise {{ inputs.x }}."}
    assert changed(
        print_of(tmp_path, rendering, inputs={"x": "1"}),
        print_of(tmp_path, rendering, inputs={"x": "2"}),
    ) == {"task"}


def script(folder: Path, name: str, text: str | bytes, executable: bool = False) -> Path:
    """A file in the workflow's folder (`executable`: with its execute bit)."""
    path = folder / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(0o755 if executable else 0o644)
    return path


def test_a_script_run_by_an_interpreter_counts_by_its_contents(tmp_path: Path) -> None:
    """`python -u script.py`, the script outside the workflow's folder: editing it changes
    the worker part and names the file; a data file it is given does not count, nor does
    the same script after an inline `-c` program."""
    folder = tmp_path / "flow"
    folder.mkdir()
    code = script(tmp_path, "job.py", "print(1)\n")
    data = script(tmp_path, "data.txt", "one\n")
    command = {"command": ["python3", "-u", str(code), str(data)], "reads": ["notes.md"]}
    before = print_of(folder, command)
    assert f"file:{code}" in before.parts and f"file:{data}" not in before.parts
    script(tmp_path, "job.py", "print(22)\n")  # another size: a new modification is seen
    edited = print_of(folder, command)
    assert changed(before, edited) == {"worker", f"file:{code}"}
    script(tmp_path, "data.txt", "two, longer\n")
    assert changed(edited, print_of(folder, command)) == set()
    inline = print_of(folder, {"command": ["python3", "-c", "print(1)", str(code)]})
    assert f"file:{code}" not in inline.parts


def test_only_code_under_the_workflow_folder_counts_besides_the_interpreters_script(
    tmp_path: Path,
) -> None:
    """A program named by path counts; so do a script by its suffix and an executable file
    under the workflow's folder; a file outside the folder, a non-script data file and an
    argument still holding a placeholder do not."""
    folder = tmp_path / "flow"
    folder.mkdir()
    program = script(folder, "tool", "#!/bin/sh\n", executable=True)
    helper = script(folder, "helper.sh", "echo\n")
    runnable = script(folder, "runnable", "#!/bin/sh\n", executable=True)
    notes = script(folder, "notes.txt", "data\n")
    outside = script(tmp_path, "outside.py", "print()\n")
    argv = [str(program), str(helper), str(runnable), str(notes), str(outside), "{{ topic }}"]
    definition = build_workflow(
        {"p": {"phases": [{"id": "a", "workers": [{"role": "w", "command": argv, "final": True}]}]}}
    ).get("p")
    files = reuse.code_files(definition.pipeline.worker("w"), folder)
    assert sorted(files) == sorted([str(program), str(helper), str(runnable)])
    assert files[str(helper)] == reuse.file_hash(helper)
    assert reuse.is_code(argv, 0, None)
    assert not reuse.is_code(argv, 1, None)  # no folder: only the program itself
    assert reuse.is_code(["bash", str(outside)], 1, None)  # an interpreter's script, anywhere
    assert not reuse.is_code(["bash", "-c", "x", str(outside)], 3, None)


def test_a_workflow_dir_placeholder_names_the_folder(tmp_path: Path) -> None:
    """`{workflow_dir}/job.sh` is the script beside the workflow: hashed by its contents."""
    script(tmp_path, "job.sh", "echo 1\n")
    command = {"command": ["bash", "{workflow_dir}/job.sh"]}
    before = print_of(tmp_path, command)
    assert f"file:{tmp_path}/job.sh" in before.parts
    script(tmp_path, "job.sh", "echo 12\n")
    assert changed(before, print_of(tmp_path, command)) == {"worker", f"file:{tmp_path}/job.sh"}


def test_a_code_file_is_hashed_up_to_one_mib_and_not_past_it(tmp_path: Path) -> None:
    """A script of exactly 1 MiB is hashed; one byte more and it is not (an interpreter or a
    binary, left out), so editing it changes no fingerprint."""
    at_limit = script(tmp_path, "big.py", b"#" * LIMIT)
    assert reuse.file_hash(at_limit) is not None
    past = script(tmp_path, "huge.py", b"#" * (LIMIT + 1))
    assert reuse.file_hash(past) is None
    command = {"command": ["python3", str(past)]}
    before = print_of(tmp_path, command)
    assert f"file:{past}" not in before.parts
    script(tmp_path, "huge.py", b"!" * (LIMIT + 2))
    assert changed(before, print_of(tmp_path, command)) == set()
    assert reuse.file_hash(tmp_path) is None  # a folder is no code file
    assert reuse.file_hash(tmp_path / "missing.py") is None


def test_a_code_file_hash_is_read_again_once_the_file_changed(tmp_path: Path) -> None:
    """The remembered digest is kept by modification time and size: a rewrite with the same
    size but a new modification time is read again."""
    path = script(tmp_path, "job.py", "print(1)\n")
    first = reuse.file_hash(path)
    script(tmp_path, "job.py", "print(2)\n")
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert reuse.file_hash(path) not in (None, first)


def test_a_call_target_counts_by_its_source_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `call:` worker's module source is part of its identity: editing it changes the
    worker part; another function of the same module is another worker."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = script(tmp_path, "identity_job.py", "def run(task):\n    return 'a'\n")
    try:
        call = {"call": "identity_job:run"}
        before = print_of(tmp_path, call)
        assert before.parts["file:call:identity_job:run"] == reuse.file_hash(module)[:16]  # type: ignore[index]
        script(tmp_path, "identity_job.py", "def run(task):\n    return 'bb'\n")
        assert changed(before, print_of(tmp_path, call)) == {
            "worker",
            "file:call:identity_job:run",
        }
        other = print_of(tmp_path, {"call": "identity_job:other"})
        assert "worker" in changed(print_of(tmp_path, call), other)
    finally:
        sys.modules.pop("identity_job", None)


def test_a_tool_servers_script_counts_up_to_one_mib(tmp_path: Path) -> None:
    """A model worker's stdio tool server: editing its script changes the worker part and
    names the file; past 1 MiB the script is not hashed."""
    server = script(tmp_path, "tools.py", "print('tools')\n")
    tooled = {**MODEL, "tools": [{"mcp": ["python3", "tools.py"]}]}
    before = print_of(tmp_path, tooled)
    assert "file:tools.py" in before.parts
    script(tmp_path, "tools.py", "print('other tools')\n")
    assert changed(before, print_of(tmp_path, tooled)) == {"worker", "file:tools.py"}
    script(tmp_path, "tools.py", b"#" * LIMIT)
    assert "file:tools.py" in print_of(tmp_path, tooled).parts
    script(tmp_path, "tools.py", b"#" * (LIMIT + 1))
    assert "file:tools.py" not in print_of(tmp_path, tooled).parts
    assert server.exists()


def test_env_names_count_in_the_worker_part(tmp_path: Path) -> None:
    """The names of variables a command is given are part of what the worker is."""
    command = {"command": ["true"]}
    before = print_of(tmp_path, command)
    assert changed(before, print_of(tmp_path, {**command, "env": ["HOME"]})) == {"worker"}


def test_the_inputs_of_a_command_count_whether_or_not_its_task_renders_them(
    tmp_path: Path,
) -> None:
    """A command is handed every input: another value changes its inputs part."""
    command = {"command": ["true"]}
    before = print_of(tmp_path, command, inputs={"x": "1"})
    assert changed(before, print_of(tmp_path, command, inputs={"x": "2"})) == {"inputs"}


def test_a_script_edited_between_two_tasks_of_one_process_counts(tmp_path: Path) -> None:
    """The worker part is kept per role and code digests: the same `Reuser` (the orchestrator
    shares one between runs) sees a script edited since its last fingerprint."""
    code = script(tmp_path, "job.sh", "echo 1\n")
    reuser = reuser_of(tmp_path, {"command": ["bash", str(code)]})
    state = run_state("a topic", {}, "a" * 64)
    before = reuser.fingerprint(state, state.tasks["w@1"])
    script(tmp_path, "job.sh", "echo 123\n")
    after = reuser.fingerprint(state, state.tasks["w@1"])
    assert changed(before, after) == {"worker", f"file:{code}"}
    assert reuser.fingerprint(state, state.tasks["w@1"]) == after
