"""RLVR verifiers: final-answer extraction, exact match, format, math-verify, user functions, term pricing."""

from __future__ import annotations

import sys
import types

import pytest

from adapters.trl.rewards import term_names, trl_reward_funcs
from adapters.verifiers.math_answer import math_verify_score
from adapters.verifiers.registry import (
    RewardSourceError,
    completion_text,
    reward_source,
    reward_source_problem,
)
from application.run_online_grpo import price_completions
from domain.config.dataset import DatasetConfig
from domain.rewards import RewardTerm, ScoreOutOfRange
from domain.verifiers import (
    MAX_SCORED_CHARS,
    compile_format,
    exact_match_score,
    final_answer,
    format_score,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("thinking...\n<answer> 42 </answer>\nAnswer: 7", "42"),
        ("so the result is \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("first Answer: 3\nthen answer: 5\nbye", "5"),
        ("line one\n\nthe last line  \n", "the last line"),
        ("", ""),
    ],
)
def test_final_answer_prefers_tags_then_boxed_then_answer_line_then_last_line(text, expected):
    assert final_answer(text) == expected


def test_normalize_answer_strips_decoration_case_and_digit_commas():
    assert normalize_answer("  **Paris.** ") == "paris"
    assert normalize_answer("$1,000$") == "1000"
    assert normalize_answer("New   York") == "new york"


def test_exact_match_scores_the_final_answer_only():
    assert exact_match_score("3 + 4 = 7\nAnswer: 7", "7") == 1.0
    assert exact_match_score("Answer: 7 apples", "7") == 0.0
    assert exact_match_score("Answer: 8", "7") == 0.0
    assert exact_match_score("Answer: -4.", "-4") == 1.0


def test_format_reads_only_the_bounded_tail():
    pattern = compile_format(r"(?im)^answer:\s*\S+")
    assert format_score("blah\nAnswer: 3", pattern) == 1.0
    assert format_score("no marker here", pattern) == 0.0
    assert format_score("Answer: 3\n" + "x" * MAX_SCORED_CHARS, pattern) == 0.0
    with pytest.raises(ValueError, match="not a valid regular expression"):
        compile_format("(unclosed")


def test_math_verify_judges_equivalent_forms_and_falls_back_for_words():
    assert math_verify_score("so we get \\boxed{0.5}", "1/2") == 1.0
    assert math_verify_score("Answer: -4", "-4") == 1.0
    assert math_verify_score("Answer: 5", "-4") == 0.0
    assert math_verify_score("I cannot say", "3") == 0.0
    assert math_verify_score("Answer: Paris", "Paris") == 1.0  # not math: exact match


def test_math_verify_runs_off_the_main_thread():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(lambda a: math_verify_score(f"Answer: {a}", "12"), ["12", "13", "12.0"]))
    assert scores == [1.0, 0.0, 1.0]


def test_completion_text_reads_trl_conversational_completions():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]) == "a"
    assert completion_text({"role": "assistant", "content": "b"}) == "b"


def test_builtin_sources_need_the_answer_column():
    source = reward_source("exact_match", format_regex=".")
    assert source(["p", "p"], ["Answer: 1", "Answer: 2"], answer=["1", "1"]) == [1.0, 0.0]
    with pytest.raises(RewardSourceError, match="needs an 'answer' column"):
        source(["p"], ["Answer: 1"])


@pytest.fixture
def user_module(monkeypatch):
    module = types.ModuleType("h7_user_rewards")
    module.half = lambda prompts, completions, **kw: [0.5] * len(completions)
    module.too_big = lambda prompts, completions, **kw: [1.5] * len(completions)
    module.none = lambda prompts, completions, **kw: [None] * len(completions)
    module.short = lambda prompts, completions, **kw: []
    module.not_callable = 3
    monkeypatch.setitem(sys.modules, "h7_user_rewards", module)
    return module


def test_user_functions_are_imported_and_their_scores_validated(user_module):
    assert reward_source("h7_user_rewards:half", format_regex=".")(["p"], ["c"]) == [0.5]
    with pytest.raises(ScoreOutOfRange, match="h7_user_rewards:too_big.*1.5"):
        reward_source("h7_user_rewards:too_big", format_regex=".")(["p"], ["c"])
    with pytest.raises(ScoreOutOfRange, match="no score"):
        reward_source("h7_user_rewards:none", format_regex=".")(["p"], ["c"])
    with pytest.raises(RewardSourceError, match="returned 0 scores for 1"):
        reward_source("h7_user_rewards:short", format_regex=".")(["p"], ["c"])


def test_reward_source_problem_names_what_is_wrong(user_module):
    assert reward_source_problem("math_verify") is None
    assert reward_source_problem("h7_user_rewards:half") is None
    assert "give a built-in" in reward_source_problem("mathverify")
    assert "cannot import module 'no_such_mod_h7'" in reward_source_problem("no_such_mod_h7:f")
    assert "no callable 'not_callable'" in reward_source_problem("h7_user_rewards:not_callable")


def test_trl_reward_funcs_times_weights_equal_the_priced_term_list(user_module):
    terms = (
        RewardTerm("exact_match", weight=2.0, exponent=1.0),
        RewardTerm("h7_user_rewards:half", weight=0.5, exponent=2.0),
        RewardTerm("h7_user_rewards:half", weight=-1.0, exponent=3.0),
    )
    sources = {t.source: reward_source(t.source, format_regex=".") for t in terms}
    funcs, weights = trl_reward_funcs(terms, sources)
    completions, answers = ["Answer: 1", "Answer: 2"], ["1", "1"]
    trl_total = [
        sum(w * f(["p"] * 2, completions, answer=answers)[i] for f, w in zip(funcs, weights)) for i in range(2)
    ]
    priced = price_completions(terms, sources, ["p"] * 2, completions, {"answer": answers})
    assert trl_total == pytest.approx(priced)
    assert priced == pytest.approx([2.0 + 0.5 * 0.25 - 0.125, 0.5 * 0.25 - 0.125])
    assert [f.__name__ for f in funcs] == term_names(terms) == ["exact_match", "h7_user_rewards:half#1", "h7_user_rewards:half#2"]


def test_dataset_config_refuses_bad_values():
    with pytest.raises(ValueError, match="format_regex"):
        DatasetConfig(format_regex="(")
    with pytest.raises(ValueError, match="placeholder"):
        DatasetConfig(prompt_template="no question here")
    with pytest.raises(ValueError, match="needs 'path'"):
        DatasetConfig(source="jsonl")
    with pytest.raises(ValueError, match="eval_fraction"):
        DatasetConfig(eval_fraction=1.0)
