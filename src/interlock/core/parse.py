"""Workflow text to plain data: YAML, or strict JSON for `.json` files, with limits.

Both formats refuse what a person almost never means: a key given twice in one mapping (the
last would silently win), nesting deeper than any workflow needs, and text larger than any
workflow is, or YAML whose aliases stand for more than such text could write out. Each
refusal names the line and says what to do. Pure: text in, data out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from json.decoder import scanstring  # type: ignore[attr-defined]  # not in the stubs
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

MAX_BYTES = 10 * 1024 * 1024  # a 10,000-worker pipeline is about 1 MB
MAX_DEPTH = 64  # a workflow nests about 8 levels; hostile text nests thousands


@cache
def base_loader() -> type[yaml.SafeLoader]:
    """libyaml's parser when the wheel has it (five times faster on large files); the mappings
    are still built in Python, which is where duplicate keys are caught. PyYAML is loaded at
    the first YAML document, so that a JSON workflow is read without it."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ParseProblem(ValueError):
    """The text is not a usable workflow document; the message names the line."""


def parse_text(text: str, *, json_only: bool = False) -> Any:
    """The data of a workflow document (raises ParseProblem)."""
    if len(text) > MAX_BYTES:
        raise ParseProblem(too_large(len(text)))
    return _parse_json(text) if json_only else _parse_yaml(text)


def too_large(size: int) -> str:
    """The message for a document over the size limit."""
    return (
        f"the file is larger than {MAX_BYTES // (1024 * 1024)} MB ({size:,} bytes or more); "
        "a workflow file is text of a few kilobytes to a megabyte: is this the right file?"
    )


def _too_deep(line: int | None) -> ParseProblem:
    where = f" at line {line}" if line is not None else ""
    return ParseProblem(
        f"nesting deeper than {MAX_DEPTH} levels{where}; a workflow nests a handful of "
        "levels: check the brackets and indentation"
    )


def _boolean_key(key: str, line: int) -> ParseProblem:
    """A key such as `on:` or `no:`, which YAML 1.1 reads as a boolean, not as a name."""
    return ParseProblem(
        f"line {line}: key {key!r} is read by YAML as a boolean (true or false), not as the "
        f"name {key!r}: quote it ('{key}':) to use it as a name"
    )


@cache
def _loader() -> type[yaml.SafeLoader]:
    """The loader of workflow documents, made at the first YAML document."""
    import yaml

    class Loader(base_loader()):  # type: ignore[misc]
        """A safe loader that refuses a key given twice in one mapping."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` keys are meant to be overridden
                if isinstance(key_node, yaml.ScalarNode):
                    key = key_node.value  # text as written: no need to build it twice
                    if key_node.tag == "tag:yaml.org,2002:bool":
                        raise _boolean_key(key, key_node.start_mark.line + 1)
                else:
                    key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so in its own words
                    break
                if first is not None:
                    raise ParseProblem(
                        f"line {line}: key {key!r} is given twice in one mapping (first at line "
                        f"{first}); the second would silently replace the first: remove one"
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    return Loader


def _parse_yaml(text: str) -> Any:
    import yaml

    from interlock.core.aliases import AliasProblem, check_expanded

    loader = _loader()(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # the pure-Python parser recurses per level
            raise _too_deep(None) from None
        if node is None:
            return None
        depth, line = _node_depth(node)
        if depth > MAX_DEPTH:
            raise _too_deep(line)
        try:
            check_expanded(node, text, base_loader())
        except AliasProblem as exc:
            raise ParseProblem(str(exc)) from None
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "maximum nesting depth" in problem:  # libyaml's own limit (PyYAML 6.0.4), past ours
            raise _too_deep(mark.line + 1 if mark else None) from None
        raise ParseProblem(f"not valid YAML{where}: {problem}") from None
    finally:
        loader.dispose()


def locator(text: str) -> Callable[[Sequence[Any]], int | None]:
    """A function giving the line where a place of the document is written, for messages.

    A place is the path a validator names (`("t", "phases", 0, "workers", 0, "timout")`); its
    line is that of the deepest key or item found along it, so a missing key is placed at its
    mapping. JSON is YAML here too. The text is composed again, once, only when asked (only a
    rejected document is), and None is given when it does not compose.
    """
    root: list[yaml.Node | None] = []

    def line_of(path: Sequence[Any]) -> int | None:
        import yaml

        if not root:
            try:
                root.append(yaml.compose(text, Loader=base_loader()))
            except (yaml.YAMLError, RecursionError):
                root.append(None)
        node, line = root[0], None
        for part in path:
            if isinstance(node, yaml.MappingNode):
                found = next(
                    (
                        (key, value)
                        for key, value in node.value
                        if isinstance(key, yaml.ScalarNode) and key.value == str(part)
                    ),
                    None,
                )
                if found is None:
                    break
                line, node = found[0].start_mark.line + 1, found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    return line_of


def _node_depth(root: yaml.Node) -> tuple[int, int | None]:
    """The deepest nesting of a node tree and the line where it first passes the limit."""
    deepest = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    seen: set[int] = set()  # aliases share nodes: visit each once
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth, node.start_mark.line + 1
        for child in _children(node):
            stack.append((child, depth + 1))
    return deepest, None


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _parse_json(text: str) -> Any:
    depth, line = _json_depth(text)
    if depth > MAX_DEPTH:
        raise _too_deep(line)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ParseProblem(
            f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except _Duplicate:
        key, line, first = _find_duplicate(text)
        raise ParseProblem(
            f"line {line}: key {key!r} is given twice in one object (first at line {first}); "
            "the second would silently replace the first: remove one"
        ) from None


class _Duplicate(Exception):
    """An object has a key twice; a second pass finds where."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _Duplicate
    return result


def _no_constant(name: str) -> Any:
    raise ParseProblem(f"{name} is not a JSON value; write a number or a string")


def _json_depth(text: str) -> tuple[int, int | None]:
    """Bracket nesting outside strings, and the line where it first passes the limit."""
    depth = deepest = 0
    in_string = escaped = False
    line = 1
    for char in text:
        if char == "\n":
            line += 1
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return depth, line
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest, None


def _find_duplicate(text: str) -> tuple[str, int, int]:
    """The first key given twice in one object, in document order: (key, line, first line)."""
    decoder = json.JSONDecoder()

    def line_at(index: int) -> int:
        return text.count("\n", 0, index) + 1

    def skip_ws(index: int) -> int:
        while index < len(text) and text[index] in " \t\r\n":
            index += 1
        return index

    def walk(index: int) -> tuple[int, tuple[str, int, int] | None]:
        index = skip_ws(index)
        char = text[index]
        if char == "{":
            seen: dict[str, int] = {}
            index = skip_ws(index + 1)
            while text[index] != "}":
                key, after = scanstring(text, index + 1)
                if key in seen:
                    return after, (key, line_at(index), seen[key])
                seen[key] = line_at(index)
                index = skip_ws(after)  # at ':'
                index, found = walk(index + 1)
                if found:
                    return index, found
                index = skip_ws(index)
                if text[index] == ",":
                    index = skip_ws(index + 1)
            return index + 1, None
        if char == "[":
            index = skip_ws(index + 1)
            while text[index] != "]":
                index, found = walk(index)
                if found:
                    return index, found
                index = skip_ws(index)
                if text[index] == ",":
                    index += 1
                index = skip_ws(index)
            return index + 1, None
        _, end = decoder.raw_decode(text, index)
        return end, None

    _, found = walk(0)
    assert found is not None, "called only for text json.loads found a duplicate in"
    return found
