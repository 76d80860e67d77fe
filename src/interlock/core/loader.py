"""Load a workflow file (YAML, or JSON for `.json` files) into validated pipelines."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import json
import math
import re
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from interlock.core.parse import MAX_BYTES, ParseProblem, locator, parse_text, too_large
from interlock.core.shell_scripts import as_arguments, has_shell_syntax
from interlock.core.subpipelines import children, embed_children
from interlock.core.validate import read_name, validate_pipeline
from interlock.core.workflow import (
    Budget,
    Cache,
    ConcurrencyKey,
    ForEach,
    Phase,
    Pipeline,
    Rule,
    WaitFor,
    Worker,
    WorkflowFile,
)
from interlock.errors import UsageError, WorkflowError


@dataclass(frozen=True, kw_only=True)
class Definition:
    """One pipeline as a run pins it: the model, its canonical JSON and the content hash."""

    name: str
    pipeline: Pipeline
    canonical: str
    hash: str
    source: str = ""

    @classmethod
    def of(cls, name: str, pipeline: Pipeline, source: str = "") -> Definition:
        """Pin a pipeline built in code or loaded from a file."""
        canonical = canonical_json(pipeline)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        return cls(name=name, pipeline=pipeline, canonical=canonical, hash=digest, source=source)

    @classmethod
    def from_canonical(cls, name: str, canonical: str) -> Definition:
        """Rebuild a pinned definition from the JSON stored with a run."""
        pipeline = Pipeline.model_validate(json.loads(canonical))
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        return cls(name=name, pipeline=pipeline, canonical=canonical, hash=digest)


def canonical_json(pipeline: Pipeline) -> str:
    """A stable text for hashing: sorted keys, every default spelled out, no whitespace."""
    data = pipeline.model_dump(mode="json", by_alias=True)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


LANGUAGE = 1
"""The version of the workflow language this interlock reads (docs/releases.md): a file
states the one it was written for with a top-level `$language: 1`."""

_META_KEYS = ("$language", "$schema")  # `$schema`: for editors, not read


def _language(data: dict[Any, Any], source: str) -> tuple[int, bool, dict[Any, Any]]:
    """The language `data` states (or LANGUAGE, assumed), and `data` without its `$` keys.

    Raises:
        WorkflowError: a `$` key that is not one of `_META_KEYS`, or a language this
            interlock does not read.
    """
    meta = {k: v for k, v in data.items() if isinstance(k, str) and k.startswith("$")}
    if not meta:
        return LANGUAGE, False, data
    problems = [
        f"top-level key {key!r}: keys starting with '$' are reserved ({', '.join(_META_KEYS)}); "
        "a pipeline name cannot start with '$'"
        for key in meta
        if key not in _META_KEYS
    ]
    stated = meta.get("$language")
    if "$language" in meta and (isinstance(stated, bool) or stated != LANGUAGE):
        if isinstance(stated, int) and not isinstance(stated, bool) and stated > LANGUAGE:
            problems.append(
                f"$language: {stated}: the file is written for workflow language {stated}, and "
                f"this interlock reads language {LANGUAGE}: upgrade interlock"
            )
        else:
            problems.append(
                f"$language: {stated!r} is not a workflow language: write $language: {LANGUAGE}"
            )
    if problems:
        raise WorkflowError(source, problems)
    rest = {k: v for k, v in data.items() if k not in meta}
    return LANGUAGE, "$language" in meta, rest


@dataclass(frozen=True)
class Workflow:
    """A loaded workflow file, with the SHA-256 of each file it was read from (the file
    itself, the schema files and the sub-pipelines' files it names): while those bytes are
    the same, loading it again gives the same definitions (`unchanged`)."""

    source: str
    definitions: dict[str, Definition]
    files: tuple[tuple[str, str], ...] = ()  # (path, SHA-256 of the bytes read)
    language: int = LANGUAGE  # the workflow language the file is read as
    language_stated: bool = False  # False: the file has no `$language`, LANGUAGE is assumed

    def get(self, name: str) -> Definition:
        """The pipeline `name`, or a UsageError listing the ones that exist."""
        try:
            return self.definitions[name]
        except KeyError:
            known = ", ".join(sorted(self.definitions)) or "none"
            raise UsageError(
                f"{self.source}: no pipeline named {name!r}; pipelines are {known}"
            ) from None


def load_workflow(path: str | Path) -> Workflow:
    """Read, parse and validate a workflow file.

    Raises:
        UsageError: the file cannot be read.
        WorkflowError: the file is not a valid workflow; every problem is listed.
    """
    file = Path(path)
    try:
        if file.is_dir():
            raise UsageError(f"{file}: is a directory; give the workflow file inside it")
        with file.open("rb") as stream:
            # Read one byte past the limit, so /dev/zero or a log file is refused, not read whole.
            raw = stream.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(
            f"{file}: no such workflow file (run 'interlock init' for a starter)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{file}: cannot read the workflow file: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise WorkflowError(str(file), [too_large(len(raw))])
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is no error
    except UnicodeDecodeError as exc:
        raise WorkflowError(
            str(file), [f"not UTF-8 text (byte {exc.start}): save the file as UTF-8"]
        ) from None
    if "\0" in text:
        raise WorkflowError(str(file), ["the file holds NUL bytes: it is not a text file"])
    files = {str(file): _digest(raw)}
    workflow = parse_workflow(
        text,
        str(file),
        json_only=file.suffix.lower() == ".json",
        base_dir=file.parent,
        files_read=files,
    )
    return dataclasses.replace(workflow, files=tuple(sorted(files.items())))


def unchanged(workflow: Workflow) -> bool:
    """Whether every file `workflow` was loaded from still holds the bytes it was read
    from (False for one loaded from text, which names no file). Each file is read again
    and hashed: a few microseconds for a workflow file, where parsing and validating it
    again takes milliseconds; modification times are not trusted (two edits within the
    file system's timestamp granularity look the same)."""
    if not workflow.files:
        return False
    for name, digest in workflow.files:
        try:
            with open(name, "rb") as stream:
                raw = stream.read(MAX_BYTES + 1)
        except OSError:
            return False
        if _digest(raw) != digest:
            return False
    return True


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def parse_workflow(
    text: str,
    source: str = "<workflow>",
    *,
    json_only: bool = False,
    base_dir: Path | None = None,
    files_read: dict[str, str] | None = None,
) -> Workflow:
    """Parse and validate workflow text; `source` names it in error messages.

    With `base_dir`, a worker's `schema: file.json` is read from there into the definition,
    so a run pins the schema it started with. `files_read`, when given, gets the path and
    SHA-256 of each other file read (schemas, sub-pipelines' files).

    YAML unless `json_only`: then the text must be strict JSON (no trailing commas, no
    comments), as a `.json` file promises.
    """
    try:
        data = parse_text(text, json_only=json_only)
    except ParseProblem as exc:
        raise WorkflowError(source, [str(exc)]) from None
    if base_dir is not None:
        problems = inline_schema_files(data, base_dir, files_read)
        if problems:
            raise WorkflowError(source, problems)
    return build_workflow(
        data, source, base_dir=base_dir, files_read=files_read, locate=locator(text)
    )


def inline_schema_files(
    data: Any, base_dir: Path, files_read: dict[str, str] | None = None
) -> list[str]:
    """Replace each worker's `schema: <path>.json` by the document it names (in place),
    noting each file read in `files_read`."""
    problems: list[str] = []
    pipelines = data.items() if isinstance(data, dict) else []
    for name, pipeline in pipelines:
        phases = pipeline.get("phases") if isinstance(pipeline, dict) else None
        for phase in phases if isinstance(phases, list) else []:
            workers = phase.get("workers") if isinstance(phase, dict) else None
            for worker in workers if isinstance(workers, list) else []:
                path = worker.get("schema") if isinstance(worker, dict) else None
                if not isinstance(path, str) or not path.endswith(".json"):
                    continue
                place = f"pipeline {name!r}, worker {worker.get('role')!r}, key 'schema'"
                try:
                    raw = (base_dir / path).read_bytes()
                    if files_read is not None:
                        files_read[str(base_dir / path)] = _digest(raw)
                    if len(raw) > MAX_BYTES:
                        raise ParseProblem(too_large(len(raw)))
                    worker["schema"] = parse_text(raw.decode("utf-8"), json_only=True)
                except OSError as exc:
                    problems.append(f"{place}: cannot read {path}: {exc.strerror or exc}")
                except ValueError as exc:  # ParseProblem (bounded as the workflow is) or UTF-8
                    problems.append(f"{place}: {path} is not JSON: {exc}")
    return problems


def build_workflow(
    data: Any,
    source: str = "<workflow>",
    *,
    base_dir: Path | None = None,
    files_read: dict[str, str] | None = None,
    locate: Callable[[Sequence[Any]], int | None] | None = None,
) -> Workflow:
    """Validate already-parsed data (a dict of pipelines); sub-pipelines in other files are
    read relative to `base_dir` (and noted in `files_read`). With `locate` (see
    `parse.locator`), each problem of a key or value names its line."""
    if not isinstance(data, dict) or not data:
        raise WorkflowError(
            source, ["the top level must map pipeline names to pipelines, e.g. 'research: {...}'"]
        )
    language, stated, data = _language(data, source)
    if not data:
        raise WorkflowError(
            source, ["the top level must map pipeline names to pipelines, e.g. 'research: {...}'"]
        )
    embedding = embed_children(data, source, _FileReader(source, base_dir, files_read))
    if embedding:
        raise WorkflowError(source, embedding)
    try:
        parsed = WorkflowFile.model_validate(data)
    except ValidationError as exc:
        errors = _union_branch(exc.errors(), data)
        described = [_describe(err, data) for err in errors]
        if locate is not None:
            lines = [locate(err["loc"]) for err in errors]
            described = by_line(
                [
                    problem if line is None else f"line {line}: {problem}"
                    for problem, line in zip(described, lines, strict=True)
                ]
            )
        raise WorkflowError(source, described) from None
    problems: list[str] = []
    definitions = {}
    for name, pipeline in parsed.root.items():
        if not isinstance(name, str) or not name.strip():
            problems.append(f"pipeline name {name!r} must be a non-empty string")
            continue
        problems += validate_pipeline(name, pipeline)
        problems += _validate_other_files(name, pipeline)
        definitions[name] = Definition.of(name, pipeline, source)
    if problems:
        if locate is not None:
            problems = by_line([_with_line(problem, data, locate) for problem in problems])
        raise WorkflowError(source, problems)
    return Workflow(
        source=source, definitions=definitions, language=language, language_stated=stated
    )


# The place a cross-reference problem starts with, in the words `validate` writes it:
# `pipeline 't', phase 'review', worker 'reviewer': ...`, `..., next rule 2: ...`.
_NAME = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_PIPELINE_PLACE = re.compile(rf"pipeline (?P<name>{_NAME})")
_PLACE_PART = re.compile(
    rf", (?:phase (?P<phase>{_NAME})|worker (?P<worker>{_NAME})|next rule (?P<rule>\d+)"
    r"|(?P<key>for_each|not_before|concurrency|inputs|metrics)\b)"
)

_PROBLEM_KEY = re.compile(
    r"(?:[,:] key '(?P<key>\w+)'|: (?P<verb>reads|extract|task|goto|output|expression) "
    r"(?:'(?P<name>[^']*)')?)"
)
_VERB_KEY = {"expression": "if"}  # a rule's condition is its `if`


def by_line(problems: list[str]) -> list[str]:
    """Problems in the order of the lines they name; those with no line after, as they were."""
    placed = [(int(m[1]) if (m := _LINE.match(p)) else math.inf, i) for i, p in enumerate(problems)]
    return [problems[i] for _, i in sorted(placed)]


_LINE = re.compile(r"line (\d+): ")


def _with_line(problem: str, data: Any, locate: Callable[[Sequence[Any]], int | None]) -> str:
    """`problem` prefixed with the line of the place it names (`line 12: ...`), when found."""
    line = locate(_place_path(problem, data))
    return problem if line is None else f"line {line}: {problem}"


def _quoted(text: str) -> str | None:
    """The name a problem quotes with `!r` (None if it does not read as one)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _place_path(problem: str, data: Any) -> list[Any]:
    """The path in `data` of the place a problem names (as far as it is found)."""
    found = _PIPELINE_PLACE.match(problem)
    if found is None:
        return []
    name = _quoted(found["name"])
    path: list[Any] = [name]
    node = data.get(name) if isinstance(data, dict) else None
    position = found.end()
    while (part := _PLACE_PART.match(problem, position)) is not None and isinstance(node, dict):
        position = part.end()
        if part["phase"] is not None:
            entries, field, wanted = node.get("phases"), "phases", part["phase"]
        elif part["worker"] is not None:
            entries, field, wanted = node.get("workers"), "workers", part["worker"]
        elif part["rule"] is not None:
            rules = node.get("next")
            index = int(part["rule"]) - 1
            if not isinstance(rules, list) or not 0 <= index < len(rules):
                break
            path += ["next", index]
            node = rules[index]
            continue
        else:
            path.append(part["key"])
            metric = re.match(rf" (?P<name>{_NAME})", problem[position:])
            if part["key"] == "metrics" and metric is not None:  # the metric's own line
                path.append(_quoted(metric["name"]))
            break
        key = "id" if field == "phases" else "role"
        value = _quoted(wanted)
        listed = entries if isinstance(entries, list) else []
        at = next(
            (i for i, e in enumerate(listed) if isinstance(e, dict) and e.get(key) == value),
            None,
        )
        if at is None:
            break
        path += [field, at]
        node = listed[at]
    else:  # the key of the place the problem is about, when it says so
        said = _PROBLEM_KEY.match(problem, position)
        if said is not None and isinstance(node, dict):
            word = said["key"] or _VERB_KEY.get(said["verb"], said["verb"])
            if word in node:
                path.append(word)
                reads = node[word] if word == "reads" else None
                if isinstance(reads, list) and said["name"] is not None:  # that entry's line
                    path += [
                        i
                        for i, entry in enumerate(reads)
                        if isinstance(entry, str) and read_name(entry)[0] == said["name"]
                    ][:1]
    return path


class _FileReader:
    """Reads the workflow files that sub-pipelines name (`other.yaml#name`), each once."""

    def __init__(
        self, source: str, base_dir: Path | None, files_read: dict[str, str] | None
    ) -> None:
        self.dirs = {source: base_dir}
        self.files: dict[str, Any] = {}
        self.files_read = files_read

    def __call__(self, ref: str, source: str) -> tuple[Any, str]:
        base = self.dirs.get(source)
        if base is None:
            raise ValueError("a file reference needs a workflow file on disk to be relative to")
        path = base / ref
        key = str(path)
        if key not in self.files:
            try:
                raw = path.read_bytes()
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
            if len(raw) > MAX_BYTES:
                raise ValueError(too_large(len(raw)))
            if self.files_read is not None:
                self.files_read[key] = _digest(raw)
            try:
                data = parse_text(raw.decode("utf-8-sig"), json_only=path.suffix == ".json")
            except (ParseProblem, UnicodeDecodeError) as exc:
                raise ValueError(f"{path}: {exc}") from None
            problems = inline_schema_files(data, path.parent, self.files_read)
            if problems:
                raise ValueError(f"{path}: {'; '.join(problems)}")
            self.files[key], self.dirs[key] = data, path.parent
        return self.files[key], key


def _validate_other_files(name: str, pipeline: Pipeline) -> list[str]:
    """Check the children that come from other files (those of this file are checked as
    pipelines of their own)."""
    problems = []
    for worker, child in children(pipeline):
        if "#" in (worker.pipeline or ""):
            label = f"{name} > {worker.pipeline}"
            problems += validate_pipeline(label, child)
            problems += _validate_other_files(label, child)
    return problems


# How pydantic names the members of a union such as `int | ConcurrencyKey` in an error's
# location: a scalar type, or a model's class name. These are not keys of the file.
_SCALAR_BRANCH = re.compile(r"^(constrained-)?(int|float|str|bool)$")


def _union_branch(errors: list[Any], data: Any) -> list[Any]:
    """Errors of a value that may be written two ways (`concurrency: 3` or `{key, limit}`):
    only those of the way it is written, without the union member in their location, so a
    mapping is not also told that it should be a valid integer."""
    kept: list[Any] = []
    for error in errors:
        loc = list(error["loc"])
        node, index = data, None
        for i, part in enumerate(loc):
            is_branch = isinstance(part, str) and (_SCALAR_BRANCH.match(part) or part[:1].isupper())
            if is_branch and not (isinstance(node, dict) and part in node):
                index = i
                break
            if (isinstance(node, dict) and part in node) or (
                isinstance(node, list) and isinstance(part, int) and part < len(node)
            ):
                node = node[part]
            else:
                node = None
        if index is None:
            kept.append(error)
            continue
        scalar_branch = bool(_SCALAR_BRANCH.match(str(loc[index])))
        if scalar_branch == isinstance(node, dict):
            continue  # the error of the other way of writing it
        trimmed = {**error, "loc": (*loc[:index], *loc[index + 1 :])}
        if trimmed not in kept:
            kept.append(trimmed)
    return kept


def _describe(error: Any, data: Any) -> str:
    """Turn a pydantic error location into the file's own words."""
    loc = list(error["loc"])
    parts: list[str] = []
    node = data
    key: Any = None
    child: Any = data  # an error of the whole file (a text, not a mapping) has no location
    while loc:
        key = loc.pop(0)
        if (isinstance(node, dict) and key in node) or (
            isinstance(node, list) and isinstance(key, int) and key < len(node)
        ):
            child = node[key]
        else:
            child = None
        if not parts:
            parts.append(f"pipeline {key!r}")
        elif (
            key in ("phases", "workers", "next")
            and isinstance(child, list)
            and loc
            and isinstance(loc[0], int)
        ):
            index = loc.pop(0)
            item = child[index] if isinstance(index, int) and index < len(child) else None
            label = {"phases": "phase", "workers": "worker", "next": "next rule"}[key]
            ident = (
                item.get("id" if key == "phases" else "role") if isinstance(item, dict) else None
            )
            parts.append(f"{label} {ident!r}" if ident else f"{label} {index + 1}")
            node = item
            continue
        elif parts[-1] == "key 'inputs'" and isinstance(node, dict):
            parts[-1] = f"input {key!r}"
        elif isinstance(key, str) and not key.startswith("function-"):
            parts.append(f"key {key!r}")
        node = child
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown key (a typo?); remove it or check the spelling"
        if key == "tolerate" and not any(p == "key 'for_each'" for p in parts):
            # Failed items are those of a fan-out: the tolerance is the fan-out's own.
            message = (
                "'tolerate' belongs to a fan-out: write it under the phase's for_each "
                "(for_each: {items: ROLE.LIST, tolerate: 5}); a phase without for_each "
                "has no items to tolerate"
            )
        else:
            message += _did_you_mean(key, parts[-2] if len(parts) > 1 else "")
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "literal_error" and isinstance(child, str):
        message += _closest_choice(child, str(error.get("ctx", {}).get("expected", "")))
    elif error["type"] == "model_type":
        message = _mapping_expected(key, parts, child)
    elif key == "command" and error["type"] == "list_type" and isinstance(child, str):
        # A command line written as one string: it is not run through a shell. The shell
        # form suggested passes placeholders as arguments: pasted into the script, a topic
        # or an item would run as code.
        split = f"split it, {child.split()!r}, or " if not has_shell_syntax(child) else ""
        message = (
            "a command is a list of arguments, not one line (no shell runs it): "
            f"{split}for a shell line write {as_arguments(child)} "
            '(values as arguments, read as "$1", never pasted into the script)'
        )
    message = message.removeprefix("Value error, ")
    if message.startswith("Input should be "):  # pydantic's word; a file's inputs are other
        message = "must be " + message.removeprefix("Input should be ")
    return f"{', '.join(parts)}: {message}"


# What each place of a file is, by the word its errors name it with: for "did you mean".
_MODELS: dict[str, Any] = {"pipeline": Pipeline, "phase": Phase, "worker": Worker, "next": Rule}
# The mappings under a key, by that key's name.
_NESTED: dict[str, Any] = {
    "budget": Budget,
    "concurrency": ConcurrencyKey,
    "wait_for": WaitFor,
    "for_each": ForEach,
    "cache": Cache,
}


_SHORT = reprlib.Repr()  # a value quoted in a message: its start, not megabytes of it
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 2
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = 4


def _mapping_expected(key: Any, parts: list[str], value: Any) -> str:
    """What a key that takes a mapping was given instead, in the file's words: pydantic's own
    message names an internal class (`instance of ConcurrencyKey`), which no file mentions."""
    model = _NESTED.get(key) if isinstance(key, str) else None
    fields = [field.alias or name for name, field in model.model_fields.items()] if model else []
    given = type(value).__name__ if value is not None else "null"
    shown = {"str": "text", "int": "a number", "float": "a number", "list": "a list"}
    message = f"expected a mapping, not {shown.get(given, given)} ({_SHORT.repr(value)})"
    if fields:
        message += f"; its keys are {', '.join(fields)}"
    if key == "concurrency" and len(parts) > 1 and parts[-2].startswith("worker "):
        # A worker's key limits its tasks; a plain number limits whole runs, on the pipeline.
        message += (
            "; a worker's concurrency is {key: EXPR, limit: N}, e.g. {key: inputs.customer,"
            " limit: 2} (a plain number limits runs and is written on the pipeline)"
        )
    return message


# Other languages' names of a choice (`type: int`), which a near spelling would not find.
_CHOICE_ALIASES = {
    "int": "integer",
    "float": "number",
    "str": "text",
    "string": "text",
    "bool": "boolean",
}


def _closest_choice(given: str, expected: str) -> str:
    """' (did you mean ...?)' naming the choice of `expected` (pydantic's "'a', 'b' or 'c'")
    closest to `given`, or ''."""
    choices = re.findall(r"'([^']*)'", expected)
    names = {choice: choice for choice in choices}
    names.update({alias: to for alias, to in _CHOICE_ALIASES.items() if to in choices})
    close = difflib.get_close_matches(given.strip().lower(), list(names), n=1)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def _did_you_mean(key: Any, place: str) -> str:
    """' (did you mean ...?)' naming the known key of `place` closest to `key`, or ''."""
    word, _, name = place.partition(" ")
    model = _MODELS.get(word) if word != "key" else _NESTED.get(name.strip("'"))
    if model is None or not isinstance(key, str):
        return ""
    known = [field.alias or name for name, field in model.model_fields.items()]
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def model_aliases(definition: Definition) -> set[str]:
    """Every model alias a pipeline may call, fallbacks included (here, not in the runtime,
    so that `check` and `quote` need not import the engine's driver)."""
    return {
        alias
        for phase in definition.pipeline.phases
        for worker in phase.workers
        for alias in ([worker.model] if worker.model else []) + worker.fallback_models
    }


def calls_models(definition: Definition) -> bool:
    """Whether a run of the pipeline may call models: a model worker, or a `call:` function
    (which may call them itself, through `ctx.model`)."""
    return bool(model_aliases(definition)) or any(
        worker.call for phase in definition.pipeline.phases for worker in phase.workers
    )
