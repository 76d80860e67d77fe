"""A worker's `schema:`: the JSON Schema its answer must match (pure: no I/O).

The schema is checked when the workflow is read, and each top-level property becomes a value
that conditions can read (`reviewer.score`) without an `extract:` block: the answer is
validated against the schema before it is committed, so those values are always there.

`jsonschema` (with its dependencies, about 35 ms to import) is imported by the first
schema checked, so that a pipeline without schemas never loads it.
"""

from __future__ import annotations

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
