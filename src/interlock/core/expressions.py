"""Transition conditions, written in CEL and evaluated without `eval`.

CEL (the Common Expression Language) is side-effect free and terminates, which is what a
control plane needs: a condition can read values but never act. The values it reads come
from model output, so they are converted to CEL data and never parsed as code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
from celpy import celparser
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

ROOT_NAMES = frozenset({"topic", "inputs", "visits", "roles"})


class ExpressionError(ValueError):
    """An expression does not compile, or cannot be evaluated on the given values."""


@dataclass(frozen=True)
class Compiled:
    """A compiled condition and the top-level names it reads."""

    source: str
    names: frozenset[str]
    program: Any


_ENV = celpy.Environment()


@lru_cache(maxsize=1024)
def compile_expression(source: str) -> Compiled:
    """Parse `source` once; raise ExpressionError with CEL's own pointer on a syntax error."""
    try:
        tree = _ENV.compile(source)
    except celparser.CELParseError as exc:
        raise ExpressionError(f"expression {source!r} does not parse: {exc}") from None
    names = frozenset(str(node.children[0]) for node in tree.find_data("ident"))
    return Compiled(source=source, names=names, program=_ENV.program(tree))


def evaluate(source: str, context: Mapping[str, Any]) -> bool:
    """Evaluate a condition to a boolean.

    Args:
        source: the CEL text from the workflow file.
        context: plain JSON-like values (dicts, lists, str, int, float, bool, None).

    Raises:
        ExpressionError: a missing value, a type mismatch or a non-boolean result.
    """
    compiled = compile_expression(source)
    activation = {k: json_to_cel(v) for k, v in context.items() if k in compiled.names}
    missing = compiled.names - activation.keys()
    if missing:
        raise ExpressionError(
            f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value yet"
        )
    try:
        result = compiled.program.evaluate(activation)
    except Exception as exc:  # CEL raises its own error types; all mean "cannot evaluate"
        raise ExpressionError(f"expression {source!r} cannot be evaluated: {exc}") from None
    if isinstance(result, (celpy.celtypes.BoolType, bool)):
        return bool(result)
    if isinstance(result, CELEvalError):
        raise ExpressionError(f"expression {source!r} failed: {result.args[0]}")
    raise ExpressionError(f"expression {source!r} gave {result!r}, not true or false")
