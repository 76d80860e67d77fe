"""`init`, `check` and `pipelines`: templates that check, pipelines listed, bounded exploring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from interlock.cli import workflows
from interlock.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_init_lists_its_templates() -> None:
    """`init --list` names every template with its pipeline and what it does."""
    code, stdout, _ = invoke("init", "--list")
    assert code == 0
    names = [line.split()[0] for line in stdout.splitlines()]
    assert names == ["research", "review-loop", "fan-out", "approval", "signal", "subpipeline"]
    assert "pipeline 'review': Draft, review with a score" in stdout


@pytest.mark.parametrize("template", list(workflows.TEMPLATES))
def test_every_template_is_written_and_checks(tmp_path: Path, template: str) -> None:
    """`init --template NAME` writes a file that `check` accepts, and says how to run it
    (in the file's own comment too, naming that file rather than the default name)."""
    target = tmp_path / f"{template}.yaml"
    code, stdout, _ = invoke("init", str(target), "--template", template)
    assert code == 0 and target.is_file()
    keys = list(yaml.safe_load(target.read_text()))
    assert keys[0] == "$language", "a new file states the language it is written for"
    pipeline = keys[1]
    assert f"interlock run {target} {pipeline} --topic" in stdout
    written = target.read_text()
    assert f"interlock run {target} {pipeline} --topic" in written, "its comment runs this file"
    assert "workflow.yaml" not in written
    code, stdout, stderr = invoke("check", str(target))
    assert code == 0, stderr
    assert stdout.startswith(f"{target}: ok ({pipeline}")  # more pipelines may follow


@pytest.mark.parametrize("template", list(workflows.TEMPLATES))
def test_init_into_a_json_file_writes_json_that_checks(tmp_path: Path, template: str) -> None:
    """A `.json` target gets the template as JSON (read strictly as JSON), which checks."""
    target = tmp_path / "flow.json"
    code, _, stderr = invoke("init", str(target), "--template", template)
    assert code == 0, stderr
    json.loads(target.read_text())
    code, _, stderr = invoke("check", str(target))
    assert code == 0, stderr
    assert not (tmp_path / "workflow.schema.json").exists()


def test_init_with_an_unknown_template_lists_the_known_ones(tmp_path: Path) -> None:
    """A template name that does not exist is exit 2 naming the ones that do."""
    code, _, stderr = invoke("init", str(tmp_path / "x.yaml"), "--template", "reviw")
    assert code == 2
    known = "research, review-loop, fan-out, approval, signal, subpipeline"
    assert f"no template 'reviw'; templates are {known}" in stderr
    assert not (tmp_path / "x.yaml").exists()


def test_check_lists_pipelines_with_their_inputs() -> None:
    """`check` prints each pipeline, its inputs with defaults, and the command that runs it."""
    flow = ROOT / "examples" / "translate.yaml"
    code, stdout, _ = invoke("check", str(flow))
    assert code == 0
    assert "  translate: Translation with a bounded review/polish loop (5 phase(s)" in stdout
    assert "      input language (text, default 'French')" in stdout
    assert f"      run: interlock run {flow} translate --topic TEXT" in stdout
    code, stdout, _ = invoke("check", "--quiet", str(flow))
    assert code == 0 and stdout.strip() == f"{flow}: ok (translate)"


def test_pipelines_command_lists_required_inputs(tmp_path: Path) -> None:
    """`pipelines FILE` lists pipelines; a required input shows in the run command."""
    data = yaml.safe_load((ROOT / "examples" / "translate.yaml").read_text())
    data["translate"]["inputs"]["tone"] = {"required": True, "description": "how it sounds"}
    flow = tmp_path / "flow.yaml"
    flow.write_text(yaml.safe_dump(data))
    code, stdout, _ = invoke("pipelines", str(flow))
    assert code == 0
    assert "      input tone (text, required): how it sounds" in stdout
    assert "--topic TEXT --input tone=VALUE" in stdout
    code, stdout, _ = invoke("pipelines", "--json", str(flow))
    (line,) = stdout.splitlines()
    summary = json.loads(line)
    assert summary["name"] == "translate" and summary["inputs"]["tone"]["required"] is True
    assert summary["phases"][0] == "fetch"


def test_max_states_says_what_it_did_not_cover() -> None:
    """A `--max-states` too small still answers, warning what was not explored."""
    flow = ROOT / "examples" / "translate.yaml"
    code, stdout, stderr = invoke("check", "--max-states", "5", str(flow))
    assert code == 0
    assert "(partly explored, see the warning)" in stdout
    assert "warning: pipeline 'translate': exploring stopped at 5 states (--max-states)" in stderr
    assert "raise --max-states" in stderr


def test_progress_shows_off_a_terminal_only_after_a_few_seconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Piped, a short exploration prints no progress; a long one prints a line now and then."""
    with workflows._Progress("p") as tell:
        tell(1000, 10)
    assert capsys.readouterr().err == ""
    progress = workflows._Progress("p")
    progress.started = time.monotonic() - 10
    with progress as tell:
        tell(5000, 70)
        tell(6000, 80)  # within five seconds of the last line: not repeated
    assert capsys.readouterr().err.splitlines() == [
        "exploring 'p': 5,000 states, 70 waiting, 10s (--max-states bounds it)"
    ]


def test_a_ten_thousand_worker_phase_checks_in_seconds(tmp_path: Path) -> None:
    """A parallel phase of 10,000 workers is checked through the real CLI, not abandoned."""
    workers = [{"role": f"w{n}", "command": ["{python}", "-c", "pass"]} for n in range(10_000)]
    last = {"role": "z", "command": ["{python}", "-c", "pass"], "final": True}
    flow = tmp_path / "wide.json"
    phases = [{"id": "fan", "workers": workers}, {"id": "out", "workers": [last]}]
    flow.write_text(json.dumps({"wide": {"phases": phases}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "check", "--quiet", str(flow)],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{flow}: ok (wide)"
    assert time.monotonic() - started < 120  # before: killed after 300 s at 1.7 GB


def test_init_into_a_missing_folder_says_so(tmp_path: Path) -> None:
    """A target in a folder that does not exist is exit 2 naming it, not an internal error."""
    target = tmp_path / "nodir" / "flow.yaml"
    code, _, stderr = invoke("init", str(target))
    assert code == 2
    assert f"{target}: cannot write it: No such file or directory; create" in stderr


@pytest.mark.parametrize(
    ("template", "pipeline", "code"),
    [
        ("research", "research", 0),
        ("review-loop", "review", 0),
        ("fan-out", "article", 0),
        ("approval", "announce", 3),  # paused for approval, as its comments say
        ("subpipeline", "report", 3),
    ],
)
def test_each_starter_runs_as_written_with_no_provider_configured(
    cli_env: dict[str, str], tmp_path: Path, template: str, pipeline: str, code: int
) -> None:
    """`init -t TEMPLATE` then the run command its header gives, on a machine with no
    provider configured: the offline stand-in answers, and the run delivers (or pauses where
    the template pauses) instead of failing on the shape of a placeholder answer."""
    flow = tmp_path / f"{template}.yaml"
    for args in (["init", str(flow), "-t", template], ["run", str(flow), pipeline, "-t", "tides"]):
        result = subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert "Traceback" not in result.stderr
    assert result.returncode == code, result.stdout + result.stderr
    assert f".yaml {pipeline} --topic" in flow.read_text()  # the header names this command
