"""Transition conditions, written in CEL and evaluated without `eval`.

CEL (the Common Expression Language) is side-effect free and terminates, which is what a
control plane needs: a condition can read values but never act. The values it reads come
from model output, so they are converted to CEL data and never parsed as code.

CEL's grammar is parsed by lark alone, loaded by the first expression compiled, so that a
pipeline without conditions never loads it. CEL's evaluator (celpy, which loads pendulum and
dateutil for its time types: most of a tenth of a second) is loaded by the first expression
evaluated, or by a parse error (celpy words its message): `check` reads conditions' trees and
names, and evaluates none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from interlock.core import reads
from interlock.core.expression_limits import MAX_SIZE, ExpressionLimit, weight

if TYPE_CHECKING:
    from lark import Tree

ROOT_NAMES = frozenset(
    {"topic", "inputs", "visits", "roles", "feedback", "budget", "signals", "failed_items"}
)


class ExpressionError(ValueError):
    """An expression does not compile, or cannot be evaluated on the given values."""


@dataclass(frozen=True)
class Compiled:
    """A parsed condition and the top-level names it reads; its program (celpy's runner) is
    made when it is first evaluated."""

    source: str
    names: frozenset[str]
    tree: Any = None  # the parse tree, for saying in words what the condition reads

    @cached_property
    def program(self) -> Any:
        """celpy's runner of the tree (loads celpy)."""
        return _environment().program(self.tree)


def _where(source: str, error: Exception) -> str:
    """Where CEL stopped, on one line: its message draws a caret under the expression on a
    line of its own, which is misplaced once the expression is quoted inside a sentence."""
    lines = str(error).splitlines()
    carets = [line.index("^") for line in lines if line.strip() == "^"]
    if not carets or carets[0] > len(source):
        return f": {' '.join(str(error).split())}"
    at = carets[0]
    rest = source[at:]
    shown = repr(rest if len(rest) <= 20 else rest[:20] + "...") if rest else "its end"
    return f" at character {at + 1}, at {shown}"


def _syntax_hint(source: str) -> str:
    """The likely fix of a condition that does not parse, when its text shows one: words
    and signs of other languages, a brace of a template, brackets that do not pair."""
    words = re.sub(r"'[^']*'|\"[^\"]*\"", "''", source)  # quoted text says nothing
    hints = []
    if "{{" in words or "{%" in words:
        hints.append("a condition is not a template: write `reviewer.score < 8`, not `{{ ... }}`")
    if re.search(r"\b(and|or|not)\b", words):
        hints.append("CEL writes `&&`, `||` and `!` for `and`, `or` and `not`")
    if re.search(r"(?<![=!<>])=(?!=)", words):
        hints.append("compare with `==`; a single `=` is not an operator")
    opened = words.count("(") - words.count(")")
    if opened:
        hints.append(f"{abs(opened)} {'`(` not closed' if opened > 0 else '`)` never opened'}")
    return f" ({'; '.join(hints)})" if hints else ""


# Where CEL's parse tables are kept between processes: set by the command line to a function
# that makes the folder and names the file (None, or a None from it: built in each process).
# The engine does no I/O of its own: lark reads and writes that one file.
PARSER_CACHE: Callable[[], str | None] | None = None


@lru_cache(maxsize=1)
def _environment() -> Any:
    # Every evaluation counts its steps and the values it builds (`expression_limits`).
    import celpy
    from celpy.celparser import CELParser

    from interlock.core.expression_limits import runner_class

    if CELParser.CEL_PARSER is None:
        CELParser.CEL_PARSER = _parser()  # the one `compile_expression` parses with
    return celpy.Environment(runner_class=runner_class())


@lru_cache(maxsize=1)
def _parser() -> Any:
    """CEL's parser, as celpy makes it (`CELParser.__init__`) but without loading celpy: lark
    and celpy's grammar file. Building its LALR tables takes a sixth of a second: only
    pipelines with conditions pay for it, once per process, or once per machine with
    PARSER_CACHE (lark checks a digest of the grammar, its options and lark's version, and
    builds anew from a file it cannot read)."""
    import importlib.util
    from pathlib import Path

    import lark

    spec = importlib.util.find_spec("celpy")  # finds the package without running it
    if spec is None or spec.origin is None:
        raise ImportError("CEL's implementation (the cel-python package) is not installed")
    grammar = Path(spec.origin).parent / "cel.lark"
    path = PARSER_CACHE() if PARSER_CACHE is not None else None
    return lark.Lark(
        grammar.read_text(),
        parser="lalr",
        start="expr",
        debug=True,
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": _ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=lark.Tree,
        **({"cache": path} if path is not None else {}),
    )


def _ambiguous_literals(token: Any) -> Any:
    """`true` and `false` lexed as identifiers are literals (celpy's
    `CELParser.ambiguous_literals`)."""
    from lark import Token

    if token.value in ("true", "false"):
        return Token("BOOL_LIT", token.value)
    return token


# Sized for the largest pipelines: a check of 4,000 conditions parses each once, not per path.
@lru_cache(maxsize=4096)
def compile_expression(source: str) -> Compiled:
    """Parse `source` once; raise ExpressionError with CEL's own pointer on a syntax error."""
    from lark.exceptions import LexError, ParseError, UnexpectedInput

    try:
        tree = _parser().parse(source)
    except (UnexpectedInput, LexError, ParseError):
        # What celpy's parser catches; its error says where, in the words users see.
        from celpy import celparser

        try:
            tree = _environment().compile(source)
        except celparser.CELParseError as exc:
            where = _where(source, exc)
            hint = _syntax_hint(source)
            raise ExpressionError(f"expression {source!r} does not parse{where}{hint}") from None
        except RecursionError:
            raise ExpressionError(_too_deep(source)) from None
    if _depth(tree) > MAX_DEPTH:
        raise ExpressionError(_too_deep(source))
    return Compiled(source=source, names=_free_names(tree), tree=tree)


# Levels of the parsed expression: the walks over it (its names, its evaluation, what it
# read) recurse per level, so a deeper one would pass Python's recursion limit. About 23
# brackets within brackets, 120 terms added up or a chain of 115 fields (`a.b.c...`): no
# condition comes near, and evaluating the deepest accepted one leaves room on the stack.
MAX_DEPTH = 250


def _depth(tree: Tree[Any]) -> int:
    """The levels of a parse tree, counted without recursion."""
    from lark import Tree

    deepest, pending = 0, [(tree, 1)]
    while pending:
        node, level = pending.pop()
        deepest = max(deepest, level)
        if isinstance(node, Tree):
            pending.extend((child, level + 1) for child in node.children)
    return deepest


def _too_deep(source: str) -> str:
    shown = source if len(source) <= 80 else f"{source[:60]}...{source[-15:]}"
    return (
        f"expression {shown!r} nests too deeply (at most {MAX_DEPTH} levels once parsed: "
        "about 23 brackets within brackets); write it with fewer levels, or compute the "
        "value in the worker's output and compare that"
    )


def read_values(source: str, context: Mapping[str, Any]) -> list[str]:
    """The values a condition reads, one line each: `reviewer.score = 5`, or what is missing
    and what exists (for `explain`)."""
    compiled = compile_expression(source)
    return reads.read_values(compiled.tree, compiled.names, context)


# Macros bind their first argument as a variable for the rest: in `xs.all(x, x > 0)`, `x` is
# not a value the expression reads from the run.
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _free_names(tree: Tree[Any]) -> frozenset[str]:
    """The top-level names an expression reads, leaving out variables bound by macros."""
    from lark import Tree

    names: set[str] = set()

    def walk(node: Any, bound: frozenset[str]) -> None:
        if not isinstance(node, Tree):
            return
        if node.data == "ident":
            name = str(node.children[0])
            if name not in bound:
                names.add(name)
            return
        if node.data == "member_dot_arg" and len(node.children) == 3:
            target, method, args = node.children
            variable = _bare_ident(args.children[0]) if args.children else None
            if str(method) in _MACROS and variable is not None:
                walk(target, bound)
                for arg in args.children[1:]:
                    walk(arg, bound | {variable})
                return
        for child in node.children:
            walk(child, bound)

    walk(tree, frozenset())
    return frozenset(names)


def _bare_ident(node: Any) -> str | None:
    """The name when an expression is just one identifier, else None."""
    from lark import Tree

    while isinstance(node, Tree):
        if node.data == "ident":
            return str(node.children[0])
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


def evaluate_text(source: str, context: Mapping[str, Any]) -> str:
    """Evaluate an expression to text: a string as it is, any other value as JSON (for keys
    such as a concurrency key). Raises ExpressionError as `evaluate` does."""
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    compiled = compile_expression(source)
    activation = {k: json_to_cel(v) for k, v in context.items() if k in compiled.names}
    missing = compiled.names - activation.keys()
    if missing:
        raise ExpressionError(
            f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value"
        )
    try:
        result = compiled.program.evaluate(activation)
    except ExpressionLimit as exc:
        raise ExpressionError(f"expression {source!r} passes a limit: {exc}") from None
    except Exception as exc:  # CEL raises its own error types; all mean "cannot evaluate"
        result = CELEvalError(exc.args[0] if exc.args else "")
    if isinstance(result, CELEvalError):
        problem = reads.why_not(compiled.tree, compiled.names, context, "")
        raise ExpressionError(f"expression {source!r} cannot be evaluated: {problem}")
    if isinstance(result, str):
        return str(result)
    if weight(result) > MAX_SIZE:
        raise ExpressionError(
            f"expression {source!r} passes a limit: its value holds more than {MAX_SIZE:,} "
            "items once written out"
        )
    return json.dumps(_plain(result), sort_keys=True)


def shown(value: Any) -> str:
    """A CEL value as a person reads it in a message: JSON text, shortened (`"abc"`, `5`),
    never the evaluator's own types (`StringType('abc')`)."""
    return reads.show_value(_plain(value))


def _plain(value: Any) -> Any:
    """A CEL value as plain JSON data."""
    from celpy import celtypes

    if isinstance(value, (celtypes.BoolType, bool)):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType, int)):
        return int(value)
    if isinstance(value, (celtypes.DoubleType, float)):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return None if value is None else str(value)


def evaluate(source: str, context: Mapping[str, Any]) -> bool:
    """Evaluate a condition to a boolean.

    Args:
        source: the CEL text from the workflow file.
        context: plain JSON-like values (dicts, lists, str, int, float, bool, None).

    Raises:
        ExpressionError: a missing value, a type mismatch or a non-boolean result.
    """
    from celpy import celtypes
    from celpy.adapter import json_to_cel
    from celpy.evaluation import CELEvalError

    compiled = compile_expression(source)
    activation = {k: json_to_cel(context[k]) for k in compiled.names if k in context}
    missing = compiled.names - activation.keys()
    if missing:
        raise ExpressionError(
            f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value yet"
        )
    try:
        result = compiled.program.evaluate(activation)
    except ExpressionLimit as exc:
        raise ExpressionError(f"expression {source!r} passes a limit: {exc}") from None
    except Exception as exc:  # CEL raises its own error types; all mean "cannot evaluate"
        result, failed, detail = None, True, exc.args[0] if exc.args else ""
    else:
        failed = isinstance(result, CELEvalError)
        detail = result.args[0] if failed and result.args else ""
    if failed:
        # CEL's own error is a tuple of internals: say in words what is missing or misfits.
        problem = reads.why_not(compiled.tree, compiled.names, context, detail)
        raise ExpressionError(f"expression {source!r} cannot be evaluated: {problem}")
    if isinstance(result, (celtypes.BoolType, bool)):
        return bool(result)
    raise ExpressionError(f"expression {source!r} gave {shown(result)}, not true or false")
