"""A reasoning test model: the offline SmolLM2-135M-Instruct with `<think>` and `</think>` as single tokens.

SmolLM2 has no reasoning markers. This copy adds both as added (non-special) tokens, resizes the
tied embeddings (new rows drawn from the old rows' mean and covariance, seeded), and replaces the
ChatML template with one that, given the chat-template kwarg `enable_thinking`, opens `<think>`
right after the assistant header of the generation prompt (as Qwen3-style templates do). vLLM
counts reasoning from the last open start in prompt + output, so such a prompt opens a reasoning
section although SmolLM2 never writes one itself. Finished assistant turns render without the
marker, so a rendered history stays a prefix of the next rendering (what token-in/token-out needs).
"""

from __future__ import annotations

from pathlib import Path

THINK_START = "<think>"
THINK_END = "</think>"
TEMPLATE_KWARGS = {"enable_thinking": True}

_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking %}{{ '<think>' }}{% endif %}"
    "{% endif %}"
)


def build_thinking_model(source: Path, target: Path, seed: int = 0) -> Path:
    """Write the reasoning copy of the model at `source` to `target` (a new folder) and return it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    added = tokenizer.add_tokens([THINK_START, THINK_END])
    if added != 2:
        raise RuntimeError(f"{source}: expected to add 2 reasoning tokens, added {added}")
    tokenizer.chat_template = _CHAT_TEMPLATE
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    for marker in (THINK_START, THINK_END):
        ids = tokenizer(marker, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise RuntimeError(f"{target}: {marker!r} encodes to {ids}, not one token")
    return target
