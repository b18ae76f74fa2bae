"""The sync verifier as training and `check --sync` build it: the probe, the servers, the tolerance.

`build_verifier(config, model_path, trainer, targets)` gives a `PromptLogprobVerifier` over the
sync targets' servers, the trainer's log-probs (`TorchPolicy`), the tokenized `PROBE_TEXT` (a
short ChatML exchange, so special tokens and ordinary text are both scored) and the tolerance of
`model.dtype` (see `adapters.vllm.sync_verifier`). Kept apart from `sync_check` so the container
can import it without importing the bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from adapters.vllm.sync_verifier import PromptLogprobVerifier, logprob_tolerance
from application.ports.sync_verifier import TrainerLogprobs
from application.sync_report import SyncTarget
from domain.config import RunConfig

PROBE_TEXT = (
    "<|im_start|>user\nWhat is 17 + 25? Think step by step.<|im_end|>\n<|im_start|>assistant\n"
    "17 + 25 = 42. The capital of France is Paris, and water boils at 100 degrees Celsius."
)


def probe_token_ids(model_path: Path) -> list[int]:
    from transformers import AutoTokenizer

    return list(AutoTokenizer.from_pretrained(model_path)(PROBE_TEXT)["input_ids"])


def build_verifier(
    config: RunConfig, model_path: Path, trainer: TrainerLogprobs, targets: Sequence[SyncTarget]
) -> PromptLogprobVerifier:
    return PromptLogprobVerifier(
        [t.server for t in targets], trainer, probe_token_ids(model_path), logprob_tolerance(config.model.dtype)
    )
