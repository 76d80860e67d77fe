"""Mutation testing: do the tests notice when the engine (or reuse's identity) is subtly wrong?

    python benchmarks/mutate.py                  # 40 mutants of decide.py, state.py, reuse.py
    python benchmarks/mutate.py --files core/ --mutants 10      # every module of core/, 10 each
    python benchmarks/mutate.py --files core/state.py --mutants 0   # every point of one module
    python benchmarks/mutate.py --files core/state.py --functions earliest_deadline --mutants 0
    python benchmarks/mutate.py --json results.json --min-score 90

Each mutant changes one point of one file (a comparison flipped, `and` for `or`, a `not`
dropped, a constant changed, `+=` for `-=`, a condition forced), drawn from every such
point of the file with a seeded generator, so a run is repeatable. The mutant is written into
a scratch copy of the package and the module's tests run against it (stopping at the first
failure): a failure kills the mutant, a run past three times the unmutated run (plus 30 s)
kills it by timeout, a pass lets it survive. Each module has its own tests (`TESTS_FOR`: the
tests that can notice it, fastest first), so that a module takes minutes; `--tests` gives one
set for every module instead. The score is the share killed.

Prints one line per mutant, then a table per module (killed, of which by timeout, survived,
score) and every survivor with its file:line and its diff; exits 1 when a module scores below
`--min-score`.
"""

from __future__ import annotations

import argparse
import ast
import difflib
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
FILES = ("core/decide.py", "core/state.py", "runtime/reuse.py")
_SIMULATION = "tests/reliability/test_simulation.py::test_thousands_of_seeds_keep_every_invariant"
_ENGINE = (
    "tests/core/test_deadline_properties.py",
    "tests/core/test_decide.py",
    "tests/core/test_deadlines.py",
    "tests/core/test_retry_after.py",
    "tests/core/test_waits.py",
    "tests/core/test_properties.py",
    _SIMULATION,
)
# The tests run against each module's mutants, by file or by folder (the first key that
# matches wins): those that can notice it, fastest first, since a kill stops at the first
# failure and only a survivor runs them all; an option (`--deselect=...`) is passed as it is.
# A path that does not exist (yet) is left out.
# A module of core/ with no entry runs its own test files (`tests/core/test_<name>*.py`), then
# the whole of tests/core.
TESTS_FOR: dict[str, tuple[str, ...]] = {
    "core/state.py": _ENGINE,
    "core/decide.py": _ENGINE,
    "runtime/reuse.py": (
        "tests/runtime/test_reuse_identity.py",
        "tests/core/test_fingerprint.py",
        "tests/runtime/test_rerun_cache.py",
        # A crash test of the cache's commit (45 s), not of what a fingerprint covers.
        "--deselect=tests/runtime/test_rerun_cache.py::"
        "test_a_kill_right_after_a_cached_completion_keeps_its_cache_entry",
    ),
    "core/": ("tests/core",),
    "": ("tests",),
}
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


def tests_for(root: Path, file: str) -> list[str]:
    """The pytest arguments run against `file`'s mutants (see `TESTS_FOR`)."""
    key = next(k for k in TESTS_FOR if file == k or (k[-1:] in ("/", "") and file.startswith(k)))
    chosen = list(TESTS_FOR[key])
    if key == "core/":
        stem = Path(file).stem
        chosen = [
            str(p.relative_to(root)) for p in sorted((root / "tests/core").glob(f"test_{stem}*.py"))
        ] + chosen
    return [t for t in chosen if t.startswith("-") or (root / t.partition("::")[0]).exists()]


def expand(source_root: Path, names: list[str]) -> list[str]:
    """`--files` as module paths under src/interlock: a folder (`core/`) stands for each of
    its modules with a point to mutate."""
    files: list[str] = []
    for name in names:
        path = source_root / name
        if path.is_dir():
            for module in sorted(path.glob("*.py")):
                relative = str(module.relative_to(source_root))
                if mutants(module.read_text(), relative):
                    files.append(relative)
        elif path.is_file():
            files.append(name)
        else:
            raise FileNotFoundError(name)
    return list(dict.fromkeys(files))


def within(source: str, names: set[str]) -> list[tuple[int, int]]:
    """The line spans of the functions and methods of `source` named in `names`."""
    return [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
    ]


def diff(source: str, mutant: Mutant) -> str:
    """The mutant's change as the lines of the (normalised) module it alters."""
    before = ast.unparse(ast.parse(source)).splitlines()
    after = mutated(source, mutant).splitlines()
    lines = difflib.unified_diff(before, after, lineterm="", n=0)
    return "\n".join(line for line in lines if line[:1] in "-+" and line[:3] not in ("---", "+++"))


def run_tests(
    root: Path, package: Path, tests: list[str], seeds: int, timeout: float
) -> tuple[str, float]:
    """How `tests` end against the package copy at `package` ("passed", "failed" or
    "timeout"), and how long they took."""
    # Property tests draw the same examples in every run (a fixed seed) and remember none
    # between runs (an empty example database each time): an example that failed against
    # one mutant must not kill the next, and the unmutated run must not depend on luck.
    examples = Path(tempfile.mkdtemp(prefix="hypothesis-", dir=package.parent))
    env = {
        **os.environ,
        "PYTHONPATH": str(package.parent),
        "INTERLOCK_SIM_SEEDS": str(seeds),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HYPOTHESIS_STORAGE_DIRECTORY": str(examples),
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    command += ["--hypothesis-seed=0", *tests]
    began = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=root, env=env, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - began
    finally:
        shutil.rmtree(examples, ignore_errors=True)
    if done.returncode in (3, 4, 5):  # pytest could not run (0: passed, 1: failed, 2: broken)
        sys.stderr.write(done.stdout.decode(errors="replace")[-2000:])
    return ("passed" if done.returncode == 0 else "failed"), time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    """Run the mutation test; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", nargs="+", default=list(FILES), help="under src/interlock; a folder: each module"
    )
    parser.add_argument("--mutants", type=int, default=40, help="per module (0: all of them)")
    parser.add_argument("--seed", type=int, default=1, help="which mutants are drawn")
    parser.add_argument(
        "--functions", nargs="+", help="only the points inside functions of these names"
    )
    parser.add_argument(
        "--tests", nargs="+", help="pytest arguments for every module (default: TESTS_FOR)"
    )
    parser.add_argument("--sim-seeds", type=int, default=300, help="simulator seeds per run")
    parser.add_argument("--min-score", type=float, default=0.0, help="percent, per module")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to mutate")
    args = parser.parse_args(argv)
    if args.mutants < 0 or args.sim_seeds < 1:
        parser.error("--mutants must be >= 0 and --sim-seeds >= 1")
    root = args.root.resolve()
    source_root = root / "src" / "interlock"
    try:
        files = expand(source_root, args.files)
    except FileNotFoundError as missing:
        parser.error(f"--files {missing}: no such file or folder under src/interlock")
    scratch = Path(tempfile.mkdtemp(prefix="interlock-mutate-"))
    # SIGTERM ends the run like Ctrl-C, through the `finally` that removes the scratch copy.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        package = scratch / "interlock"
        shutil.copytree(source_root, package, ignore=shutil.ignore_patterns("__pycache__"))
        baselines: dict[tuple[str, ...], float] = {}
        report: dict[str, dict[str, Any]] = {}
        for file in files:
            tests = list(args.tests) if args.tests else tests_for(root, file)
            if tuple(tests) not in baselines:
                outcome, took = run_tests(root, package, tests, args.sim_seeds, timeout=1800)
                if outcome != "passed":  # rerun them with pytest to see why
                    print(
                        f"the tests fail on the unmutated code: fix them first ({' '.join(tests)})",
                        file=sys.stderr,
                    )
                    return 2
                print(f"baseline: {' '.join(tests)} pass in {took:.1f}s")
                baselines[tuple(tests)] = took
            baseline = baselines[tuple(tests)]
            report[file] = _mutate_module(root, package, source_root, file, tests, baseline, args)
        _print_report(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
        low = [f for f, r in report.items() if r["score"] < args.min_score]
        return 1 if low else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _mutate_module(
    root: Path,
    package: Path,
    source_root: Path,
    file: str,
    tests: list[str],
    baseline: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Run the chosen mutants of one module; its line of the report."""
    original = (source_root / file).read_text()
    every = mutants(original, file)
    if args.functions:
        spans = within(original, set(args.functions))
        every = [m for m in every if any(first <= m.line <= last for first, last in spans)]
    rng = random.Random(f"{args.seed}/{file}")  # per module: adding a module draws no others anew
    chosen = every if args.mutants == 0 else rng.sample(every, min(args.mutants, len(every)))
    chosen.sort(key=lambda mutant: mutant.index)
    survivors, timeouts = [], 0
    try:
        for mutant in chosen:
            (package / file).write_text(mutated(original, mutant))
            outcome, _ = run_tests(root, package, tests, args.sim_seeds, baseline * 3 + 30)
            label = {"failed": "killed  ", "timeout": "timeout ", "passed": "SURVIVED"}[outcome]
            print(f"{label} {file}:{mutant.line} {mutant.what}", flush=True)
            timeouts += outcome == "timeout"
            if outcome == "passed":
                survivors.append(
                    {"line": mutant.line, "what": mutant.what, "diff": diff(original, mutant)}
                )
    finally:
        (package / file).write_text(original)
    killed = len(chosen) - len(survivors)
    return {
        "points": len(every),
        "mutants": len(chosen),
        "killed": killed,  # by a failing test or by a timeout
        "timeouts": timeouts,
        "survived": len(survivors),
        "score": round(100.0 * killed / max(1, len(chosen)), 1),
        "tests": tests,
        "survivors": survivors,
    }


def _print_report(report: dict[str, dict[str, Any]]) -> None:
    """The table of scores per module, then each survivor with its diff."""
    width = max([6, *map(len, report)])
    print(f"\n{'module':<{width}}  points  mutants  killed  timeout  survived  score")
    for file, r in report.items():
        print(
            f"{file:<{width}}  {r['points']:>6}  {r['mutants']:>7}"
            f"  {r['killed'] - r['timeouts']:>6}  {r['timeouts']:>7}  {r['survived']:>8}"
            f"  {r['score']:>4.1f}%"
        )
    for file, r in report.items():
        for survivor in r["survivors"]:
            print(f"\nsurvived {file}:{survivor['line']} {survivor['what']}")
            print("\n".join(f"    {line}" for line in survivor["diff"].splitlines()))


if __name__ == "__main__":
    sys.exit(main())
