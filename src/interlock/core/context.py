"""What a condition may read, looked up when it is read.

A condition reads a few names (`reviewer.score`, `visits.fix`), while a run may have hundreds
of roles and phases. Building a dict of everything for each branch would cost every branch,
and every condition `interlock check` forces, the size of the run's history; a `Context` costs
only what is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


class Context(Mapping[str, Any]):
    """Named values computed when read (`topic`, `visits`...), then each role's extracted
    values under the role's own name when it is an identifier and not one of those names.

    Values are the state's own, read when looked up: use a context at once, not after the
    state changes. Evaluating converts what it reads, so nothing writes through it.
    """

    __slots__ = ("_roles", "_roots")

    def __init__(self, by_role: Mapping[str, Any], /, **roots: Callable[[], Any]) -> None:
        self._roles, self._roots = by_role, roots

    def __getitem__(self, name: str) -> Any:
        root = self._roots.get(name)
        if root is not None:
            return root()
        if name.isidentifier():
            return self._roles[name]
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        if name in self._roots:
            return True
        return isinstance(name, str) and name.isidentifier() and name in self._roles

    def __iter__(self) -> Iterator[str]:
        yield from self._roots
        for role in self._roles:
            if role.isidentifier() and role not in self._roots:
                yield role

    def __len__(self) -> int:
        return sum(1 for _ in self)
