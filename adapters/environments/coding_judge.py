"""Judge a stdin/stdout program against hidden tests in the sandbox, one verdict per test.

One sandbox run holds the program, the test inputs (never the expected outputs) and a small
judge harness. The harness makes itself non-dumpable (so the program, same uid, cannot read its
memory or file descriptors through /proc), reads a nonce from stdin, then runs the program once
per test in its own process group with the test as stdin, stdout into a file (RLIMIT_FSIZE caps
it) and a `timeout_per_test` wall clock, and prints one nonce-tagged JSON line per test. The
host compares outputs token by token (whitespace-insensitive, like most judges) and gives
Codeforces-style verdicts: accepted, wrong_answer, time_limit_exceeded, runtime_error,
memory_limit_exceeded, output_limit_exceeded; a test without a harness line (the program killed
the harness, or the run hit its deadline) is `judge_lost` and counts as failed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence

import attrs

from adapters.sandbox.sandbox import Sandbox

PYTHON = "/usr/bin/python3"
ACCEPTED = "accepted"
STARTUP_SECONDS = 2.0
OUTPUT_CAP = 64 * 1024  # bytes of each test's stdout the harness reports

HARNESS = r'''
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
nonce = sys.stdin.readline().strip()
count, timeout, cap = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
for index in range(count):
    with open(f"tests/{index}.in", "rb") as stdin, open(f"/tmp/out{index}", "wb") as out, open(f"/tmp/err{index}", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-I", "solution.py"], stdin=stdin, stdout=out, stderr=err, start_new_session=True, close_fds=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    with open(f"/tmp/out{index}", "rb") as handle:
        stdout = handle.read(cap)
    with open(f"/tmp/err{index}", "rb") as handle:
        stderr = handle.read()[-2000:]
    for name in (f"/tmp/out{index}", f"/tmp/err{index}"):
        os.remove(name)
    row = {"i": index, "code": proc.returncode, "timed_out": timed_out,
           "out": stdout.decode("utf-8", "replace"), "err": stderr.decode("utf-8", "replace")}
    sys.stdout.write(nonce + " " + json.dumps(row) + "\n")
    sys.stdout.flush()
'''


@attrs.frozen(kw_only=True)
class JudgeReport:
    verdicts: tuple[str, ...]
    details: tuple[str, ...]  # one short line per test
    sandbox_verdict: str
    sandbox_reason: str

    @property
    def passed(self) -> int:
        return sum(v == ACCEPTED for v in self.verdicts)

    @property
    def fraction(self) -> float:
        return self.passed / len(self.verdicts) if self.verdicts else 0.0

    @property
    def overall(self) -> str:
        """The verdict of the first failed test (a judge's summary), or accepted."""
        return next((v for v in self.verdicts if v != ACCEPTED), ACCEPTED)

    def first_failure(self) -> str | None:
        for index, (verdict, detail) in enumerate(zip(self.verdicts, self.details)):
            if verdict != ACCEPTED:
                return f"test {index + 1}: {verdict} ({detail})"
        return None


def judge(sandbox: Sandbox, program: str, tests: Sequence[Sequence[str]], timeout_per_test: float) -> JudgeReport:
    nonce = secrets.token_hex(16)
    files = {"judge.py": HARNESS, "solution.py": program, **{f"tests/{i}.in": t[0] for i, t in enumerate(tests)}}
    argv = [PYTHON, "-I", "judge.py", str(len(tests)), repr(float(timeout_per_test)), str(OUTPUT_CAP)]
    timeout = STARTUP_SECONDS + (timeout_per_test + 0.5) * max(len(tests), 1)
    result = sandbox.run(files, argv, stdin=nonce + "\n", timeout=timeout)
    rows: dict[int, dict] = {}
    for line in result.stdout.splitlines():
        if line.startswith(nonce + " "):
            try:
                row = json.loads(line[len(nonce) + 1 :])
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("i"), int) and row["i"] not in rows:
                rows[row["i"]] = row
    lost = f"no result from the judge ({result.verdict}: {result.reason})"
    graded = [_grade(rows[i], str(t[1])) if i in rows else ("judge_lost", lost) for i, t in enumerate(tests)]
    return JudgeReport(verdicts=tuple(v for v, _ in graded), details=tuple(d for _, d in graded),
                       sandbox_verdict=result.verdict, sandbox_reason=result.reason)  # fmt: skip


def _grade(row: dict, expected: str) -> tuple[str, str]:
    code, err = row.get("code"), str(row.get("err", ""))
    if row.get("timed_out") or code in (-24, 152):  # SIGXCPU
        return "time_limit_exceeded", "ran past the time limit"
    if "MemoryError" in err or "Cannot allocate memory" in err:
        return "memory_limit_exceeded", "allocation failed under the memory limit"
    if "File too large" in err or code in (-25, 153):  # SIGXFSZ
        return "output_limit_exceeded", "wrote more than the output limit"
    if code != 0:
        last = [line for line in err.strip().splitlines() if line.strip()]
        return "runtime_error", f"exit status {code}" + (f": {last[-1][:200]}" if last else "")
    if str(row.get("out", "")).split() == expected.split():
        return ACCEPTED, "ok"
    return "wrong_answer", "output differs from the expected output"
