"""Child runs of `pipeline` workers over the API, on a real server: the parent's page data
names each child with its own state and cost, a child names its parent, and the runs list
marks child runs and can leave them out."""

from __future__ import annotations

from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.helpers import Server, write_workflow

from interlock.core.subpipelines import child_run_id

FLOW = """
parent:
  phases:
    - id: prep
      workers:
        - {role: notes, model: sonnet, task: "Notes on {{ topic }}"}
    - id: delegate
      workers:
        - {role: summary, pipeline: checked, task: "Summary of {{ topic }}", final: true}
checked:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, model: sonnet, task: "Draft {{ topic }}"}
    - id: write
      workers:
        - {role: writer, model: sonnet, task: "Write {{ topic }}", final: true}
"""


def paused_family(make_server: ServerFactory, tmp_path: Path) -> tuple[Server, str, str]:
    """A server, a parent run paused because its child paused for approval, and the child."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("parent", "Otters")
    child = child_run_id(run_id, "summary@1", 1)
    server.wait_status(child, "paused")
    server.wait_status(run_id, "paused")
    return server, run_id, child


def test_the_parent_names_its_paused_child_and_the_child_its_parent(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """While the child waits for approval, the parent's run shows it paused in that child,
    its task carries the child's id, state and cost, and the child names parent and task;
    approving the parent lets both deliver, after which the task's child shows delivered."""
    server, run_id, child = paused_family(make_server, tmp_path)
    run = server.http.get(f"/api/runs/{run_id}").json()
    assert run["pause"]["child"]["run"] == child
    [listed] = run["child_runs"]
    assert listed["run_id"] == child and listed["status"] == "paused"
    assert listed["pipeline"] == "checked" and listed["tokens"] > 0 and "cost_usd" in listed
    task = next(t for t in run["tasks"] if t["task_id"] == "summary@1")
    assert task["child"]["run_id"] == child
    assert all(t["child"] is None for t in run["tasks"] if t["task_id"] != "summary@1")
    kid = server.http.get(f"/api/runs/{child}").json()
    assert kid["parent_run"] == {
        "run_id": run_id,
        "task_id": "summary@1",
        "pipeline": "parent",
        "status": "paused",
    }
    assert kid["child_runs"] == []
    assert server.http.post(f"/api/runs/{run_id}/approve", json={}).status_code < 300
    server.wait_status(run_id, "delivered")
    done = server.http.get(f"/api/runs/{run_id}").json()
    assert done["child_runs"][0]["status"] == "delivered"
    assert done["child_runs"][0]["detail"] == ""


def test_the_runs_list_marks_child_runs_and_hides_them_on_request(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """Each listed run says whose child it is (None for a top-level run); `children=hide`
    leaves the child runs out and keeps the others; a bad value is refused."""
    server, run_id, child = paused_family(make_server, tmp_path)
    # A top-level run whose id merely looks like a child's is listed as top-level.
    lookalike = server.start_run("checked", "Not a child", run_id="mine-c0123456789ab")
    rows = {r["run_id"]: r for r in server.http.get("/api/runs").json()}
    assert (rows[child]["parent_run"], rows[child]["parent_task"]) == (run_id, "summary@1")
    assert rows[run_id]["parent_run"] is None and rows[lookalike]["parent_run"] is None
    hidden = [r["run_id"] for r in server.http.get("/api/runs?children=hide").json()]
    assert child not in hidden and run_id in hidden
    assert server.http.get("/api/runs?children=maybe").status_code == 422


def test_a_running_childs_spend_so_far_is_in_its_parents_attempts(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """While the child is paused, the parent's attempts give the pipeline task the child's
    spend so far (`child_spent`, as the parent's budget counts it); once the child ends, its
    final usage replaces it."""
    server, run_id, child = paused_family(make_server, tmp_path)
    spent = server.http.get(f"/api/runs/{child}").json()["tokens"]
    assert spent > 0
    attempts = server.http.get(f"/api/runs/{run_id}/attempts").json()["attempts"]
    summary = next(a for a in attempts if a["task_id"] == "summary@1")
    assert summary["child_spent"] == {"cost_usd": 0.0, "tokens": spent}
    assert server.http.post(f"/api/runs/{run_id}/approve", json={}).status_code < 300
    server.wait_status(run_id, "delivered")
    attempts = server.http.get(f"/api/runs/{run_id}/attempts").json()["attempts"]
    summary = next(a for a in attempts if a["task_id"] == "summary@1")
    assert summary["child_spent"] is None and sum(summary["tokens"].values()) > spent
