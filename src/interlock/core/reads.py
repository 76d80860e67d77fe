"""What a condition reads, in words: `reviewer.score = 5`, or what is missing and what exists.

`explain` shows the values behind each branch, and a condition that cannot be evaluated says
which value was missing or of the wrong kind instead of CEL's internal error tuple. Pure: the
values come in as the same context the engine evaluates conditions on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # lark is imported with CEL, by the first expression compiled
    from lark import Tree

Path = tuple[str, ...]
_MISSING = object()


def paths(tree: Tree[Any], roots: frozenset[str]) -> list[Path]:
    """The value paths an expression reads (`reviewer.score`, `roles["a-b"].x`), in order,
    each once; only paths that start at one of `roots` (names bound by macros are not)."""
    from lark import Tree

    found: list[Path] = []

    def walk(node: Any) -> None:
        if not isinstance(node, Tree):
            return
        if node.data == "member":
            path = _path(node)
            if path is not None:
                if path[0] in roots and path not in found:
                    found.append(path)
                return
        for child in node.children:
            walk(child)

    walk(tree)
    return found


def _path(node: Any) -> Path | None:
    """The path a `member` node names, when it is only names and constant string keys."""
    from lark import Tree

    if not isinstance(node, Tree):
        return None
    if node.data in ("member", "primary", "expr", "conditionalor", "conditionaland", "relation"):
        if len(node.children) != 1:
            return None
        return _path(node.children[0])
    if node.data in ("addition", "multiplication", "unary"):
        return _path(node.children[0]) if len(node.children) == 1 else None
    if node.data == "ident":
        return (str(node.children[0]),)
    if node.data == "member_dot":
        base = _path(node.children[0])
        return None if base is None else (*base, str(node.children[1]))
    if node.data == "member_index":
        base, key = _path(node.children[0]), _string_literal(node.children[1])
        return None if base is None or key is None else (*base, key)
    return None


def _string_literal(node: Any) -> str | None:
    from lark import Token, Tree

    while isinstance(node, Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, Token) and node.type == "STRING_LIT":
        try:
            value = json.loads(str(node))
        except ValueError:
            return str(node)[1:-1]
        return value if isinstance(value, str) else None
    return None


def show_path(path: Path) -> str:
    """`reviewer.score`, or `roles["researcher-a"].x` for names that are not identifiers."""
    text = path[0]
    for part in path[1:]:
        text += f".{part}" if part.isidentifier() else f"[{json.dumps(part)}]"
    return text


def lookup(context: Mapping[str, Any], path: Path) -> tuple[Any, str | None]:
    """(value, None), or (missing, what is missing and what exists there, in words)."""
    value: Any = context
    for depth, part in enumerate(path):
        where = show_path(path[:depth]) if depth else ""
        if not isinstance(value, Mapping):
            return _MISSING, f"{where} is {show_value(value)}, which has no {part!r}"
        if part not in value:
            if not where:
                return _MISSING, f"{part} has no value yet (no worker has extracted it)"
            keys = ", ".join(sorted(str(k) for k in value)) or "nothing"
            return _MISSING, f"{where} has no {part!r} (it has: {keys})"
        value = value[part]
    return value, None


def show_value(value: Any) -> str:
    """A value as a person reads it: JSON, shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_values(tree: Tree[Any], roots: frozenset[str], context: Mapping[str, Any]) -> list[str]:
    """One line per value the expression reads: `reviewer.score = 5`, or what is missing."""
    lines = []
    for path in paths(tree, roots):
        value, problem = lookup(context, path)
        lines.append(problem if problem is not None else f"{show_path(path)} = {show_value(value)}")
    return lines


def why_not(
    tree: Tree[Any], roots: frozenset[str], context: Mapping[str, Any], detail: object = ""
) -> str:
    """Why an expression cannot be evaluated on `context`, in words (`detail`: CEL's own
    message, used only when it is plain words)."""
    problems, shown = [], []
    for path in paths(tree, roots):
        value, problem = lookup(context, path)
        if problem is not None:
            problems.append(problem)
        elif value is None and path[0] == "inputs":
            problems.append(
                f"{show_path(path)} is not set: it is optional and the run was given no value "
                "(give one with --input, or a default in the file)"
            )
        elif value is None:
            problems.append(f"{show_path(path)} is null: nothing was extracted for it")
        else:
            shown.append(f"{show_path(path)} = {show_value(value)} ({kind(value)})")
    if problems:
        return "; ".join(problems)
    words = detail if isinstance(detail, str) and not any(c in detail for c in "<>()'") else ""
    if shown:
        text = "the values do not fit the operation: " + ", ".join(shown)
        return f"{text}; {words}" if words else text
    return words or "the operation does not apply to these values"


def kind(value: Any) -> str:
    """The kind of a value in CEL's words."""
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a map"
    return "null" if value is None else type(value).__name__
