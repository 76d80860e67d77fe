"""The real CLI for reviews and bundles: edit, reject, export, import, verify, exit codes."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import uuid
from pathlib import Path

import psycopg
from tests.cli.test_cli import RESEARCH, cli, run_id_of
from tests.storage.conftest import PG_ADMIN, pg_url

REVIEWED = """
research:
  phases:
    - id: collect
      workers:
        - {role: researcher-a, model: sonnet, task: "Perspective A"}
        - {role: researcher-b, model: sonnet, task: "Perspective B"}
    - id: synthesis
      pause_after: true
      workers:
        - role: synthesizer
          model: opus
          reads: [researcher-a.md, researcher-b.md]
          task: "Synthesize. Reviewer said: {{ feedback }}"
    - id: publish
      workers: [{role: editor, model: sonnet, reads: [synthesizer.md], final: true}]
"""


def _paused_run(env: dict[str, str], tmp_path: Path) -> str:
    flow = tmp_path / "reviewed.yaml"
    flow.write_text(REVIEWED)
    result = cli(env, "run", str(flow), "research", "--topic", "tides")
    assert result.returncode == 3, result.stderr
    return run_id_of(result)


def test_edit_then_approve_reruns_the_reader(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock edit` records the new text and names what runs again (the same text given
    again is refused: its readers would run and be paid for again); approve runs it and
    pauses to show the new synthesis; approved again, the run delivers."""
    run_id = _paused_run(cli_env, tmp_path)
    new = tmp_path / "a.md"
    new.write_text("A, corrected by a person\n")
    edited = cli(cli_env, "edit", run_id, "researcher-a.md", "--file", str(new), "-m", "typo")
    assert edited.returncode == 0, edited.stderr
    assert "recorded the edit of researcher-a.md" in edited.stdout
    assert "synthesizer@1" in edited.stdout
    assert "then it pauses again after 'synthesis', to show what changed" in edited.stdout
    again = cli(cli_env, "edit", run_id, "researcher-a.md", "--file", str(new))
    assert again.returncode == 2, again.stdout + again.stderr  # the same text: no second rerun
    assert "holds the same text as the recorded researcher-a.md" in again.stderr
    approved = cli(cli_env, "approve", run_id)
    assert approved.returncode == 3, approved.stdout + approved.stderr  # the new synthesis
    approved = cli(cli_env, "approve", run_id)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    lines = cli(cli_env, "events", run_id, "--json").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    kinds = [e["kind"] for e in events]
    assert kinds.count("output_edited") == 1
    assert [e["rule"] for e in events].count("revise") == 1


def test_bad_edits_and_rejections_exit_2(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Unknown outputs and phases, and a missing --file, are exit 2 with one clear line."""
    run_id = _paused_run(cli_env, tmp_path)
    missing = cli(cli_env, "edit", run_id, "nope.md", "--file", str(tmp_path / "x"))
    assert missing.returncode == 2 and "no such file" not in missing.stdout
    (tmp_path / "x").write_text("x")
    unknown = cli(cli_env, "edit", run_id, "nope.md", "--file", str(tmp_path / "x"))
    assert unknown.returncode == 2 and "has no output 'nope.md'" in unknown.stderr
    neither = cli(cli_env, "edit", run_id, "researcher-a.md")
    assert neither.returncode == 2 and "--file FILE or --editor" in neither.stderr
    phase = cli(cli_env, "reject", run_id, "--to", "colect", "-m", "x")
    assert phase.returncode == 2 and "has no phase 'colect'" in phase.stderr


def test_reject_goes_back_and_pauses_again(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`interlock reject --to` runs the phase again with the feedback and exits 3 at the
    next pause; the prompt holds the feedback."""
    run_id = _paused_run(cli_env, tmp_path)
    rejected = cli(cli_env, "reject", run_id, "--to", "synthesis", "-m", "shorter please")
    assert rejected.returncode == 3, rejected.stdout + rejected.stderr
    prompts = Path(cli_env["INTERLOCK_HOME"]) / "runs" / run_id / "prompts"
    assert any("shorter please" in p.read_text() for p in prompts.rglob("*synthesizer*"))


def _tamper(bundle: Path, target: Path) -> None:
    """Change one event's content and fix up the manifest so that only the chain notices."""
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    lines = members["events.jsonl"].decode().splitlines()
    event = json.loads(lines[3])
    event["at"] += 1
    lines[3] = json.dumps(event)
    members["events.jsonl"] = ("\n".join(lines) + "\n").encode()
    manifest = json.loads(members["manifest.json"])
    manifest["files"]["events.jsonl"] = {
        "sha256": hashlib.sha256(members["events.jsonl"]).hexdigest(),
        "size": len(members["events.jsonl"]),
    }
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(target, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_export_verify_import_across_stores(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A run exported from SQLite verifies, imports into PostgreSQL with the same chain,
    is refused a second time (exit 2), and a tampered copy fails with the seq named (exit 6)."""
    done = cli(cli_env, "run", RESEARCH, "research", "--topic", "tides")
    run_id = run_id_of(done)
    bundle = tmp_path / "run.tar.gz"
    exported = cli(cli_env, "export", run_id, "-o", str(bundle))
    assert exported.returncode == 0, exported.stderr
    checked = cli(cli_env, "verify", str(bundle))
    assert checked.returncode == 0
    # Both count the same files: every file of the bundle, and those of the run's folder.
    counted = re.search(r"(\d+ files, \d+ of the run's folder)", checked.stdout)
    assert counted is not None, checked.stdout
    assert counted.group(1).replace(", ", " (") + ")" in exported.stdout
    assert cli(cli_env, "verify", run_id).returncode == 0
    tampered = tmp_path / "tampered.tar.gz"
    _tamper(bundle, tampered)
    bad = cli(cli_env, "verify", str(tampered))
    assert bad.returncode == 6 and "event 4" in bad.stderr
    name = f"il_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    try:
        pg = {**cli_env, "INTERLOCK_STORE": pg_url(name), "INTERLOCK_HOME": str(tmp_path / "pg")}
        refused = cli(pg, "import", str(tampered))
        assert refused.returncode == 6 and cli(pg, "status", run_id).returncode == 2
        imported = cli(pg, "import", str(bundle))
        assert imported.returncode == 0, imported.stderr
        assert "the same chain" in imported.stdout
        again = cli(pg, "import", str(bundle))
        assert again.returncode == 2 and "--run-id" in again.stderr
        verified = cli(pg, "verify", run_id)
        assert verified.returncode == 0, verified.stderr
        assert exported.stdout.split("chain head ")[1][:16] in verified.stdout
        renamed = cli(pg, "import", str(bundle), "--run-id", "copy-1")
        assert renamed.returncode == 0 and cli(pg, "verify", "copy-1").returncode == 0
        status = json.loads(cli(pg, "status", run_id, "--json").stdout)
        assert status["status"] == "delivered"
        refused = cli(pg, "rerun", run_id)  # the bundle's definition is not this user's code
        assert refused.returncode == 2 and "--workflow FILE" in refused.stderr
        rerun = cli(pg, "rerun", run_id, "--workflow", RESEARCH)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_status_of_a_paused_run_names_the_pause_and_the_answers(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`status` of a run paused after a phase says after which one, and the three ways on."""
    run_id = _paused_run(cli_env, tmp_path)
    shown = cli(cli_env, "status", run_id)
    assert shown.returncode == 0, shown.stderr
    last = shown.stdout.strip().splitlines()[-1]
    assert last == (
        f"paused after phase 'synthesis' (pause_after): interlock approve {run_id}, or change "
        f"an output: interlock edit {run_id} OUTPUT --file F, or send it back: interlock "
        f"reject {run_id} --to PHASE -m TEXT"
    )
