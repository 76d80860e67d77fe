"""How large a YAML document is once its aliases are expanded, counted before it is built.

An alias (`*name`) stands for a whole node written elsewhere, so a few hundred bytes of
nested aliases ("billion laughs") stand for billions of values: PyYAML shares them while
building, but every later walk (validation, the definition's canonical JSON, fingerprints)
pays for each one. The size counted is one per node plus the characters of each scalar, the
same measure for a document with aliases and one without, so no file within the size limit
that writes its values out can reach it. Pure: nodes and text in, numbers out.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED = 10_000_000  # as much as the largest file allowed (10 MB) can write out


class AliasProblem(ValueError):
    """The document's aliases stand for too much, or for a node that contains them."""


def check_expanded(root: yaml.Node, text: str, loader: type[Any]) -> None:
    """Raise AliasProblem when the composed `root` stands for more than MAX_EXPANDED.

    The count walks each distinct node once (aliases share nodes), so it costs what the text
    does. Only a refused document is read again, as events, to name the alias that passes.
    """
    if "*" not in text:
        return  # no alias: the text itself is within the size limit
    size = _expanded_size(root)
    if size is None or size > MAX_EXPANDED:
        raise AliasProblem(_where_it_passes(text, loader))


def _expanded_size(root: yaml.Node) -> int | None:
    """One per node plus scalar characters, aliases counted in full; None for a cycle."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(1 + sum(sizes[id(child)] for child in _children(node)), 1 << 62)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            return None  # an alias inside the node it names: an endless document
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = 1 + len(node.value)
            continue
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                return None
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _where_it_passes(text: str, loader: type[Any]) -> str:
    """The message for a refused document, naming the line of the alias that passes."""
    anchors: dict[str, int | None] = {}  # None: the node is still open
    frames: list[tuple[str | None, int]] = []  # (anchor, size so far) of each open collection
    total = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1 if event.start_mark else None
            size = anchors.get(event.anchor or "")
            if size is None:
                return (
                    f"line {line or '?'}: the alias *{event.anchor} is inside the node it names, "
                    "which makes the document endless: write the value out instead"
                )
            total += size
            if total > MAX_EXPANDED:
                return _too_much(line, event.anchor)
            frames[-1] = (frames[-1][0], frames[-1][1] + size)
        elif isinstance(event, yaml.ScalarEvent):
            size = 1 + len(event.value)
            total += size
            if event.anchor is not None:
                anchors[event.anchor] = size
            if frames:
                frames[-1] = (frames[-1][0], frames[-1][1] + size)
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            total += 1
            if event.anchor is not None:
                anchors[event.anchor] = None
            frames.append((event.anchor, 1))
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = frames.pop()
            if anchor is not None:
                anchors[anchor] = size
            if frames:
                frames[-1] = (frames[-1][0], frames[-1][1] + size)
    return _too_much(None, None)  # not reached: the events count what the nodes did


def _too_much(line: int | None, anchor: str | None) -> str:
    where = f"line {line}: the alias *{anchor} makes" if line is not None else "its aliases make"
    return (
        f"{where} the document stand for more than {MAX_EXPANDED:,} values and characters "
        "once its aliases are expanded (a file writes out at most 10 MB); a workflow needs "
        "a few aliases of small parts: write the values out, or nest fewer aliases"
    )
