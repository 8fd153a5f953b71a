"""Zero-shot sentence similarity (training/embedding_similarity.py) on tiny real models and tokenizers.

The batched, padded scores are checked against the formula computed one sentence at a time with no
padding, so a mask or pooling mistake shows up as a different number."""
from __future__ import annotations

import collections
import math

import pytest
import torch
from scipy import stats

from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer
from training.embedding_similarity import applies_to, token_overlap_similarity, zero_shot_similarity
from training.tasks import get_task

SENTENCES = ["나는 학교에 간다", "오늘 날씨가 좋다 .", "서울은 한국의 수도 이다", "책을 읽었다", "영화가 재미있다",
             "우리 내일 만나자", "나는 책을 읽었다 .", "오늘 영화가 재미있다", "서울은 날씨가 좋다", "문장 입니다"]
PAIRS = [{"sentence1": a, "sentence2": b, "score": f"{(i * 7) % 6}.0"}
         for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[3:] + SENTENCES[:3]))]


def _folder(kind: str, tmp_path):
    """A stock BERT folder, or an XPT folder converted from a RoBERTa source (remote code)."""
    tokenizer = word_tokenizer("bert" if kind == "bert" else "roberta", KOREAN_WORDS)
    folder = tmp_path / kind
    if kind == "bert":
        tiny_source("bert", tokenizer, folder, seed=3)
    else:
        from modeling_xpt import from_source

        from_source(tiny_source("roberta", tokenizer, seed=3), tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder, tokenizer


def _expected(folder, tokenizer, max_length: int) -> float:
    """The module docstring's formula, one unpadded sentence at a time."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()

    def u(text):
        ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            return model(input_ids=ids).last_hidden_state[0].mean(0)

    cosines = [torch.nn.functional.cosine_similarity(u(p["sentence1"]), u(p["sentence2"]), dim=0).item() for p in PAIRS]
    return 100 * stats.spearmanr(cosines, [float(p["score"]) for p in PAIRS]).statistic


@pytest.mark.parametrize("kind", ["bert", "xpt"])
@pytest.mark.parametrize("max_length", [64, 4])
def test_zero_shot_score_is_the_unpadded_formula(kind, max_length, tmp_path):
    folder, tokenizer = _folder(kind, tmp_path)
    result = zero_shot_similarity(folder, get_task("korsts"), PAIRS, max_length=max_length)
    assert result["pairs"] == len(PAIRS)
    assert result["spearman"] == pytest.approx(_expected(folder, tokenizer, max_length), abs=1e-3)


@pytest.mark.parametrize("max_length, words_kept", [(64, 64), (4, 2)])  # [CLS] and [SEP] take 2 of max_length
def test_token_overlap_is_the_cosine_of_token_counts(max_length, words_kept):
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)

    def cosine(a: str, b: str) -> float:
        x, y = collections.Counter(a.split()[:words_kept]), collections.Counter(b.split()[:words_kept])
        return sum(x[k] * y[k] for k in x) / math.sqrt(sum(v * v for v in x.values()) * sum(v * v for v in y.values()))

    expected = 100 * stats.spearmanr([cosine(p["sentence1"], p["sentence2"]) for p in PAIRS],
                                     [float(p["score"]) for p in PAIRS]).statistic
    result = token_overlap_similarity(tokenizer, get_task("korsts"), PAIRS, max_length=max_length)
    assert result["spearman"] == pytest.approx(expected, abs=1e-6)


def test_only_pair_regression_tasks_are_scored(tmp_path):
    assert applies_to(get_task("korsts")) and not applies_to(get_task("nsmc"))
    with pytest.raises(ValueError, match="nsmc"):
        token_overlap_similarity(word_tokenizer("bert", KOREAN_WORDS), get_task("nsmc"), PAIRS, max_length=64)
