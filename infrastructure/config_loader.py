"""Load a run configuration from YAML into a validated `RunConfig`, or say exactly what is wrong.

`load_run_config(path)` reads the file with a safe YAML loader, structures it with the strict
converter (`config_converter`), then runs the cross-field checks (`config_checks`). Every user
mistake raises one `ConfigError` holding one line per problem, in cattrs' `transform_error`
style (`extra fields found (rollout_temprature) @ $.training`). No spelling is ever migrated:
an unknown key is an error, with a "did you mean" hint for a near miss.

Deliberate departures from `yaml.safe_load`: the loader is a `SafeLoader` subclass that also reads
`1e-5` as a float (YAML 1.1 wants `1.0e-5` and would give the string "1e-5"), and it refuses a
key written twice in one mapping instead of silently keeping the last.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import attrs
import yaml
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from domain.config import RunConfig
from infrastructure.config_checks import EnvironmentCatalog, semantic_problems
from infrastructure.config_converter import WrongType, make_converter

_CONVERTER = make_converter()


class ConfigError(ValueError):
    """One or more problems with a configuration; `problems` holds one line each."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [prefix + problem for problem in self.problems]


def load_run_config(path: str | Path, catalog: EnvironmentCatalog | None = None) -> RunConfig:
    """Read, structure and check the YAML file at `path`; raise `ConfigError` naming the file."""
    source = str(path)
    try:
        return parse_run_config(read_yaml_mapping(Path(path)), catalog)
    except ConfigError as exc:
        raise ConfigError(exc.problems, source=source) from None


def parse_run_config(data: Any, catalog: EnvironmentCatalog | None = None) -> RunConfig:
    """Structure an already-parsed mapping and run the semantic checks."""
    config = structure_run_config(data)
    problems = semantic_problems(config, catalog)
    if problems:
        raise ConfigError(problems)
    return config


def structure_run_config(data: Any) -> RunConfig:
    try:
        return _CONVERTER.structure(data, RunConfig)
    except (ClassValidationError, IterableValidationError) as exc:
        raise ConfigError(structure_problems(exc)) from None
    except (ValueError, TypeError) as exc:  # RunConfig's own validators, outside any section
        raise ConfigError([_leaf(exc, None, "$", "$")]) from None


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(["config file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read the config file: {exc}"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(exc)]) from None
    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"{type(data).__name__}: {data!r:.40}"
        raise ConfigError([f"the top level must be a mapping of sections (job, model, grpo, ...), found {found}"])
    return data


def structure_problems(exc: BaseException, path: str = "$") -> list[str]:
    """One line per leaf error of a detailed cattrs validation error, with its `$.a.b[i]` path."""
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        children = [(sub, note.name, f"{path}.{note.name}") for sub, note in with_notes]
    elif isinstance(exc, IterableValidationError):
        with_notes, without = exc.group_exceptions()
        children = [(sub, None, f"{path}[{note.index!r}]") for sub, note in with_notes]
    else:
        return [_leaf(exc, None, path, path)]
    lines: list[str] = []
    for sub, key, sub_path in children:
        if isinstance(sub, (ClassValidationError, IterableValidationError)):
            lines.extend(structure_problems(sub, sub_path))
        else:
            lines.append(_leaf(sub, key, path, sub_path))
    lines.extend(_leaf(sub, None, path, path) for sub in without)
    return lines


def _leaf(exc: BaseException, key: str | None, parent: str, path: str) -> str:
    if isinstance(exc, WrongType):
        what = f"'{key}' must be" if key else "must be"
        return f"{what} {exc.expected}, got {type(exc.value).__name__}: {exc.value!r} @ {parent if key else path}"
    if isinstance(exc, KeyError) and key:
        return f"required field missing ('{key}') @ {parent}"
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"extra fields found ({', '.join(sorted(exc.extra_fields))}) @ {path}{_hint(exc)}"
    if isinstance(exc, (ValueError, TypeError)):
        return f"{exc} @ {path}"
    return f"{type(exc).__name__}: {exc} @ {path}"


def _hint(exc: ForbiddenExtraKeysError) -> str:
    known = [a.name for a in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
    pairs = []
    for bad in sorted(exc.extra_fields):
        close = difflib.get_close_matches(bad, known, n=1, cutoff=0.6)
        if close:
            pairs.append((bad, close[0]))
    if not pairs:
        return ""
    if len(pairs) == 1:
        return f" (did you mean '{pairs[0][1]}'?)"
    return " (did you mean " + ", ".join(f"'{good}' for '{bad}'" for bad, good in pairs) + "?)"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"invalid YAML{where}: {problem}"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that reads `1e-5` as a float and refuses duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue  # SafeLoader itself refuses unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_FLOAT_WITHOUT_DOT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_WITHOUT_DOT, list("-+0123456789"))
