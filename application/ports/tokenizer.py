"""Port: the policy's chat template and tokenizer, used to build token-in/token-out episodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from application.ports.environment import Message


class ChatTokenizer(Protocol):
    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The opening messages rendered by the chat template, ending with the assistant header."""
        ...

    def continuation_ids(self, history: Sequence[Message], new_messages: Sequence[Message]) -> list[int]:
        """Tokens to append after the assistant's last turn (which ended with its end-of-turn token):
        the new messages plus the next assistant header, exactly as the template renders them."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...
