"""Intrinsic masked-LM metrics (training/intrinsic.py): loss, perplexity, hits@k, MRR and mean rank equal
hand-computed values, from full or gathered labels and summed across batches, with tied logits ordered at
random (the expected rank); the output bias initialised to the training tokens' unigram frequencies; and the context-free
frequency baseline checked against a hand count.
"""
from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import KOREAN_SENTENCES
from tests.model_factories import word_tokenizer
from tests.post_train_helpers import WORDS
from training.intrinsic import MetricSums, frequency_baseline, init_output_bias, masked_lm_metrics, unigram_log_probs
from training.mlm_batches import Masker

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


def test_intrinsic_metrics_equal_hand_computed_values():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 5.0],   # gold 0: larger logits {5.0}      -> rank 2
                           [0.0, 3.0, 1.0, 2.0, -2.0],   # gold 1: largest                 -> rank 1
                           [4.0, 3.0, 2.0, 1.0, 0.0]])   # gold 4: all four larger         -> rank 5
    labels = torch.tensor([0, 1, 4])
    m = masked_lm_metrics(logits, labels)
    ce = [math.log(sum(math.exp(v) for v in row)) - row[g] for row, g in zip(logits.tolist(), [0, 1, 4])]
    loss = sum(ce) / 3
    assert m["loss"] == pytest.approx(loss, rel=1e-6)
    assert m["perplexity"] == pytest.approx(math.exp(loss), rel=1e-6)
    assert m["hits@1"] == pytest.approx(1 / 3)
    assert m["hits@3"] == pytest.approx(2 / 3)
    assert m["hits@5"] == pytest.approx(1.0)
    assert m["hits@10"] == pytest.approx(1.0)
    assert m["mrr"] == pytest.approx((1 / 2 + 1 + 1 / 5) / 3)
    assert m["mean_rank"] == pytest.approx((2 + 1 + 5) / 3)


def test_intrinsic_metrics_from_full_labels_and_across_batches():
    torch.manual_seed(0)
    labels = torch.full((2, 6), -100)
    labels[0, 1], labels[0, 4], labels[1, 2] = 3, 7, 1
    dense = torch.randn(2, 6, 12)
    sparse = dense[labels.ne(-100)]
    a = masked_lm_metrics(dense, labels)
    b = masked_lm_metrics(sparse, labels)
    assert a == pytest.approx(b)
    sums = MetricSums()  # split into two batches: same numbers
    sums.add_batch(sparse[:1], labels[labels.ne(-100)][:1])
    sums.add_batch(sparse[1:], labels[labels.ne(-100)][1:])
    assert sums.compute() == pytest.approx(a)


def test_tied_logits_give_the_expected_rank_of_a_random_order():
    """Constant logits know nothing: hits@1 is 1 / vocabulary, not 1. A gold token tied with two others
    below one larger logit is 2nd, 3rd or 4th with equal chance."""
    m = masked_lm_metrics(torch.zeros(1, 4), torch.tensor([2]))
    assert m["mean_rank"] == pytest.approx(2.5) and m["hits@1"] == pytest.approx(0.25)
    assert m["hits@3"] == pytest.approx(0.75) and m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    m = masked_lm_metrics(torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.0]]), torch.tensor([2]))
    assert m["mean_rank"] == pytest.approx(3.0) and m["hits@1"] == 0.0 and m["hits@3"] == pytest.approx(2 / 3)
    assert m["hits@5"] == 1.0 and m["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)


def test_nan_logits_are_misses_never_perfect_hits():
    """A diverged model's logits are NaN: no logit is above or tied with a NaN gold logit, which once made
    (k - 0) / 0 count as a hit at every k. A NaN gold logit ranks last, and a NaN elsewhere ranks above it."""
    vocab = 12
    m = masked_lm_metrics(torch.full((3, vocab), float("nan")), torch.tensor([0, 2, 11]))
    assert all(m[f"hits@{k}"] == 0.0 for k in (1, 3, 5, 10)) and m["mean_rank"] == vocab
    assert m["mrr"] == pytest.approx(1 / vocab) and math.isnan(m["loss"]) and math.isnan(m["perplexity"])
    one_nan = torch.tensor([[0.0, float("nan"), 2.0, 1.0, -1.0]])  # gold 2 is the largest number, one logit is NaN
    m = masked_lm_metrics(one_nan, torch.tensor([2]))
    assert m["hits@1"] == 0.0 and m["hits@3"] == 1.0 and m["mean_rank"] == 2.0


def test_unigram_output_bias_starts_at_the_training_token_frequencies(tiny):
    import datasets

    from modeling_xpt import from_source

    source, tok_dir = tiny["bert"]
    tok = word_tokenizer("bert", WORDS)
    model = from_source(str(source), tok)
    special = tok.all_special_ids
    plain = [i for i in range(len(tok)) if i not in special]
    rows = datasets.Dataset.from_dict({"input_ids": [[tok.cls_token_id, plain[0], plain[0], plain[1], tok.sep_token_id],
                                                     [tok.cls_token_id, plain[0], tok.sep_token_id]]})
    init_output_bias(model, rows, special_ids=special)
    vocab = model.config.vocab_size
    counts = torch.zeros(vocab)
    counts[plain[0]], counts[plain[1]] = 3, 1
    expected = torch.log((counts + 1) / (counts.sum() + vocab))
    bias = model.lm_head.bias.detach()
    torch.testing.assert_close(bias[plain], expected[plain])
    assert torch.all(bias[special] == expected.min()) and torch.all(bias[vocab:] == expected.min())
    assert bias[plain[0]] > bias[plain[1]] > bias[plain[2]]


def test_frequency_baseline_scores_tokens_by_their_train_frequency(tiny):
    """The context-free baseline ranks every masked token by its train-split frequency: checked against a
    hand count of the train rows and the masked labels of the same fixed masks."""
    from collections import Counter

    from accelerate import Accelerator
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.mlm_batches import eval_batches

    tok = AutoTokenizer.from_pretrained(str(tiny["bert"][1]))

    def rows(sentences):
        ids = [[tok.cls_token_id] + [tok.convert_tokens_to_ids(w) for w in s.split()] + [tok.sep_token_id]
               for s in sentences]
        return Dataset.from_dict({"input_ids": ids, "word_start": [[1] * len(x) for x in ids],
                                  "seg_lengths": [[len(x)] for x in ids]})

    train, test = rows(KOREAN_SENTENCES[:10] * 3 + KOREAN_SENTENCES[:2]), rows(KOREAN_SENTENCES[:12])
    kwargs = dict(masker=Masker(tok, 0.5), pad_id=tok.pad_token_id, position_offset=0, packing=True, seed=1234)
    log_p = unigram_log_probs(train, tok.all_special_ids, len(tok), len(tok))
    metrics = frequency_baseline(test, log_p, accelerator=Accelerator(cpu=True), batch_size=4,
                                            collate_kwargs=kwargs)

    counts = Counter(t for ids in train["input_ids"] for t in ids if t not in tok.all_special_ids)
    labels = [int(t) for b in eval_batches(test, batch_size=4, rank=0, world=1, collate_kwargs=kwargs)
              for t in b["labels"][b["labels"].ne(-100)]]
    every = [counts.get(v, 0) for v in range(len(tok))]  # specials and unseen tokens share the smallest score
    above = [sum(c > counts[t] for c in every) for t in labels]
    tied = [sum(c == counts[t] for c in every) for t in labels]
    assert metrics["num_tokens"] == len(labels) > 10 and max(tied) > 1  # the toy text's counts tie
    assert metrics["hits@1"] == pytest.approx(sum(1 / t for a, t in zip(above, tied) if a == 0) / len(labels))
    assert metrics["mean_rank"] == pytest.approx(sum(a + (t + 1) / 2 for a, t in zip(above, tied)) / len(labels))
    expected_loss = -sum(float(log_p[t]) - float(torch.logsumexp(log_p.float(), 0)) for t in labels) / len(labels)
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-5)
