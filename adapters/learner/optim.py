"""AdamW and its learning-rate schedule under TRL/transformers' defaults.

As `transformers.Trainer` does by default: weight decay on every trainable parameter except
biases and normalisation weights, `adam_epsilon` 1e-8, and the `linear` schedule with no warmup,
so the learning rate falls from `learning_rate` to 0 over `max_steps` optimizer steps (a call
past `max_steps` trains at lr 0, as TRL would have stopped).
"""

from __future__ import annotations

import torch
from torch import nn

from domain.config.grpo import GRPOConfig

ADAM_EPSILON = 1e-8


def _no_decay_names(model: nn.Module) -> set[str]:
    names: set[str] = set()
    for module_name, module in model.named_modules():
        is_norm = "norm" in type(module).__name__.lower()
        for param_name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            if is_norm or param_name == "bias":
                names.add(full)
    return names


def build_optimizer(model: nn.Module, config: GRPOConfig) -> torch.optim.AdamW:
    no_decay = _no_decay_names(model)
    decay_params, plain_params = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (plain_params if name in no_decay else decay_params).append(param)
    groups = [
        {"params": decay_params, "weight_decay": config.weight_decay},
        {"params": plain_params, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=ADAM_EPSILON,
    )


def build_schedule(optimizer: torch.optim.Optimizer, max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, (max_steps - step) / max_steps))
