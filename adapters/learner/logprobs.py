"""Per-token log-probs of chosen tokens, projecting through the LM head only where they are needed.

Like TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`), we run the backbone once,
pick the hidden states that predict the tokens we score, and only those go through the LM head
(logits / temperature, then `logit[label] - logsumexp(logits)`), in chunks, so the
(B, L, vocab) logits are never materialised. This is the `logits_to_keep` idea, per token.
Models whose head rescales or soft-caps logits are refused rather than scored wrongly.
`TokenScorer` runs the same scoring as one module call, for wrappers that hook `forward`
(FSDP2's root unit in `adapters.learner.sharded` must see the backbone and the head together).
"""

from __future__ import annotations

import torch
from torch import nn

from adapters.learner.batching import MicroBatch

_HEAD_CHUNK_TOKENS = 4096
_UNSUPPORTED_HEAD_FIELDS = ("final_logit_softcapping", "logit_scale", "output_multiplier",
                            "lm_head_multiplier", "logits_scaling")


def check_plain_lm_head(model: nn.Module) -> None:
    """Raise if the model's config changes logits after the LM head projection."""
    config = model.config.get_text_config()
    for field in _UNSUPPORTED_HEAD_FIELDS:
        if getattr(config, field, None) not in (None, 1.0):
            raise ValueError(
                f"model type {config.model_type!r} sets {field}={getattr(config, field)!r}; "
                "the learner's log-prob head supports plain LM heads only"
            )


def _head_logprobs(hidden: torch.Tensor, labels: torch.Tensor, head: nn.Module, temperature: float) -> torch.Tensor:
    """hidden (N, H), labels (N,) -> (N,) log-probs, the head applied chunk by chunk."""
    out = []
    for start in range(0, hidden.size(0), _HEAD_CHUNK_TOKENS):
        logits = head(hidden[start : start + _HEAD_CHUNK_TOKENS]).float()  # (n, V)
        if temperature != 1.0:
            logits = logits / temperature
        chosen = logits.gather(1, labels[start : start + _HEAD_CHUNK_TOKENS, None]).squeeze(1)  # (n,)
        out.append(chosen - torch.logsumexp(logits, dim=-1))
    return torch.cat(out) if out else hidden.new_zeros((0,), dtype=torch.float32)


def token_logprobs(model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor,
                   labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-prob of `labels` (N,) predicted at (row, column) `positions` (N, 2) of `input_ids` (B, L).

    The prediction for the token at column j is read from the hidden state at column j - 1.
    """
    hidden = model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state  # (B, L, H)
    picked = hidden[positions[:, 0], positions[:, 1]]  # (N, H)
    return _head_logprobs(picked, labels, model.get_output_embeddings(), temperature)


class TokenScorer(nn.Module):
    """`token_logprobs(model, ...)` as this module's forward; holds `model`, copies nothing."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor,
                temperature: float = 1.0) -> torch.Tensor:
        return token_logprobs(self.model, input_ids, positions, labels, temperature)


def completion_logprobs(model: nn.Module, batch: MicroBatch, temperature: float,
                        which: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) float32 log-probs of the completion tokens selected by `which` (default: the loss mask); 0 elsewhere.

    `model` is a causal LM or a `TokenScorer` around one (scored through its forward)."""
    select = batch.loss_mask.bool() if which is None else which  # (B, T)
    rows, cols = select.nonzero(as_tuple=True)  # (N,), (N,)
    source_cols = batch.completion_start[rows] + cols - 1  # (N,) hidden state that predicts each token
    positions = torch.stack([rows, source_cols], dim=1)  # (N, 2)
    labels = batch.completion_ids[rows, cols]  # (N,)
    scorer = model if isinstance(model, TokenScorer) else TokenScorer(model)
    values = scorer(batch.input_ids, positions, labels, temperature)  # (N,)
    out = torch.zeros(select.shape, dtype=torch.float32, device=values.device)  # (B, T)
    return out.index_put((rows, cols), values)  # differentiable scatter into the padded layout
