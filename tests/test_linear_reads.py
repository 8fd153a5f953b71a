"""training/linear_reads.py and finetune.py's --floor / --mode probe: the no-model floor and linear
probes, recomputed independently with scikit-learn and checked to use fine-tuning's own splits."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge

from tests.test_finetune import args_for, stock_model_dir, toy_sentiment_dir, toy_sts_dir, xpt_model_dir
from tests.model_factories import KOREAN_WORDS, word_tokenizer
from training import compare, finetune, linear_reads
from training.tasks import TaskDataError, get_task, load_task_data


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tfidf_recomputed(train_texts, fit_texts, dev_texts, test_texts=None):
    vectoriser = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True).fit(fit_texts)
    return [vectoriser.transform(t) if t is not None else None for t in (train_texts, dev_texts, test_texts)]


def test_floor_on_nsmc_matches_a_recomputation(shared_data):
    """TF-IDF + logistic regression, C chosen on dev: the same dev accuracy as scikit-learn directly."""
    spec = get_task("nsmc")
    splits = load_task_data(spec, shared_data / "tasks" / "nsmc", 600, 300, data_seed=3)
    result = linear_reads.floor(spec, splits)
    texts = {s: [r["document"] for r in rows] for s, rows in splits.items()}
    labels = {s: np.array([str(r["label"]) for r in rows]) for s, rows in splits.items()}
    x_train, x_dev, _ = tfidf_recomputed(texts["train"], texts["train"], texts["dev"])
    by_c = {c: 100 * float((LogisticRegression(C=c, max_iter=2000).fit(x_train, labels["train"]).predict(x_dev)
                            == labels["dev"]).mean()) for c in linear_reads.C_GRID}
    best_c = max(by_c, key=by_c.get)
    assert result["estimator"] == f"logistic regression C={best_c:g}"
    assert result["dev"] == pytest.approx(by_c[best_c])
    assert result["train_examples"] == 600 and result["split"] == "dev" and "test" not in result
    assert result["dev"] > 60  # sentiment words are lexical: the floor is far above chance


def test_sts_floor_ridge_and_cosine_match_a_recomputation(tmp_path):
    spec = get_task("korsts")
    splits = load_task_data(spec, toy_sts_dir(tmp_path / "sts"))
    result = linear_reads.floor(spec, splits)
    cols = {s: ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows]) for s, rows in splits.items()}
    gold = {s: [float(r["score"]) for r in rows] for s, rows in splits.items()}
    vectoriser = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True).fit(
        cols["train"][0] + cols["train"][1])
    dense = {s: [vectoriser.transform(c).toarray() for c in pair] for s, pair in cols.items()}
    features = {s: np.hstack([np.abs(u - v), u * v]) for s, (u, v) in dense.items()}
    by_alpha = {a: Ridge(alpha=a).fit(features["train"], gold["train"]) for a in linear_reads.ALPHA_GRID}
    dev = {a: 100 * spearmanr(m.predict(features["dev"]), gold["dev"])[0] for a, m in by_alpha.items()}
    best = max(dev, key=dev.get)
    assert result["estimator"] == f"ridge alpha={best:g}" and result["dev"] == pytest.approx(dev[best], abs=1e-6)
    assert result["test"] == pytest.approx(100 * spearmanr(by_alpha[best].predict(features["test"]), gold["test"])[0],
                                           abs=1e-6)
    u, v = dense["test"]
    cosine = np.round((u * v).sum(1) / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), 1e-12), 10)
    assert result["zero_shot"]["test"] == pytest.approx(100 * spearmanr(cosine, gold["test"])[0], abs=1e-6)
    assert result["zero_shot"]["test"] > 50  # the toy score is the number of shared words


def test_probe_reads_the_frozen_encoder_with_both_poolings(tmp_path):
    """Probe features are the encoder's pooled states: a recomputation from the model's own forward
    gives the same vectors, and a task the states separate is learned."""
    from transformers import AutoModel, AutoTokenizer

    model_dir = stock_model_dir(tmp_path / "bert")
    spec = get_task("nsmc")
    splits = load_task_data(spec, toy_sentiment_dir(tmp_path / "toy"))
    results = linear_reads.probe(model_dir, spec, splits, max_length=16)
    assert set(results) == {"mean", "first"}
    for result in results.values():
        assert result["kind"] == "probe" and result["train_examples"] == len(splits["train"])
        assert 0 <= result["dev"] <= 100
    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()
    texts = [r["document"] for r in splits["dev"][:3]]
    states = linear_reads.encode(model, tokenizer, texts, 16)
    with torch.no_grad():
        for i, text in enumerate(texts):  # one text at a time: no padding at all
            hidden = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]
            assert np.allclose(states["mean"][i], hidden.mean(0).numpy(), atol=1e-5)
            assert np.allclose(states["first"][i], hidden[0].numpy(), atol=1e-5)


def test_finetune_reports_floor_and_probe_on_its_own_subsample(shared_data, tmp_path):
    """--floor and --mode both: the floor and the probes see exactly the train subsample and dev split
    that fine-tuning used (recomputed from load_task_data with the same seed)."""
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model = xpt_model_dir(tmp_path / "xpt", tokenizer)
    data_dir = shared_data / "tasks" / "nsmc"
    args = args_for(model, "nsmc", data_dir, tmp_path / "out", "--floor", "--mode", "both", "--max-train-samples",
                    "200", "--max-eval-samples", "100", "--data-seed", "5", "--max-length", "24")
    results = finetune.run(args)
    assert results["num_examples"] == {"train": 200, "dev": 100}
    assert results["floor"]["train_examples"] == results["probe"]["mean"]["train_examples"] == 200
    again = linear_reads.floor(get_task("nsmc"), load_task_data(get_task("nsmc"), data_dir, 200, 100, data_seed=5))
    assert again["dev"] == results["floor"]["dev"] and again["estimator"] == results["floor"]["estimator"]
    other = linear_reads.floor(get_task("nsmc"), load_task_data(get_task("nsmc"), data_dir, 200, 100, data_seed=6))
    assert other["dev"] != results["floor"]["dev"]  # another subsample gives another floor: the seed matters
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["mode"] == "both" and saved["floor"] == results["floor"] and saved["scores"]
    rows = compare.load_results([tmp_path / "out" / "results.json"])
    assert {r["method"] for r in rows} == {"xpt", "xpt probe (mean)", "xpt probe (first)", compare.FLOOR}


def test_probe_mode_trains_nothing_and_refuses_publishing(tmp_path, capsys):
    model = stock_model_dir(tmp_path / "bert")
    data = toy_sentiment_dir(tmp_path / "toy")
    results = finetune.run(args_for(model, "nsmc", data, tmp_path / "out", "--mode", "probe", "--floor"))
    assert "scores" not in results and not (tmp_path / "out" / "model").exists()
    assert results["split"] == "dev" and "linear probe, mean-pooled" in capsys.readouterr().out
    code = finetune.main(["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir",
                          str(tmp_path / "o2"), "--mode", "probe", "--push-to-hub", "org/x", "--push-dry-run"])
    assert code == 2 and "--mode probe trains no model" in capsys.readouterr().err
    with pytest.raises(TaskDataError, match="sentence-level"):
        finetune.linear_reads(argparse.Namespace(floor=True, mode="finetune"), get_task("klue-ner"), {}, 16, "cpu")
