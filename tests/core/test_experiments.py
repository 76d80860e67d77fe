"""The plan of an experiment: which of a variant's tasks its rows reuse from the base rows,
from what is known before anything runs; and the names variants may have."""

from __future__ import annotations

from interlock.core.experiments import base_plan, check_variant_name, plan, variant_batch_id
from interlock.core.loader import parse_workflow

RESEARCH = """\
research:
  phases:
    - id: collect
      workers:
        - {role: a, command: [echo, a], task: "Perspective A"}
        - {role: b, command: [echo, b], task: "Perspective B"}
    - id: synthesis
      workers:
        - {role: s, command: [echo, s], reads: [a.md, b.md], final: true, task: "SYNTH"}
"""


def pipeline(text: str):
    """The research pipeline of `text`."""
    return parse_workflow(text).get("research").pipeline


def test_a_variant_with_another_last_prompt_reuses_both_researchers() -> None:
    """Only the worker whose task changed runs; its inputs come from reused tasks."""
    base = pipeline(RESEARCH)
    edited = pipeline(RESEARCH.replace("SYNTH", "Three bullets"))
    found = plan(base, edited, name="edited", base_identity={}, identity={})
    assert (found.tasks, found.runs, found.reused, found.changed) == (3, 1, ("a", "b"), ("s",))
    assert base_plan(base).runs == 3


def test_a_changed_first_worker_makes_its_readers_run_too() -> None:
    """A task reading the output of one that runs again cannot be known to match."""
    base = pipeline(RESEARCH)
    edited = pipeline(RESEARCH.replace("Perspective A", "Perspective A, briefly"))
    found = plan(base, edited, name="v", base_identity={}, identity={})
    assert (found.reused, found.changed) == (("b",), ("a", "s"))


def test_a_worker_resolving_to_another_model_runs() -> None:
    """Alike in the file but resolved otherwise (another interlock.toml): not the same worker."""
    base = pipeline(RESEARCH)
    found = plan(base, base, name="v", base_identity={"a": "model-1"}, identity={"a": "model-2"})
    assert found.changed == ("a", "s")


def test_variant_names_and_their_batch_ids() -> None:
    """A variant's name is short and id-safe, never `base`; its batch id follows the base's."""
    assert check_variant_name("short-prompt") is None
    assert "first" in (check_variant_name("base") or "")
    assert "lowercase" in (check_variant_name("Short Prompt") or "")
    assert variant_batch_id("e1", "base") == "e1"
    assert variant_batch_id("e1", "short") == "e1-short"
