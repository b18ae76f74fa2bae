"""Build TRL's `GRPOTrainer` for online GRPO with our generation backend plugged in.

`build_grpo_trainer` makes TRL's config from our `grpo:` section (`adapters.trl.config`),
constructs the trainer with our reward functions, dataset, tokenizer and callbacks, then
installs `ServerGeneration` (`adapters.trl.generation`). TRL's `PrinterCallback` (the print of every
log dict that replaces its tqdm bar when `disable_tqdm` is set) is removed: `MetricsCallback` reports. `TrlTrainer` is the `OnlineTrainer`
port of `application.run_online_grpo` over it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers.trainer_callback import PrinterCallback
from trl import GRPOTrainer

from adapters.trl.config import trl_config
from adapters.trl.generation import ServerGeneration, install_generation
from domain.config.grpo import GRPOConfig


def build_grpo_trainer(
    *,
    model: Any,
    tokenizer: Any,
    grpo: GRPOConfig,
    reward_funcs: Sequence[Any],
    reward_weights: Sequence[float],
    train_dataset: Any,
    generation: ServerGeneration,
    callbacks: Sequence[Any] = (),
    overrides: Mapping[str, Any] | None = None,
) -> GRPOTrainer:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=list(reward_funcs),
        args=trl_config(grpo, reward_weights=reward_weights, overrides=overrides),
        train_dataset=train_dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )
    trainer.remove_callback(PrinterCallback)  # our metrics callback and progress bar report instead
    install_generation(trainer, generation)
    return trainer


class TrlTrainer:
    """`OnlineTrainer` over a GRPOTrainer."""

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.trainer = trainer

    @property
    def steps_done(self) -> int:
        return int(self.trainer.state.global_step)

    def train(self) -> None:
        self.trainer.train()
