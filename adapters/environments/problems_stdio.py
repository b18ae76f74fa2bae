"""Generated stdin/stdout problems (`code_contests`, `codeforces`): statement, reference program,
public examples and hidden tests, all from one seed.

A problem draws a template (`problems_stdio_templates.TEMPLATES`) and its parameters from the
seed, then `num_tests` inputs from a per-problem seed; expected outputs come from the template's
reference `solve` run on the host (our code). The first `num_examples` tests are shown in the
statement; all tests are judged. The reference program is `solve`'s source plus a stdin/stdout
main. A problem belongs to the eval split iff the hash of its statement and tests falls in the
eval bucket, so the splits never share a problem.
"""

from __future__ import annotations

import inspect
from typing import Any

import attrs

from adapters.environments.problems_functions import in_eval_bucket, seeded_rng
from adapters.environments.problems_stdio_templates import TEMPLATES, StdioTemplate

_MAX_DRAWS_PER_PROBLEM = 200


@attrs.frozen(kw_only=True)
class StdioProblem:
    problem_id: str
    template: str
    rating: int
    statement: str
    tests: tuple[tuple[str, str], ...]  # (input, expected output)
    reference: str  # a complete Python program


def make_problem(template: StdioTemplate, seed_parts: tuple, num_tests: int, num_examples: int) -> StdioProblem:
    rng = seeded_rng("stdio", template.name, *seed_parts)
    params = template.params(rng)
    tests = []
    for index in range(num_tests):
        text = template.gen(rng, params, index)
        tests.append((text, template.solve(text, params)))
    examples = "".join(f"\nExample {i + 1}\nInput:\n{inp}Output:\n{out}" for i, (inp, out) in enumerate(tests[:num_examples]))
    statement = template.statement.format(**params) + "\n" + examples
    reference = f"{inspect.getsource(template.solve)}\nimport sys\nsys.stdout.write({template.solve.__name__}(sys.stdin.read(), {params!r}))\n"
    problem_id = f"{template.name}/" + "/".join(map(str, seed_parts))
    return StdioProblem(problem_id=problem_id, template=template.name, rating=template.rating, statement=statement,
                        tests=tuple(tests), reference=reference)  # fmt: skip


def generate(
    env_name: str, split: str, count: int, seed: int, fraction: float, num_tests: int, num_examples: int,
    ratings: tuple[int, int] = (0, 10**6),
) -> list[StdioProblem]:
    """`count` problems of `split`, deterministic under `seed`, rating within `ratings`."""
    templates = [t for t in TEMPLATES if ratings[0] <= t.rating <= ratings[1]]
    if not templates:
        raise ValueError(f"environment {env_name!r}: no problem template has a rating in {list(ratings)}")
    rng = seeded_rng(env_name, split, seed)
    found: list[StdioProblem] = []
    for draw in range(max(count, 1) * _MAX_DRAWS_PER_PROBLEM):
        if len(found) == count:
            break
        template = templates[draw % len(templates)] if draw < len(templates) else rng.choice(templates)
        problem = make_problem(template, (seed, split, draw), num_tests, num_examples)
        if in_eval_bucket(problem.statement + repr(problem.tests), fraction) == (split == "eval"):
            found.append(problem)
    if len(found) < count:
        raise ValueError(f"environment {env_name!r}: found only {len(found)} {split} problems (asked for {count})")
    return found


def problem_metadata(problem: StdioProblem, split: str) -> dict[str, Any]:
    return {"problem_id": problem.problem_id, "template": problem.template, "rating": problem.rating, "split": split,
            "tests": [list(t) for t in problem.tests], "reference": problem.reference}  # fmt: skip
