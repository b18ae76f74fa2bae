"""The environment facts the config checks and `rlsetup envs` need, behind a small protocol.

`RegistryCatalog` is the real one: it forwards to the environment registry
(`adapters.environments.registry`), imported on first use so that loading this module never
imports every environment. Environment classes validate their own kwargs with the classmethod
`resolve_kwargs` (an unknown key raises a ValueError naming it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class EnvironmentCatalog(Protocol):
    def registered_names(self) -> Sequence[str]: ...

    def get_environment_class(self, name: str) -> type: ...

    def load_environment_cls(self, path: str) -> type:
        """Import `package.module:ClassName`; raise with a clear message unless it is an environment."""
        ...

    def environment_info(self) -> Sequence[Any]:
        """Per environment: name, requires_answer, max_turns, summary, kwargs (name, default, description)."""
        ...


class RegistryCatalog:
    """The project's environment registry, imported lazily."""

    def registered_names(self) -> Sequence[str]:
        from adapters.environments.registry import registered_names

        return tuple(registered_names())

    def get_environment_class(self, name: str) -> type:
        from adapters.environments.registry import get_environment_class

        return get_environment_class(name)

    def load_environment_cls(self, path: str) -> type:
        from adapters.environments.registry import load_environment_cls

        return load_environment_cls(path)

    def environment_info(self) -> Sequence[Any]:
        from adapters.environments.registry import environment_info

        return environment_info()
