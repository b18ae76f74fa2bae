"""`HfChatTokenizer`: the ChatTokenizer port on a Hugging Face tokenizer and its chat template.

Token-in/token-out needs the tokens *between* two assistant turns without re-tokenising what the
engine sampled. The template renders every finished assistant turn as
`content + END + TRAILER` (ChatML: `<|im_end|>` then `"\n"`), while the engine's sampled tokens
stop right after END (the end-of-turn token is its stop token). So
`continuation_ids(history, new)` is the text of `render(history + new, generation prompt)` past
`render(history)`, with TRAILER put back in front, tokenised on its own. Because END is a special
token, tokenisation never merges across it, hence
`prompt_ids(opening) + sampled + continuation == prompt_ids(history + new)` (tested).
END and TRAILER are found once, by rendering a probe conversation.

`eos_token_ids[0]` is END (the end-of-turn token the runner closes an unfinished turn with);
the model's `generation_config.json` and tokenizer end-of-sequence ids follow.
The `tool` role is passed to the template as is: SmolLM2's ChatML template renders it as
`<|im_start|>tool ... <|im_end|>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from application.ports.environment import Message

_PROBE = "\u2063probe-assistant-content\u2063"


class ChatTemplateError(ValueError):
    """The chat template does not render a conversation the way token-in/token-out needs."""


class HfChatTokenizer:
    def __init__(self, model_path: str | Path, chat_template_kwargs: Mapping[str, Any] | None = None) -> None:
        self._path = Path(model_path)
        self._tok = AutoTokenizer.from_pretrained(str(self._path), clean_up_tokenization_spaces=False)
        self._template_kwargs = dict(chat_template_kwargs or {})
        self._end, self._trailer = self._probe_turn_suffix()
        end_ids = self.encode(self._end)
        if len(end_ids) != 1:
            raise ChatTemplateError(f"{self._path}: end-of-turn text {self._end!r} is not one token: {end_ids}")
        self._eos = _unique([end_ids[0], *_config_eos_ids(self._path), self._tok.eos_token_id])

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        payload = [{"role": m.role, "content": m.content} for m in messages]
        return self._tok.apply_chat_template(
            payload, tokenize=False, add_generation_prompt=add_generation_prompt, **self._template_kwargs
        )

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        if not messages:
            raise ValueError("prompt_ids needs at least one message")
        return self.encode(self.render(messages, add_generation_prompt=True))

    def continuation_ids(self, history: Sequence[Message], new_messages: Sequence[Message]) -> list[int]:
        if not history or history[-1].role != "assistant":
            raise ValueError("continuation_ids: the history must end with the assistant's turn")
        before = self.render(history, add_generation_prompt=False)
        after = self.render([*history, *new_messages], add_generation_prompt=True)
        closing = self._end + self._trailer
        if not after.startswith(before) or not before.endswith(closing):
            raise ChatTemplateError(
                f"{self._path}: the chat template does not render the conversation as a prefix plus new messages "
                f"(history ends {before[-40:]!r}); token-in/token-out cannot continue it"
            )
        return self.encode(self._trailer + after[len(before) :])

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=True)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    def _probe_turn_suffix(self) -> tuple[str, str]:
        """(END, TRAILER): what the template writes after an assistant message's content."""
        probe = [Message(role="user", content="hi"), Message(role="assistant", content=_PROBE)]
        text = self.render(probe, add_generation_prompt=False)
        if text.count(_PROBE) != 1:
            raise ChatTemplateError(f"{self._path}: the chat template does not render assistant content verbatim")
        suffix = text.split(_PROBE, 1)[1]
        special = sorted(self._tok.all_special_tokens + list(self._tok.get_added_vocab()), key=len, reverse=True)
        for token in special:
            if token and suffix.startswith(token):
                return token, suffix[len(token) :]
        raise ChatTemplateError(f"{self._path}: the template closes an assistant turn with {suffix!r}, not a special token")


def _config_eos_ids(path: Path) -> list[int]:
    config = path / "generation_config.json"
    if not config.is_file():
        return []
    value = json.loads(config.read_text()).get("eos_token_id")
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _unique(ids: Sequence[int | None]) -> tuple[int, ...]:
    out: list[int] = []
    for token in ids:
        if token is not None and token not in out:
            out.append(int(token))
    return tuple(out)
