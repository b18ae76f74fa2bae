"""Small builders the container calls: values derived from the config, in one place.

- the sync targets (one weight-transfer group per server, trainer rank 0, group ports from
  `vllm_group_port` or each server's own `group_port`);
- the weight-sync mode (`rolling_sync`, logged once at start): rolling, one server at a time so
  N-1 keep generating, when there is more than one server AND one training process AND plain
  weights (no PEFT LoRA to fold, no DTensor (FSDP2/TP/EP) or hand-sliced shard to gather);
  otherwise the concurrent flush of every server. Multi-rank runs always flush concurrently:
  every rank must join the same gathers, once per sync (not a config key: it follows from the run);
- the loop settings (prefetch is turned off, with a warning, when only one server is
  configured: a single server blocks during the sync, so nothing can overlap);
- the training problem stream and the held-out evaluator;
- the effort length term of the loop (from the reasoning markers the container resolved).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence

import attrs
from torch import nn

from adapters.weights import dtensor, layout, lora, shards
from application.evaluate import HeldOutEvaluator
from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.ports.weight_sync import TransferInit, WeightSyncServer, WeightTransport
from application.run_env_grpo import LoopSettings
from application.sync_report import SyncTarget
from domain.config import RunConfig
from domain.thinking_budget import ReasoningMarkers
from infrastructure.reasoning_tokens import effort_length

log = logging.getLogger("rlsetup")

# Packed broadcast bucket size (vLLM's default is 1 GiB, `DEFAULT_PACKED_BUFFER_SIZE_BYTES`) and
# the tensors per `/update_weights` call (1 GiB; also SGLang's single-buffer bucket). Buckets
# smaller than a chunk give the double-buffered sender and the pipelined gloo receiver something
# to overlap inside one call: measured in bench/sync_bandwidth.py (results/sync_bandwidth.json).
PACKED_BUFFER_BYTES = 256 * 1024**2
CHUNK_BYTES = 1024**3
PROBLEM_POOL_SEED_STRIDE = 100_003
# Receive buffers the server rotates through. On a small CPU host, overlapping the next gloo
# receive with the current layer load contends for the same cores and measured slower (500M:
# 2.50 s with one buffer, 3.40 s with two; bench/sync_bandwidth.py); GPUs overlap for free.
PACKED_NUM_BUFFERS = {"gloo": 1, "nccl": 2}


def group_ports(config: RunConfig, count: int) -> list[int]:
    configs = config.training.rollout_server_configs
    base = config.grpo.vllm_group_port
    return [
        (configs[i].group_port if i < len(configs) and configs[i].group_port else base + i) for i in range(count)
    ]


def sync_targets(
    urls: Sequence[str],
    config: RunConfig,
    server_factory: Callable[..., WeightSyncServer],
    transport_factory: Callable[[], WeightTransport],
    master_address: str = "127.0.0.1",
) -> list[SyncTarget]:
    return [
        SyncTarget(
            server=server_factory(url),
            transport=transport_factory(),
            init=TransferInit(
                master_address=master_address,
                master_port=port,
                rank_offset=1,
                world_size=0,  # set at connect() from the server's /get_world_size
                packed=True,
                packed_buffer_size_bytes=PACKED_BUFFER_BYTES,
                packed_num_buffers=PACKED_NUM_BUFFERS[config.server.weight_transfer_backend],
            ),
        )
        for url, port in zip(urls, group_ports(config, len(urls)))
    ]


def rolling_sync(urls: Sequence[str], model: nn.Module, *, world_size: int | None = None) -> bool:
    """Whether `SyncWeights` rolls (one server at a time) or flushes every server at once; logs it."""
    ranks = layout.world_size() if world_size is None else world_size
    rolling, why = sync_mode(len(urls), model, world_size=ranks)
    if rolling:
        count = len(urls)
        log.info("weight sync: rolling, one server at a time (%d of %d keep generating): %s", count - 1, count, why)
    else:
        log.info("weight sync: concurrent flush of all %d server(s): %s", len(urls), why)
    return rolling


def sync_mode(server_count: int, model: nn.Module, *, world_size: int) -> tuple[bool, str]:
    """(rolling?, why): rolling needs more than one server, one training process, plain weights."""
    if server_count < 2:
        return False, "a single server blocks during the sync whichever way it is flushed"
    if world_size != 1:
        return False, f"{world_size} training ranks must join the same gathers, once per sync"
    wrapped = unplain_weights(model)
    if wrapped is not None:
        return False, f"the weights are not plain ({wrapped}); the rolling sync is for plain single-process weights"
    return True, f"{server_count} servers, one training process, plain weights"


def unplain_weights(model: nn.Module) -> str | None:
    """What makes the weight source more than a read of local tensors, or None when it is plain:
    a PEFT LoRA layer or `modules_to_save` copy (folded per send), a DTensor parameter (FSDP2,
    TP, EP) or a hand-sliced shard (`adapters.weights.shards`), each gathered collectively."""
    for name, module in model.named_modules():
        where = name or "<root>"
        if lora.is_lora_layer(module) or lora.is_modules_to_save(module):
            return f"PEFT adapter at {where}"
        for param_name, param in module.named_parameters(recurse=False):
            if dtensor.is_dtensor(param):
                return f"DTensor parameter {where}.{param_name}"
            if shards.shard_of(module, param_name) is not None:
                return f"declared shard {where}.{param_name}"
    return None


def sampling(config: RunConfig) -> SamplingParams:
    t = config.training
    return SamplingParams(
        max_tokens=t.rollout_max_tokens,
        temperature=config.grpo.temperature if t.rollout_temperature is None else t.rollout_temperature,
        top_p=config.grpo.top_p if t.rollout_top_p is None else t.rollout_top_p,
        thinking_token_budget=t.rollout_max_thinking_tokens,
    )


def loop_settings(config: RunConfig, urls: Sequence[str], markers: ReasoningMarkers | None = None) -> LoopSettings:
    prefetch = config.training.enable_prefetch
    if prefetch and len(urls) < 2:
        log.warning(
            "enable_prefetch is on but only one rollout server is configured: a single server blocks "
            "during the weight sync, so prefetch is disabled (use rollout_server_configs for overlap)"
        )
        prefetch = False
    return LoopSettings(
        max_steps=config.grpo.max_steps,
        prompts_per_step=config.training.prompts_per_step,
        num_generations=config.grpo.num_generations,
        scale_rewards=config.grpo.scale_rewards,
        sync_weights_every_n_steps=config.training.sync_weights_every_n_steps,
        enable_prefetch=prefetch,
        sampling=sampling(config),
        max_turns=config.environment.max_turns,
        reward_terms=config.rewards,
        evaluate_before=config.eval.before_training,
        rollout_timeout=batch_timeout(config, config.training.prompts_per_step * config.grpo.num_generations),
        effort_length=effort_length(config.training, markers),
    )


def batch_timeout(config: RunConfig, episodes: int, turns_bound: int = 8) -> float:
    """Bound on one batch of rollouts: every wave of concurrent episodes may use every turn's timeout."""
    t = config.training
    waves = -(-episodes // t.max_concurrent_rollouts)
    turns = config.environment.max_turns or turns_bound
    return t.rollout_connection_timeout * waves * turns


def training_problems(config: RunConfig, env_cls) -> Iterator[Problem]:
    """An endless stream of training problems, a fresh seeded pool each epoch.

    Returned as an `itertools.chain`, not a generator: on Python 3.11 asyncio (and so the DI
    container) mistakes a generator object for a coroutine.
    """
    kwargs = config.environment.environment_kwargs
    pool_size = config.grpo.max_steps * config.training.prompts_per_step

    def epoch_pool(epoch: int):
        return env_cls.problems("train", pool_size, config.grpo.seed + epoch * PROBLEM_POOL_SEED_STRIDE, **kwargs)

    return itertools.chain.from_iterable(map(epoch_pool, itertools.count()))


def evaluator(config: RunConfig, env_cls, pool) -> HeldOutEvaluator | None:
    if config.eval.num_problems == 0:
        return None
    problems = env_cls.problems("eval", config.eval.num_problems, config.eval.seed, **config.environment.environment_kwargs)
    return HeldOutEvaluator(
        pool=pool,
        problems=problems,
        # Seeded (eval.seed) like online GRPO's evaluation: before and after see the same random stream.
        sampling=attrs.evolve(sampling(config), seed=config.eval.seed),
        batch_size=config.training.eval_rollout_batch_size,
        reward_terms=config.rewards,
        max_turns=config.environment.max_turns,
        timeout=batch_timeout(config, config.training.eval_rollout_batch_size),
    )
