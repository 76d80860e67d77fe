"""Values pasted into a script that a shell or an interpreter runs (`sh -c "... {topic} ..."`).

A command's arguments are never run through a shell, so a placeholder stays one argument
whatever it holds. Inside the script of `sh -c` (or `bash -c`, `python -c`, `node -e`, ...)
it does not: a topic, a fan-out item taken from a model's answer, or an input with a quote or
`$(...)` in it runs as code. The safe forms pass the value as an argument of its own, which
the script reads as `"$1"` (`sys.argv[1]`), or read it from the environment
(`"$INTERLOCK_TOPIC"`). `check` warns about the unsafe form and names the safe one; a command
written as one line is suggested in the safe form. Pure: argv in, words out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from interlock.core.workflow import Pipeline

# The placeholders whose values come from outside the workflow (or from a model's answer),
# with what a script reads instead. Paths interlock makes ({output}, {run_dir}, ...) are not
# data, so they are not warned about.
_DATA = {
    "topic": "$INTERLOCK_TOPIC",
    "item": "$INTERLOCK_ITEM",
    "task": "$INTERLOCK_TASK",
}
_VALUE = re.compile(
    r"\{\{.*?\}\}|\{%.*?%\}|(?<!\$)\{(?:read|input):[^{}]+\}|(?<!\$)\{[A-Za-z_]\w*\}", re.S
)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
_SHELLS |= {"csh", "tcsh", "pwsh", "powershell", "cmd", "su"}
_EVAL_FLAGS = {  # interpreter -> the flags after which its next argument is code
    "node": ("-e", "--eval", "-p", "--print"),
    "deno": ("eval",),
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "php": ("-r",),
    "lua": ("-e",),
    "Rscript": ("-e",),
    "osascript": ("-e",),
}
_SHELL_FLAG = re.compile(r"^-[A-Za-z]*c[A-Za-z]*$|^-(?i:command)$|^/(?i:c)$")


def script_of(argv: Sequence[str]) -> tuple[int, str] | None:
    """(index, interpreter) of the first argument that is code for a shell or interpreter
    (`sh -c SCRIPT`, `python3 -c SCRIPT`, `node -e SCRIPT`, also after `env`, `sudo`, `docker
    exec NAME`, ...), or None."""
    for at, arg in enumerate(argv[:-1]):
        name = _interpreter(arg)
        if name is None:
            continue
        flags = _flags(name)
        for index in range(at + 1, len(argv) - 1):
            option = argv[index]
            if _is_eval_flag(name, option, flags):
                return index + 1, f"{name} {option}"
            if not option.startswith("-"):
                break  # a script file or a subcommand: its arguments are not code
    return None


def _interpreter(arg: str) -> str | None:
    name = arg.rsplit("/", 1)[-1].removesuffix(".exe")
    if name == "{python}" or re.fullmatch(r"python[\d.]*|pypy[\d.]*", name):
        return "python"
    if name in _SHELLS or name in _EVAL_FLAGS:
        return name
    return None


def _flags(name: str) -> tuple[str, ...]:
    if name == "python":
        return ("-c",)
    return _EVAL_FLAGS.get(name, ())


def _is_eval_flag(name: str, option: str, flags: tuple[str, ...]) -> bool:
    if name in _SHELLS:
        return bool(_SHELL_FLAG.match(option)) and not option.startswith("--")
    return option in flags


def script_warnings(argv: Sequence[str]) -> list[str]:
    """What is pasted into the script of `argv`, each with the safe form (empty: nothing)."""
    found = script_of(argv)
    if found is None:
        return []
    index, runner = found
    script = argv[index]
    warnings = []
    for value in dict.fromkeys(_pasted(script)):
        reads = _DATA.get(value.strip("{}"))
        env = f', or read "{reads}"' if reads else ""
        if runner.startswith("python"):
            fix = (
                "pass it as an argument after the script and read sys.argv[1]: "
                f"[{runner.split()[0]}, -c, 'import sys; ... sys.argv[1]', {value!r}]"
            )
            env = f', or read os.environ["{reads[1:]}"]' if reads else ""
        elif runner.split()[0] in _SHELLS:
            fix = (
                "pass it as an argument after the script and quote it there: "
                f"[{runner.split()[0]}, {runner.split()[1]}, 'tool \"$1\"', "
                f"{runner.split()[0]}, {value!r}]"
            )
        else:
            fix = "pass it as an argument after the script and read it there"
        warnings.append(
            f"argument {index + 1}: {value!r} is pasted into the script of '{runner}', so a "
            f"value with a quote, ';' or '$(...)' in it runs as code: {fix}{env}"
        )
    return warnings


def _pasted(script: str) -> list[str]:
    """The placeholders and templates of a script that carry data (not paths interlock
    makes, such as `{output}`)."""
    values = []
    for match in _VALUE.finditer(script):
        token = match.group(0)
        name = token.strip("{}")
        if token.startswith(("{{", "{%")) or name in _DATA or ":" in name:
            values.append(token)
    return values


def shell_warnings(
    name: str, pipeline: Pipeline, line_of: Callable[[Sequence[Any]], int | None]
) -> list[str]:
    """Each command of `pipeline` with data pasted into a script, with the line it is on."""
    warnings = []
    for p, phase in enumerate(pipeline.phases):
        for w, worker in enumerate(phase.workers):
            if not worker.command:
                continue
            found = script_of(worker.command)
            for warning in script_warnings(worker.command):
                path = [name, "phases", p, "workers", w, "command"]
                line = line_of([*path, found[0]] if found else path)
                where = f"line {line}: " if line is not None else ""
                place = f"pipeline {name!r}, phase {phase.id!r}, worker {worker.role!r}"
                warnings.append(f"{where}{place}, key 'command': {warning}")
    return warnings


# What only a shell reads in a line: redirections, pipes, separators, `$` and backquotes
# (`&&` and `||` are made of these). Split into arguments, each would be a literal word.
_SHELL_SYNTAX = re.compile(r"[><|;&$`]")


def has_shell_syntax(line: str) -> bool:
    """Whether a command written as one line needs a shell to mean what it says (`echo x >
    out`): placeholders and `{{ ... }}` templates aside, it holds > < | ; & $ or a backquote."""
    return _SHELL_SYNTAX.search(_VALUE.sub(" ", line)) is not None


def as_arguments(line: str) -> str:
    """A command written as one line, in the safe form: its placeholders and templates moved
    to arguments of their own after the script, which reads them as "$1", "$2", ...

    `grep {topic} {read:a.md}` -> `[sh, -c, 'grep "$1" "$2"', sh, "{topic}", "{read:a.md}"]`.
    """
    values: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(0) not in values:
            values.append(match.group(0))
        return f'"${values.index(match.group(0)) + 1}"'

    script = _VALUE.sub(number, line)
    parts = ["sh", "-c", "'" + script.replace("'", "''") + "'"]  # YAML's single quotes
    if values:
        parts += ["sh", *(f'"{v}"' for v in values)]
    return "[" + ", ".join(parts) + "]"
