"""Downstream metrics for `training/finetune.py`, all reported x 100.

Why not `evaluate`: `evaluate.load("accuracy")` (and every other metric) fetches the metric script
from the Hugging Face Hub; the pip wheel ships no metric scripts, so it fails offline
("Couldn't find a module script ... doesn't exist on the Hugging Face Hub either", evaluate 0.4.6)
and only works with a hand-downloaded copy of each script (huggingface/evaluate#315, #257).
The fine-tuning harness must run offline, so the same formulas are computed here with
scikit-learn / scipy (what evaluate's accuracy/f1/pearsonr/spearmanr scripts call themselves),
entity F1 follows seqeval's default (conlleval) chunking, and QA exact match / F1 follow the
KorQuAD 1.0 evaluation script (character-level F1 after normalisation). Each is tested against
hand-computed values in tests/test_finetune_metrics.py.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

import numpy as np


# scipy and sklearn are imported where used: they take seconds to import, and `--help` of the
# command-line tools that list these metrics should not wait for them.
def accuracy(predictions: Sequence, references: Sequence) -> float:
    from sklearn.metrics import accuracy_score

    return 100.0 * float(accuracy_score(references, predictions))


def f1_macro(predictions: Sequence, references: Sequence) -> float:
    from sklearn.metrics import f1_score

    return 100.0 * float(f1_score(references, predictions, average="macro", zero_division=0))


def f1_micro_excluding(predictions: Sequence, references: Sequence, exclude: str = "no_relation") -> float:
    from sklearn.metrics import f1_score

    """Micro F1 over all labels except `exclude` (KLUE-RE's main metric)."""
    labels = sorted({str(x) for x in list(references) + list(predictions)} - {exclude})
    if not labels:
        return 0.0
    return 100.0 * float(f1_score([str(r) for r in references], [str(p) for p in predictions],
                                  labels=labels, average="micro", zero_division=0))


def _correlation(kind, predictions, references) -> float:
    predictions, references = np.asarray(predictions, dtype=float), np.asarray(references, dtype=float)
    if predictions.std() == 0 or references.std() == 0:
        return 0.0  # undefined (constant input); a constant predictor earns no correlation
    return 100.0 * float(kind(predictions, references)[0])


def pearson(predictions, references) -> float:
    from scipy import stats

    return _correlation(stats.pearsonr, predictions, references)


def spearman(predictions, references) -> float:
    from scipy import stats

    return _correlation(stats.spearmanr, predictions, references)


# --- entity-level F1 (seqeval default mode = conlleval chunking) ---------------------------------------
def _split_tag(tag: str) -> tuple[str, str]:
    if tag in ("O", "", None):
        return "O", ""
    if "-" in tag:
        prefix, _, kind = tag.partition("-")
        return prefix, kind
    return tag, ""


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, start, end) chunks of an IOB1/IOB2/IOBES tag sequence, inclusive end, with conlleval's rules
    (an I- after O or after another type starts a new chunk)."""
    chunks, kind, start = [], None, None
    previous_prefix, previous_kind = "O", ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, tag_kind = _split_tag(tag)
        chunk_end = (
            previous_prefix in ("E", "S")
            or (previous_prefix in ("B", "I") and prefix in ("B", "S", "O"))
            or (previous_prefix != "O" and previous_kind != tag_kind)
        )
        chunk_start = (
            prefix in ("B", "S")
            or (prefix in ("I", "E") and (previous_prefix in ("E", "S", "O") or previous_kind != tag_kind))
        )
        if kind is not None and chunk_end:
            chunks.append((kind, start, i - 1))
            kind = None
        if chunk_start and prefix != "O":
            kind, start = tag_kind, i
        previous_prefix, previous_kind = prefix, tag_kind
    return chunks


def entity_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro precision/recall/F1 over exact entity matches (type and span), x 100."""
    true, pred = set(), set()
    for i, (p, r) in enumerate(zip(predictions, references)):
        true.update((i, *e) for e in get_entities(r))
        pred.update((i, *e) for e in get_entities(p))
    correct = len(true & pred)
    precision = correct / len(pred) if pred else 0.0
    recall = correct / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": 100.0 * precision, "recall": 100.0 * recall, "f1": 100.0 * f1}


def entity_f1(predictions, references) -> float:
    return entity_scores(predictions, references)["f1"]


def strict_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, start, end) chunks of an IOB2 sequence read strictly (seqeval's `mode="strict"`): B-X starts a
    chunk and I-X continues one of type X; an I- that continues nothing is no entity."""
    chunks, kind, start = [], None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, tag_kind = _split_tag(tag)
        if kind is not None and not (prefix == "I" and tag_kind == kind):
            chunks.append((kind, start, i - 1))
            kind = None
        if prefix == "B":
            kind, start = tag_kind, i
    return chunks


def entity_f1_macro(predictions, references) -> float:
    """The mean over entity types (those in the references or the predictions) of each type's entity F1,
    x 100, with strict IOB2 chunks: KLUE-NER's entity-level score (its seqeval call: average="macro",
    mode="strict", scheme=IOB2)."""
    true = [(i, *e) for i, r in enumerate(references) for e in strict_entities(r)]
    pred = [(i, *e) for i, p in enumerate(predictions) for e in strict_entities(p)]
    kinds = sorted({e[1] for e in true + pred})
    scores = []
    for kind in kinds:
        t, p = {e for e in true if e[1] == kind}, {e for e in pred if e[1] == kind}
        scores.append(2 * len(t & p) / (len(t) + len(p)))  # F1 = 2 TP / (gold + predicted)
    return 100.0 * sum(scores) / len(scores) if scores else 0.0


# --- extractive QA (KorQuAD 1.0 evaluation) --------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation (ASCII and common CJK quotes/brackets) and collapse whitespace."""
    text = re.sub(r"[\"'‘’´`“”「」『』《》〈〉<>]", " ", str(text)).lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(text.split())


def qa_exact_match_single(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def qa_f1_single(prediction: str, gold: str) -> float:
    """Character-level F1 with spaces removed (KorQuAD 1.0): Korean words carry particles, so a
    whitespace-token F1 would give 0 to answers that differ only by a particle."""
    pred_chars = list(normalize_answer(prediction).replace(" ", ""))
    gold_chars = list(normalize_answer(gold).replace(" ", ""))
    common = sum((Counter(pred_chars) & Counter(gold_chars)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_chars), common / len(gold_chars)
    return 2 * precision * recall / (precision + recall)


def _qa_best(score, predictions, references):
    """Mean over questions of the best score over gold answers (references: list of lists of strings)."""
    if not predictions:
        return 0.0
    return 100.0 * sum(max(score(p, g) for g in golds) for p, golds in zip(predictions, references)) / len(predictions)


def qa_exact_match(predictions, references) -> float:
    return _qa_best(qa_exact_match_single, predictions, references)


def qa_f1(predictions, references) -> float:
    return _qa_best(qa_f1_single, predictions, references)


METRICS = {
    "accuracy": accuracy,
    "f1_macro": f1_macro,
    "f1_micro_no_relation": f1_micro_excluding,
    "pearson": pearson,
    "spearman": spearman,
    "entity_f1": entity_f1,
    "entity_f1_macro": entity_f1_macro,
    "qa_f1": qa_f1,
    "qa_exact_match": qa_exact_match,
}
# Which metrics fit which task type (checked when a spec is built from the command line).
METRICS_FOR_TYPE = {
    "single": ("accuracy", "f1_macro", "f1_micro_no_relation"),
    "pair": ("accuracy", "f1_macro", "f1_micro_no_relation"),
    "regression": ("pearson", "spearman"),
    "token": ("entity_f1", "entity_f1_macro"),
    "qa": ("qa_f1", "qa_exact_match"),
}


def compute(names: Sequence[str], predictions, references) -> dict[str, float]:
    return {name: METRICS[name](predictions, references) for name in names}
