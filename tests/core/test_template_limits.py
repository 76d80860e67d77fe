"""Rendering a task template is bounded: what it builds, how many steps it takes, how long."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from interlock.core.loader import load_workflow
from interlock.core.template_guard import RenderLimits
from interlock.core.templates import TemplateProblem, render_task
from interlock.errors import WorkflowError

NESTED_LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"
SILENT_LOOPS = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"


def refused(source: str, values: dict[str, object] | None = None, **limits: int) -> str:
    with pytest.raises(TemplateProblem) as raised:
        render_task(source, values or {}, RenderLimits(**limits))  # type: ignore[arg-type]
    said = str(raised.value)
    assert said.startswith("task template passes a limit: "), said
    return said


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x' * 10**10 }}",
        "{{ 'x'.ljust(10**10) }}",
        "{{ 'x' | center(10**10) }}",
        "{{ '%10000000000d' % 1 }}",
        "{{ '{:>10000000000}'.format(1) }}",
        "{{ '{:>{}}'.format(1, 10**10) }}",
        "{{ ('a' * 1000) | replace('a', 'b' * 10000) }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
        "{% endfor %}{{ ns.s }}",
        "{% set xs = [1] %}{% for i in range(40) %}{{ xs.extend(xs) or '' }}{% endfor %}",
        "{{ (['x' * 100000] * 1000) | tojson }}",
        "{{ ['x' * 100000] * 1000 }}",
    ],
)
def test_a_value_past_the_size_limit_is_refused_before_it_is_built(source: str) -> None:
    """Each way to ask for gigabytes is refused naming the size limit, not run out of memory."""
    said = refused(source)
    assert "past the limit of 1,000,000 (max_task_size" in said, said


def test_output_is_counted_as_it_is_written() -> None:
    """A loop writing a character at a time stops at the size limit."""
    said = refused("{% for a in range(100000) %}{{ 'x' * 100 }}{% endfor %}", size=50_000)
    assert "the rendered text would have" in said and "(the worker's max_task_size)" in said


@pytest.mark.parametrize("source", [NESTED_LOOPS, SILENT_LOOPS])
def test_loops_are_counted_even_when_they_write_nothing(source: str) -> None:
    """Ten billion iterations stop at the step limit, with or without output."""
    assert "more than 20,000 steps" in refused(source, steps=20_000)


def test_a_macro_that_calls_itself_stops_at_a_depth() -> None:
    """Recursion ends with a named limit, not Python's RecursionError."""
    said = refused("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}")
    assert "more than 100 deep" in said


def test_huge_integers_are_refused() -> None:
    """`10 ** 10 ** 6`-sized arithmetic is a limit, not minutes of CPU."""
    assert "integer of more than" in refused("{{ 2 ** (10 ** 7) }}")


def test_a_clock_bounds_the_time() -> None:
    """With a clock (as the runtime gives), rendering stops at its deadline."""
    ticks = itertools.count()
    limits = RenderLimits(seconds=5.0, clock=lambda: float(next(ticks)))
    with pytest.raises(TemplateProblem, match=r"takes longer than 5 s"):
        render_task(SILENT_LOOPS, {}, limits)


def test_ordinary_templates_render_as_before() -> None:
    """Loops, filters, formatting and concatenation of ordinary sizes are untouched."""
    source = (
        "{{ topic | upper }} {{ '%03d' % n }} {{ '{:>4}'.format(n) }} {{ items | join(',') }}"
        "{% for x in items %}[{{ loop.index }}{{ x ~ '!' }}]{% endfor %}{{ 'ab' * 2 }}"
        "{{ [1, 2] + [3] }}"
    )
    values = {"topic": "t", "n": 7, "items": ["a", "b"]}
    assert render_task(source, values) == "T 007    7 a,b[1a!][2b!]abab[1, 2, 3]"


def test_check_refuses_a_template_that_passes_a_limit_at_its_line(tmp_path: Path) -> None:
    """`check` renders templates with stand-in values and names the line and the limit."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n"
        "  phases:\n"
        "    - id: a\n"
        "      workers:\n"
        "        - role: w\n"
        "          final: true\n"
        "          command: [echo, hi]\n"
        f"          task: '{NESTED_LOOPS} {{{{ topic }}}}'\n"
        "        - role: v\n"
        "          command: [echo, hi]\n"
        "          task: \"{{ 'x' * 10**10 }}\"\n"
    )
    with pytest.raises(WorkflowError) as raised:
        load_workflow(flow)
    said = str(raised.value)
    assert "line 8: pipeline 'p', phase 'a', worker 'w': key 'task': task template " in said
    assert "more than 2,000,000 steps" in said
    assert "line 11: pipeline 'p', phase 'a', worker 'v': key 'task'" in said


def test_check_leaves_templates_that_need_the_run_values_alone(tmp_path: Path) -> None:
    """A template that fails only on stand-ins (a number input without default) passes."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "p:\n"
        "  inputs:\n"
        "    n: {type: integer, required: true}\n"
        "  phases:\n"
        "    - id: a\n"
        "      workers:\n"
        "        - role: w\n"
        "          final: true\n"
        "          command: [echo, hi]\n"
        "          task: \"{{ 'x' * (inputs.n + 1) }}\"\n"
    )
    assert load_workflow(flow).definitions


def test_a_worker_raises_its_own_size_limit(tmp_path: Path) -> None:
    """`max_task_size` lets one worker's task be larger; others keep the default."""
    flow = tmp_path / "flow.yaml"
    worker = (
        "p:\n  phases:\n    - id: a\n      workers:\n        - role: w\n          final: true\n"
        "          command: [echo, hi]\n          task: \"{{ 'x' * 1500000 }}\"\n"
    )
    flow.write_text(worker)
    with pytest.raises(WorkflowError, match=r"past the limit of 1,000,000"):
        load_workflow(flow)
    flow.write_text(worker + "          max_task_size: 2000000\n")
    definition = load_workflow(flow).get("p")
    assert definition.pipeline.worker("w").max_task_size == 2_000_000


def test_a_range_past_jinjas_cap_loops_within_the_step_budget() -> None:
    """`range(200000)` is counted against the 2,000,000 steps, not refused at 100,000 items."""
    source = "{% for i in range(200000) %}{% endfor %}{{ range(200000) | length }}"
    assert render_task(source, {}) == "200000"
    assert render_task("{{ range(10**10) | last }} {{ 7 in range(10**10) }}", {}) == (
        "9999999999 true"
    )


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(10**10) %}{% endfor %}x",
        "{{ range(10**10) | list }}",
        "{{ range(10**8) | list }}",
        "{{ range(10**10) | reverse | list }}",
        "{{ range(10**10) | sum }}",
        "{{ 'a' in range(10**10) }}",
        "{{ range(10**30) | length }}",
    ],
)
def test_a_huge_range_stops_at_the_step_limit(source: str) -> None:
    """Each way to go through ten billion items stops at interlock's step limit, by name."""
    said = refused(source)
    assert "more than 2,000,000 steps" in said, said
    assert "MAX_RANGE" not in said


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("{{ ''.__class__ }}", "it reads '__class__' of a str value, which a task template"),
        ("{{ '{0.__class__}'.format(1) }}", "it reads '__class__' of a int value"),
    ],
)
def test_a_blocked_attribute_is_refused_in_interlocks_words(source: str, words: str) -> None:
    """The sandbox's own "access to attribute ... is unsafe" never reaches the user."""
    with pytest.raises(TemplateProblem) as raised:
        render_task(source, {})
    said = str(raised.value)
    assert said.startswith("task template cannot be rendered: ") and words in said, said
    assert "is unsafe" not in said


def test_check_refuses_a_huge_range_at_its_line(tmp_path: Path) -> None:
    """`check` finds `range(10**10)` at its line; `range(200000)` passes it."""
    flow = tmp_path / "flow.yaml"
    head = "p:\n  phases:\n    - id: a\n      workers:\n        - role: w\n          final: true\n"
    head += "          command: [echo, hi]\n"
    flow.write_text(head + '          task: "{% for i in range(10**10) %}{% endfor %}x"\n')
    with pytest.raises(WorkflowError) as raised:
        load_workflow(flow)
    said = str(raised.value)
    assert "line 8: pipeline 'p', phase 'a', worker 'w': key 'task': task template passes" in said
    assert "more than 2,000,000 steps" in said
    flow.write_text(head + '          task: "{% for i in range(200000) %}{% endfor %}x"\n')
    assert load_workflow(flow).definitions


def test_templates_of_bare_names_read_as_jinja2_reads_them() -> None:
    """A template of text and `{{ name }}` / `{{ name + N }}` tags, which `check` reads
    without jinja2, gives the names jinja2 finds; anything else (a filter, a brace in the
    text, a keyword, a literal, whitespace control) is left to jinja2."""
    from jinja2 import Environment, meta

    from interlock.core.templates import placeholders, template_names

    simple = [
        "Translate {{ topic }} into {{ language }}.",
        "Section '{{ item }}' (number {{ item_index + 1 }}) about {{topic}}",
        "{{ a }}{{b}}{{  c  +  12 }} % # ] )",
        "plain text",
    ]
    for source in simple:
        assert placeholders(source) is not None, source
        found = meta.find_undeclared_variables(Environment().parse(source))
        assert template_names(source) == found, source
    others = [
        "{{ topic | upper }}",
        "{{ topic }} {json}",
        "{{{ topic }}}",
        "{{ true }}",
        "{{ not }}",
        "{{- topic -}}",
        "{{ inputs.language }}",
        "{% if topic %}x{% endif %}",
        "{# note #}{{ topic }}",
        "{{ n + 01 }}",
    ]
    for source in others:
        assert placeholders(source) is None, source
    assert template_names("{{ inputs.language }} {{ topic }}") == {"inputs", "topic"}


def test_check_refuses_a_bare_name_template_past_a_small_size_limit(tmp_path: Path) -> None:
    """A template of bare names whose stand-in values make it longer than the worker's
    `max_task_size` is refused by `check` as any other template is; half the limit or less
    is not rendered at all and passes."""
    flow = tmp_path / "flow.yaml"
    worker = (
        "p:\n  inputs:\n    language: {default: '" + "x" * 60 + "'}\n"
        "  phases:\n    - id: a\n      workers:\n        - role: w\n          final: true\n"
        "          command: [echo, hi]\n          task: 'Into {{ language }}.'\n"
    )
    from interlock.core.template_checks import _far_below

    values = {"language": "x" * 60}
    assert not _far_below("Into {{ language }}.", values, 50)  # rendered by jinja2: refused
    assert _far_below("Into {{ language }}.", values, 200)  # not rendered: passes
    assert not _far_below("Into {{ language }}.", values, 140)  # more than half: rendered
    flow.write_text(worker + "          max_task_size: 50\n")
    with pytest.raises(WorkflowError) as raised:
        load_workflow(flow)
    assert "key 'task': task template passes a limit" in str(raised.value)
    assert "(the worker's max_task_size)" in str(raised.value)
    flow.write_text(worker + "          max_task_size: 200\n")
    assert load_workflow(flow).definitions


@pytest.mark.parametrize(
    "source", ["{" * 3000, "{{ (" * 2000 + "x", "{{ a + " * 2000, "{{ [" * 1500]
)
def test_a_template_nested_past_what_jinja2_reads_is_a_problem_not_a_crash(
    tmp_path: Path, source: str
) -> None:
    """jinja2's parser recurses per level of brackets: a task of a few thousand `{` or `(`
    is refused with the fix, at `check` (its line named) and when a task renders, instead of
    taking the process down with a RecursionError."""
    from interlock.core.templates import input_names, template_names

    for read in (template_names, input_names, lambda s: render_task(s, {"a": 1})):
        with pytest.raises(TemplateProblem, match="nest too deeply") as raised:
            read(source + " inputs")
        assert "{% raw %}" in str(raised.value)
    flow = tmp_path / "flow.json"
    worker = {"role": "w", "final": True, "command": ["echo", "hi"], "task": source}
    flow.write_text(json.dumps({"p": {"phases": [{"id": "a", "workers": [worker]}]}}))
    with pytest.raises(WorkflowError, match="key 'task': template does not parse: its brackets"):
        load_workflow(flow)
