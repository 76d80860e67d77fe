"""`interlock explain`: each decision with its rule, why, and the values its conditions read
(see `interlock.runtime.explain`), as lines for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock.cli.base import escape, when
from interlock.runtime.explain import decisions

if TYPE_CHECKING:
    from interlock.api import Interlock


def explain_lines(app: Interlock, run_id: str) -> list[str]:
    """The lines of `interlock explain` (rich markup, values escaped)."""
    lines = []
    for d in decisions(app.store, run_id):
        head = f"{d['seq']:>4} {when(d['at'])}"
        why = escape(d["why"] or "")
        if d["rule"]:
            lines.append(f"{head} [bold]{d['rule']:<12}[/] {d['kind']:<16} {why}")
        elif d["why"]:
            lines.append(f"{head} [dim]{'observed':<12}[/] {d['kind']:<16} {why}")
        else:
            lines.append(f"{head} [dim]{'observed':<12} {d['kind']:<16}[/]")
        lines += [f"{' ' * 26}{escape(line)}" for line in d["reads"]]
    return lines
