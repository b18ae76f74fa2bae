"""HfChatTokenizer on SmolLM2's ChatML template: no re-tokenisation drift across turns."""

from __future__ import annotations

import pytest

from adapters.chat_tokenizer import HfChatTokenizer
from application.ports.environment import Message
from infrastructure.model_assets import resolve_model_path


@pytest.fixture(scope="module")
def tokenizer() -> HfChatTokenizer:
    return HfChatTokenizer(resolve_model_path("smollm2-135m-instruct"))


def _sampled(tokenizer: HfChatTokenizer, text: str) -> list[int]:
    """What an engine returns for a turn: the text's tokens and the end-of-turn token."""
    return tokenizer.encode(text) + [tokenizer.eos_token_ids[0]]


CONVERSATIONS = [
    (
        [Message(role="user", content="What is 3 + 4 - 2?")],
        [
            ("Let me check. <calc>3 + 4 - 2</calc>", [Message(role="tool", content="3 + 4 - 2 = 5")]),
            ("Hmm,\n  spaces  and unicode: ÷ × é 😀 ", [Message(role="tool", content="  leading spaces\n\n")]),
            ("Answer: 5", []),
        ],
    ),
    (
        [Message(role="system", content="Be terse."), Message(role="user", content="hi")],
        [("hello!\n", [Message(role="user", content="again"), Message(role="tool", content="x")]), ("", [])],
    ),
]


@pytest.mark.parametrize(("opening", "turns"), CONVERSATIONS)
def test_concatenated_ids_equal_the_template_rendering_of_the_whole_conversation(tokenizer, opening, turns):
    ids = tokenizer.prompt_ids(opening)
    history = list(opening)
    for text, new_messages in turns:
        ids += _sampled(tokenizer, text)
        history.append(Message(role="assistant", content=text))
        if new_messages:
            ids += tokenizer.continuation_ids(history, new_messages)
            history.extend(new_messages)
            assert ids == tokenizer.prompt_ids(history)  # the next prompt is a pure concatenation
    rendered = tokenizer.encode(tokenizer.render(history, add_generation_prompt=False))
    assert ids + tokenizer.encode("\n") == rendered


def test_continuation_starts_after_the_end_of_turn_token(tokenizer):
    history = [Message(role="user", content="q"), Message(role="assistant", content="a")]
    continuation = tokenizer.continuation_ids(history, [Message(role="tool", content="7")])
    assert tokenizer._tok.decode(continuation) == "\n<|im_start|>tool\n7<|im_end|>\n<|im_start|>assistant\n"


def test_eos_ids_start_with_the_chatml_end_of_turn_token(tokenizer):
    assert tokenizer.eos_token_ids[0] == tokenizer.encode("<|im_end|>")[0]
    assert len(set(tokenizer.eos_token_ids)) == len(tokenizer.eos_token_ids)


def test_decode_drops_special_tokens(tokenizer):
    assert tokenizer.decode(_sampled(tokenizer, "Answer: 5")) == "Answer: 5"


def test_continuation_needs_a_history_ending_with_the_assistant(tokenizer):
    with pytest.raises(ValueError, match="assistant"):
        tokenizer.continuation_ids([Message(role="user", content="q")], [Message(role="tool", content="7")])


def test_prompt_ids_end_with_the_assistant_header(tokenizer):
    ids = tokenizer.prompt_ids([Message(role="user", content="q")])
    assert tokenizer._tok.decode(ids).endswith("<|im_start|>assistant\n")
