"""SWE tasks generated from HumanEval: one AST mutation of a reference solution makes the bug.

`mutants(source)` lists single-site mutations (swap a comparison, flip + and -, and/or,
True/False, or nudge an integer constant by one) in a seeded order; `build_task` keeps the first
mutant that really fails the task's tests (checked in the sandbox) and lays out a small
repository: `solution_pkg/core.py` (the buggy code), `solution_pkg/__init__.py`,
`tests/test_core.py` (the visible tests: the first half of HumanEval's asserts, as a plain
script) and a README. The hidden tests are all of HumanEval's asserts; the reference is the fix.
"""

from __future__ import annotations

import ast
import copy
import random

from adapters.environments.coding_harness import TestSpec, run_function_tests, split_check
from adapters.environments.problems_functions import FunctionTask
from adapters.sandbox.sandbox import Sandbox

PACKAGE = "solution_pkg"
_COMPARE_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult}


def _sites(tree: ast.AST) -> list[tuple[int, str]]:
    """(node index in ast.walk order, kind) of every mutable site."""
    found = []
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_SWAP:
            found.append((index, "compare"))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            found.append((index, "binop"))
        elif isinstance(node, ast.BoolOp):
            found.append((index, "boolop"))
        elif isinstance(node, ast.Constant) and type(node.value) in (bool, int):
            found.append((index, "constant"))
    return found


def _mutate(node: ast.AST, kind: str) -> None:
    if kind == "compare":
        node.ops[0] = _COMPARE_SWAP[type(node.ops[0])]()
    elif kind == "binop":
        node.op = _BINOP_SWAP[type(node.op)]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif type(node.value) is bool:
        node.value = not node.value
    else:
        node.value = node.value + 1


def mutants(source: str, rng: random.Random) -> list[tuple[str, str]]:
    """(mutated source, description) for each site, in a seeded order."""
    tree = ast.parse(source)
    sites = _sites(tree)
    rng.shuffle(sites)
    out = []
    for index, kind in sites:
        clone = copy.deepcopy(tree)
        node = next(n for i, n in enumerate(ast.walk(clone)) if i == index)
        _mutate(node, kind)
        line = getattr(node, "lineno", "?")
        out.append((ast.unparse(clone) + "\n", f"{kind} at line {line}"))
    return out


def visible_tests(spec: TestSpec) -> TestSpec:
    keep, tests = [], 0
    half = max(1, (spec.count + 1) // 2)
    for source, is_test in spec.statements:
        if is_test:
            if tests >= half:
                continue
            tests += 1
        keep.append((source, is_test))
    return TestSpec(prelude=spec.prelude, statements=tuple(keep))


def test_script(entry_point: str, spec: TestSpec) -> str:
    lines = [
        '"""Tests of solution_pkg. Run: python3 tests/test_core.py"""',
        "import os, sys",
        "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
        f"from {PACKAGE}.core import *",
        f"candidate = {entry_point}",
        spec.prelude,
        "failures = 0",
    ]
    for number, (source, is_test) in enumerate(spec.statements):
        if not is_test:
            lines.append(source)
            continue
        body = "\n".join("    " + line for line in source.splitlines())
        lines += [f"try:\n{body}\n    print('test {number}: ok')",
                  f"except Exception as exc:\n    failures += 1\n    print('test {number}: FAILED', type(exc).__name__, exc)"]  # fmt: skip
    lines.append("print(f'{failures} failed')\nsys.exit(1 if failures else 0)")
    return "\n".join(lines) + "\n"


def repo_files(task: FunctionTask, buggy: str, spec: TestSpec) -> dict[str, str]:
    return {
        f"{PACKAGE}/__init__.py": "from .core import *  # noqa: F401,F403\n",
        f"{PACKAGE}/core.py": buggy,
        "tests/test_core.py": test_script(task.entry_point, visible_tests(spec)),
        "README.md": f"# {PACKAGE}\n\nImplements `{task.entry_point}`. Run the tests with `python3 tests/test_core.py`.\n",
    }


def build_task(sandbox: Sandbox, task: FunctionTask, rng: random.Random, tries: int = 4) -> dict | None:
    """The repository files and facts of a task whose bug breaks the tests, or None."""
    spec = split_check(task.test)
    for buggy, description in mutants(task.reference, rng)[:tries]:
        report = run_function_tests(sandbox, buggy, task.entry_point, spec, timeout_per_test=1.0)
        if report.fraction < 1.0:
            return {"files": repo_files(task, buggy, spec), "mutation": description, "test": task.test,
                    "entry_point": task.entry_point, "fix": task.reference, "task_id": task.task_id}  # fmt: skip
    return None
