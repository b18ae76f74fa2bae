"""GRPO hyperparameters under TRL's own `GRPOConfig` names and defaults (TRL 1.16).

Only the fields rlsetup acts on are accepted; any other key is refused by the parser rather
than silently ignored. Online GRPO hands these to TRL's `GRPOTrainer` unchanged; env GRPO's
own learner reads the same fields with the same meaning.
"""

from __future__ import annotations

import attrs

from domain.config.rules import at_least, in_unit_interval, non_negative, one_of, port, positive

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")


TRL_DEFAULT_SERVER = ("0.0.0.0", 8000)  # GRPOConfig's vllm_server_host / vllm_server_port defaults


@attrs.frozen(kw_only=True)
class GRPOConfig:
    # group and loss
    num_generations: int = attrs.field(default=8, validator=at_least(2))
    beta: float = attrs.field(default=0.0, validator=non_negative)
    epsilon: float = attrs.field(default=0.2, validator=positive)
    epsilon_high: float | None = attrs.field(default=None, validator=positive)
    scale_rewards: str = attrs.field(default="group", validator=one_of(SCALE_REWARDS))
    loss_type: str = attrs.field(default="dapo", validator=one_of(LOSS_TYPES))
    temperature: float = attrs.field(default=1.0, validator=positive)
    top_p: float = attrs.field(default=1.0, validator=in_unit_interval)
    max_completion_length: int = attrs.field(default=512, validator=positive)
    mask_truncated_completions: bool = False
    # optimisation (TrainingArguments names)
    learning_rate: float = attrs.field(default=1e-6, validator=positive)
    weight_decay: float = attrs.field(default=0.0, validator=non_negative)
    adam_beta1: float = attrs.field(default=0.9, validator=in_unit_interval)
    adam_beta2: float = attrs.field(default=0.999, validator=in_unit_interval)
    max_grad_norm: float = attrs.field(default=1.0, validator=positive)
    max_steps: int = attrs.field(default=100, validator=positive)
    per_device_train_batch_size: int = attrs.field(default=8, validator=positive)
    gradient_accumulation_steps: int = attrs.field(default=1, validator=positive)
    seed: int = 42
    logging_steps: int = attrs.field(default=1, validator=positive)
    output_dir: str = "runs/grpo"
    # TRL's vLLM server fields (online GRPO uses host/port; both jobs use the group port)
    use_vllm: bool = False
    vllm_mode: str = attrs.field(default="server", validator=one_of(("server",)))
    vllm_server_base_url: str | None = None
    vllm_server_host: str = "0.0.0.0"
    vllm_server_port: int = attrs.field(default=8000, validator=port)
    vllm_server_timeout: float = attrs.field(default=240.0, validator=positive)
    vllm_group_port: int = attrs.field(default=51216, validator=port)

    @property
    def external_server_url(self) -> str | None:
        """Online GRPO's server: `vllm_server_base_url`, else host:port when either differs from
        TRL's defaults (0.0.0.0:8000); None = start the embedded server of the `server:` section."""
        if self.vllm_server_base_url:
            return self.vllm_server_base_url.rstrip("/")
        if (self.vllm_server_host, self.vllm_server_port) != TRL_DEFAULT_SERVER:
            return f"http://{self.vllm_server_host}:{self.vllm_server_port}"
        return None

    @property
    def epsilon_upper(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high
