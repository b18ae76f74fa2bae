"""`EnvironmentConfig`: which environment runs the episodes, and its knobs."""

from __future__ import annotations

from typing import Any

import attrs

from domain.config.rules import positive


@attrs.frozen(kw_only=True)
class EnvironmentConfig:
    environment_type: str | None = "react_math"
    environment_kwargs: dict[str, Any] = attrs.field(factory=dict)
    # Import path `package.module:ClassName` of a BaseEnvironment subclass; replaces environment_type.
    environment_cls: str | None = None
    # None = the environment's own max_turns.
    max_turns: int | None = attrs.field(default=None, validator=positive)
