"""exam_qa: MMLU from the offline package, subject filters, letter scoring, open-book search."""

from __future__ import annotations

import time

import pytest

from adapters.environments.base import UnknownEnvironmentKwarg
from adapters.environments.exam_qa import ExamQa
from adapters.environments.exam_qa_data import LETTERS, answer_letter, mmlu, subjects
from application.ports.environment import Message, Problem

GEOGRAPHY = "high school geography"


def _problem(answer: str = "B") -> Problem:
    return Problem(prompt="What is the capital of Kenya?\nA. Mombasa\nB. Nairobi\nC. Kampala\nD. Kisumu", answer=answer)


def _episode(problem: Problem, actions: list[str], **kwargs):
    env = ExamQa(problem, **kwargs)
    env.reset()
    return env, [env.step(a) for a in actions]


def test_mmlu_is_read_from_the_package_without_its_header_rows():
    rows = mmlu()
    assert len(rows) == 14_042 and len(subjects()) == 57
    assert {row.answer for row in rows} == set(LETTERS)
    assert all(row.question != "question" for row in rows)


def test_problems_are_seeded_filtered_and_split_disjointly():
    train = ExamQa.problems("train", 25, seed=4, subjects=[GEOGRAPHY])
    assert train == ExamQa.problems("train", 25, seed=4, subjects=[GEOGRAPHY])
    assert train != ExamQa.problems("train", 25, seed=5, subjects=[GEOGRAPHY])
    assert {p.metadata["subject"] for p in train} == {GEOGRAPHY}
    assert all(p.answer in LETTERS and "\nA. " in p.prompt and "\nD. " in p.prompt for p in train)
    all_train = {p.prompt for p in ExamQa.problems("train", 170, seed=0, subjects=[GEOGRAPHY])}
    evaluation = {p.prompt for p in ExamQa.problems("eval", 15, seed=3, subjects=[GEOGRAPHY])}
    assert len(all_train) == 170 and not all_train & evaluation


def test_all_subjects_are_interleaved_by_default():
    assert len({p.metadata["subject"] for p in ExamQa.problems("train", 57, seed=0)}) == 57


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"subjects": ["astrology"]}, "astrology"), ({"subjects": "anatomy"}, "subjects"), ({"colour": 1}, "colour")],
)
def test_bad_kwargs_raise_naming_the_offender(kwargs, message):
    with pytest.raises((ValueError, UnknownEnvironmentKwarg), match=message):
        ExamQa.problems("train", 3, seed=0, **kwargs)


@pytest.mark.parametrize(
    ("text", "letter"),
    [("B", "B"), ("(b)", "B"), ("B. Nairobi", "B"), ("B) Nairobi", "B"), ("Option C", "C"), ("Brasilia", None), ("a cat", None), ("", None)],
)
def test_answer_letter(text, letter):
    assert answer_letter(text) == letter


@pytest.mark.parametrize("text", ["Answer: B", "The answer is (B).", "Nairobi is in Kenya.\nB", "<think>A? no.</think>Answer: B"])
def test_right_letter_scores_one(text):
    _, (result,) = _episode(_problem(), [text])
    assert result.done and result.score == 1.0


@pytest.mark.parametrize("text", ["Answer: A", "Answer: Nairobi", "", "<think>Answer: B</think>Answer: C", "z" * 50_000])
def test_wrong_or_missing_letter_scores_zero(text):
    _, (result,) = _episode(_problem(), [text])
    assert result.done and result.score == 0.0


def test_closed_book_has_no_tools_and_ends_after_one_turn():
    env, (result,) = _episode(_problem(), ["<search>Kenya</search>"])
    assert result.done and result.score == 0.0
    assert "search" not in env.reset()[0].content.split("\n")[-1].lower()


def test_open_book_searches_then_answers():
    env, (searched, answered) = _episode(_problem(), ["<search>capital of Kenya</search>", "Answer: B"], open_book=True)
    assert not searched.done and "Kenya" in searched.observation[0].content
    assert answered.done and answered.score == 1.0
    assert "<search>" in env.reset()[-1].content


def test_open_book_tool_errors_are_tool_messages():
    _, (result,) = _episode(_problem(), ["<calc>1+1</calc>"], open_book=True)
    assert not result.done and "unknown tool 'calc'" in result.observation[0].content


@pytest.mark.parametrize("carry", [True, False])
def test_carry_reasoning_decides_what_the_next_turn_sees(carry):
    turn = "<think>Nairobi, probably.</think><search>Nairobi</search>"
    env, (result,) = _episode(_problem(), [turn], open_book=True, carry_reasoning=carry)
    assert result.metadata["reasoning"] == "Nairobi, probably."
    assert env.context()[1] == Message(role="assistant", content=turn if carry else "<search>Nairobi</search>")


def test_scripted_correct_policy_throughput():
    problems = ExamQa.problems("train", 200, seed=0)
    start = time.monotonic()
    scores = [_episode(p, [f"Answer: {p.answer}"])[1][0].score for p in problems]
    rate = len(problems) / (time.monotonic() - start)
    print(f"exam_qa: {rate:.0f} episodes/s (closed book, scripted correct policy)")
    assert scores == [1.0] * len(problems)
