"""A tolerated fan-out's failed items as the next phase sees them: its task templates read
`{{ failed_items.PHASE }}` (`check` accepts the name), and a required read of a fan-out whose
every item failed says so, with the count and how to read it optionally."""

from __future__ import annotations

from tests.runtime.conftest import WriteWorkflow

from interlock import Interlock
from interlock.core.loader import load_workflow
from interlock.core.state import RunStatus

FLOW = """
demo:
  phases:
    - id: plan
      workers:
        - role: planner
          command: ["sh", "-c", "echo '{\\"items\\": [ITEMS]}' > {output}"]
          extract: {items: {json: items, type: list}}
    - id: write
      for_each: {items: planner.items, tolerate: TOLERATE}
      workers:
        - role: writer
          command: ["sh", "-c", "case $0 in bad*) echo broke-$0 >&2; exit 3;; esac; echo $0 > $1",
                    "{item}", "{output}"]
    - id: merge
      workers:
        - role: editor
          final: true
          reads: [READ]
          task: >-
            {% for f in failed_items.write %}{{ f.index }}={{ f.item }} ({{ f.task }});
            {% endfor %}
          command: ["sh", "-c", "printf '%s' \\"$0\\" > $1", "{task}", "{output}"]
"""


def flow(items: str, tolerate: str, read: str = "writer.md") -> str:
    """The fan-out over `items` (a JSON list's inside) whose `bad` items fail."""
    text = FLOW.replace("ITEMS", items).replace("TOLERATE", tolerate)
    return text.replace("READ", f'"{read}"')


def test_a_task_template_reads_the_failed_items(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Two of four items fail under `tolerate: 2`: the editor's task lists them, in item
    order, with their index and task; `check` accepts the template."""
    path = write_workflow(flow('\\"a\\", \\"bad1\\", \\"c\\", \\"bad2\\"', "2"))
    load_workflow(path).get("demo")  # validated as `check` does: failed_items is a known name
    done = app.run(path, "demo", topic="t")
    assert done.status is RunStatus.DELIVERED, done.failure
    final = (app.run_dir(done.run_id) / "final.md").read_text()
    assert final == "1=bad1 (writer@1.1); 3=bad2 (writer@1.3); "  # folded: a space per line


def test_every_item_failed_within_the_tolerance_names_the_phase_and_the_count(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Every item fails under `tolerate: "100%"`: the editor's required read fails saying
    that all 2 items of 'write' failed and were tolerated, and how to read it optionally;
    read optionally, the run delivers."""
    items = '\\"bad1\\", \\"bad2\\"'
    failed = app.run(write_workflow(flow(items, '"100%"')), "demo", topic="t")
    assert failed.status is RunStatus.FAILED
    reason = failed.failure or ""
    assert "every item of phase 'write' failed (2 of 2 items), within its tolerate 100%" in (reason)
    assert "held no items" not in reason
    assert "mark the read optional ('writer.md?')" in reason
    optional = write_workflow(flow(items, '"100%"', read="writer.md?"))
    assert app.run(optional, "demo", topic="t").status is RunStatus.DELIVERED
