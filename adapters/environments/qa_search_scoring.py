"""Short-answer scoring for `qa_search`: SQuAD-style exact match and token F1, in [0, 1].

Normalisation: Unicode accents folded (Brasília = Brasilia), lower case, punctuation removed,
the articles a/an/the dropped, whitespace collapsed. The score is the best over the accepted
answers (the reference plus its aliases).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable

REWARDS = ("exact_match", "f1")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})


def normalize(text: str) -> str:
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    lowered = folded.lower().replace("'", "").replace("’", "").replace(".", "")
    return " ".join(_ARTICLES.sub(" ", lowered.translate(_PUNCTUATION)).split())


def exact_match(prediction: str, reference: str) -> float:
    return 1.0 if normalize(prediction) == normalize(reference) and normalize(reference) else 0.0


def token_f1(prediction: str, reference: str) -> float:
    predicted, gold = normalize(prediction).split(), normalize(reference).split()
    common = sum((Counter(predicted) & Counter(gold)).values())
    if not predicted or not gold or common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def score(prediction: str, references: Iterable[str], reward: str) -> float:
    """The best `reward` ("exact_match" or "f1") of `prediction` over `references`."""
    measure = {"exact_match": exact_match, "f1": token_f1}.get(reward)
    if measure is None:
        raise ValueError(f"qa_search: unknown reward {reward!r} (known: {', '.join(REWARDS)})")
    return max((measure(prediction, r) for r in references), default=0.0)
