"""Downstream metrics (training/metrics_downstream.py) against values computed by hand."""
from __future__ import annotations

import math

import pytest

from training import metrics_downstream as M


def test_accuracy_and_macro_f1_by_hand():
    refs = ["a", "a", "b", "b", "c"]
    preds = ["a", "b", "b", "b", "a"]
    assert M.accuracy(preds, refs) == pytest.approx(60.0)  # 3 of 5
    # a: P=1/2 R=1/2 F=1/2; b: P=2/3 R=1 F=4/5; c: P=0 R=0 F=0 -> mean 13/30
    assert M.f1_macro(preds, refs) == pytest.approx(100 * (0.5 + 0.8 + 0) / 3)


def test_micro_f1_without_no_relation_by_hand():
    refs = ["no_relation", "per:age", "org:top", "per:age"]
    preds = ["per:age", "per:age", "no_relation", "org:top"]
    # Counted over relation labels only: TP=1 (row 1), FP=2 (rows 0, 3), FN=2 (rows 2, 3) -> P=1/3 R=1/3
    assert M.f1_micro_excluding(preds, refs) == pytest.approx(100 / 3)


def test_pearson_and_spearman_by_hand():
    x, y = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0]
    # Pearson: deviations x (-1.5,-.5,.5,1.5), y (-1.75,.25,-.75,2.25): cov 5.5, |x| sqrt5, |y| sqrt(8.75)
    assert M.pearson(x, y) == pytest.approx(100 * 5.5 / math.sqrt(5 * 8.75))
    # Spearman: ranks of y are (1,3,2,4); d = (0,-1,1,0): 1 - 6*2/(4*15) = 0.8
    assert M.spearman(x, y) == pytest.approx(80.0)
    assert M.spearman([1, 1, 1], [1, 2, 3]) == 0.0  # constant predictions: no correlation, not NaN


def test_entities_and_entity_f1_by_hand():
    assert M.get_entities(["B-PS", "I-PS", "O", "B-LC", "B-LC", "I-OG", "I-OG"]) == [
        ("PS", 0, 1), ("LC", 3, 3), ("LC", 4, 4), ("OG", 5, 6)]  # an I- after another type opens a chunk
    refs = [["B-PS", "I-PS", "O", "B-LC"], ["B-OG", "O"]]
    preds = [["B-PS", "I-PS", "O", "O"], ["B-OG", "B-DT"]]
    # gold {PS 0-1, LC 3, OG 0}, predicted {PS 0-1, OG 0, DT 1}: TP 2, P 2/3, R 2/3
    scores = M.entity_scores(preds, refs)
    assert scores["precision"] == pytest.approx(200 / 3)
    assert scores["recall"] == pytest.approx(200 / 3)
    assert M.entity_f1(preds, refs) == pytest.approx(200 / 3)
    # a span that is off by one token is wrong, not half right
    assert M.entity_f1([["B-PS", "O"]], [["B-PS", "I-PS"]]) == 0.0


def test_entity_f1_agrees_with_seqeval_when_installed():
    seqeval = pytest.importorskip("seqeval.metrics", reason="seqeval not installed (optional cross-check)")
    refs = [["B-PS", "I-PS", "O", "B-LC", "I-LC"], ["O", "B-OG", "I-OG", "I-OG", "O", "B-DT"]]
    preds = [["B-PS", "I-PS", "O", "I-LC", "I-LC"], ["O", "B-OG", "I-OG", "O", "O", "B-DT"]]
    assert M.entity_f1(preds, refs) == pytest.approx(100 * seqeval.f1_score(refs, preds))
    from seqeval.scheme import IOB2

    strict = seqeval.f1_score(refs, preds, average="macro", mode="strict", scheme=IOB2)  # KLUE's own call
    assert M.entity_f1_macro(preds, refs) == pytest.approx(100 * strict)
    assert 100 * strict == pytest.approx(50.0)  # the predicted I-LC I-LC is no entity in strict IOB2


def test_entity_macro_f1_by_hand():
    refs = [["B-PS", "I-PS", "O", "B-LC"], ["B-OG", "O"]]
    preds = [["B-PS", "I-PS", "O", "O"], ["B-OG", "B-DT"]]
    # PS 1, LC 0 (missed), OG 1, DT 0 (spurious): the mean of the four types, where micro F1 is 2/3
    assert M.entity_f1_macro(preds, refs) == pytest.approx(50.0)


def test_qa_exact_match_and_char_f1_by_hand():
    assert M.qa_exact_match_single("서울특별시", "서울특별시") == 1.0
    assert M.qa_exact_match_single("「서울」", "서울") == 1.0  # brackets are normalised away
    # "서울특별시에" vs "서울특별시": 5 common characters, P 5/6, R 1 -> F 10/11
    assert M.qa_f1_single("서울특별시에", "서울특별시") == pytest.approx(10 / 11)
    assert M.qa_f1_single("부산", "서울") == 0.0
    # best over gold answers, mean over questions
    preds, refs = ["서울특별시에", "부산"], [["서울", "서울특별시"], ["부산광역시"]]
    # q1: max(F(서울특별시에, 서울)=2*(2/6*1)/(2/6+1)=1/2, 10/11); q2: P 1, R 2/5 -> 4/7
    assert M.qa_f1(preds, refs) == pytest.approx(100 * (10 / 11 + 4 / 7) / 2)
    assert M.qa_exact_match(preds, refs) == 0.0
