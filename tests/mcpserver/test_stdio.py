"""`interlock mcp` over stdio, driven by the MCP SDK's client: a pipeline end to end, a
review (edit, reject, cancel), errors, a read-only server, and the missing extra."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from mcp.types import TextResourceContents
from tests.mcpserver.helpers import call, environment, project, refused, stdio_session


def test_pipeline_end_to_end(tmp_path: Path) -> None:
    """A client lists the directory's pipelines (files that are not workflows are skipped
    and named), starts a run, sees it pause, reads the draft, approves it,
    reads the final output as a tool result and as a resource, then reruns its last phase."""

    async def scenario() -> None:
        folder = project(tmp_path)
        (folder / "notes.yaml").write_text("just: [notes\n")  # not a workflow: skipped, said why
        (folder / "workflow.schema.json").write_text("{}")  # what init writes beside a file
        async with stdio_session(folder) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"start_run", "approve", "reject", "edit_output", "cancel"} <= names
            listed = await call(client, "list_pipelines")
            (announce,) = listed["pipelines"]
            assert announce["pipeline"] == "announce"
            assert announce["inputs"]["audience"]["default"] == "engineers"
            (skipped,) = listed["skipped"]
            assert "notes.yaml" in skipped

            row = await call(
                client, "start_run", pipeline="announce", topic="MCP", inputs={"audience": "ops"}
            )
            run_id = row["run_id"]
            state = await call(client, "wait_for_run", run_id=run_id)
            assert (state["status"], state["pause_reason"], state["timed_out"]) == (
                "paused",
                "pause_after",
                False,
            )
            outputs = (await call(client, "list_outputs", run_id=run_id))["outputs"]
            assert [o["name"] for o in outputs] == ["writer.md"]
            draft = await client.read_resource(outputs[0]["uri"])
            assert "for ops" in draft.contents[0].text  # type: ignore[union-attr]

            assert (await call(client, "approve", run_id=run_id, note="ship it"))["accepted"]
            state = await call(client, "wait_for_run", run_id=run_id)
            assert state["status"] == "delivered"
            final = await call(client, "read_output", run_id=run_id, name="final.md")
            assert "Polish the approved draft." in final["text"]
            resource = await client.read_resource(f"interlock://runs/{run_id}/outputs/final.md")
            (content,) = resource.contents
            assert isinstance(content, TextResourceContents) and content.text == final["text"]

            events = (await call(client, "run_events", run_id=run_id))["events"]
            approved = [e for e in events if e["kind"] == "approved"]
            assert approved[0]["data"]["message"] == "ship it"
            decisions = (await call(client, "explain", run_id=run_id))["decisions"]
            assert any(d["rule"] for d in decisions)
            runs = await client.read_resource("interlock://runs")
            assert run_id in runs.contents[0].text  # type: ignore[union-attr]

            again = await call(client, "rerun", run_id=run_id, from_phase="publish")
            assert again["rerun_of"] == run_id
            rerun = await call(client, "wait_for_run", run_id=again["run_id"])
            assert rerun["status"] == "paused"  # the reused draft still waits for a person
            assert rerun["rerun_of"] == run_id and rerun["rerun_from"] == "publish"
            await call(client, "approve", run_id=again["run_id"])
            rerun = await call(client, "wait_for_run", run_id=again["run_id"])
            assert rerun["status"] == "delivered"

    asyncio.run(scenario())


def test_review_edit_reject_cancel(tmp_path: Path) -> None:
    """At a pause a client replaces the draft, sends the run back with feedback that reaches
    the writer's prompt, and cancels it; an unknown pipeline or phase, and commands in the
    wrong state, are errors that say what is allowed."""

    async def scenario() -> None:
        async with stdio_session(project(tmp_path)) as client:
            nothing = await refused(client, "start_run", pipeline="ghost", topic="x")
            assert "no pipeline 'ghost'" in nothing["message"] and "announce" in nothing["message"]
            run_id = (await call(client, "start_run", pipeline="announce", topic="T"))["run_id"]
            assert (await call(client, "wait_for_run", run_id=run_id))["status"] == "paused"

            await call(client, "edit_output", run_id=run_id, output="writer.md", text="by hand")
            state = await call(client, "wait_for_run", run_id=run_id)
            assert state["status"] == "paused"
            text = await call(client, "read_output", run_id=run_id, name="writer.md")
            assert text["text"] == "by hand"

            await call(client, "reject", run_id=run_id, to="draft", feedback="Mention pricing.")
            state = await call(client, "wait_for_run", run_id=run_id)
            assert state["status"] == "paused"
            writers = [t for t in state["tasks"] if t["role"] == "writer"]
            assert [t["visit"] for t in writers] == [1, 2]
            prompts = await call(client, "explain", run_id=run_id, prompts_of=writers[1]["task_id"])
            assert "Mention pricing." in prompts["prompts"][-1]["text"]

            bad = await refused(client, "reject", run_id=run_id, to="nowhere", feedback="x")
            assert "nowhere" in bad["message"]
            assert (await call(client, "cancel", run_id=run_id, reason="done"))["accepted"]
            state = await call(client, "wait_for_run", run_id=run_id)
            assert state["status"] == "cancelled"
            wrong = await refused(client, "approve", run_id=run_id)
            assert wrong["code"] == "wrong_state"
            assert "it is cancelled; approve needs a run that is paused" in wrong["message"]
            wrong = await refused(client, "cancel", run_id=run_id)
            assert "cancel needs a run that is running or paused" in wrong["message"]

    asyncio.run(scenario())


def test_errors_and_read_only_scope(tmp_path: Path) -> None:
    """Started with --scope read, the server reads but refuses to start a run, naming the
    scope it needs; an unknown run is a clear error; a call without a required argument
    (start_run without a topic) is an error result of the API's shape, not the SDK's raw
    validation text."""

    async def scenario() -> None:
        async with stdio_session(project(tmp_path), "--scope", "read") as client:
            assert (await call(client, "list_pipelines"))["pipelines"]
            missing = await refused(client, "run_status", run_id="nope")
            assert missing == {
                "code": "run_not_found",
                "message": "no run matches 'nope' (see 'interlock runs')",
            }
            forbidden = await refused(client, "start_run", pipeline="announce", topic="x")
            assert forbidden["code"] == "forbidden"
            assert "start_run needs the 'operate' scope" in forbidden["message"]
            unknown = await refused(client, "read_output", run_id="../x", name="final.md")
            assert unknown["code"] in ("bad_request", "run_not_found")
            untitled = await refused(client, "start_run", pipeline="announce")
            assert untitled == {
                "code": "invalid_request",
                "message": "start_run: topic: required, give it",
            }

    asyncio.run(scenario())


def test_missing_extra_is_named(tmp_path: Path) -> None:
    """Without the MCP SDK installed, `interlock mcp` names the extra and exits 69."""
    hide = (
        "import sys; sys.modules['mcp'] = None; sys.argv = ['interlock', 'mcp'];"
        "from interlock.cli.main import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide],
        cwd=tmp_path,
        env=environment(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 69
    assert "pip install 'interlock[mcp]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_scopes_without_read_are_refused(tmp_path: Path) -> None:
    """`interlock mcp --scope operate` is a usage error: a client needs `read` to list tools."""
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "mcp", "--scope", "operate"],
        cwd=tmp_path,
        env=environment(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "add --scope read" in done.stderr
