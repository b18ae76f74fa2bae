"""The tools our bundled MCP server serves, as plain functions (also used to compute answers).

- `calculator(expression)`: bounded arithmetic (the AST calculator of `react_math`);
- `convert_units(value, from_unit, to_unit)`: length, mass, volume and temperature;
- `day_of_week(date)`, `add_days(date, days)`, `days_between(start, end)`: ISO dates;
- `country_facts(country)`: capital, region and area of a UN member state (offline geography).
Every function returns text and raises `ToolInputError` with a message for the model on bad
input; the server turns that into an MCP tool error.
"""

from __future__ import annotations

import datetime as dt

from adapters.environments.calculator import CalculatorError, evaluate, format_number
from adapters.search.geography import countries

MAX_DAYS = 100_000


class ToolInputError(ValueError):
    """Input a tool cannot work with; the message is shown to the model."""


_FACTORS = {  # unit -> (dimension, factor to the base unit)
    "m": ("length", 1.0), "km": ("length", 1000.0), "cm": ("length", 0.01), "mm": ("length", 0.001),
    "mi": ("length", 1609.344), "yd": ("length", 0.9144), "ft": ("length", 0.3048), "in": ("length", 0.0254),
    "kg": ("mass", 1.0), "g": ("mass", 0.001), "lb": ("mass", 0.45359237), "oz": ("mass", 0.028349523125),
    "l": ("volume", 1.0), "ml": ("volume", 0.001), "gal": ("volume", 3.785411784),
}
_TEMPERATURES = ("c", "f", "k")
UNITS = tuple(_FACTORS) + ("C", "F", "K")


def calculator(expression: str) -> str:
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        raise ToolInputError(str(exc)) from None


def convert(value: float, from_unit: str, to_unit: str) -> float:
    source, target = from_unit.strip(), to_unit.strip()
    if source.lower() in _TEMPERATURES and target.lower() in _TEMPERATURES:
        return _from_kelvin(_to_kelvin(value, source.lower()), target.lower())
    if source not in _FACTORS or target not in _FACTORS:
        bad = source if source not in _FACTORS else target
        raise ToolInputError(f"unknown unit {bad[:20]!r} (known: {', '.join(UNITS)})")
    if _FACTORS[source][0] != _FACTORS[target][0]:
        raise ToolInputError(f"cannot convert {_FACTORS[source][0]} ({source}) to {_FACTORS[target][0]} ({target})")
    return value * _FACTORS[source][1] / _FACTORS[target][1]


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    return f"{round(convert(float(value), from_unit, to_unit), 4):g} {to_unit.strip()}"


def day_of_week(date: str) -> str:
    return _date(date).strftime("%A")


def add_days(date: str, days: int) -> str:
    if abs(int(days)) > MAX_DAYS:
        raise ToolInputError(f"days must be within ±{MAX_DAYS}, got {days}")
    try:
        return (_date(date) + dt.timedelta(days=int(days))).isoformat()
    except OverflowError:
        raise ToolInputError("the resulting date is out of range") from None


def days_between(start: str, end: str) -> str:
    return str((_date(end) - _date(start)).days)


def country_facts(country: str) -> str:
    wanted = " ".join(country.split()).lower()
    for row in countries():
        if wanted in (row.name.lower(), row.code.lower()):
            capitals = " and ".join(row.capitals)
            return f"{row.name}: capital {capitals}; region {row.region} ({row.subregion}); area {row.area_km2:g} km2"
    raise ToolInputError(f"no country called {country[:60]!r}; use the English short name, e.g. Kenya")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise ToolInputError(f"dates are written YYYY-MM-DD, got {str(text)[:40]!r}") from None


def _to_kelvin(value: float, unit: str) -> float:
    return {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"c": value - 273.15, "f": (value - 273.15) * 9 / 5 + 32, "k": value}[unit]
