"""`exam_qa`: MMLU multiple-choice questions, closed book or open book with a search tool.

Problems: MMLU test questions (`exam_qa_data`), filtered by `subjects`, split into disjoint train
and eval sets by question hash. The answer is a letter; the score is 1 when the stated final
answer (`Answer: B`) names the right letter, else 0.
Closed book (default): no tools, the first turn is the answer (the episode ends after one turn).
Open book (`open_book: true`): the `search` tool of `qa_search` over `search_backend`; a turn
without a tool call is the answer. Reasoning in `<think>` is never scored; `carry_reasoning` says
whether it stays in the context (`context()`, see `search_turns`).
Departure from the usual MMLU harness: no few-shot examples and no log-likelihood ranking of the
letters; the model writes its answer, as in RL.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.exam_qa_data import ExamQuestion, answer_letter, select
from adapters.environments.registry import register
from adapters.environments.search_splits import draw
from adapters.environments.search_tool import search_kwargs, search_tool_from
from adapters.environments.search_turns import ToolEpisode, opening, tool_env_kwargs
from application.ports.environment import Message, Problem, StepResult

CLOSED_BOOK = "\n\nReply with the letter of the correct option, as: Answer: <letter>"
OPEN_BOOK = (
    "\n\nYou can search an encyclopedia: write <search>words to look for</search> and you will get the best "
    "matching articles. When you know the answer, reply with the letter of the correct option, as: Answer: <letter>"
)


@register
class ExamQa(BaseEnvironment):
    """MMLU multiple choice; optional open-book search tool; score 1 for the right letter."""

    name = "exam_qa"
    requires_answer = True
    max_turns = 3
    kwargs = {
        "subjects": KwargSpec(None, "MMLU subjects to draw from, e.g. [high school geography] (None: all 57)"),
        "open_book": KwargSpec(False, "give the model the search tool (else one closed-book turn)"),
        **search_kwargs("the search index behind the search tool when open_book"),
        **tool_env_kwargs("questions"),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        options = self.options
        if not isinstance(options["open_book"], bool):
            raise ValueError(f"exam_qa: open_book must be true or false, got {options['open_book']!r}")
        tool = search_tool_from(self.name, options) if options["open_book"] else None
        self._episode = ToolEpisode(self.max_turns, options["carry_reasoning"], self._score, tool)

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        groups = select(options["subjects"])
        rows = draw(cls.name, groups, ExamQuestion.prompt, split, count, seed, options["eval_fraction"])
        return [Problem(prompt=q.prompt(), answer=q.answer, metadata={"subject": q.subject, "split": split}) for q in rows]

    def reset(self) -> list[Message]:
        suffix = OPEN_BOOK if self.options["open_book"] else CLOSED_BOOK
        return self._episode.open(opening(self.options["system_prompt"], self.problem.prompt + suffix))

    def step(self, action: str) -> StepResult:
        return self._episode.step(action)

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._episode.context()

    def _score(self, answer: str) -> float:
        return 1.0 if answer_letter(answer) == str(self.problem.answer).strip().upper() else 0.0
