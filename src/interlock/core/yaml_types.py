"""Values YAML 1.1 reads as something other than what was written: `country: NO` is the
boolean false, `flag: off` false, `version: 1.10` the number 1.1. `check` warns about each,
naming its line; a mapping key read as a boolean is refused when the file is parsed
(`parse`). Pure: text in, messages out.
"""

from __future__ import annotations

from typing import Any

import yaml

from interlock.core.parse import base_loader

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_SAID_AS_BOOLEANS = frozenset({"true", "false"})  # the spellings YAML 1.2 keeps as booleans


def implicit_typing(text: str) -> list[str]:
    """A warning for each plain (unquoted) value read as a boolean from a word other than
    true/false, or as a number that does not write back as it was written (`1.10`, `012`,
    `1_000`, `1:30`), in document order; none for text that does not parse."""
    try:
        root = yaml.compose(text, Loader=base_loader())
    except (yaml.YAMLError, RecursionError):
        return []
    if root is None:
        return []
    constructor = yaml.constructor.SafeConstructor()
    found: list[tuple[int, int, str]] = []
    stack: list[yaml.Node] = [root]
    seen: set[int] = set()  # aliases share nodes: each is said once
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(value for _, value in node.value)
        elif isinstance(node, yaml.ScalarNode) and not node.style:  # plain: "" or None
            said = _changed(node, constructor)
            if said is not None:
                mark = node.start_mark
                found.append((mark.line + 1, mark.column, said))
    return [f"line {line}: {said}" for line, _, said in sorted(found)]


def _changed(node: yaml.ScalarNode, constructor: yaml.constructor.SafeConstructor) -> str | None:
    """What YAML made of a plain scalar, when it is not what a reader of the text sees."""
    written = node.value
    if node.tag == _BOOL:
        if written.lower() in _SAID_AS_BOOLEANS:
            return None
        value = "true" if constructor.construct_yaml_bool(node) else "false"
        return (
            f"{written} is read by YAML as the boolean {value}: quote it ('{written}') if you "
            f"mean the text, or write {value}"
        )
    if node.tag not in (_INT, _FLOAT):
        return None
    number: Any = (
        constructor.construct_yaml_int(node)
        if node.tag == _INT
        else constructor.construct_yaml_float(node)
    )
    if str(number) == written.lstrip("+") or repr(number) == written:
        return None
    return (
        f"{written} is read by YAML as the number {number!r}: quote it ('{written}') to keep "
        "it as written"
    )
