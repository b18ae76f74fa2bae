"""Validators whose messages name the key, the value and the rule (`'x' must be > 0: -1`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import attrs


def positive(_i: object, a: attrs.Attribute, v: Any) -> None:
    if v is not None and not v > 0:
        raise ValueError(f"'{a.name}' must be > 0: {v!r}")


def non_negative(_i: object, a: attrs.Attribute, v: Any) -> None:
    if v is not None and not v >= 0:
        raise ValueError(f"'{a.name}' must be >= 0: {v!r}")


def at_least(bound: float):
    def check(_i: object, a: attrs.Attribute, v: Any) -> None:
        if v is not None and not v >= bound:
            raise ValueError(f"'{a.name}' must be >= {bound}: {v!r}")

    return check


def in_unit_interval(_i: object, a: attrs.Attribute, v: Any) -> None:
    if v is not None and not 0 < v <= 1:
        raise ValueError(f"'{a.name}' must be in (0, 1]: {v!r}")


def one_of(choices: Collection[str]):
    def check(_i: object, a: attrs.Attribute, v: Any) -> None:
        if v is not None and v not in choices:
            raise ValueError(f"'{a.name}' must be one of {sorted(choices)}: {v!r}")

    return check


def port(_i: object, a: attrs.Attribute, v: Any) -> None:
    if v is not None and not 0 < v < 65536:
        raise ValueError(f"'{a.name}' must be a TCP port in 1..65535: {v!r}")
