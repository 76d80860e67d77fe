"""A worker's `schema:`: the JSON Schema its answer must match (pure: no I/O).

The schema is checked when the workflow is read, and each top-level property becomes a value
that conditions can read (`reviewer.score`) without an `extract:` block: the answer is
validated against the schema before it is committed, so those values are always there.

`jsonschema` (with its dependencies, about 35 ms to import) is imported by the first
schema checked, so that a pipeline without schemas never loads it.

A schema is all there is: a `$ref` may only point inside the schema itself (`#/$defs/...`,
`#name`). A reference to a URL or another file would be fetched when an answer is validated,
outside the definition the run pinned and its fingerprint, so it is refused when the workflow
is read, and every validator is built with a registry that refuses to retrieve anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# JSON Schema types -> the extracted value's type.
_VALUE_TYPES = {"number": "number", "integer": "number", "boolean": "bool", "array": "list"}


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` is not a valid JSON Schema (under the draft it names, 2020-12 if none)."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = exc.json_path if exc.json_path != "$" else "the top level"
        return f"'schema' is not valid JSON Schema: at {where}: {exc.message}"
    return None


# Keywords whose values are data, not schemas: a `$ref` key inside them is just a key.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def ref_problem(schema: Any) -> str | None:
    """Why `schema` refers outside itself (a `$ref` that is not `#...`), or None."""
    for path, keyword, target in _refs(schema, "$"):
        if not target.startswith("#"):
            return (
                f"'schema' refers outside itself: at {path}: {keyword} {target!r}; a schema "
                "must be whole, since a URL or a file would be read at run time, unpinned: "
                "copy the definition under '$defs' and refer to it as '#/$defs/NAME'"
            )
    return None


def _refs(node: Any, path: str) -> Iterator[tuple[str, str, str]]:
    """(place, keyword, target) of each reference in a schema, in document order."""
    stack: list[tuple[Any, str]] = [(node, path)]
    while stack:
        value, place = stack.pop()
        if isinstance(value, dict):
            for keyword in _REF_KEYWORDS:
                target = value.get(keyword)
                if isinstance(target, str):
                    yield place, keyword, target
            children = [
                (child, f"{place}.{key}")
                for key, child in value.items()
                if key not in _DATA_KEYWORDS and isinstance(child, dict | list)
            ]
            stack.extend(reversed(children))
        elif isinstance(value, list):
            items = [(child, f"{place}[{i}]") for i, child in enumerate(value)]
            stack.extend(reversed([(c, p) for c, p in items if isinstance(c, dict | list)]))


def local_validator(schema: dict[str, Any], default: type[Any] | None = None) -> Any:
    """A validator of `schema` whose patterns RE2 matches and that never retrieves anything
    (under the draft the schema names, else `default`, else 2020-12). A reference it cannot
    find in the schema raises `referencing.exceptions.Unresolvable` instead of reading a URL
    or a file."""
    from jsonschema.validators import validator_for

    from interlock.core.schema_patterns import linear_class

    cls = validator_for(schema, default=default) if default else validator_for(schema)
    # Its patterns are matched with RE2 (linear in the text), its references never fetched.
    return linear_class(cls)(schema, registry=_local_registry())


def _local_registry() -> Any:
    from referencing import Registry

    return Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _refuse_retrieval(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs fields the stubs miss


def implied_extract(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An `extract` rule for each top-level property of an object schema.

    A property listed in `required` is a required value; any other may be missing (None).
    Objects and other shapes are kept as their JSON text.
    """
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    required = set(schema.get("required") or [])
    rules: dict[str, dict[str, Any]] = {}
    for name, spec in properties.items():
        if not isinstance(name, str) or not name.isidentifier():
            continue  # conditions could not name it
        kind = spec.get("type") if isinstance(spec, dict) else None
        rules[name] = {
            "json": name,
            "type": _VALUE_TYPES.get(kind, "string") if isinstance(kind, str) else "string",
            "required": name in required,
        }
    return rules
