"""Attempts, attempt detail, costs and the pipeline graph over the API, on a real server."""

from __future__ import annotations

from pathlib import Path

from tests.server.conftest import ServerFactory
from tests.server.helpers import write_workflow

from interlock.server.attempts import Attempt

FLOW = """
flaky:
  budget: {max_cost_usd: 10}
  phases:
    - id: try
      workers:
        - role: shaky
          retries: 1
          backoff: {initial: 0}
          command:
            - "{python}"
            - "-c"
            - >-
              import os, sys; print('trying', file=sys.stderr);
              sys.exit('first try fails') if os.environ['INTERLOCK_ATTEMPT'] == '1'
              else print('steady')
    - id: write
      workers:
        - role: author
          model: sonnet
          task: "Write about {{ topic }}"
          reads: [shaky.md]
          final: true
loop:
  phases:
    - id: draft
      workers:
        - {role: drafter, call: srv.many, output: draft.md}
    - id: review
      next:
        - {if: "visits.draft < 2", goto: draft, max_visits: 2}
      workers:
        - {role: reviewer, call: srv.many, reads: [draft.md]}
    - id: publish
      workers:
        - {role: publisher, call: srv.many, final: true}
"""


def test_attempts_show_retry_logs_prompt_usage_and_costs(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    """A command that fails once and a model worker: the attempts list says retried then done,
    with the command's stderr in the detail, and the model's prompt, provider, tokens by kind
    and cost; per-phase and run costs add up and the budget used is given."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("flaky", "Tide tables")
    server.wait_status(run_id, "delivered")
    body = server.http.get(f"/api/runs/{run_id}/attempts").json()
    shaky = [a for a in body["attempts"] if a["role"] == "shaky"]
    assert [a["outcome"] for a in shaky] == ["retried", "done"]
    assert "first try fails" in shaky[0]["error"]
    assert shaky[0]["started_at"] and shaky[0]["finished_at"] and shaky[0]["queued_at"]
    first = server.http.get(f"/api/runs/{run_id}/attempts/{shaky[0]['seq']}").json()
    assert "trying" in first["logs"]["stderr"]
    assert first["prompt"] is None and first["answer"] is None
    (author,) = [a for a in body["attempts"] if a["role"] == "author"]
    assert author["outcome"] == "done" and author["provider"] and author["model"]
    assert author["tokens"]["input_tokens"] > 0 and author["tokens"]["output_tokens"] > 0
    detail = server.http.get(f"/api/runs/{run_id}/attempts/{author['seq']}").json()
    assert "Write about Tide tables" in detail["prompt"]["user"]
    assert "model sonnet" in detail["prompt"]["header"]
    assert detail["answer"] and detail["logs"] == {"stdout": None, "stderr": None}
    costs = body["costs"]
    assert costs["run"]["cost_usd"] == round(author["cost_usd"], 6)
    assert costs["phases"]["write"]["tokens"] == author["tokens"]
    assert costs["phases"]["try"]["attempts"] == 2
    assert costs["budget"]["max_cost_usd"] == 10
    assert costs["budget"]["cost_fraction"] == round(costs["run"]["cost_usd"] / 10, 4)
    missing = server.http.get(f"/api/runs/{run_id}/attempts/9999")
    assert missing.status_code == 404 and "attempts lists them" in missing.text


def test_pause_edit_and_reuse_appear_in_attempts(make_server: ServerFactory) -> None:
    """A pause is a span with its end and who ended it; an edited output's attempt says
    edited and by whom; a rerun's carried-over task says reused and from which run."""
    server = make_server()
    run_id = server.start_run("review", "Kelp farms")
    server.wait_status(run_id, "paused")
    edited = server.http.put(
        f"/api/runs/{run_id}/outputs/draft.md",
        content=b"# Fixed draft\n",
        headers={"X-Interlock-Note": "typo"},
    )
    assert edited.status_code == 200, edited.text
    server.http.post(f"/api/runs/{run_id}/approve", json={"message": "ok"})
    server.wait_status(run_id, "delivered")
    body = server.http.get(f"/api/runs/{run_id}/attempts").json()
    (pause,) = body["pauses"]
    assert pause["phase"] == "draft" and pause["end"] and pause["how"] == "approved"
    drafter = next(a for a in body["attempts"] if a["role"] == "drafter")
    assert drafter["outcome"] == "edited"
    assert drafter["edits"][0]["note"] == "typo" and drafter["edits"][0]["by"] == "anonymous"
    detail = server.http.get(f"/api/runs/{run_id}/attempts/{drafter['seq']}").json()
    assert detail["answer"] == "# Fixed draft\n"
    again = server.http.post(f"/api/runs/{run_id}/rerun", json={"from_phase": "edit"})
    rerun = again.json()["run_id"]
    server.wait_status(rerun, "paused", "delivered")
    reused = server.http.get(f"/api/runs/{rerun}/attempts").json()["attempts"][0]
    assert reused["outcome"] == "reused"
    assert reused["reused_from"] == {"run": run_id, "task": "drafter@1", "via": "rerun"}


def test_graph_gives_edges_conditions_and_path(make_server: ServerFactory, tmp_path: Path) -> None:
    """The graph of a looping pipeline names its phases, workers, the `reads:` edge, the
    conditional loop edge and the default edge, and counts the loop taken once."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    definition = server.http.get("/api/workflows/loop/graph").json()
    assert [p["id"] for p in definition["phases"]] == ["draft", "review", "publish"]
    assert definition["reads"] == [{"from": "drafter", "to": "reviewer", "file": "draft.md"}]
    assert {"from": "draft", "to": "review", "rule": None, "condition": None} in definition["flow"]
    run_id = server.start_run("loop", "Loops")
    server.wait_status(run_id, "delivered")
    graph = server.http.get(f"/api/runs/{run_id}/graph").json()
    loop = next(e for e in graph["flow"] if e["to"] == "draft")
    assert loop["condition"] == "visits.draft < 2"
    phases = [v["phase"] for v in graph["visits"]]
    assert phases == ["draft", "review", "draft", "review", "publish"]
    assert graph["taken"] == {
        "draft->review": 2,
        "review->draft#1": 1,
        "review->publish": 1,
        "publish->end": 1,
    }
    assert server.http.get("/api/workflows/nope/graph").status_code == 404


def test_a_wait_for_a_signal_is_a_span_of_the_timeline(make_server: ServerFactory) -> None:
    """The time a run waited for a signal is listed with the pauses: its phase, the signal,
    and how it ended."""
    server = make_server()
    run_id = server.start_run("signalled", "Parcel")
    server.wait_status(run_id, "waiting")
    sent = server.http.post(f"/api/runs/{run_id}/signals/payment", json={"data": {"amount": 3}})
    assert sent.status_code == 202, sent.text
    server.wait_status(run_id, "delivered")
    (wait,) = server.http.get(f"/api/runs/{run_id}/attempts").json()["pauses"]
    assert wait["kind"] == "wait" and wait["reason"] == "signal payment"
    assert wait["phase"] == "ship" and wait["how"] == "signal" and wait["end"]


def test_detail_gives_a_tool_transcript_masked_and_counts_tool_calls(
    make_server: ServerFactory,
) -> None:
    """An attempt's tool transcript (kept beside its prompt) is in its detail with anything
    shaped like a key masked, and the tool calls and model turns its calls reported add up."""
    server = make_server()
    run_id = server.start_run("modelled", "Tools")
    server.wait_status(run_id, "delivered")
    (author,) = server.http.get(f"/api/runs/{run_id}/attempts").json()["attempts"]
    assert author["tool_calls"] is None  # no tool loop
    prompts = server.service.home.run_dir(run_id) / "prompts"
    key = "sk-" + "a1b2c3d4" * 6
    (prompts / "author@1.1.tools.md").write_text(f"## Call `search`\n\nkey {key}\n")
    detail = server.http.get(f"/api/runs/{run_id}/attempts/{author['seq']}").json()
    assert "## Call `search`" in detail["tools"] and key not in detail["tools"]
    attempt = Attempt(
        seq=1, task_id="t@1", phase="p", role="t", visit=1, item=None, attempt=1, model="m",
        queued_at=0.0, usage=[{"turns": 2, "tool_calls": 3}, {"turns": 1, "tool_calls": 1}],
    )  # fmt: skip
    assert attempt.as_dict()["tool_calls"] == 4 and attempt.as_dict()["turns"] == 3
