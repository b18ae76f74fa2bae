"""The trainer's side of the sync verification for online GRPO, on one rank or many.

`ModelLogprobs` is the `TrainerLogprobs` of TRL's model: log-prob of each probe token given
the ones before it, temperature 1, eval mode, no grad. Departure from `TorchPolicy`'s: one full
`model(input_ids)` forward instead of backbone + LM head called apart, so FSDP2's hooks (which
all-gather the root unit's embeddings and head on the model's own forward) run; under FSDP2
that forward is a collective, so every rank runs it.

`RankZeroVerifier` is the `SyncVerifier` every rank holds: on rank 0 it runs the real verifier
(`PromptLogprobVerifier`: the trainer forward, then the server's `/weight_info` and prompt
log-probs); elsewhere it runs the same trainer forward and takes rank 0's verdict through
`share`, so a mismatch raises `SyncVerificationError` on every rank, never on rank 0 alone.
If rank 0's verifier itself raises, the others raise too (naming rank 0's error).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from application.ports.sync_verifier import SyncVerification, SyncVerifier, TrainerLogprobs


class ModelLogprobs:
    def __init__(self, model: nn.Module) -> None:
        self._model = model

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        if len(token_ids) < 2:
            raise ValueError(f"sequence_logprobs needs at least 2 tokens, got {len(token_ids)}")
        device = next(self._model.parameters()).device
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)  # (1, n)
        was_training = self._model.training
        self._model.eval()
        try:
            logits = self._model(input_ids=ids, use_cache=False).logits[0, :-1].float()  # (n-1, V)
        finally:
            self._model.train(was_training)
        chosen = ids[0, 1:, None]  # (n-1, 1)
        return torch.log_softmax(logits, dim=-1).gather(1, chosen)[:, 0].tolist()


class RankZeroVerifier:
    def __init__(
        self,
        verifier: SyncVerifier | None,
        trainer: TrainerLogprobs,
        probe_token_ids: Sequence[int],
        share: Callable[[Any], Any],
    ) -> None:
        """`verifier` on rank 0 only (None elsewhere); `share` broadcasts rank 0's object."""
        self._verifier, self._trainer = verifier, trainer
        self._probe = [int(t) for t in probe_token_ids]
        self._share = share

    def verify(self, version: int) -> SyncVerification:
        if self._verifier is not None:
            try:
                verification = self._verifier.verify(version)
            except Exception as error:
                self._share(f"{type(error).__name__}: {error}")
                raise
            return self._share(verification)
        self._trainer.sequence_logprobs(self._probe)  # rank 0's forward is a collective under FSDP2
        shared = self._share(None)
        if not isinstance(shared, SyncVerification):
            raise RuntimeError(f"rank 0 could not verify weight version {version}: {shared}")
        return shared
