"""Mutation testing of the engine: do the tests notice when `core/` is subtly wrong?

    python benchmarks/mutate.py                         # 40 mutants of decide.py and state.py
    python benchmarks/mutate.py --mutants 10 --files core/state.py --seed 7
    python benchmarks/mutate.py --json results.json --min-score 90

Each mutant changes one point of one file (a comparison flipped, `and` for `or`, a `not`
dropped, a constant changed, `+=` for `-=`, a condition forced), drawn from every such
point of the file with a seeded generator, so a run is repeatable. The mutant is written into
a scratch copy of the package and the chosen tests run against it (stopping at the first
failure): a failure or a timeout kills the mutant, a pass lets it survive. The score is the
share killed; survivors are listed with their line so that a test can be written for them.

Prints one line per mutant and a summary per file; exits 1 when a file scores below
`--min-score`.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FILES = ("core/decide.py", "core/state.py")
TESTS = (
    "tests/core/test_decide.py",
    "tests/reliability/test_simulation.py::test_thousands_of_seeds_keep_every_invariant",
)
SWAPS: dict[type[ast.AST], Any] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
    ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.And: ast.Or, ast.Or: ast.And,
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div,
}  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class Mutant:
    """One single-point change: where it is and what it does."""

    file: str
    index: int  # the point's position among the file's points
    line: int
    what: str


Change = Callable[[ast.AST], None]


def _points(tree: ast.AST) -> Iterator[tuple[ast.AST, str, Change]]:
    """Every mutable point of `tree`: (node, description, change applied to a copy)."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAPS:
                    swapped = SWAPS[type(op)]
                    yield node, f"{type(op).__name__} -> {swapped.__name__}", _set_op(i, swapped)
        elif isinstance(node, ast.BoolOp) and type(node.op) in SWAPS:
            yield node, f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", _swap_bool
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in SWAPS:
            yield node, f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", _swap_bin
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not dropped", _drop_not
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, bool):
                yield node, f"{node.value} -> {not node.value}", _flip_bool
            elif isinstance(node.value, int):
                yield node, f"{node.value} -> {node.value + 1}", _increment
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            yield node, "condition forced True", _force(True)
            yield node, "condition forced False", _force(False)


def _set_op(i: int, op: Any) -> Change:
    def change(node: ast.AST) -> None:
        assert isinstance(node, ast.Compare)
        node.ops[i] = op()

    return change


def _swap_bool(node: ast.AST) -> None:
    assert isinstance(node, ast.BoolOp)
    node.op = SWAPS[type(node.op)]()


def _swap_bin(node: ast.AST) -> None:
    assert isinstance(node, (ast.BinOp, ast.AugAssign))
    node.op = SWAPS[type(node.op)]()


def _drop_not(node: ast.AST) -> None:
    assert isinstance(node, ast.UnaryOp)
    node.op = ast.UAdd()  # `+x` of a bool is x as an int: truthiness unchanged, `not` gone


def _flip_bool(node: ast.AST) -> None:
    assert isinstance(node, ast.Constant)
    node.value = not node.value


def _increment(node: ast.AST) -> None:
    assert isinstance(node, ast.Constant) and isinstance(node.value, int)
    node.value = node.value + 1


def _force(value: bool) -> Change:
    def change(node: ast.AST) -> None:
        assert isinstance(node, (ast.If, ast.IfExp, ast.While))
        node.test = ast.Constant(value=value)

    return change


def mutants(source: str, file: str) -> list[Mutant]:
    """Every single-point mutant of `source` (its text comes from `mutated`, one at a time:
    making all of them up front is quadratic in the file's size)."""
    return [
        Mutant(file=file, index=index, line=getattr(node, "lineno", 0), what=what)
        for index, (node, what, _) in enumerate(_points(ast.parse(source)))
    ]


def mutated(source: str, mutant: Mutant) -> str:
    """`source` with `mutant`'s change made."""
    tree = ast.parse(source)
    node, _, change = list(_points(tree))[mutant.index]
    change(node)
    return ast.unparse(ast.fix_missing_locations(tree))


def run_tests(
    root: Path, package: Path, tests: list[str], seeds: int, timeout: float
) -> tuple[bool, float]:
    """Whether `tests` pass against the package copy at `package`, and how long they took."""
    env = {
        **os.environ,
        "PYTHONPATH": str(package.parent),
        "INTERLOCK_SIM_SEEDS": str(seeds),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    began = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - began
    return done.returncode == 0, time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    """Run the mutation test; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", default=list(FILES), help="under src/interlock")
    parser.add_argument("--mutants", type=int, default=40, help="per file (0: all of them)")
    parser.add_argument("--seed", type=int, default=1, help="which mutants are drawn")
    parser.add_argument("--tests", nargs="+", default=list(TESTS), help="pytest arguments")
    parser.add_argument("--sim-seeds", type=int, default=300, help="simulator seeds per run")
    parser.add_argument("--min-score", type=float, default=0.0, help="percent, per file")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to mutate")
    args = parser.parse_args(argv)
    if args.mutants < 0 or args.sim_seeds < 1:
        parser.error("--mutants must be >= 0 and --sim-seeds >= 1")
    root = args.root.resolve()
    source_root = root / "src" / "interlock"
    for file in args.files:
        if not (source_root / file).is_file():
            parser.error(f"--files {file}: no such file under src/interlock")
    scratch = Path(tempfile.mkdtemp(prefix="interlock-mutate-"))
    # SIGTERM ends the run like Ctrl-C, through the `finally` that removes the scratch copy.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        package = scratch / "interlock"
        shutil.copytree(source_root, package, ignore=shutil.ignore_patterns("__pycache__"))
        passed, baseline = run_tests(root, package, args.tests, args.sim_seeds, timeout=1800)
        if not passed:
            print("the tests fail on the unmutated code: fix them first", file=sys.stderr)
            return 2
        print(f"baseline: the tests pass in {baseline:.1f}s")
        report = {}
        for file in args.files:
            original = (source_root / file).read_text()
            every = mutants(original, file)
            rng = random.Random(f"{args.seed}/{file}")
            chosen = (
                every if args.mutants == 0 else rng.sample(every, min(args.mutants, len(every)))
            )
            chosen.sort(key=lambda mutant: mutant.index)
            survivors = []
            for mutant in chosen:
                (package / file).write_text(mutated(original, mutant))
                killed = not run_tests(
                    root, package, args.tests, args.sim_seeds, baseline * 3 + 30
                )[0]
                print(f"{'killed  ' if killed else 'SURVIVED'} {file}:{mutant.line} {mutant.what}")
                if not killed:
                    survivors.append({"line": mutant.line, "what": mutant.what})
            (package / file).write_text(original)
            score = 100.0 * (len(chosen) - len(survivors)) / max(1, len(chosen))
            report[file] = {
                "points": len(every),
                "mutants": len(chosen),
                "killed": len(chosen) - len(survivors),
                "score": round(score, 1),
                "survivors": survivors,
            }
            print(f"{file}: {score:.1f}% killed ({len(chosen) - len(survivors)}/{len(chosen)})")
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        low = [f for f, r in report.items() if r["score"] < args.min_score]
        return 1 if low else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
