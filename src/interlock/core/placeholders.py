"""The `{name}` placeholders of a `command:` argument, and the names a run directory reserves.

The runner fills placeholders; `check` refuses any it could not fill, so a typo such as
`{outptu}` is an error in the file instead of a file literally named `{outptu}`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection

# name -> what the runner puts in its place (docs/getting-started.md's table says the same)
COMMAND_PLACEHOLDERS: dict[str, str] = {
    "output": "the path the worker writes its output to",
    "task": "the worker's task text, rendered",
    "topic": "the run's topic",
    "item": "the fan-out item (empty outside for_each)",
    "run_dir": "the run's directory",
    "workflow_dir": "the directory of the workflow file",
    "python": "the Python interpreter interlock runs on",
}
INPUTS_PLACEHOLDER = "{inputs}"  # every file the worker reads, one argument each
READ_PREFIXES = ("read:", "input:")  # `{read:NAME}`: the path of the read file NAME

# A placeholder looks like `{name}` or `{read:NAME}`; braces around other text (awk's
# '{print $1}', jq's '{a: .b}') are left alone, and so is what jinja2 blocks hold. Braces
# right after a `$` are a shell's (`${DB_URL:-none}`, `${output}`), never a placeholder.
NOT_SHELL = r"(?<!\$)"
_TOKEN = re.compile(NOT_SHELL + r"\{([A-Za-z_][\w.:?-]*)\}")  # "?" only to catch `{read:x.md?}`
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)

# Names the runner writes in a run directory beside the workers' outputs.
RESERVED_OUTPUTS = {
    "final.md": "the run's result",
    "status.json": "the run's status file",
    "logs": "the folder of command output",
    "prompts": "the folder of model prompts",
}


def command_problems(
    argv: list[str],
    reads: list[str],
    inputs: Collection[str] = (),
    optional: Collection[str] = (),
) -> list[str]:
    """What is wrong with the placeholders of one command (empty when all resolve).

    `reads` are the files the worker reads, `inputs` the pipeline's declared inputs (named
    only to explain that `{input:NAME}` is a file, not an input), `optional` the reads that
    may be absent (`name?`): a single path cannot stand for a file that may not be there.
    """
    problems = []
    choices = [*COMMAND_PLACEHOLDERS, "inputs", *(f"read:{name}" for name in reads)]
    for number, arg in enumerate(argv, start=1):
        for token in _TOKEN.findall(_JINJA.sub(" ", arg)):
            if token in COMMAND_PLACEHOLDERS:
                continue
            if token == "inputs":
                if arg != INPUTS_PLACEHOLDER:
                    problems.append(
                        f"argument {number} ({arg!r}): '{{inputs}}' expands to several "
                        "arguments, so it must be an argument of its own; use "
                        "'{read:NAME}' for one file inside an argument"
                    )
                continue
            prefix = next((p for p in READ_PREFIXES if token.startswith(p)), None)
            if prefix is not None:
                name = token[len(prefix) :]
                if name.endswith("?"):
                    problems.append(
                        f"argument {number} ({arg!r}): '{{{token}}}': name the file without "
                        f"'?', as '{{{prefix}{name[:-1]}}}' ('?' belongs in 'reads' only)"
                    )
                elif name in optional:
                    problems.append(
                        f"argument {number} ({arg!r}): '{{{token}}}' is the path of {name!r}, "
                        f"which the worker reads as optional ('{name}?'): when it is absent "
                        "there is no path to put there; use '{inputs}' (the files that are "
                        "there), or read it without '?'"
                    )
                elif name not in reads:
                    listed = ", ".join(reads) or "nothing"
                    hint = (
                        f"; the pipeline input {name!r} is written {{{{ {name} }}}}"
                        if name in inputs
                        else ""
                    )
                    problems.append(
                        f"argument {number} ({arg!r}): '{{{token}}}' is the path of a file the "
                        f"worker reads, but it does not read {name!r}{_suggest(name, reads)}; "
                        f"it reads {listed} (add it to 'reads'){hint}"
                    )
                continue
            problems.append(
                f"argument {number} ({arg!r}): unknown placeholder '{{{token}}}'"
                f"{_suggest(token, choices, braces=True)}; placeholders are "
                + ", ".join(f"{{{c}}}" for c in [*COMMAND_PLACEHOLDERS, "inputs", "read:NAME"])
                + f" (for a literal '{{{token}}}', write {{{{ '{{{token}}}' }}}})"
            )
    return problems


def _suggest(name: str, choices: list[str], *, braces: bool = False) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    if not close:
        return ""
    return f" (did you mean '{{{close[0]}}}'?)" if braces else f" (did you mean {close[0]!r}?)"
