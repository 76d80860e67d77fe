"""Task templates: `{{ topic }}`, `{{ item }}` and inputs, rendered in jinja2's sandbox.

Only the task text and the `system:` prompt from the workflow file are template source.
Worker outputs and other model text are passed as values, so template syntax inside them is
inert data.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from interlock.core.task_size import MAX_TASK_SIZE

if TYPE_CHECKING:
    from jinja2 import TemplateError
    from jinja2.sandbox import SandboxedEnvironment

    from interlock.core.template_guard import RenderLimits

TEMPLATE_NAMES = frozenset(
    {"topic", "inputs", "item", "item_index", "visit", "run_id", "feedback", "signals"}
    | {"failed_items"}  # phase -> the failed items of a tolerated fan-out, as conditions read
)


def _as_text(value: Any) -> Any:
    # A value is shown as a workflow file and a command line write it: true/false, and an
    # optional input left unset as nothing, not Python's True, False and None.
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    from interlock.core.template_guard import checked_text

    return checked_text(value)


@lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    """jinja2's sandbox, with what a template builds and how long it runs bounded
    (`interlock.core.template_guard`); made at the first template, so that plain tasks never
    load jinja2."""
    from jinja2 import StrictUndefined

    from interlock.core.template_guard import make_environment

    return make_environment(
        undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_as_text
    )


class ItemObject(dict[str, Any]):
    """A fan-out item that an extracted list keeps as JSON text (`interlock.core.extract`),
    given to templates as its object: `{{ item.customer }}` reads a field, and `{{ item }}`
    still renders the JSON text it was."""

    def __init__(self, text: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.text = text

    def __str__(self) -> str:
        return self.text


def template_item(item: Any) -> Any:
    """The fan-out item as templates see it: an object's JSON text becomes an `ItemObject`."""
    if isinstance(item, str) and item.startswith("{"):
        try:
            fields = json.loads(item)
        except ValueError:
            return item
        return ItemObject(item, fields) if isinstance(fields, dict) else item
    return item


class TemplateProblem(ValueError):
    """A task template does not parse or reads an unknown name."""


def template_names(source: str) -> set[str]:
    """The top-level names a template reads (raises TemplateProblem on a syntax error)."""
    if not any(mark in source for mark in _SYNTAX):
        return set()  # plain text: thousands of workers check without parsing a template
    tags = placeholders(source)
    if tags is not None:
        return {name for name, _ in tags}
    return set(_names(source))


_SYNTAX = ("{{", "{%", "{#")  # what starts jinja2 syntax; a lone "{" is text

# `{{ name }}` or `{{ name + 1 }}`, with spaces or without: what most tasks' templates hold.
_PLACEHOLDER = re.compile(r"\{\{ *([A-Za-z_][A-Za-z0-9_]*)(?: *\+ *(0|[1-9][0-9]{0,8}))? *\}\}")
_CONSTANTS = frozenset({"true", "false", "none"})  # jinja2's literals besides Python's


def placeholders(source: str) -> list[tuple[str, int | None]] | None:
    """The tags of a template that is text and `{{ name }}` or `{{ name + N }}` tags alone,
    as (name, N or None), which jinja2 parses to the same names and never fails to parse;
    None for any other template (a brace left in its text, a keyword, a filter), which
    jinja2 reads. Checking the common template this way does not load jinja2."""
    tags = []
    for match in _PLACEHOLDER.finditer(source):
        name, added = match.groups()
        if keyword.iskeyword(name) or name in _CONSTANTS:
            return None
        tags.append((name, None if added is None else int(added)))
    rest = _PLACEHOLDER.sub("", source)
    if "{" in rest or "}" in rest:
        return None
    return tags


def input_names(source: str) -> set[str]:
    """The inputs a template reads by name as `inputs.NAME` or `inputs["NAME"]` (raises
    TemplateProblem on a syntax error), so that a misspelt one is found before a run."""
    if "inputs" not in source or not any(mark in source for mark in _SYNTAX):
        return set()
    if placeholders(source) is not None:
        return set()  # bare names: no `inputs.NAME` among them
    return set(_input_names(source))


@lru_cache(maxsize=4096)
def _input_names(source: str) -> frozenset[str]:
    from jinja2 import nodes

    tree = _parsed(source)
    found = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Getattr) and _is_inputs(node.node):
            found.add(node.attr)
        elif isinstance(node, nodes.Getitem) and _is_inputs(node.node):
            key = node.arg
            if isinstance(key, nodes.Const) and isinstance(key.value, str):
                found.add(key.value)
    return frozenset(found)


def _said(exc: TemplateError) -> str:
    """The engine's message alone: a syntax error's text also quotes a source location
    (`File "<introspection>", line 1`) on lines of its own."""
    return " ".join((exc.message or str(exc) or type(exc).__name__).split())


def _is_inputs(node: Any) -> bool:
    from jinja2 import nodes

    return isinstance(node, nodes.Name) and node.name == "inputs"


@lru_cache(maxsize=4096)
def _names(source: str) -> frozenset[str]:
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(_parsed(source)))


_TOO_DEEP = (
    "template does not parse: its brackets, braces or parentheses nest too deeply "
    "(jinja2 reads about a hundred levels); write the text without so many, or escape it "
    "as {% raw %}...{% endraw %}"
)


def _parsed(source: str) -> Any:
    """jinja2's tree of a template (raises TemplateProblem when it does not parse, or nests
    deeper than jinja2's parser, which recurses per level, can read)."""
    from jinja2 import TemplateError

    try:
        return _environment().parse(source)
    except TemplateError as exc:
        raise TemplateProblem(f"template does not parse: {_said(exc)}") from None
    except RecursionError:
        raise TemplateProblem(_TOO_DEEP) from None


def render_system(
    source: str, values: Mapping[str, Any], limits: RenderLimits | None = None
) -> str:
    """A worker's `system:` prompt, rendered as its task is: the same names, the same limits
    (`{{ topic }}` there reaches the model as the topic, not as written)."""
    try:
        return render_task(source, values, limits)
    except TemplateProblem as exc:
        said = str(exc).replace("task template", "system prompt template", 1)
        raise TemplateProblem(said) from None


@lru_cache(maxsize=512)
def _compiled(source: str) -> Any:
    return _environment().from_string(source)


def render_task(source: str, values: Mapping[str, Any], limits: RenderLimits | None = None) -> str:
    """Render a task; input names are available both bare and under `inputs`.

    Rendering stays within `limits` (the defaults of `interlock.core.template_guard` when
    None): what would pass one raises TemplateProblem naming it, as does an operation the
    values do not allow.
    """
    if "{" not in source:
        return source  # most tasks are plain text: skip the template machinery
    from jinja2 import TemplateError

    from interlock.core.template_guard import RenderLimits, TemplateLimit, render_bounded

    limits = limits or RenderLimits()
    hint = (
        " (max_task_size; set it on the worker to raise it)"
        if limits.size == MAX_TASK_SIZE
        else " (the worker's max_task_size)"
    )
    try:
        compiled = _compiled(source)
    except TemplateError as exc:
        raise TemplateProblem(f"task template does not parse: {_said(exc)}") from None
    except RecursionError:
        raise TemplateProblem(_TOO_DEEP.replace("template", "task template", 1)) from None
    try:
        return render_bounded(compiled, dict(values), limits, hint)
    except TemplateLimit as exc:
        raise TemplateProblem(f"task template passes a limit: {exc}") from None
    except TemplateError as exc:
        raise TemplateProblem(f"task template cannot be rendered: {_said(exc)}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        # An operation the values do not allow (`{{ inputs.n + "x" }}` with an integer n).
        raise TemplateProblem(
            f"task template cannot be rendered: {type(exc).__name__}: {exc}"
        ) from None
    except RecursionError:
        raise TemplateProblem(
            "task template passes a limit: its macros call themselves too deeply"
        ) from None
    except MemoryError:
        raise TemplateProblem(
            "task template passes a limit: rendering it ran out of memory"
        ) from None
