"""`interlock experiment` / `batch --variant`: bad variants refused before anything is
recorded, the dry-run plan, and an experiment run and compared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli.main import cli

# A writer, then a reviewer that scores the topic's length: a variant scores otherwise.
WORKFLOW = """\
p:
  inputs:
    lang: fr
  metrics:
    score: reviewer.score
    passed: reviewer.score >= 5
  phases:
    - id: write
      workers:
        - role: writer
          command:
            [sh, -c, 'echo "$1" >> "$2"; echo "draft: $1" > "$3"', sh, "{topic}", COUNT, "{output}"]
    - id: review
      workers:
        - role: reviewer
          final: true
          reads: [writer.md]
          command:
            - sh
            - -c
            - 'n=$(printf %s "$1" | wc -c); echo "Score: $((RULE))" > "$2"'
            - sh
            - "{topic}"
            - "{output}"
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def setup(tmp_path: Path) -> None:
    """base.yaml, a variant whose reviewer scores otherwise, and five rows."""
    text = WORKFLOW.replace("COUNT", str(tmp_path / "writes.txt"))
    (tmp_path / "base.yaml").write_text(text.replace("RULE", "n % 10"))
    (tmp_path / "strict.yaml").write_text(text.replace("RULE", "(n * 3) % 10"))
    topics = ["alpha", "beta", "gamma", "delta", "epsilon"]
    (tmp_path / "rows.csv").write_text("topic\n" + "\n".join(topics) + "\n")


@pytest.mark.parametrize(
    ("variant", "says"),
    [
        ("x=broken.yaml", "broken.yaml: invalid workflow"),
        ("x=other.yaml", "--variant x=other.yaml: has no pipeline 'p' (its pipelines: q)"),
        ("x=inputs.yaml", "declares other inputs than in base.yaml (it lacks lang)"),
        ("base=strict.yaml", "'base' is the name of the workflow file given first"),
        ("x", "write NAME=FILE"),
    ],
)
def test_a_bad_variant_is_refused_before_anything_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str, says: str
) -> None:
    """A variant file that does not parse, lacks the pipeline, or declares other inputs than
    the rows': exit 2, the file and the fix named, no ledger made."""
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.yaml").write_text("p:\n  phases: [\n")
    base = (tmp_path / "base.yaml").read_text()
    (tmp_path / "other.yaml").write_text(base.replace("p:\n", "q:\n", 1))
    (tmp_path / "inputs.yaml").write_text(base.replace("  inputs:\n    lang: fr\n", ""))
    home = tmp_path / "home"
    args = ["--home", str(home), "experiment", "base.yaml", "p", "--inputs", "rows.csv"]
    result = CliRunner().invoke(cli, [*args, "--variant", variant])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert "Traceback" not in result.output
    assert not home.exists()


def test_an_experiment_reuses_the_shared_writer_and_compares_the_reviews(
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan says the variant reuses the writer; running writes each row's draft once
    (5 executions, not 10); compare shows both variants and the rows that differ most."""
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = [
        "experiment",
        "base.yaml",
        "p",
        "--inputs",
        "rows.csv",
        "--variant",
        "strict=strict.yaml",
    ]
    home = ["--home", str(tmp_path / "home")]
    plan = CliRunner().invoke(cli, [*home, *args, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "strict          2    1       1      5       5  (writer)" in plan.output
    ran = subprocess.run(
        [sys.executable, "-m", "interlock", *home, *args, "--batch-id", "ex"],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert len((tmp_path / "writes.txt").read_text().splitlines()) == 5
    found = CliRunner().invoke(cli, [*home, "compare", "ex", "--json"])
    assert found.exit_code == 0, found.output
    body = json.loads(found.output)
    assert [(v["variant"], v["delivered"]) for v in body["variants"]] == [
        ("base", 5),
        ("strict", 5),
    ]
    assert body["by"] == "score"
    assert body["variants"][0]["metrics"]["score"]["mean"] == 5.2  # 5, 4, 5, 5, 7
    assert body["variants"][1]["metrics"]["passed"]["pass_rate"] == 0.6
    top = body["differences"][0]
    assert (top["row"], top["high"]["run_id"], top["low"]["run_id"]) == (5, "ex-r5", "ex-strict-r5")
    assert top["diff"] == "interlock diff ex-strict-r5 ex-r5"
    text = CliRunner().invoke(cli, [*home, "compare", "ex", "ex-strict", "--by", "passed"])
    assert "rows that differ most by passed:" in text.output
    exported = CliRunner().invoke(cli, [*home, "batch", "export", "ex", "-o", "out.jsonl"])
    assert exported.exit_code == 0, exported.output
    first = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert first["metrics"] == {"passed": True, "score": 5.0}
    wrong = CliRunner().invoke(cli, [*home, "compare", "ex", "--by", "nope"])
    assert wrong.exit_code == 2 and "the metrics are passed, score" in wrong.output


def test_an_experiment_without_a_variant_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`interlock experiment` needs a --variant: without one it says so (exit 2), recording
    nothing (`interlock batch` is the plain batch)."""
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    args = ["--home", str(home), "experiment", "base.yaml", "p", "--inputs", "rows.csv"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "give --variant NAME=FILE" in result.output
    assert not home.exists()
