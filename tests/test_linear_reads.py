"""training/linear_reads.py and finetune.py's --floor / --mode probe: the no-model floor and linear
probes, recomputed independently with scikit-learn and checked to use fine-tuning's own splits."""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge

from tests.test_finetune import one_thread  # noqa: F401 - autouse: tiny models gain nothing from threads
from tests.test_finetune import args_for, stock_model_dir, toy_sentiment_dir, toy_sts_dir, write_tsv, xpt_model_dir
from tests.model_factories import KOREAN_WORDS, word_tokenizer
from modeling_xpt.tokenizer_files import VOCABULARY_ROWS
from tests.post_train_helpers import WORDS
from training import compare, finetune, linear_reads, sentence_similarity
from training.tasks import TaskDataError, get_task, load_task_data

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


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
    cosine = np.round((u * v).sum(1) / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), 1e-12),
                      linear_reads.ROUND_COSINE)
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


def test_probe_of_a_diverged_encoder_is_one_line_naming_the_model(tmp_path):
    """An encoder whose weights hold NaN (a diverged post-training) gives NaN states: refused as a TaskDataError
    naming the model folder, not a scikit-learn traceback."""
    from transformers import AutoModel

    model_dir = stock_model_dir(tmp_path / "bert")
    model = AutoModel.from_pretrained(model_dir)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.fill_(float("nan"))
    model.save_pretrained(model_dir)
    spec = get_task("nsmc")
    splits = load_task_data(spec, toy_sentiment_dir(tmp_path / "toy"))
    with pytest.raises(TaskDataError, match=r"bert: the encoder's hidden states on the train split are not finite"):
        linear_reads.probe(model_dir, spec, splits, max_length=16)


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
    floor = f"no-model floor (TF-IDF, {results['floor']['estimator']})"  # named as the study's report names it
    assert {r["method"] for r in rows} == {"xpt", "xpt probe (mean)", "xpt probe (first)", floor}


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


def test_a_probe_run_with_other_options_is_refused_in_its_folder(tmp_path, capsys):
    """One run per folder for probes too: results.json records the options that shape a probe's scores, a probe
    with other options is refused there (unless --overwrite-output-dir) and the same options run again."""
    model = stock_model_dir(tmp_path / "bert")
    out = tmp_path / "out"
    argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(toy_sentiment_dir(tmp_path / "toy")),
            "--output-dir", str(out), "--mode", "probe", "--max-length", "16", "--device", "cpu", "--no-progress"]
    assert finetune.main([*argv, "--max-train-samples", "40"]) == 0
    first = json.loads((out / "results.json").read_text())
    assert first["hyperparameters"] == {"max_length": 16, "max_train_samples": 40, "max_eval_samples": None,
                                        "hold_out_test": 0, "hold_out_dev": 0}
    assert finetune.main([*argv, "--max-train-samples", "30"]) == 2
    assert "holds the results of a run with other options (max_train_samples 40 -> 30)" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text()) == first
    assert finetune.main([*argv, "--max-train-samples", "40"]) == 0  # the same options: the same run
    assert finetune.main([*argv, "--max-train-samples", "30", "--overwrite-output-dir"]) == 0
    assert json.loads((out / "results.json").read_text())["num_examples"]["train"] == 30
    assert "note: --mode probe" not in capsys.readouterr().err
    assert finetune.main([*argv, "--max-train-samples", "30", "--seeds", "5", "--learning-rate", "1"]) == 0
    assert "note: --mode probe trains no model, so --seeds, --learning-rate are not used" in capsys.readouterr().err


def test_a_probe_over_a_fine_tuning_run_leaves_none_of_its_files(tmp_path, capsys):
    """--mode probe --overwrite-output-dir over a fine-tuning run: its saved model and seed records go with its
    results.json, so that the folder holds the probe run alone."""
    model = stock_model_dir(tmp_path / "bert")
    data = toy_sentiment_dir(tmp_path / "toy")
    out = tmp_path / "out"
    finetune.run(args_for(model, "nsmc", data, out, "--seeds", "2"))
    assert (out / "model" / "config.json").is_file() and len(list((out / "runs").glob("seed_*.json"))) == 2
    finetune.run(args_for(model, "nsmc", data, out, "--mode", "probe", "--overwrite-output-dir"))
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]
    assert json.loads((out / "results.json").read_text())["mode"] == "probe"
    assert compare.find_results([str(out)]) == [out / "results.json"] and "interrupted" not in capsys.readouterr().err


def test_learning_curve_probes_every_checkpoint_with_its_own_weights(tiny, tmp_path, monkeypatch):
    """Each point is the checkpoint's weights in the run's architecture: rebuilt folders hold exactly the
    checkpoint's tensors, and the finished model is read as it was saved."""
    from tests.post_train_helpers import checkpoint_weights, run_args, run_inprocess
    from training import learning_curve as lc
    from training.checkpointing import list_checkpoints

    run = tmp_path / "run"
    run_inprocess(run_args(tiny, run, train_steps=6, phase1_steps=2, save_steps=3))
    checkpoints = list_checkpoints(run)
    assert [s for s, _ in checkpoints] == [3, 6]  # the cadence, and the run's last step (read from the finished model)
    task_dir = tmp_path / "toy"
    rows = [[i, " ".join(random.Random(i).sample(WORDS, 4)), i % 2] for i in range(60)]
    for split, part in (("train", rows[:40]), ("dev", rows[40:])):
        write_tsv(task_dir / f"{split}.tsv", ["id", "document", "label"], part)
    probed = []
    real_probe = linear_reads.probe
    monkeypatch.setattr(linear_reads, "probe", lambda folder, *args: probed.append(Path(folder)) or real_probe(folder, *args))
    first = lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 16, steps=[3])  # the finished model is step 6
    assert [p["step"] for p in first["points"]] == [3] and len(probed) == 1
    curve = lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 16)  # step 3 kept from the file, 6 added
    assert [p["step"] for p in curve["points"]] == [3, 6] and probed[1:] == [run]
    assert curve["points"][0] == first["points"][0] == json.loads((run / lc.CURVE_FILE).read_text())["points"][0]
    other = lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 12)  # other settings: every point probed again
    assert [p["step"] for p in other["points"]] == [3, 6] and len(probed) == 4
    assert lc.main([str(run), "--task", f"nsmc={task_dir}", "--hold-out-test", "1000"]) == 2
    with pytest.raises(TaskDataError, match=r"no checkpoint or finished model at step\(s\) 5; steps kept: 3, 6"):
        lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 16, steps=[5, 6])  # a typo probes nothing, says so
    assert curve["floor"]["nsmc"]["train_examples"] == 40
    capped = lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 16, steps=[6], max_eval_samples=8)
    capped_splits = load_task_data(get_task("nsmc"), task_dir, None, 8)
    assert len(capped_splits["dev"]) == 8 and capped["max_eval_samples"] == 8
    expected = linear_reads.floor(get_task("nsmc"), capped_splits)  # read on the 8 dev examples
    assert {**capped["floor"]["nsmc"], "wall_s": None} == {**expected, "wall_s": None}
    with pytest.raises(TaskDataError, match=f"^{tmp_path / 'typo'}: no such folder"):
        lc.learning_curve(tmp_path / "typo", {"nsmc": str(task_dir)}, None, 16)
    with pytest.raises(TaskDataError, match=f"^--task nsmc={tmp_path / 'nope'}: no such folder"):
        lc.learning_curve(run, {"nsmc": str(tmp_path / "nope")}, None, 16)
    from transformers import AutoModelForMaskedLM
    step, path = checkpoints[0]
    config = lc.run_config(run, path, None)  # the settings saved in the checkpoint
    folder = lc.checkpoint_model(run, path, config, tmp_path / "ckpt")
    saved = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).state_dict()
    for name, tensor in checkpoint_weights(path).items():  # E_T, decoder and MLM bias: one row per token when saved
        rows = tensor[: len(saved[name])] if name.endswith(VOCABULARY_ROWS) else tensor
        assert torch.equal(saved[name], rows), name
    direct = linear_reads.probe(run, get_task("nsmc"), load_task_data(get_task("nsmc"), task_dir), 16)
    assert direct["mean"]["dev"] == curve["points"][-1]["probe"]["nsmc"]["mean"]["dev"]
    assert "| 6 |" in lc.table(curve)
    # a run with word-order prediction: its checkpoints hold the WOP head beside the model, which is left out
    wop = tmp_path / "wop"
    run_inprocess(run_args(tiny, wop, train_steps=4, phase1_steps=2, save_steps=2, wop_probability=0.5))
    (_, wop_checkpoint), = list_checkpoints(wop)[:1]
    assert any(k.startswith("wop_head.") for k in checkpoint_weights(wop_checkpoint))
    folder = lc.checkpoint_model(wop, wop_checkpoint, lc.run_config(wop, wop_checkpoint, None), tmp_path / "wop-ckpt")
    saved = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).state_dict()
    assert all(torch.equal(saved[k], v[: len(saved[k])] if k.endswith(VOCABULARY_ROWS) else v)
               for k, v in checkpoint_weights(wop_checkpoint).items() if not k.startswith("wop"))


def test_bi_encoder_sts_starts_at_the_cosine_and_never_ends_below_it_on_dev(tmp_path):
    """--pair-encoding bi: epoch 0 is the encoder's cosine without training (the probe's zero-shot
    figure on the same dev split); the kept state is the best on dev, epoch 0 included; model/ reloads
    as a sentence encoder with the same test score."""
    from transformers import AutoModel, AutoTokenizer

    model = stock_model_dir(tmp_path / "bert")
    data = toy_sts_dir(tmp_path / "sts")
    results = finetune.run(args_for(model, "korsts", data, tmp_path / "out", "--pair-encoding", "bi", "--epochs", "3",
                                    "--learning-rate", "1e-3", "--floor", "--mode", "both", "--max-length", "16",
                                    "--mixed-precision", "no"))
    run = json.loads((tmp_path / "out" / "runs" / "seed_0.json").read_text())
    zero_shot = results["probe"]["mean"]["zero_shot"]["dev"]
    assert run["epochs"][0]["epoch"] == 0 and run["epochs"][0]["dev"]["spearman"] == pytest.approx(zero_shot, abs=1e-4)
    assert run["dev"] == max(e["dev"]["spearman"] for e in run["epochs"]) >= zero_shot - 1e-4
    assert results["hyperparameters"]["pair_encoding"] == "bi"
    encoder = AutoModel.from_pretrained(tmp_path / "out" / "model").eval()  # a plain sentence encoder
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out" / "model")
    rows = load_task_data(get_task("korsts"), data)["test"]
    u = linear_reads.encode(encoder, tokenizer, [r["sentence1"] for r in rows], 16)["mean"]
    v = linear_reads.encode(encoder, tokenizer, [r["sentence2"] for r in rows], 16)["mean"]
    cosine = np.round((u * v).sum(1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)), linear_reads.ROUND_COSINE)
    assert 100 * spearmanr(cosine, [float(r["score"]) for r in rows])[0] == pytest.approx(results["scores"][0], abs=0.5)


def test_bi_encoder_is_refused_where_it_means_nothing(tmp_path, capsys):
    model, data = stock_model_dir(tmp_path / "bert"), toy_sentiment_dir(tmp_path / "toy")
    code = finetune.main(["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir",
                          str(tmp_path / "o"), "--pair-encoding", "bi"])
    assert code == 2 and "sentence-pair regression" in capsys.readouterr().err


def test_hold_out_test_is_the_split_the_study_holds_out(shared_data, tmp_path):
    """finetune.py --hold-out-test N gives NSMC the same test split as the study's hold_out_test: N (seed 0),
    so figures of the two are on the same reviews; the train subsample is drawn from what is left."""
    from training import study

    spec = study.StudySpec.from_dict({"tasks": {"nsmc": {"data_dir": str(shared_data / "tasks" / "nsmc"),
                                                         "hold_out_test": 300}}})
    folder = study.task_folder(spec, tmp_path, "nsmc")
    by_study = load_task_data(get_task("nsmc"), folder)
    held = load_task_data(get_task("nsmc"), shared_data / "tasks" / "nsmc", 500, None, 0, hold_out_test=300)
    assert [r["id"] for r in held["test"]] == [r["id"] for r in by_study["test"]]
    assert not {r["id"] for r in held["train"]} & {r["id"] for r in held["test"]} and len(held["train"]) == 500
    with pytest.raises(TaskDataError, match="already has a test split"):
        load_task_data(get_task("korsts"), shared_data / "tasks" / "korsts", hold_out_test=10)


def test_finetuning_that_loses_to_the_floor_says_so_last_and_in_results(tmp_path, capsys):
    """A cross-encoder that barely trains (learning rate 1e-9) stays below the TF-IDF floor: its run ends
    with the verdict line naming that, and results.json holds the verdict with the bars it was judged by."""
    model, data = stock_model_dir(tmp_path / "bert"), toy_sts_dir(tmp_path / "sts")
    results = finetune.run(args_for(model, "korsts", data, tmp_path / "out", "--pair-encoding", "cross",
                                    "--learning-rate", "1e-9", "--floor", "--mode", "both", "--max-length", "16"))
    verdict = json.loads((tmp_path / "out" / "results.json").read_text())["verdict"]
    assert verdict == results["verdict"] and verdict["compared_with"] == ["probe", "floor"]
    for split in ("dev", "test"):
        assert verdict["floor"]["bar"][split] == linear_reads.floor_bar(results["floor"], split)[0]
        assert verdict["floor"]["finetuned_mean"][split] == results["runs"][0][split]
        assert verdict["floor"]["finetuned_mean"][split] < verdict["floor"]["bar"][split]
    assert verdict["floor"]["above"] is False and verdict["above_all"] is False
    probe = max(results["probe"].values(), key=lambda read: read["dev"])
    assert verdict["probe"]["bar"] == {"dev": probe["dev"], "test": probe["test"]}
    assert verdict["probe"]["above"] == all(results["runs"][0][s] > probe[s] for s in ("dev", "test"))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == verdict["line"] and "BELOW the no-model floor" in last and "0/1 seeds above on test" in last


def test_finetuning_without_reads_says_what_to_add():
    from training.finetune_tables import verdict

    runs = [{"seed": 0, "dev": 71.0, "test": 70.0}, {"seed": 1, "dev": 69.0, "test": float("nan")}]
    plain = verdict({"split": "test", "runs": runs})
    assert plain["compared_with"] == [] and "--floor and --mode both" in plain["line"]
    floor = {"estimator": "ridge alpha=1", "split": "test", "dev": 60.0, "test": 60.0, "zero_shot": {"dev": 65.0, "test": 55.0}}
    judged = verdict({"split": "test", "runs": runs[:1], "floor": floor})
    assert judged["floor"]["bar"] == {"dev": 65.0, "test": 60.0}  # the stronger no-model read on each split
    assert judged["floor"]["above"] is True and judged["above_all"] is True and "BELOW" not in judged["line"]
    assert verdict({"split": "test", "runs": runs, "floor": floor})["floor"]["above"] is False  # a NaN seed loses


def test_bi_encoder_folder_loads_in_sentence_transformers_with_the_same_vectors(tmp_path):
    """An XPT bi-encoder fine-tuned on STS is saved in sentence-transformers' layout: SentenceTransformer loads
    it (through its remote code) and gives the package's mean-pooled sentence vectors, whose cosines are the
    fine-tuned model's predictions."""
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is an optional extra "
                             "(pip install 'xpt[sentence-transformers]'); the layout is checked where it is installed")
    from transformers import AutoModel, AutoTokenizer

    model = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
    data = toy_sts_dir(tmp_path / "sts")
    results = finetune.run(args_for(model, "korsts", data, tmp_path / "out", "--pair-encoding", "bi", "--learning-rate",
                                    "1e-3", "--max-length", "16", "--epochs", "2"))
    saved = tmp_path / "out" / "model"
    assert all((saved / name).is_file() for name in sentence_similarity.SENTENCE_TRANSFORMERS_FILES)
    loaded = st.SentenceTransformer(str(saved), trust_remote_code=True, device="cpu")
    assert loaded.max_seq_length == 16  # read from the saved layout (without it: the tokenizer's 512)
    rows = load_task_data(get_task("korsts"), data)["test"]
    encoder = AutoModel.from_pretrained(saved, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(saved)
    ours = [linear_reads.encode(encoder, tokenizer, [r[c] for r in rows], 16)["mean"] for c in ("sentence1", "sentence2")]
    theirs = [loaded.encode([r[c] for r in rows], convert_to_numpy=True, batch_size=8) for c in ("sentence1", "sentence2")]
    assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(theirs, ours))
    u, v = ours  # the reloaded encoder is the fine-tuned one: its cosines give the run's test score
    cosine = np.round((u * v).sum(1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)), linear_reads.ROUND_COSINE)
    assert 100 * spearmanr(cosine, [float(r["score"]) for r in rows])[0] == pytest.approx(results["scores"][0], abs=0.5)
