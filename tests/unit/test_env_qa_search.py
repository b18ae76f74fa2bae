"""qa_search: offline questions, the BM25 search tool, EM/F1 scoring, tool errors, carry_reasoning."""

from __future__ import annotations

import time

import pytest

from adapters.environments.base import UnknownEnvironmentKwarg
from adapters.environments.qa_search import QaSearch
from adapters.environments.qa_search_scoring import exact_match, normalize, token_f1
from adapters.environments.search_turns import split_reasoning
from adapters.search.backends import UnknownSearchBackend, search_backend
from adapters.search.package_data import MissingDataPackage, package_file
from application.ports.environment import Message, Problem


def _capital(country: str = "Kenya", answer: str = "Nairobi", aliases: tuple[str, ...] = ()) -> Problem:
    return Problem(prompt=f"What is the capital of {country}?", answer=answer, metadata={"aliases": aliases})


def _episode(problem: Problem, actions: list[str], **kwargs):
    env = QaSearch(problem, **kwargs)
    env.reset()
    results = [env.step(a) for a in actions]
    return env, results


# ---- problems ----------------------------------------------------------------------------


def test_problems_are_seeded_mixed_and_split_disjointly():
    train = QaSearch.problems("train", 30, seed=1)
    assert train == QaSearch.problems("train", 30, seed=1)
    assert train != QaSearch.problems("train", 30, seed=2)
    assert {p.metadata["type"] for p in train[:3]} == {"capital", "country", "article"}
    evaluation = QaSearch.problems("eval", 30, seed=1)
    every_train = {p.prompt for p in QaSearch.problems("train", 300, seed=5, question_types=["capital", "country"])}
    assert not every_train & {p.prompt for p in QaSearch.problems("eval", 20, seed=9, question_types=["capital", "country"])}
    assert not {p.prompt for p in train} & {p.prompt for p in evaluation}


def test_article_questions_hide_the_title():
    for problem in QaSearch.problems("train", 20, seed=0, question_types=["article"]):
        assert "___" in problem.prompt
        assert problem.answer.lower() not in problem.prompt.lower()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"question_types": ["riddles"]}, "riddles"),
        ({"question_types": "capital"}, "question_types"),
        ({"eval_fraction": 0}, "eval_fraction"),
        ({"colour": 1}, "colour"),
    ],
)
def test_bad_problem_kwargs_raise_naming_the_offender(kwargs, message):
    with pytest.raises((ValueError, UnknownEnvironmentKwarg), match=message):
        QaSearch.problems("train", 3, seed=0, **kwargs)


def test_asking_for_more_problems_than_exist_says_how_many_exist():
    with pytest.raises(ValueError, match="only .* exist"):
        QaSearch.problems("eval", 500, seed=0, question_types=["capital"])


@pytest.mark.parametrize(("kwargs", "message"), [({"search_backend": "google"}, "google"), ({"reward": "bleu"}, "bleu"), ({"top_k": 0}, "top_k")])
def test_bad_episode_kwargs_raise_naming_the_offender(kwargs, message):
    with pytest.raises((ValueError, UnknownSearchBackend), match=message):
        QaSearch(_capital(), **kwargs)


def test_missing_data_package_names_the_install_command():
    with pytest.raises(MissingDataPackage, match="offline-data.txt"):
        package_file("no_such_data_package_h11", "data/x.json")


# ---- scoring -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["Answer: Nairobi", "The answer is nairobi.", "I searched.\nNairobi", "Answer: the Nairobi"])
def test_correct_answer_scores_one(text):
    _, (result,) = _episode(_capital(), [text])
    assert result.done and result.score == 1.0


@pytest.mark.parametrize("text", ["Answer: Mombasa", "", "x" * 100_000, "<think>Answer: Nairobi</think>Answer: Kampala"])
def test_wrong_answer_scores_zero(text):
    _, (result,) = _episode(_capital(), [text])
    assert result.done and result.score == 0.0


def test_aliases_are_accepted_and_f1_gives_partial_credit():
    south_africa = _capital("South Africa", "Pretoria", ("Bloemfontein", "Cape Town"))
    assert _episode(south_africa, ["Answer: Cape Town"])[1][0].score == 1.0
    partial = _episode(_capital(), ["Answer: Nairobi city"], reward="f1")[1][0].score
    assert partial == pytest.approx(2 / 3)


def test_normalisation_folds_case_accents_punctuation_and_articles():
    assert normalize("The  Brasília!") == "brasilia"
    assert exact_match("Washington, D.C.", "Washington D.C.") == 1.0
    assert token_f1("", "Nairobi") == 0.0 and exact_match("", "") == 0.0


def test_every_generated_answer_scores_one_against_itself():
    for problem in QaSearch.problems("train", 30, seed=3):
        assert _episode(problem, [f"Answer: {problem.answer}"])[1][0].score == 1.0


# ---- the search tool ---------------------------------------------------------------------


def test_index_is_built_once_per_process_and_finds_the_article():
    backend = search_backend("bm25")
    assert search_backend("bm25") is backend
    start = time.monotonic()
    titles = [hit.title for hit in backend.search("capital city of Kenya", 3)]
    assert "Kenya" in titles and time.monotonic() - start < 1.0


def test_search_then_answer_scores_one():
    env, (searched, answered) = _episode(_capital(), ["<search>Kenya capital</search>", "Answer: Nairobi"])
    assert not searched.done and searched.observation[0].role == "tool"
    assert "Kenya" in searched.observation[0].content and "Nairobi" in searched.observation[0].content
    assert answered.done and answered.score == 1.0 and answered.metadata["tool_calls"] == 1


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("<lookup>Kenya</lookup>", "unknown tool 'lookup'"),
        ("<search>   </search>", "empty query"),
        ("<search>" + "kenya " * 400 + "</search>", "longer than"),
        ("<search>zzqxj wvvkq</search>", "no results"),
        ('<tool_call>{"name": "rm", "arguments": "-rf /"}</tool_call>', "unknown tool 'tool_call'"),
    ],
)
def test_tool_errors_are_tool_messages(action, message):
    _, (result,) = _episode(_capital(), [action])
    assert not result.done and message in result.observation[0].content


def test_a_tool_call_on_the_last_turn_is_scored_as_the_answer():
    _, results = _episode(_capital(), ["<search>Kenya</search>", "<search>Kenya</search>"], max_turns=2)
    assert results[-1].done and results[-1].score == 0.0 and results[-1].metadata["tool_call_pending"]


# ---- reasoning ---------------------------------------------------------------------------


def test_tool_calls_inside_reasoning_are_not_run():
    _, (result,) = _episode(_capital(), ["<think>maybe <search>Kenya</search></think>Answer: Nairobi"])
    assert result.done and result.score == 1.0


def test_split_reasoning_handles_open_closed_and_template_opened_blocks():
    assert split_reasoning("<think>a</think>b<think>c</think>d") == ("a\nc", "bd")
    assert split_reasoning("opened by the template</think>Answer: 3") == ("opened by the template", "Answer: 3")
    assert split_reasoning("text<think>cut off") == ("cut off", "text")


@pytest.mark.parametrize("carry", [True, False])
def test_carry_reasoning_decides_what_the_next_turn_sees(carry):
    turn = "<think>Kenya is in East Africa.</think><search>Kenya capital</search>"
    env, (result,) = _episode(_capital(), [turn], carry_reasoning=carry)
    assert result.metadata["reasoning"] == "Kenya is in East Africa."
    context = env.context()
    assert [m.role for m in context] == ["user", "assistant", "tool"]
    assert context[1] == Message(role="assistant", content=turn if carry else "<search>Kenya capital</search>")
    assert context[2] == result.observation[0]


def test_carry_reasoning_must_be_a_bool():
    with pytest.raises(ValueError, match="carry_reasoning"):
        QaSearch(_capital(), carry_reasoning="no")


# ---- throughput --------------------------------------------------------------------------


def test_scripted_correct_policy_throughput():
    problems = QaSearch.problems("train", 40, seed=0)
    search_backend("bm25")
    start = time.monotonic()
    scores = []
    for problem in problems:
        query = problem.prompt.split("\n")[-1][:200]
        _, results = _episode(problem, [f"<search>{query}</search>", f"Answer: {problem.answer}"])
        scores.append(results[-1].score)
    rate = len(problems) / (time.monotonic() - start)
    print(f"qa_search: {rate:.0f} episodes/s (search + answer, scripted correct policy)")
    assert scores == [1.0] * len(problems)
