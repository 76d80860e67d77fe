"""Bounds on evaluating a condition: its steps and the size of the values it builds.

CEL terminates, but not soon: a macro inside a macro over lists of a hundred thousand
extracted items asks for ten billion steps (celpy takes about a millisecond for each item of
a nested macro), and `+` in a macro can build text or lists past any memory. Conditions are
evaluated by the decision engine, which replays them: the bound is a count of steps, the
same on every machine and every replay, never a clock. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

MAX_STEPS = 100_000  # nodes of the expression evaluated, macro bodies once per item
MAX_SIZE = 1_000_000  # characters of a text, or items of a list or map, it builds


class ExpressionLimit(RuntimeError):
    """Evaluation passed a limit. Not a ValueError or TypeError: CEL turns those into values
    (`a || b` goes on past an error of `a`), and a passed limit must stop the evaluation."""


class Budget:
    """What one evaluation has left, shared by the evaluators of its macros."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ExpressionLimit(
                f"it takes more than {MAX_STEPS:,} steps (a macro over a long list inside "
                "another?); a condition must not compute that much"
            )

    @staticmethod
    def built(value: Any) -> None:
        if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > MAX_SIZE:
            raise ExpressionLimit(
                f"it builds a value of {len(value):,} characters (or items), past the limit "
                f"of {MAX_SIZE:,}"
            )


def runner_class() -> Any:
    """A celpy runner whose evaluators count every step against one `Budget`."""
    import celpy
    from celpy.evaluation import Evaluator

    class BoundedEvaluator(Evaluator):
        budget: Budget

        def _visit_tree(self, tree: Any) -> Any:
            self.budget.step()
            result = super()._visit_tree(tree)
            self.budget.built(result)
            return result

        def sub_evaluator(self, ast: Any) -> Evaluator:
            nested = BoundedEvaluator(ast, activation=self.activation)
            nested.budget = self.budget
            return nested

    class BoundedRunner(celpy.InterpretedRunner):
        def evaluate(self, context: Any) -> Any:
            evaluator = BoundedEvaluator(ast=self.ast, activation=self.new_activation())
            evaluator.budget = Budget()
            return evaluator.evaluate(context)

    return BoundedRunner


def weight(value: Any) -> int:
    """About how many items `value` holds, nested lists and maps counted in full (stops
    counting past MAX_SIZE): `xs.map(x, xs)` is small in memory and huge as JSON."""
    total = 0
    pending = [value]
    while pending and total <= MAX_SIZE:
        item = pending.pop()
        total += 1
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return total
