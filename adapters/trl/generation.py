"""`ServerGeneration`: what TRL's `GRPOTrainer` calls on `trainer.vllm_generation`, done our way.

The seam (TRL 1.16, no TRL file changed, no subclass): `GRPOTrainer` reaches its vLLM backend only
through `trainer.vllm_generation.sync_weights()` (when `state.global_step` moved since
`_last_loaded_step`) and `trainer.vllm_generation.generate(prompts, images, num_generations,
profiler)`, guarded by `trainer.use_vllm`. `install_generation` builds the trainer with
`use_vllm=False` (TRL's own `VLLMGeneration` needs `vllm` importable in the trainer and its
client talks to `trl vllm-serve` routes and refuses weight sync off CUDA), then sets those three
attributes. From then on TRL runs its vLLM path unchanged (importance-sampling correction
against the engine's sampling log-probs included), while:
- generation goes through our `GenerationServer` (vLLM's `/v1/completions`, token ids in and
  out), one request of `n = num_generations` per unique prompt, several in flight at once;
- `sync_weights` publishes version `global_step` through our `WeightPublisher` (the shared
  handshake + gather routine), skipping a version already published.
Multi-process (TRL's own server-mode scheme): every rank gathers all prompts (a group of
`num_generations` copies may span ranks, so groups are checked on the gathered list), the main
process alone generates and talks to the server, the results are broadcast and each rank keeps
its slice; every rank publishes (every rank joins the weight gather; only rank 0 sends).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from application.ports.generation import GenerationServer, SamplingParams
from application.ports.weight_publisher import PublishReport, WeightPublisher

GenerateResult = tuple[list[list[int]], list[list[int]], list[list[list[float]]], None]


class ServerGeneration:
    def __init__(
        self,
        *,
        server: GenerationServer,
        sampling: SamplingParams,
        publisher: WeightPublisher,
        concurrency: int = 16,
    ) -> None:
        self._server = server
        self._sampling = sampling
        self._publisher = publisher
        self._accelerator: Any | None = None
        self._concurrency = max(1, concurrency)
        self._step: Callable[[], int] | None = None
        self.published_version: int | None = None
        self.last_report: PublishReport | None = None

    def bind(self, step: Callable[[], int], accelerator: Any | None) -> None:
        """Where `sync_weights` reads the version to publish (the trainer's global step), and the ranks."""
        self._step, self._accelerator = step, accelerator

    # ---- WeightPublisher -----------------------------------------------------------------
    def publish(self, version: int) -> PublishReport:
        self.last_report = self._publisher.publish(version)
        self.published_version = version
        return self.last_report

    # ---- what TRL calls ------------------------------------------------------------------
    def sync_weights(self) -> None:
        if self._step is None:
            raise RuntimeError("ServerGeneration.sync_weights before bind(): use install_generation()")
        version = self._step()
        if version != self.published_version:
            self.publish(version)

    def generate(
        self,
        prompts: list[list[int]],
        images: list | None,
        num_generations: int,
        profiler: Any | None = None,
    ) -> GenerateResult:
        acc = self._accelerator
        multi = acc is not None and acc.num_processes > 1
        has_images = images is not None and any(image is not None for image in images)
        # every rank gathers before any check, so all ranks raise alike (a group may span ranks)
        all_prompts = _gather(prompts) if multi else prompts
        if any(_gather([has_images]) if multi else [has_images]):
            raise ValueError("online GRPO generates from text prompts only; this batch carries images")
        if len(all_prompts) % num_generations:
            raise ValueError(f"{len(all_prompts)} prompts are not whole groups of num_generations={num_generations}")
        payload = None
        if not multi or acc.is_main_process:
            with profiler or nullcontext():
                payload = self._generate_groups(all_prompts[::num_generations], num_generations)
        if multi:
            payload = _broadcast(payload)
        prompt_ids, completion_ids, logprobs = payload
        if multi:
            part = slice(acc.process_index * len(prompts), (acc.process_index + 1) * len(prompts))
            prompt_ids, completion_ids, logprobs = prompt_ids[part], completion_ids[part], logprobs[part]
        return prompt_ids, completion_ids, logprobs, None

    def _generate_groups(self, unique: Sequence[list[int]], n: int) -> tuple[list, list, list]:
        workers = max(1, min(self._concurrency, len(unique)))
        with ThreadPoolExecutor(workers, thread_name_prefix="trl-generate") as pool:
            groups = list(pool.map(lambda ids: self._server.generate(ids, self._sampling, n=n), unique))
        prompt_ids, completion_ids, logprobs = [], [], []
        for ids, group in zip(unique, groups):
            if len(group) != n:
                raise RuntimeError(f"{self._server.url} returned {len(group)} completions for a prompt, expected {n}")
            for completion in group:
                prompt_ids.append(list(ids))
                completion_ids.append(list(completion.token_ids))
                logprobs.append([[lp] for lp in completion.logprobs])
        return prompt_ids, completion_ids, logprobs


def _gather(prompts: list[list[int]]) -> list[list[int]]:
    from accelerate.utils import gather_object

    return gather_object(prompts)


def _broadcast(payload: Any) -> Any:
    from accelerate.utils import broadcast_object_list

    box = [payload]
    broadcast_object_list(box, from_process=0)
    return box[0]


def install_generation(trainer: Any, generation: ServerGeneration) -> None:
    """Plug `generation` into a GRPOTrainer built with `use_vllm=False` (see module docstring)."""
    for name in ("use_vllm", "vllm_importance_sampling_correction", "state"):
        if not hasattr(trainer, name):
            raise TypeError(f"{type(trainer).__name__} has no {name!r}: not the TRL GRPOTrainer this seam was written for")
    if trainer.use_vllm:
        raise ValueError("build the GRPOTrainer with use_vllm=False; ServerGeneration replaces TRL's vLLM backend")
    generation.bind(lambda: int(trainer.state.global_step), getattr(trainer, "accelerator", None))
    trainer.vllm_generation = generation
    trainer._last_loaded_step = -1
    trainer.use_vllm = True
    trainer.args.use_vllm = True
