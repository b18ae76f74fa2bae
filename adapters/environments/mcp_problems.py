"""Problems for the `mcp` environment whose answers need the bundled server's tools.

Kinds (the `tasks` kwarg): `arithmetic` (three- and four-digit products and sums: calculator),
`units` (convert_units, rounded to 2 decimals), `weekday` (day_of_week), `date_offset`
(add_days), `days_between` (days_between), `area` (country_facts). Each kind is a fixed universe
of questions generated from a fixed seed; the answers are computed with the same functions the
server runs (`mcp_tools`), so they agree with what the tools return.
Scoring (`score_answer`): numeric answers compare by value (within half of the last asked
decimal); other answers compare after normalisation (case, accents, punctuation).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import re

from adapters.environments import mcp_tools
from adapters.environments.qa_search_scoring import normalize
from adapters.search.geography import countries

TASKS = ("arithmetic", "units", "weekday", "date_offset", "days_between", "area")
UNIVERSE = 3000
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_UNIT_NAMES = {"mi": "miles", "km": "kilometres", "ft": "feet", "m": "metres", "lb": "pounds", "kg": "kilograms",
               "gal": "US gallons", "l": "litres", "F": "degrees Fahrenheit", "C": "degrees Celsius", "oz": "ounces", "g": "grams"}
_CONVERSIONS = (("mi", "km"), ("km", "mi"), ("ft", "m"), ("lb", "kg"), ("kg", "lb"), ("gal", "l"), ("F", "C"), ("C", "F"), ("oz", "g"))


def generate(task: str) -> tuple[tuple[str, str], ...]:
    """The (question, answer) universe of `task`, deduplicated, in a fixed order."""
    builders = {"arithmetic": _arithmetic, "units": _units, "weekday": _weekday, "date_offset": _date_offset,
                "days_between": _days_between, "area": _area}
    if task not in builders:
        raise ValueError(f"mcp: unknown task {task!r} (known: {', '.join(TASKS)})")
    return _dedupe(builders[task]())


def score_answer(answer: str, reference: str) -> float:
    if _NUMBER.fullmatch(reference.strip()):
        found = _NUMBER.search(answer)
        if found is None:
            return 0.0
        decimals = len(reference.partition(".")[2])
        tolerance = 0.5 * 10**-decimals + 1e-9 if decimals else 1e-9
        return 1.0 if abs(float(found.group().replace(",", "")) - float(reference)) <= tolerance else 0.0
    return 1.0 if normalize(answer) == normalize(reference) and normalize(reference) else 0.0


def _dedupe(rows: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(dict(rows).items())


def _date(rng: random.Random) -> str:
    return (dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(200 * 365))).isoformat()


@functools.cache
def _arithmetic() -> list[tuple[str, str]]:
    rng = random.Random("mcp/arithmetic")
    rows = []
    for _ in range(UNIVERSE):
        a, b, c = rng.randrange(100, 10000), rng.randrange(100, 1000), rng.randrange(1, 10000)
        expression = f"{a} * {b} {rng.choice('+-')} {c}"
        rows.append((f"What is {expression}?", mcp_tools.calculator(expression)))
    return rows


@functools.cache
def _units() -> list[tuple[str, str]]:
    rng = random.Random("mcp/units")
    rows = []
    for _ in range(UNIVERSE):
        source, target = rng.choice(_CONVERSIONS)
        value = round(rng.uniform(1, 500), 1)
        answer = f"{mcp_tools.convert(value, source, target):.2f}"
        rows.append((f"Convert {value:g} {_UNIT_NAMES[source]} to {_UNIT_NAMES[target]}, rounded to 2 decimal places.", answer))
    return rows


@functools.cache
def _weekday() -> list[tuple[str, str]]:
    rng = random.Random("mcp/weekday")
    return [(f"On which day of the week was {d}?", mcp_tools.day_of_week(d)) for d in (_date(rng) for _ in range(UNIVERSE))]


@functools.cache
def _date_offset() -> list[tuple[str, str]]:
    rng = random.Random("mcp/date_offset")
    rows = []
    for _ in range(UNIVERSE):
        start, days = _date(rng), rng.randrange(10, 2000)
        rows.append((f"Which date is {days} days after {start}? Give it as YYYY-MM-DD.", mcp_tools.add_days(start, days)))
    return rows


@functools.cache
def _days_between() -> list[tuple[str, str]]:
    rng = random.Random("mcp/days_between")
    rows = []
    for _ in range(UNIVERSE):
        start, end = sorted((_date(rng), _date(rng)))
        rows.append((f"How many days are there from {start} to {end}?", mcp_tools.days_between(start, end)))
    return rows


@functools.cache
def _area() -> list[tuple[str, str]]:
    return [(f"What is the area of {c.name} in square kilometres, according to country_facts?", f"{c.area_km2:g}")
            for c in countries() if c.area_km2 > 0]
