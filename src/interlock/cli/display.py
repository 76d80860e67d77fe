"""Terminal output: a live progress view while a run is driven, and plain tables."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from interlock.cli.base import real_console, when
from interlock.cli.printable import printable

if TYPE_CHECKING:  # the engine and the live view are loaded only when a run is shown live
    from collections.abc import Callable

    from rich.console import Console, Group
    from rich.live import Live

    from interlock.core.loader import Definition
    from interlock.core.state import RunState
    from interlock.runtime.home import Home
    from interlock.storage.base import NewEvent

STATUS_STYLE = {
    "completed": "green",
    "running": "yellow",
    "pending": "dim",
    "skipped": "dim",
    "retrying": "magenta",
    "failed": "red",
    "timed_out": "red",
    "paused": "cyan",
    "waiting": "cyan",
    "delivered": "green bold",
    "cancelled": "red",
    "abandoned": "dim",
    "dispatched": "yellow",
    "reused": "blue",
}


def styled(status: str) -> Text:
    """A status word in its colour."""
    return Text(status, style=STATUS_STYLE.get(status, ""))


def ended_text(status: str, failure: str | None) -> str:
    """How a run ended, its reason said once: a run cancelled without a reason records
    "cancelled" as its reason, which "cancelled: cancelled" would say twice."""
    if not failure or failure == status:
        return status
    return f"{status}: {failure}"


# A log path as failure messages record it: relative to the run's folder, which moves when
# the run is archived, so the ledger keeps it relative and the terminal shows it whole.
_LOG_PATH = re.compile(r"(?<![\w./-])logs/[^\s)'\",;]+")
# A child run's failure is quoted in its parent's: a log path after "child run ID" is the
# child's (the nearest such mention is the run that wrote it, however deep the nesting).
_CHILD_RUN = re.compile(r"child run ([\w.-]+) ")


class LogPaths:
    """Turns the `logs/...` paths in a run's messages into paths one can open from the
    current directory (relative to it when the run's folder is under it, else absolute)."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._dirs: dict[str, Path | None] = {}

    def __call__(self, text: str, run_id: str, *, markup: bool = False) -> str:
        """`text` with each log path made openable from here; `markup`: `text` is rich
        markup, so the paths put in are escaped."""
        if "logs/" not in text:  # most lines: no regular expression run for them
            return text

        def openable(match: re.Match[str]) -> str:
            owner = run_id
            line = text.rfind("\n", 0, match.start()) + 1  # a mention on its own line only
            for child in _CHILD_RUN.finditer(text, line, match.start()):
                owner = child.group(1)
            folder = self._folder(owner)
            if folder is None:
                return match.group(0)
            shown = _from_here(folder / match.group(0))
            return escape(shown) if markup else shown

        return _LOG_PATH.sub(openable, text)

    def _folder(self, run_id: str) -> Path | None:
        if run_id not in self._dirs:
            from interlock.errors import InterlockError

            try:
                self._dirs[run_id] = self.home.run_dir(run_id)
            except InterlockError:  # not a run id after all: the text is left as it is
                self._dirs[run_id] = None
        return self._dirs[run_id]


def _from_here(path: Path) -> str:
    """`path` relative to the current directory when it is under it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except (ValueError, OSError):  # elsewhere, or the current directory is gone
        return str(path)


def progress_table(definition: Definition, state: RunState, started: float) -> Group:
    """Phases and workers with status, attempts and elapsed time."""
    from rich.console import Group

    return Group(title_line(state, started), progress_body(definition, state))


def title_line(state: RunState, started: float, now: float | None = None) -> Text:
    """The pipeline, the run, its status and the seconds since `started` (to `now`)."""
    elapsed = (time.time() if now is None else now) - started
    return Text.assemble(
        (f"{printable(state.pipeline)} ", "bold"),
        (state.run_id, "dim"),
        "  ",
        styled(state.status.value),
        f"  {elapsed:5.1f}s",
    )


def progress_body(definition: Definition, state: RunState) -> Group:
    """The table of phases and workers, and the figures and warnings under it."""
    from rich.console import Group

    from interlock.core.state import TaskStatus
    from interlock.runtime.projection import status_view

    view = status_view(definition.pipeline, state, state.run_id)
    table = Table(expand=False, box=None, padding=(0, 2))
    table.add_column("phase")
    table.add_column("worker")
    table.add_column("status")
    table.add_column("attempt", justify="right")
    table.add_column("items", justify="right")
    for phase in view["phases"]:
        for index, (role, worker) in enumerate(phase["workers"].items()):
            items = worker.get("items")
            done = worker.get("items_completed")
            table.add_row(
                Text(phase["id"], style="bold") if index == 0 else "",
                role,
                styled(worker["status"]),
                str(worker.get("attempt", "")),
                f"{done}/{items}" if items else "",
            )
    footer = []
    retries = sum(max(0, t.attempt - 1 - t.reruns - t.held) for t in state.tasks.values())
    running = sum(t.status is TaskStatus.RUNNING for t in state.tasks.values())
    footer.append(f"running {running}  retries {retries}  events {state.events}")
    if state.cost_usd:
        mark = "~" if any(t.estimated for t in state.tasks.values()) else ""
        note = "  (~: estimated)" if mark else ""
        footer.append(f"cost {mark}${state.cost_usd:.4f}  tokens {mark}{state.tokens}{note}")
    for warning in state.warnings[-3:]:
        footer.append(f"[yellow]warning:[/] {escape(printable(warning))}")
    return Group(table, *[Text.from_markup(line) for line in footer])


# What is kept of each running task's streamed answer: enough for its latest line.
_STREAM_TAIL = 2000
_STREAM_LINES = 8  # running tasks shown with their latest line, at most


def latest_line(text: str) -> str:
    """The last line of `text` that has something on it, its whitespace collapsed."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return printable(" ".join(line.split()))
    return ""


class LiveProgress:
    """Redraws the progress view on every recorded event (or prints lines off a TTY).

    On a terminal the view is drawn eight times a second between events too: its clock
    goes on, and each running task shows the latest line of the answer its model streams
    (`on_progress`, fed by the orchestrator's progress listeners; never recorded).
    """

    def __init__(
        self,
        console: Console,
        definition: Definition,
        run_id: str = "",
        *,
        paths: Callable[[str, str], str] | None = None,
    ) -> None:
        self.console = console
        self.definition = definition
        self.run_id = run_id  # the run shown; others driven with it (its children) get lines
        self.paths = paths  # makes a line's log paths openable from here (`LogPaths`)
        self.started = time.time()
        self.live: Live | None = None
        self.state: RunState | None = None
        self.streamed: dict[str, str] = {}  # task id -> the tail of its streamed answer
        self._body: Group | None = None  # the table as of the latest event

    def __enter__(self) -> LiveProgress:
        if self.console.is_terminal:
            from rich.live import Live

            console = real_console(self.console)
            self.live = Live(
                console=console,
                refresh_per_second=8,
                transient=False,
                get_renderable=self.frame,
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            if self.state is not None:
                self._body = progress_body(self.definition, self.state)
            self.streamed.clear()  # the last frame shows how the run stands, not its stream
            self.live.__exit__(*exc)

    def frame(self, now: float | None = None) -> Group | Text:
        """What the terminal shows now: the title with the time since the command started,
        the table as of the latest event, and the running tasks' latest streamed lines."""
        from rich.console import Group

        state = self.state
        if state is None or self._body is None:
            return Text("")
        parts: list[Any] = [title_line(state, self.started, now), self._body]
        shown = 0
        for task_id, tail in list(self.streamed.items()):  # a copy: fragments arrive meanwhile
            task = state.tasks.get(task_id)
            if task is None or not task.status.in_flight:
                continue
            line = latest_line(tail)
            if not line or shown == _STREAM_LINES:
                continue
            shown += 1
            text = Text.assemble((f"{task_id}: ", "dim"), line)
            text.no_wrap, text.overflow = True, "ellipsis"
            parts.append(text)
        return Group(*parts)

    def on_event(self, run_id: str, seq: int, new: NewEvent, state: RunState) -> None:
        """Listener for the orchestrator."""
        if self.run_id and run_id != self.run_id:
            # A child run (or the parent of the one shown) driven in the same process: a
            # line off a terminal, never the table, which shows the run's own pipeline.
            if self.live is None:
                line = f"     {run_id} {seq:>4} {new.event.kind:<16} {describe(new)}"
                self.console.print(self._openable(line, run_id), soft_wrap=True)
            return
        self.state = state
        if self.live is not None:
            self._body = progress_body(self.definition, state)
            # A task that ended streams no more (a retry streams its own answer): what it
            # said is dropped. The next frame (an eighth of a second at most) shows the rest.
            for task_id in list(self.streamed):
                task = state.tasks.get(task_id)
                if task is not None and not task.status.in_flight:
                    del self.streamed[task_id]
            return
        self.print_event(seq, new)

    def on_progress(self, run_id: str, task_id: str, text: str) -> None:
        """Progress listener for the orchestrator: a fragment of a task's streamed answer."""
        if self.run_id and run_id != self.run_id:
            return  # a child's tasks are not rows of this table
        self.streamed[task_id] = (self.streamed.get(task_id, "") + text)[-_STREAM_TAIL:]

    def print_event(self, seq: int, new: NewEvent) -> None:
        """One line for an event, never wrapped (off a terminal)."""
        line = f"{seq:>4} {new.event.kind:<16} {describe(new)}"
        self.console.print(self._openable(line, self.run_id), soft_wrap=True)

    def _openable(self, line: str, run_id: str) -> str:
        return line if self.paths is None or not run_id else self.paths(line, run_id)


_QUIET = ("at", "values", "usage", "fingerprint", "fingerprint_parts")  # long; in --json
# Fields that are moments (seconds since the epoch): shown as local times, like each line's.
_MOMENTS = frozenset({"not_before", "until", "sent_at"})


def describe(new: NewEvent) -> str:
    """One line about an event, its control characters shown as escapes (a topic or a
    pipeline's name is whatever someone typed)."""
    event = new.event
    fields = {
        k: when(v) if k in _MOMENTS and isinstance(v, int | float) else v
        for k, v in vars_of(event).items()
        if k not in _QUIET
    }
    if event.kind == "run_cancelled" and fields.get("reason") == "cancelled":
        del fields["reason"]  # the default reason: "run_cancelled reason=cancelled" says it twice
    text = " ".join(
        f"{k}={plain_value(v)}" for k, v in fields.items() if v not in (None, "", [], (), {})
    )
    if new.rule:
        text += f"  [{new.rule}: {new.why}]"
    return printable(text)


def plain_value(value: Any) -> str:
    """A field's value as the file and `--json` write it: true/false, null, lists and
    mappings as JSON, not Python's spelling (`False`, `{'a': None}`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list | tuple) or value is None:
        return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return str(value)


def vars_of(event: Any) -> dict[str, Any]:
    """The fields of a slotted dataclass."""
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
