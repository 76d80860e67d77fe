"""JSON Schema `pattern` and `patternProperties`, matched with RE2 (pure: no I/O).

`jsonschema` matches them with Python's `re`, a backtracking engine: a schema's pattern such
as `^(a+)+$` over a model's answer or a webhook's signal data (text nobody controls) would
take minutes and hold the process. Validators made here match them with RE2
(`interlock.core.patterns`), in time linear in the text; a schema whose pattern RE2 cannot
compile is refused when the workflow is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from interlock.core.patterns import PatternError, compile_pattern

# Keywords whose value maps names (not keywords) to schemas, and keywords holding data.
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
_DATA = frozenset({"enum", "const", "default", "examples"})


def pattern_problem(schema: Any) -> str | None:
    """Why a schema's patterns cannot be matched in linear time, or None."""
    found: set[str] = set()
    for keyword, pattern in _patterns(schema):
        found.add(keyword)
        try:
            compile_pattern(pattern, multiline=False)
        except PatternError as exc:
            return f"'schema': {keyword} {exc}"
    if "patternProperties" in found and _has_keyword(schema, "unevaluatedProperties"):
        return (
            "'schema': patternProperties together with unevaluatedProperties is not "
            "supported; list the properties, or use additionalProperties"
        )
    return None


def _patterns(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, list):
        for each in node:
            yield from _patterns(each)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in _DATA:
            continue
        if key == "pattern" and isinstance(value, str):
            yield "pattern", value
        elif key == "patternProperties" and isinstance(value, dict):
            for name, subschema in value.items():
                yield "patternProperties", str(name)
                yield from _patterns(subschema)
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            for subschema in value.values():
                yield from _patterns(subschema)
        else:
            yield from _patterns(value)


def _has_keyword(node: Any, keyword: str) -> bool:
    if isinstance(node, list):
        return any(_has_keyword(each, keyword) for each in node)
    if isinstance(node, dict):
        return keyword in node or any(_has_keyword(v, keyword) for v in node.values())
    return False


def linear_validator(schema: dict[str, Any]) -> Any:
    """A jsonschema validator of `schema` (under the draft it names) whose patterns RE2
    matches and whose references are never retrieved."""
    from interlock.core.schemas import local_validator

    return local_validator(schema)


@lru_cache(maxsize=16)
def linear_class(base: Any) -> Any:
    """`base`, a jsonschema validator class, with its patterns matched by RE2."""
    from jsonschema.validators import extend

    return extend(  # type: ignore[no-untyped-call]  # jsonschema leaves it untyped
        base,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties(base),
        },
    )


def _found(pattern: str, text: str) -> bool:
    return compile_pattern(pattern, multiline=False).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _found(pattern, instance):
        shown = instance if len(instance) <= 80 else instance[:80] + "..."
        yield ValidationError(f"{shown!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _found(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(base: Any) -> Any:
    """jsonschema's own `additionalProperties`, given only the properties that neither
    `properties` nor (by RE2) `patternProperties` cover."""
    inherited = base.VALIDATORS["additionalProperties"]

    def check(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object") or "patternProperties" not in schema:
            yield from inherited(validator, allowed, instance, schema)
            return
        patterns = list(schema["patternProperties"])
        covered = {k for k in instance if any(_found(p, k) for p in patterns)}
        rest = {k: v for k, v in instance.items() if k not in covered}
        without = {k: v for k, v in schema.items() if k != "patternProperties"}
        yield from inherited(validator, allowed, rest, without)

    return check
