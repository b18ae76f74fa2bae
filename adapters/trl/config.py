"""Our `grpo:` section as TRL's own `GRPOConfig`: same field names, TRL's defaults for the rest.

Every field of `domain.config.grpo.GRPOConfig` is passed under its own name, except `use_vllm`,
which is given to TRL as False: TRL's `VLLMGeneration` is replaced by `ServerGeneration` after
construction (see `adapters.trl.generation`), and `install_generation` turns `use_vllm` back on.
The vLLM server fields are passed through unchanged (TRL never dials them; we do).
Pinned on purpose: `multi_objective_aggregation="sum_then_normalize"` (keeps the reward term list
exact, `adapters.trl.rewards`), `report_to="none"` and `disable_tqdm` (our metrics sink and
progress bar report), `bf16=False`/`fp16=False` (no autocast: the model trains in the dtype it
was loaded in, `model.dtype`, so trainer and server log-probs agree), `save_strategy="no"` (the
job saves the final model itself), `use_cpu` when no CUDA device is visible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
from trl import GRPOConfig as TRLGRPOConfig

from domain.config.grpo import GRPOConfig

PINNED: Mapping[str, Any] = {
    "multi_objective_aggregation": "sum_then_normalize",
    "report_to": "none",
    "disable_tqdm": True,
    "bf16": False,
    "fp16": False,
    "save_strategy": "no",
    "remove_unused_columns": False,
}


class TRLConfigError(ValueError):
    """TRL refused the combination of `grpo:` fields (its message says which)."""


def trl_config(
    grpo: GRPOConfig,
    *,
    reward_weights: Sequence[float],
    overrides: Mapping[str, Any] | None = None,
) -> TRLGRPOConfig:
    """TRL's GRPOConfig for `grpo`; `overrides` (tests, the job) win over everything."""
    fields = attrs.asdict(grpo)
    fields["use_vllm"] = False
    kwargs: dict[str, Any] = {**fields, **PINNED, "reward_weights": list(reward_weights)}
    kwargs["use_cpu"] = not torch.cuda.is_available()
    kwargs.update(overrides or {})
    try:
        return TRLGRPOConfig(**kwargs)
    except (ValueError, TypeError) as error:
        raise TRLConfigError(f"TRL's GRPOConfig refused the grpo section: {error}") from error
