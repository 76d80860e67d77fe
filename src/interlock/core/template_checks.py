"""`check` renders each task template once with stand-in values, to find those that pass a
rendering limit whatever the run (`interlock.core.template_guard`): `{{ 'x' * 10**10 }}`, or
loops that never end in time, are refused before a run rather than failing its first attempt.

Only a passed limit is a problem here: a template that cannot be rendered with stand-ins
(an input compared with a number, a signal not sent yet) is left for the run, where the real
values are. Pure: steps are counted, no clock is read.
"""

from __future__ import annotations

from typing import Any

from interlock.core.task_size import MAX_TASK_SIZE
from interlock.core.templates import TemplateProblem, placeholders, render_task
from interlock.core.workflow import Pipeline

_LIMIT = "task template passes a limit"


def limit_problems(where: str, pipeline: Pipeline) -> list[str]:
    """Every task template, command argument and child input of `pipeline` that passes a
    rendering limit with stand-in values."""
    problems = []
    inputs = {name: "" if spec.default is None else spec.default
              for name, spec in pipeline.inputs.items()}  # fmt: skip
    values: dict[str, Any] = {
        **inputs, "topic": "", "inputs": inputs, "item": "", "item_index": 0, "visit": 1,
        "run_id": "run", "feedback": "", "signals": {},
        "failed_items": {p.id: [] for p in pipeline.phases if p.for_each is not None},
    }  # fmt: skip
    for phase in pipeline.phases:
        for worker in phase.workers:
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            texts = [("task", worker.task)] + [("command", arg) for arg in worker.command or []]
            texts += [("system", worker.system)] if worker.system else []
            texts += [(f"inputs.{k}", v) for k, v in worker.inputs.items() if isinstance(v, str)]
            for key, text in texts:
                if "{{" not in text and "{%" not in text:
                    continue
                size = worker.max_task_size or MAX_TASK_SIZE
                if _far_below(text, values, size):
                    continue
                from interlock.core.template_guard import RenderLimits  # a template: jinja2

                limits = RenderLimits(size=size)
                try:
                    render_task(text, values, limits)
                except TemplateProblem as exc:
                    if str(exc).startswith(_LIMIT):
                        problems.append(f"{place}: key {key!r}: {exc}")
    return problems


def _far_below(text: str, values: dict[str, Any], size: int) -> bool:
    """True when `text` is a template of bare names (`templates.placeholders`) whose
    rendering with `values` is at most half of `size` long and takes a few steps: no limit
    can be passed, and jinja2 need not render it. A name without a value, or one whose value
    is a list or mapping (weighed as it is written out), is left to jinja2."""
    tags = placeholders(text)
    if tags is None or len(tags) > 100:
        return False
    total = len(text)
    for name, added in tags:
        if name not in values:
            return False
        value = values[name]
        if added is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                return False
            value += added
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            return False
        total += len(str(value))
    return total <= size // 2
