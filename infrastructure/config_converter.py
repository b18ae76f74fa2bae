"""A strict cattrs converter for the run configuration: YAML values -> frozen attrs sections.

Deliberate departures from cattrs' defaults, which coerce with the target type's constructor
(`int("3")`, `float("1e-5")`, `bool("false") is True`, a string iterated into a tuple):
- `int` takes an int only (a bool is refused); `float` takes an int or a float (1 -> 1.0), never
  a string or a bool; `str` takes a string only; `bool` takes true/false only.
- a section (attrs class) or `dict[str, Any]` takes a mapping only; `tuple[X, ...]` takes a list.
- every attrs class refuses unknown keys (`forbid_extra_keys=True`); nothing is ever renamed.
A refused value raises `WrongType`, which the loader renders with the key, value and expected type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.gen import make_dict_structure_fn


class WrongType(TypeError):
    """A YAML value of the wrong kind for its key."""

    def __init__(self, value: Any, expected: str) -> None:
        super().__init__(f"expected {expected}, got {type(value).__name__}: {value!r}")
        self.value = value
        self.expected = expected


def make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook_factory(_is_str_any_dict, lambda _t: _str_any_dict)
    converter.register_structure_hook_factory(_is_homogeneous_tuple, lambda t: _list_only_tuple(t, converter))
    converter.register_structure_hook_factory(attrs.has, lambda cl: _mapping_only_class(cl, converter))
    return converter


def _strict_int(value: Any, _type: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongType(value, "an integer")
    return value


def _strict_float(value: Any, _type: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WrongType(value, "a number")
    return float(value)


def _strict_str(value: Any, _type: type) -> str:
    if not isinstance(value, str):
        raise WrongType(value, "a string")
    return value


def _strict_bool(value: Any, _type: type) -> bool:
    if not isinstance(value, bool):
        raise WrongType(value, "true or false")
    return value


def _is_str_any_dict(tp: Any) -> bool:
    return get_origin(tp) is dict and get_args(tp) == (str, Any)


def _str_any_dict(value: Any, _type: type) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise WrongType(value, "a mapping")
    for key in value:
        if not isinstance(key, str):
            raise WrongType(key, "a mapping with string keys")
    return dict(value)


def _is_homogeneous_tuple(tp: Any) -> bool:
    args = get_args(tp)
    return get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


def _list_only_tuple(tp: Any, converter: cattrs.Converter) -> Callable[[Any, Any], tuple]:
    structure = homogenous_tuple_structure_factory(tp, converter)

    def hook(value: Any, _type: Any) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise WrongType(value, "a list")
        return structure(value, tp)

    return hook


def _mapping_only_class(cl: type, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    structure = make_dict_structure_fn(cl, converter, _cattrs_forbid_extra_keys=True)

    def hook(value: Any, _type: Any) -> Any:
        if not isinstance(value, Mapping):
            raise WrongType(value, "a mapping")
        return structure(value, cl)

    return hook
