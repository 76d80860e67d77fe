"""mkdocs hook: the reference pages are generated from the code, never written twice.

A page holds a marker line `<!-- generated: NAME -->`; at build time the marker is replaced by
the tables `NAME` makes from the models, enums and routes themselves (`mkdocs build --strict`
in CI builds them, so a page cannot fall behind the code).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _type(prop: dict[str, Any]) -> str:
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " or ".join(dict.fromkeys(_type(p) for p in prop[key]))
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of {_type(prop['additionalProperties'])}"
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def workflow() -> str:
    """Every model of the workflow file: each key, its type, its default and what it does."""
    from interlock.core.workflow_schema import workflow_schema

    schema = workflow_schema()
    out = []
    for name, model in schema["$defs"].items():
        props = model.get("properties")
        if not props:
            continue
        out += [f"### {name}", "", _cell(model.get("description", "")), ""]
        out += ["| Key | Type | Default | Description |", "|---|---|---|---|"]
        required = set(model.get("required", ()))
        for key, prop in props.items():
            if prop.get("doNotSuggest"):
                continue
            default = "required" if key in required else json.dumps(prop.get("default", None))
            out.append(
                f"| `{key}` | {_type(prop)} | {_cell(default)} | "
                f"{_cell(prop.get('description', ''))} |"
            )
        out.append("")
    return "\n".join(out)


def exit_codes() -> str:
    """`interlock.ExitCode`, with the comment beside each value in `errors.py`."""
    source = (ROOT / "src" / "interlock" / "errors.py").read_text()
    block = source.split("class ExitCode", 1)[1].split("\n\n\n", 1)[0]
    rows = re.findall(r"^    ([A-Z_]+) = (\d+)\s*# (.*)$", block, re.M)
    out = ["| Code | Name | Meaning |", "|---|---|---|"]
    out += [f"| {code} | `{name}` | {_cell(text)} |" for name, code, text in rows]
    return "\n".join(out)


def events() -> str:
    """Every event type of the ledger, its fields and what it records."""
    from interlock.core import events as module

    out = []
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if not issubclass(cls, module.Event) or cls is module.Event:
            continue
        fields = [f for f in dataclasses.fields(cls) if f.name != "at"]
        out += [f"### `{cls.kind}`", "", _cell(inspect.getdoc(cls) or ""), ""]
        out += ["| Field | Type | Default |", "|---|---|---|"]
        for f in fields:
            if f.default is not dataclasses.MISSING:
                default = f"`{f.default!r}`"
            elif f.default_factory is not dataclasses.MISSING:
                default = f"`{f.default_factory()!r}`"
            else:
                default = "required"
            out.append(f"| `{f.name}` | `{_cell(f.type)}` | {default} |")
        out.append("")
    return "\n".join(out)


def _model_table(model: Any, table: str) -> Iterator[str]:
    yield f"### `{table}`"
    yield ""
    yield _cell(inspect.getdoc(model) or "")
    yield ""
    yield "| Key | Type | Default |"
    yield "|---|---|---|"
    for key, info in model.model_fields.items():
        if key == "name":
            continue
        default = (
            "required"
            if info.is_required()
            else f"`{info.get_default(call_default_factory=True)!r}`"
        )
        shown = getattr(info.annotation, "__name__", None) or str(info.annotation)
        yield f"| `{key}` | `{_cell(shown).replace('typing.', '')}` | {_cell(default)} |"
    yield ""


def config() -> str:
    """The tables of `interlock.toml`, from the models that read them."""
    from interlock.providers.settings import ModelEntry, ProviderSettings

    out = [*_model_table(ProviderSettings, "[providers.NAME]")]
    out += [*_model_table(ModelEntry, "[models.ALIAS]")]
    return "\n".join(out)


def http_api() -> str:
    """Every route `interlock serve` answers, from its OpenAPI document."""
    from interlock.server.app import build_app
    from interlock.server.config import ServerConfig

    with tempfile.TemporaryDirectory() as home:
        spec = build_app(ServerConfig(home=Path(home))).openapi()
    out = ["| Method | Path | What it does |", "|---|---|---|"]
    for path, methods in sorted(spec["paths"].items()):
        for method, op in methods.items():
            about = op.get("summary") or op.get("description", "").split("\n", 1)[0]
            out.append(f"| {method.upper()} | `{path}` | {_cell(about)} |")
    return "\n".join(out)


def environment() -> str:
    """Every `INTERLOCK_*` variable the package reads, and the modules that read it."""
    found: dict[str, set[str]] = {}
    package = ROOT / "src" / "interlock"
    for path in sorted(package.rglob("*.py")):
        if "sim" in path.relative_to(package).parts:
            continue
        for name in re.findall(r"[\"'](INTERLOCK_[A-Z0-9_]+)[\"']", path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(package.parent)))
    out = ["| Variable | Read by |", "|---|---|"]
    for name, where in sorted(found.items()):
        out.append(f"| `{name}` | {', '.join(f'`{w}`' for w in sorted(where))} |")
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "workflow": workflow,
    "exit-codes": exit_codes,
    "events": events,
    "config": config,
    "http-api": http_api,
    "environment": environment,
}


def on_page_content(html: str, **_: Any) -> str:
    """An option without a default shows none (the click version's sentinel otherwise)."""
    return html.replace("<code>Sentinel.UNSET</code>", "")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each marker with what its generator makes (an unknown name fails the build)."""
    return MARKER.sub(lambda m: GENERATORS[m[1]](), markdown)
