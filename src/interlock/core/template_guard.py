"""Bounds on rendering a task template: the size of what it builds, its steps and its time.

A template is a small program: `{{ 'x' * 10**10 }}` asks for ten gigabytes, two nested
loops over `range(100000)` for ten billion steps, and jinja2's sandbox stops neither. Here
every operator that can multiply a value's size (`*`, `**`, `+`, `%`, `~`), every call,
filter and loop step (and each item `range()` gives: it is lazy, not capped at jinja2's
100,000 items) is counted against a `Budget`, and what would pass a limit is refused
before it is built, with a `TemplateLimit` that names the limit. Steps are counted, so the
same template fails the same way everywhere (at `check` too); the runtime also passes its
clock for a wall-clock bound. Pure: the clock is passed in.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.runtime import Macro
from jinja2.sandbox import SandboxedEnvironment

from interlock.core.task_size import MAX_TASK_SIZE

MAX_STEPS = 2_000_000  # loop iterations, calls, filters and operators of one rendering
MAX_SECONDS = 5.0  # wall-clock time of one rendering, where the runtime gives its clock
MAX_INT_BITS = 100_000  # an integer a template computes (about 30,000 digits)
MAX_DEPTH = 100  # macro calls within macro calls
MACRO_STEPS = 20  # what a macro call counts as: it costs about as much as twenty steps


class TemplateLimit(ValueError):
    """Rendering would pass one of its limits; the message names it."""


@dataclass(frozen=True, kw_only=True)
class RenderLimits:
    """The bounds of one rendering."""

    size: int = MAX_TASK_SIZE
    steps: int = MAX_STEPS
    seconds: float = MAX_SECONDS
    clock: Callable[[], float] | None = None  # None: steps only (pure callers, `check`)


@dataclass(kw_only=True)
class Budget:
    """What one rendering has left."""

    limits: RenderLimits
    steps: int = 0
    depth: int = 0  # macro calls in progress
    deadline: float | None = None
    size_hint: str = field(default="")  # how the size limit is raised, for the message

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.limits.steps:
            raise TemplateLimit(
                f"it takes more than {self.limits.steps:,} steps (loop iterations, calls and "
                "operations); a task template must not loop that much"
            )
        clock = self.limits.clock
        if clock is not None and self.deadline is not None and clock() > self.deadline:
            raise TemplateLimit(
                f"rendering takes longer than {self.limits.seconds:g} s; a task template "
                "must not compute that much"
            )

    def size(self, size: int, what: str = "a value it builds") -> None:
        if size > self.limits.size:
            raise TemplateLimit(
                f"{what} would have {size:,} characters (or items), past the limit of "
                f"{self.limits.size:,}{self.size_hint}"
            )


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("budget", default=None)


def _budget() -> Budget:
    # Outside a rendering (jinja2 folds constants while it compiles) the default limits hold.
    return _BUDGET.get() or Budget(limits=RenderLimits())


def render_bounded(template: Any, values: dict[str, Any], limits: RenderLimits, hint: str) -> str:
    """Render `template` (compiled by `ENVIRONMENT`) within `limits`; raises TemplateLimit."""
    budget = Budget(limits=limits, size_hint=hint)
    if limits.clock is not None:
        budget.deadline = limits.clock() + limits.seconds
    token = _BUDGET.set(budget)
    try:
        parts: list[str] = []
        total = 0
        # Output is counted as it is produced, so a loop that writes a character a step
        # stops at the limit instead of at the end of memory.
        for chunk in template.generate(**values):
            total += len(chunk)
            budget.size(total, "the rendered text")
            budget.step()
            parts.append(chunk)
        return "".join(parts)
    finally:
        _BUDGET.reset(token)


_SEQUENCES = (str, bytes, list, tuple)
_CONTAINERS = (list, tuple, dict, set, frozenset)


def weight(value: Any, limit: int) -> int:
    """About how many characters `value` takes as text (stops counting past `limit`): a list
    holding one long string many times is small in memory and huge once written out."""
    total = 0
    pending = [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, (str, bytes)):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 * len(item) + 2
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            total += len(item) + 2
            pending.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 8
    return total


def _huge_int() -> TemplateLimit:
    return TemplateLimit(f"it computes an integer of more than {MAX_INT_BITS:,} bits")


# A printf conversion's width and precision: `%10000000000s` asks for that many characters.
_PRINTF = re.compile(r"%[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_NUMBER = re.compile(r"\d+")


def _check_printf(spec: str, budget: Budget) -> None:
    for width, precision in _PRINTF.findall(spec):
        for number in (width, precision):
            if number == "*":
                raise TemplateLimit("a '*' width or precision in % formatting is not allowed")
            if number:
                budget.size(int(number), "a formatted field")


_NESTED_FIELD = re.compile(r"\{[^{}]*\{")  # `{:>{}}`: a width taken from the arguments


def _check_widths(text: str, arguments: list[Any], budget: Budget) -> None:
    """str.format: a width written in the text, or taken from an argument."""
    for number in _FORMAT_NUMBER.findall(text):
        budget.size(int(number[:13]), "a formatted field")
    if not _NESTED_FIELD.search(text):
        return
    for argument in arguments:
        values = argument.values() if isinstance(argument, dict) else [argument]
        for value in values:
            if isinstance(value, int) and not isinstance(value, bool):
                budget.size(abs(value), "a formatted field")


class GuardedEnvironment(SandboxedEnvironment):
    """jinja2's sandbox with every way to build a large value, and every step, counted."""

    intercepted_binops = frozenset({"+", "*", "**", "%", "//"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.step()
        if operator == "*":
            for sequence, times in ((left, right), (right, left)):
                if isinstance(sequence, _SEQUENCES) and isinstance(times, int):
                    budget.size(len(sequence) * max(times, 0))
            both = isinstance(left, int) and isinstance(right, int)
            if both and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise _huge_int()
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1 and right * left.bit_length() > MAX_INT_BITS:
                raise _huge_int()
        elif operator == "+":
            if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
                budget.size(len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            _check_printf(left, budget)
        result = super().call_binop(context, operator, left, right)
        self._check_built(result, budget)
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map`, however reached: widths checked first."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text = value.__self__
        sandboxed = wrapped

        def checked(*args: Any, **kwargs: Any) -> str:
            budget = _budget()
            budget.step()
            _check_widths(text, [*args, *kwargs.values()], budget)
            return sandboxed(*args, **kwargs)

        return checked

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """A blocked attribute, refused in interlock's words when the template uses it."""
        return self.undefined(
            f"it reads {attribute!r} of a {type(obj).__name__} value, which a task template "
            "may not read (names starting with '_' and the internals of Python objects are "
            "blocked)",
            name=attribute,
            obj=obj,
            exc=SecurityError,
        )

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if not __self.is_safe_callable(__obj):
            name = getattr(__obj, "__name__", type(__obj).__name__)
            raise SecurityError(f"it calls {name!r}, which a task template may not call")
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            _check_str_method(owner, name, args, kwargs, budget)
        if isinstance(__obj, Macro):
            # A macro that calls itself: stopped long before Python's recursion limit, whose
            # error jinja2 would spend seconds rewriting frame by frame.
            budget.step(MACRO_STEPS)
            budget.depth += 1
            if budget.depth > MAX_DEPTH:
                raise TemplateLimit(f"its macros call each other more than {MAX_DEPTH} deep")
            try:
                result = super().call(__context, __obj, *args, **kwargs)
            finally:
                budget.depth -= 1
        else:
            result = super().call(__context, __obj, *args, **kwargs)
        __self._check_built(result, budget)
        if isinstance(owner, _CONTAINERS):
            budget.size(len(owner))  # `xs.extend(xs)` in a loop doubles a list each time
        return result

    def guard_iter(self, iterable: Any) -> Iterator[Any]:
        """A loop's iterable, each iteration counted."""
        if isinstance(iterable, CountedRange):
            return iter(iterable)  # it counts its own items
        return self._counted(iterable)

    @staticmethod
    def _counted(iterable: Any) -> Iterator[Any]:
        budget = _budget()
        for each in iterable:
            budget.step()
            yield each

    def guarded_concat(self, parts: tuple[Any, ...]) -> str:
        """`~`: the joined length is checked before the text is built."""
        budget = _budget()
        budget.step()
        texts = []
        total = 0
        for part in parts:
            if isinstance(part, _CONTAINERS):
                budget.size(weight(part, budget.limits.size))
            text = str(part)
            total += len(text)
            budget.size(total)
            texts.append(text)
        return "".join(texts)

    @staticmethod
    def _check_built(result: Any, budget: Budget) -> None:
        if isinstance(result, (*_SEQUENCES, dict, set, frozenset)):
            budget.size(len(result))
        elif isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            raise _huge_int()


def _check_str_method(
    text: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], budget: Budget
) -> None:
    """A string method that can build a text larger than its inputs, checked before it runs."""
    given = [*args, *kwargs.values()]
    if name in ("ljust", "rjust", "center", "zfill") and given:
        if isinstance(given[0], int):
            budget.size(given[0])
    elif name == "expandtabs":
        size = given[0] if given and isinstance(given[0], int) else 8
        budget.size(len(text) + text.count("\t") * max(size, 0))
    elif name == "replace" and len(given) >= 2:
        old, new = given[0], given[1]
        if isinstance(old, str) and isinstance(new, str):
            count = text.count(old) if old else len(text) + 1
            budget.size(len(text) + count * len(new))
    elif name == "join" and given:
        budget.size(weight(given[0], budget.limits.size) + len(text) * _count(given[0]))


def _count(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 0


class _GuardedCode(CodeGenerator):
    """Compiles loops to count their iterations and `~` to check its length."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        guard = nodes.EnvironmentAttribute("guard_iter", lineno=node.lineno)
        node.iter = nodes.Call(guard, [node.iter], [], None, None, lineno=node.lineno)
        super().visit_For(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.guarded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


GuardedEnvironment.code_generator_class = _GuardedCode


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter counted as a step, its input weighed where it is written out as text."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        values = [a for a in args if not _is_jinja_state(a)]
        if values:
            _check_filter(name, values[0], values[1:], kwargs, budget)
        result = function(*args, **kwargs)
        GuardedEnvironment._check_built(result, budget)
        return result

    return guarded


def _is_jinja_state(value: Any) -> bool:
    from jinja2.nodes import EvalContext
    from jinja2.runtime import Context

    return isinstance(value, (Context, EvalContext, SandboxedEnvironment))


def _check_filter(
    name: str, value: Any, args: list[Any], kwargs: dict[str, Any], budget: Budget
) -> None:
    given = [*args, *kwargs.values()]
    if not isinstance(value, str) and not isinstance(value, (int, float)):
        # Most filters write their input out as text first (`upper`, `tojson`, `join`...).
        budget.size(weight(value, budget.limits.size), "a filter's input written out")
    text = value if isinstance(value, str) else ""
    numbers = [g for g in given if isinstance(g, int) and not isinstance(g, bool)]
    if name == "center" and numbers:
        budget.size(numbers[0])
    elif name == "indent":
        width = given[0] if given and isinstance(given[0], (int, str)) else 4
        pad = width if isinstance(width, int) else len(width)
        budget.size(len(text) + (text.count("\n") + 1) * max(pad, 0))
    elif name == "wordwrap":
        width = numbers[0] if numbers else 79
        wrap = next((g for g in given if isinstance(g, str)), "\n")
        budget.size(len(text) + (len(text) // max(width, 1) + 1) * len(wrap))
    elif name == "replace":
        _check_str_method(text, "replace", tuple(given), {}, budget)
    elif name == "format":
        _check_printf(text, budget)


class CountedRange:
    """`range(...)` in a template: lazy like Python's, each item it gives counted as a step, so
    `range(200000)` loops within the step budget and `range(10**10)` stops at its limit
    (jinja2's sandbox refuses any range past 100,000 items instead)."""

    __slots__ = ("_range",)

    def __init__(self, *args: int) -> None:
        self._range = range(*args)

    @property
    def start(self) -> int:
        return self._range.start

    @property
    def stop(self) -> int:
        return self._range.stop

    @property
    def step(self) -> int:
        return self._range.step

    def __iter__(self) -> Iterator[int]:
        return GuardedEnvironment._counted(self._range)

    def __reversed__(self) -> Iterator[int]:
        return GuardedEnvironment._counted(reversed(self._range))

    def __len__(self) -> int:
        # `list()` makes room for this many items before it counts one: a range longer than
        # the step budget could never be gone through anyway.
        budget = _budget()
        start, stop, step = self._range.start, self._range.stop, self._range.step
        if (stop - start) // step > budget.limits.steps:
            budget.step(budget.limits.steps + 1)
        return len(self._range)

    def __getitem__(self, index: Any) -> Any:
        found = self._range[index]
        if isinstance(found, range):
            return CountedRange(found.start, found.stop, found.step)
        return found

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, int):
            return value in self._range  # arithmetic, no steps
        return any(each == value for each in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CountedRange):
            return self._range == other._range
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._range)

    def __repr__(self) -> str:
        return repr(self._range)


def _guard_filters(environment: GuardedEnvironment) -> None:
    for name, function in list(environment.filters.items()):
        environment.filters[name] = _guarded_filter(name, function)
    # Writes paragraphs of filler text (as many as asked): nothing a task needs.
    environment.globals.pop("lipsum", None)
    environment.globals["range"] = CountedRange


def make_environment(**options: Any) -> GuardedEnvironment:
    """The environment task templates compile in."""
    environment = GuardedEnvironment(**options)
    _guard_filters(environment)
    return environment


def checked_text(value: Any) -> Any:
    """`{{ value }}` of a list or mapping: weighed before it is written out as text."""
    if isinstance(value, _CONTAINERS):
        budget = _budget()
        budget.size(weight(value, budget.limits.size), "a value written out")
    return value
