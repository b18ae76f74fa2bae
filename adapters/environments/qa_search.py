"""`qa_search`: short factual questions answered with a `search` tool over a local index.

Questions come from the offline data (`qa_search_data`: country capitals, countries of capitals,
hidden Wikipedia titles); the tool is `<search>query</search>` over `search_backend` (default
`bm25` over the 10k offline Wikipedia summaries, built once per process on the first search).
A turn without a tool call is the final answer (`Answer: ...`), scored by exact match or token
F1 against the answer and its aliases (`reward`). Tool errors (unknown tool, empty query, no
hits) are tool messages. Reasoning in `<think>` is never searched or scored; `carry_reasoning`
says whether it stays in the context (`context()`, see `search_turns`).
Departure from Search-R1-style setups: results are plain `[i] Title: snippet` lines in a `tool`
message, not `<information>` blocks inside the assistant turn.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.qa_search_data import QUESTION_TYPES, Question, questions
from adapters.environments.qa_search_scoring import REWARDS, score
from adapters.environments.registry import register
from adapters.environments.search_splits import check_kinds, draw
from adapters.environments.search_tool import search_kwargs, search_tool_from
from adapters.environments.search_turns import ToolEpisode, opening, tool_env_kwargs
from adapters.search.backends import check_backend_name
from application.ports.environment import Message, Problem, StepResult

INSTRUCTIONS = (
    "{question}\n"
    "You can search an encyclopedia: write <search>words to look for</search>, for example "
    "<search>capital of France</search>, and you will get the best matching articles. "
    "When you know the answer, reply with: Answer: <short answer>"
)


@register
class QaSearch(BaseEnvironment):
    """Factual questions with a local search tool; exact-match or F1 reward."""

    name = "qa_search"
    requires_answer = True
    max_turns = 4
    kwargs = {
        "question_types": KwargSpec(list(QUESTION_TYPES), "which questions to ask: capital, country, article"),
        **search_kwargs("the search index behind the search tool (bm25: BM25 over offline Wikipedia summaries)"),
        "reward": KwargSpec("exact_match", "exact_match (1 or 0) or f1 (token overlap in [0, 1])"),
        **tool_env_kwargs("questions"),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        options = self.options
        if options["reward"] not in REWARDS:
            raise ValueError(f"qa_search: reward must be one of {', '.join(REWARDS)}, got {options['reward']!r}")
        check_backend_name(options["search_backend"])
        self._episode = ToolEpisode(self.max_turns, options["carry_reasoning"], self._score, search_tool_from(self.name, options))

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        kinds = check_kinds(cls.name, "question_types", options["question_types"], QUESTION_TYPES)
        groups = {kind: questions(kind) for kind in kinds}
        rows = draw(cls.name, groups, lambda q: q.prompt, split, count, seed, options["eval_fraction"])
        return [_problem(q, split) for q in rows]

    def reset(self) -> list[Message]:
        return self._episode.open(opening(self.options["system_prompt"], INSTRUCTIONS.format(question=self.problem.prompt)))

    def step(self, action: str) -> StepResult:
        return self._episode.step(action)

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._episode.context()

    def _score(self, answer: str) -> float:
        references = [str(self.problem.answer), *self.problem.metadata.get("aliases", ())]
        return score(answer, references, self.options["reward"])


def _problem(question: Question, split: str) -> Problem:
    return Problem(
        prompt=question.prompt,
        answer=question.answer,
        metadata={"type": question.kind, "aliases": question.aliases, "split": split},
    )
