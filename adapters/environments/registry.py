"""The environment registry: environment classes by name, and `environment_cls` import paths.

Built-in environments register themselves with `@register` when their module is imported; the
registry imports the built-in modules (`BUILTIN_MODULES`) on first lookup, so importing the
registry alone stays cheap. `load_environment_cls("pkg.mod:Class")` imports a user's class and
checks it is a `BaseEnvironment` subclass. `environment_info()` describes every registered class
(name, requires_answer, max_turns, kwargs with defaults and descriptions) for `rlsetup envs`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, TypeVar

import attrs

from adapters.environments.base import BaseEnvironment

BUILTIN_MODULES: tuple[str, ...] = (
    "adapters.environments.react_math",
    "adapters.environments.qa_search",
    "adapters.environments.exam_qa",
    "adapters.environments.mcp_env",
    "adapters.environments.native_coding",
    "adapters.environments.code_contests",
    "adapters.environments.codeforces",
    "adapters.environments.swe",
)

_REGISTRY: dict[str, type[BaseEnvironment]] = {}
_builtins_loaded = False

E = TypeVar("E", bound=type[BaseEnvironment])


class UnknownEnvironment(KeyError):
    """No environment of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class EnvironmentClassError(ValueError):
    """An `environment_cls` path that cannot be imported or is not a BaseEnvironment subclass."""


@attrs.frozen
class KwargInfo:
    name: str
    default: Any
    description: str


@attrs.frozen
class EnvironmentInfo:
    name: str
    requires_answer: bool
    max_turns: int
    kwargs: tuple[KwargInfo, ...]
    summary: str  # first line of the class docstring


def register(cls: E) -> E:
    """Class decorator: make `cls` available under `cls.name`."""
    if not (inspect.isclass(cls) and issubclass(cls, BaseEnvironment)):
        raise TypeError(f"only BaseEnvironment subclasses can be registered, not {cls!r}")
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} needs a non-empty class attribute 'name' to be registered")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and _qualified(existing) != _qualified(cls):
        raise ValueError(f"environment name {cls.name!r} is taken by {_qualified(existing)}; cannot register {_qualified(cls)}")
    _REGISTRY[cls.name] = cls
    return cls


def registered_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get_environment_class(name: str) -> type[BaseEnvironment]:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise UnknownEnvironment(f"unknown environment_type {name!r} (registered: {known})") from None


def environment_info() -> list[EnvironmentInfo]:
    return [describe(get_environment_class(name)) for name in registered_names()]


def describe(cls: type[BaseEnvironment]) -> EnvironmentInfo:
    doc = inspect.getdoc(cls) or ""
    return EnvironmentInfo(
        name=cls.name,
        requires_answer=cls.requires_answer,
        max_turns=cls.max_turns,
        kwargs=tuple(KwargInfo(name=k, default=s.default, description=s.description) for k, s in cls.kwargs.items()),
        summary=doc.splitlines()[0] if doc else "",
    )


def load_environment_cls(path: str) -> type[BaseEnvironment]:
    """Import `package.module:ClassName` and check it is a BaseEnvironment subclass."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise EnvironmentClassError(f"environment_cls {path!r} must look like 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvironmentClassError(f"environment_cls {path!r}: cannot import module {module_name!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EnvironmentClassError(f"environment_cls {path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not (inspect.isclass(obj) and issubclass(obj, BaseEnvironment)):
        raise EnvironmentClassError(f"environment_cls {path!r} is {obj!r}, not a BaseEnvironment subclass")
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(obj.__abstractmethods__))
        raise EnvironmentClassError(f"environment_cls {path!r} does not implement: {missing}")
    return obj


def resolve_environment_class(environment_type: str | None, environment_cls: str | None) -> type[BaseEnvironment]:
    """`environment_cls` when given (it replaces the type), else the registered `environment_type`."""
    if environment_cls:
        return load_environment_cls(environment_cls)
    if not environment_type:
        raise UnknownEnvironment("the environment config names neither environment_type nor environment_cls")
    return get_environment_class(environment_type)


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    for module_name in BUILTIN_MODULES:
        importlib.import_module(module_name)
    _builtins_loaded = True


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"

