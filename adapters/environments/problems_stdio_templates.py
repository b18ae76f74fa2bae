"""The stdin/stdout problem family of `code_contests` and `codeforces`: 12 templates as code.

A template is a statement (formatted with seeded parameters), a Codeforces-like rating, a
reference `solve(text, p) -> str` (self-contained: it is also shipped, via its source, as the
reference program) and a seeded input generator `gen(rng, p, size) -> str` (`size` grows with the
test index, so later tests are larger). Parameters make each template a family of distinct problems.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import attrs


@attrs.frozen
class StdioTemplate:
    name: str
    rating: int
    statement: str  # str.format-ed with the parameters
    params: Callable[[random.Random], dict[str, Any]]
    solve: Callable[[str, dict[str, Any]], str]
    gen: Callable[[random.Random, dict[str, Any], int], str]


def _ints(rng: random.Random, n: int, lo: int, hi: int) -> str:
    return " ".join(str(rng.randint(lo, hi)) for _ in range(n))


def solve_sum_mod(text, p):
    nums = list(map(int, text.split()))
    return f"{sum(nums[1:1 + nums[0]]) % p['m']}\n"


def solve_max_subarray(text, p):
    nums = list(map(int, text.split()))[1:]
    best, cur = None, 0
    for x in nums:
        cur = max(x, cur + x)
        best = cur if best is None else max(best, cur)
    return f"{best}\n"


def solve_pairs_sum(text, p):
    nums = list(map(int, text.split()))[1:]
    seen, count = {}, 0
    for x in nums:
        count += seen.get(p["k"] - x, 0)
        seen[x] = seen.get(x, 0) + 1
    return f"{count}\n"


def solve_reverse_words(text, p):
    lines = text.splitlines()
    n = int(lines[0])
    return "".join(p["sep"].join(reversed(line.split())) + "\n" for line in lines[1:1 + n])


def solve_gcd_queries(text, p):
    import math

    nums = list(map(int, text.split()))
    q = nums[0]
    return "".join(f"{math.gcd(nums[1 + 2 * i], nums[2 + 2 * i]) * p['scale']}\n" for i in range(q))


def solve_count_primes(text, p):
    n = int(text.split()[0])
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\x00\x00"[: min(2, n + 1)]
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return f"{sum(1 for i in range(n + 1) if sieve[i] and i % p['mod'] == p['rem'])}\n"


def solve_brackets(text, p):
    pairs = {")": "(", "]": "[", "}": "{"}
    out = []
    for line in text.split()[1:]:
        stack, ok = [], True
        for ch in line:
            if ch in "([{":
                stack.append(ch)
            elif not stack or stack.pop() != pairs[ch]:
                ok = False
                break
        out.append(p["yes"] if ok and not stack else p["no"])
    return "\n".join(out) + "\n"


def solve_min_coins(text, p):
    amount = int(text.split()[0])
    best = [0] + [None] * amount
    for value in range(1, amount + 1):
        options = [best[value - c] for c in p["coins"] if c <= value and best[value - c] is not None]
        best[value] = min(options) + 1 if options else None
    return f"{-1 if best[amount] is None else best[amount]}\n"


def solve_lis(text, p):
    import bisect

    nums = list(map(int, text.split()))[1:]
    tails = []
    for x in nums:
        i = bisect.bisect_left(tails, x) if p["strict"] else bisect.bisect_right(tails, x)
        tails[i : i + 1] = [x]
    return f"{len(tails)}\n"


def solve_grid_paths(text, p):
    lines = text.split()
    rows, cols = int(lines[0]), int(lines[1])
    grid = lines[2 : 2 + rows]
    ways = [[0] * cols for _ in range(rows)]
    for r in range(rows):
        for c in range(cols):
            if grid[r][c] == "#":
                continue
            if r == 0 and c == 0:
                ways[r][c] = 1
            else:
                ways[r][c] = ((ways[r - 1][c] if r else 0) + (ways[r][c - 1] if c else 0)) % p["mod"]
    return f"{ways[rows - 1][cols - 1]}\n"


def solve_digit_powers(text, p):
    return "".join(f"{sum(int(d) ** p['k'] for d in tok)}\n" for tok in text.split()[1:])


def solve_interval_union(text, p):
    nums = list(map(int, text.split()))
    spans = sorted((nums[1 + 2 * i], nums[2 + 2 * i]) for i in range(nums[0]))
    total, end = 0, None
    for lo, hi in spans:
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return f"{total}\n"


def _grid(rng: random.Random, p: dict, size: int) -> str:
    rows, cols = rng.randint(1, 2 + size), rng.randint(1, 2 + size)
    cells = [["#" if rng.random() < p["density"] else "." for _ in range(cols)] for _ in range(rows)]
    cells[0][0] = cells[-1][-1] = "."
    return f"{rows} {cols}\n" + "\n".join("".join(row) for row in cells) + "\n"


def _brackets_line(rng: random.Random, size: int) -> str:
    if rng.random() < 0.5:
        stack, out = [], []
        for _ in range(rng.randint(1, 2 + size)):
            if stack and rng.random() < 0.5:
                out.append({"(": ")", "[": "]", "{": "}"}[stack.pop()])
            else:
                stack.append(rng.choice("([{"))
                out.append(stack[-1])
        return "".join(out) + "".join({"(": ")", "[": "]", "{": "}"}[c] for c in reversed(stack))
    return "".join(rng.choice("()[]{}") for _ in range(rng.randint(1, 2 + size)))


def _words(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(["alpha", "beta", "gamma", "x", "yy", "zeta", "io"]) for _ in range(rng.randint(1, 2 + size)))


TEMPLATES: tuple[StdioTemplate, ...] = (
    StdioTemplate("sum_mod", 800, "Read n, then n integers. Print their sum modulo {m}.", lambda r: {"m": r.choice([7, 1000, 10**9 + 7])},
                  solve_sum_mod, lambda r, p, s: f"{3 + s * 20}\n{_ints(r, 3 + s * 20, -10**9, 10**9)}\n"),
    StdioTemplate("max_subarray", 1200, "Read n, then n integers (each between -{lim} and {lim}). Print the largest sum of a non-empty contiguous subarray.",
                  lambda r: {"lim": r.choice([10, 1000])}, solve_max_subarray, lambda r, p, s: f"{1 + s * 30}\n{_ints(r, 1 + s * 30, -p['lim'], p['lim'])}\n"),
    StdioTemplate("pairs_sum", 1300, "Read n, then n integers. Print how many pairs of positions i < j have a_i + a_j = {k}.",
                  lambda r: {"k": r.randint(-5, 20)}, solve_pairs_sum, lambda r, p, s: f"{2 + s * 25}\n{_ints(r, 2 + s * 25, -10, 25)}\n"),
    StdioTemplate("reverse_words", 800, "Read n, then n lines of words. For each line print its words in reverse order, joined by {sep!r}.",
                  lambda r: {"sep": r.choice([" ", ",", " | "])}, solve_reverse_words,
                  lambda r, p, s: f"{1 + s}\n" + "".join(_words(r, s) + "\n" for _ in range(1 + s))),
    StdioTemplate("gcd_queries", 900, "Read q, then q pairs a b (1 <= a, b <= 10^12). For each pair print gcd(a, b) * {scale} on its own line.",
                  lambda r: {"scale": r.choice([1, 2, 3])}, solve_gcd_queries,
                  lambda r, p, s: f"{1 + s * 5}\n" + "".join(f"{r.randint(1, 10**12)} {r.randint(1, 10**12)}\n" for _ in range(1 + s * 5))),
    StdioTemplate("count_primes", 1000, "Read n (0 <= n <= 200000). Print how many primes p <= n satisfy p mod {mod} = {rem}.",
                  lambda r: (lambda m: {"mod": m, "rem": r.choice([x for x in range(m) if math.gcd(x, m) == 1])})(r.choice([2, 3, 4, 6])), solve_count_primes,
                  lambda r, p, s: f"{r.randint(0, 25000 * s + 10)}\n"),
    StdioTemplate("brackets", 1100, "Read n, then n strings of the characters ()[]{{}}. For each print {yes} if it is a balanced bracket sequence, else {no}.",
                  lambda r: r.choice([{"yes": "YES", "no": "NO"}, {"yes": "1", "no": "0"}]), solve_brackets,
                  lambda r, p, s: f"{1 + s}\n" + "".join(_brackets_line(r, s) + "\n" for _ in range(1 + s))),
    StdioTemplate("min_coins", 1500, "Coins have values {coins} (unlimited supply). Read an amount (0 <= amount <= 20000) and print the fewest coins summing to it, or -1 if impossible.",
                  lambda r: {"coins": sorted(r.sample([2, 3, 5, 7, 11, 13], 3))}, solve_min_coins, lambda r, p, s: f"{r.randint(0, 2500 * s + 5)}\n"),
    StdioTemplate("lis", 1600, "Read n, then n integers. Print the length of the longest {kind} subsequence.",
                  lambda r: r.choice([{"strict": True, "kind": "strictly increasing"}, {"strict": False, "kind": "non-decreasing"}]),
                  solve_lis, lambda r, p, s: f"{1 + s * 200}\n{_ints(r, 1 + s * 200, 0, 50)}\n"),
    StdioTemplate("grid_paths", 1400, "Read r and c, then r rows of c characters ('.' free, '#' blocked). Moving only right or down from the top-left to the bottom-right cell through free cells, print the number of paths modulo {mod}.",
                  lambda r: {"mod": r.choice([1000, 10**9 + 7]), "density": r.choice([0.1, 0.25])}, solve_grid_paths, _grid),
    StdioTemplate("digit_powers", 800, "Read n, then n non-negative integers. For each print the sum of the {k}-th powers of its decimal digits.",
                  lambda r: {"k": r.randint(2, 5)}, solve_digit_powers, lambda r, p, s: f"{1 + s}\n{_ints(r, 1 + s, 0, 10**(2 + s))}\n"),
    StdioTemplate("interval_union", 1300, "Read n, then n intervals lo hi (lo < hi). Print the total length of their union.",
                  lambda r: {}, solve_interval_union,
                  lambda r, p, s: (lambda k: f"{k}\n" + "".join((lambda a: f"{a} {a + r.randint(1, 30)}\n")(r.randint(0, 100 * s + 10)) for _ in range(k)))(1 + s * 4)),
)  # fmt: skip
