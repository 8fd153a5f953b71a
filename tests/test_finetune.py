"""training/finetune.py and training/tasks.py: real (tiny) fine-tuning runs on CPU.

Models are random tiny stock BERT/RoBERTa MLM folders (the Auto class adds the task head) and XPT
folders converted from them; tokenizers are the word-level test tokenizers of model_factories or a
Korean Unigram tokenizer trained on a slice of the shared NSMC/KorSTS data.
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer
from training import finetune, finetune_cli, task_encoding, task_model
from training.tasks import TaskDataError, TaskSpec, get_task, load_task_data, spec_from_cli

REPO_ROOT = Path(__file__).resolve().parents[1]
FINETUNE = REPO_ROOT / "training" / "finetune.py"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine thread hand-offs cost 3-4x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# --- helpers ------------------------------------------------------------------------------------------------
POSITIVE = ["좋다", "재미있다"]


def write_tsv(path: Path, header: list[str], rows: list[list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def sentiment_rows(n: int, seed: int) -> list[list]:
    """Learnable toy sentiment: label 1 iff the sentence holds a positive word."""
    gen = torch.Generator().manual_seed(seed)
    neutral = [w for w in KOREAN_WORDS if w not in POSITIVE]
    rows = []
    for i in range(n):
        words = [neutral[j] for j in torch.randint(len(neutral), (4,), generator=gen).tolist()]
        label = i % 2
        if label:
            words.insert(int(torch.randint(4, (1,), generator=gen)), POSITIVE[i % 4 // 2])
        rows.append([i, " ".join(words), label])
    return rows


def toy_sentiment_dir(root: Path) -> Path:
    for split, n, seed in (("train", 48, 0), ("dev", 16, 1)):
        write_tsv(root / f"{split}.tsv", ["id", "document", "label"], sentiment_rows(n, seed))
    return root


def stock_model_dir(root: Path, family: str = "bert") -> Path:
    tokenizer = word_tokenizer(family, KOREAN_WORDS)
    tiny_source(family, tokenizer, out_dir=root)
    return root


def xpt_model_dir(root: Path, tokenizer, train_sentences: int | None = 1000, method: str = "xpt",
                  dropout: float = 0.0) -> Path:
    """XPT folder: English-side tiny BERT source (its own vocabulary) + Korean target tokenizer."""
    from modeling_xpt import from_source

    source_tokenizer = word_tokenizer("bert", ["the", "a", "is", "of", "and", "to", "in"])
    source = tiny_source("bert", source_tokenizer, out_dir=root.parent / f"{root.name}-source", dropout=dropout)
    model = from_source(source, tokenizer, scratch=method == "scratch")
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    if train_sentences is not None:
        (root / "training_summary.json").write_text(json.dumps(
            {"method": method, "source_model": "tiny-bert", "data": {"train_sentences": train_sentences}}))
    return root


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FINETUNE), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})


def quick(*args) -> list[str]:
    return ["--no-progress", "--seeds", "1", "--epochs", "1", "--batch-size", "16", *map(str, args)]


@pytest.fixture(scope="module")
def korean_tokenizer(shared_data, tmp_path_factory):
    """A 3,000-piece Korean Unigram tokenizer (BERT specials) trained on NSMC + KorSTS train text."""
    from tokenization.train_tokenizer import train_tokenizer

    texts = []
    for name, columns in (("nsmc", ["document"]), ("korsts", ["sentence1", "sentence2"])):
        with (shared_data / "tasks" / name / "train.tsv").open(encoding="utf-8") as handle:
            for i, row in enumerate(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)):
                if i == 3000:
                    break
                texts.extend(row[c] for c in columns)
    tokenizer = train_tokenizer(texts, 3000, family="bert")
    tokenizer.model_max_length = 64
    return tokenizer


@pytest.fixture(scope="module")
def korean_bert(korean_tokenizer, tmp_path_factory):
    return stock_model_dir_with(korean_tokenizer, tmp_path_factory.mktemp("korean-bert"))


def stock_model_dir_with(tokenizer, root: Path, family: str = "bert", dropout: float = 0.0) -> Path:
    tiny_source(family, tokenizer, out_dir=root, dropout=dropout)
    return root


# --- registry and data -----------------------------------------------------------------------------------
def test_registry_has_paper_tasks_with_declarative_specs():
    for name in ("korsts", "nsmc", "paws-x", "kqp", "khs", "klue-ynat", "klue-sts", "klue-nli", "klue-ner",
                 "klue-re", "klue-mrc"):
        spec = get_task(name)
        assert spec.task_type in ("single", "pair", "regression", "token", "qa")
    assert get_task("paws-x").hub == ("google-research-datasets/paws-x", "ko")
    assert get_task("klue-ner").metric == "entity_f1_macro" and get_task("korsts").metric == "spearman"


def test_task_files_label_sets_and_bad_rows(tmp_path):
    data = tmp_path / "re"
    rows = [[f"문장 {i}", "no_relation" if i % 4 else "per:title"] for i in range(40)]
    write_tsv(data / "train.tsv", ["sentence", "label"], rows)
    write_tsv(data / "dev.tsv", ["sentence", "label"], [["문장", "org:founded"], ["문장", "no_relation"]])
    spec = get_task("klue-re")  # labels left open: the data's whole label set, before the sample
    splits = load_task_data(spec, data, max_train_samples=3, data_seed=1)
    assert spec.labels == ["no_relation", "org:founded", "per:title"] and len(splits["train"]) == 3
    assert get_task("klue-re").labels is None  # the registry's spec is untouched
    write_tsv(data / "test.tsv", ["sentence", "label"], [["문장", "-1"]])  # a placeholder, in no train or dev row
    with pytest.raises(TaskDataError, match=r"test row 0 has label '-1', not in the declared label set"):
        load_task_data(get_task("klue-re"), data)
    (data / "test.tsv").unlink()
    (data / "dev.tsv").write_bytes("sentence\tlabel\n문장\tno_relation\n".encode("cp949"))
    with pytest.raises(TaskDataError, match=r"dev.tsv: not UTF-8 text .*iconv -f cp949 -t utf-8"):
        load_task_data(get_task("klue-re"), data)
    (data / "dev.jsonl").write_text('{"sentence": "a", "label": "no_relation"}\n{"sentence": "b"}\n')
    (data / "dev.tsv").unlink()
    with pytest.raises(TaskDataError, match=r"dev row 1 lacks column\(s\) \['label'\]"):
        load_task_data(get_task("klue-re"), data)


@pytest.mark.parametrize("names", [None, {"x": "ex", "y": "why", "z": "zed"}])
def test_a_trained_head_keeps_each_label_when_the_labels_come_in_another_order(tmp_path, names):
    """Also when the task names its labels (`label_names`): the saved head's names are read back as labels."""
    from transformers import AutoConfig

    from training.task_model import load_model

    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    spec = spec_from_cli("mine", task_type="single", text_columns="text", label_column="label", labels="x,y,z")
    spec.label_names = names
    base = xpt_model_dir(tmp_path / "m", tokenizer)
    first = load_model(str(base), spec, AutoConfig.from_pretrained(base, trust_remote_code=True), ["x", "y", "z"],
                       trust_remote_code=True).eval()
    first.save_pretrained(tmp_path / "trained")
    tokenizer.save_pretrained(tmp_path / "trained")
    again = load_model(str(tmp_path / "trained"), spec, AutoConfig.from_pretrained(tmp_path / "trained",
                       trust_remote_code=True), ["z", "x", "y"], trust_remote_code=True).eval()
    batch = tokenizer(["학교에 갔다", "새 책"], padding=True, return_tensors="pt")
    with torch.no_grad():
        before, after = first(**batch).logits, again(**batch).logits
    torch.testing.assert_close(after, before[:, [2, 0, 1]])
    shown = names or {label: label for label in "xyz"}
    assert again.config.id2label == {0: shown["z"], 1: shown["x"], 2: shown["y"]}


def test_a_tasks_label_names_name_its_labels_by_value():
    """NSMC's "1" is "positive" in whatever order --labels gives; names that would collide with another label, or
    a malformed label_names, are not used."""
    nsmc = get_task("nsmc")
    assert nsmc.shown_labels(["0", "1"]) == ["negative", "positive"]
    assert spec_from_cli("nsmc", labels="1,0").shown_labels(["1", "0"]) == ["positive", "negative"]
    assert nsmc.shown_labels(["0", "negative"]) == ["0", "negative"]  # "negative" twice: the labels as they are
    assert get_task("korsts").shown_labels(["a", "b"]) == ["a", "b"]
    for bad in (["negative", "positive"], {"0": "same", "1": "same"}):
        with pytest.raises(TaskDataError, match="label_names .* must map labels to names, one name each"):
            spec_from_cli("mine", task_spec=json.dumps({"name": "mine", "task_type": "single", "text_columns": ["t"],
                                                         "labels": ["0", "1"], "label_names": bad}))


def test_local_shared_data_loads_and_validates(shared_data):
    splits = load_task_data(get_task("korsts"), shared_data / "tasks" / "korsts")
    assert {k: len(v) for k, v in splits.items()} == {"train": 5749, "dev": 1500, "test": 1379}
    nsmc = load_task_data(get_task("nsmc"), shared_data / "tasks" / "nsmc", max_train_samples=100)
    assert len(nsmc["train"]) == 100 and len(nsmc["dev"]) == 5000 and "test" not in nsmc
    assert {r["label"] for r in nsmc["train"]} == {"0", "1"}


def test_user_defined_task_from_cli_flags_and_json(tmp_path):
    spec = spec_from_cli("mine", task_type="pair", text_columns="q1,q2", label_column="same", labels="no,yes")
    assert (spec.task_type, spec.text_columns, spec.labels, spec.metric) == ("pair", ["q1", "q2"], ["no", "yes"], "accuracy")
    spec = spec_from_cli("mine", task_spec=json.dumps({"type": "regression", "columns": ["a", "b"], "label_column": "s"}))
    assert (spec.name, spec.task_type, spec.metric) == ("mine", "regression", "spearman")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"name": "x", "task_type": "single", "text_columns": ["t"]}))
    assert spec_from_cli("ignored", task_spec=str(path)).name == "x"
    with pytest.raises(TaskDataError, match="unknown field"):
        TaskSpec.from_dict({"name": "x", "task_type": "single", "text_columns": ["t"], "colums": 1})
    # a registered task with another headline metric still reports its own; with another type, none of its metrics
    pearson = spec_from_cli("korsts", metric="pearson")
    assert (pearson.metric, pearson.extra_metrics) == ("pearson", ["spearman"])
    assert spec_from_cli("klue-ynat", metric="accuracy").extra_metrics == ["f1_macro"]
    as_pairs = spec_from_cli("korsts", task_type="pair", labels="0,1")
    assert (as_pairs.metric, as_pairs.extra_metrics) == ("accuracy", [])
    with pytest.raises(TaskDataError, match="unknown task"):
        spec_from_cli("no-such-task")
    # a registered task overridden: the JSON's fields over the registry's, the flags over both
    spec = spec_from_cli("korsts", task_spec=json.dumps({"label_range": [0, 1], "metric": "pearson"}), metric="spearman")
    assert (spec.task_type, spec.text_columns, spec.label_range, spec.metric) == (
        "regression", ["sentence1", "sentence2"], (0.0, 1.0), "spearman")
    assert spec_from_cli("nsmc", task_spec=json.dumps({"columns": "review"}), labels="neg,pos").text_columns == ["review"]
    assert spec_from_cli("nsmc", task_spec=json.dumps({"type": "pair", "columns": "a,b"})).metric == "accuracy"  # a new task


# --- feature layout ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_pair_task_special_token_layout(family):
    tokenizer = word_tokenizer(family, KOREAN_WORDS)
    rows = [{"sentence1": "나는 학교에 간다", "sentence2": "오늘 날씨가 좋다", "score": "3.5"}]
    feature = task_encoding.encode_sequence_task(get_task("korsts"), rows, tokenizer, 64, None)[0]
    tokens = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    if family == "bert":
        assert tokens == ["[CLS]", "나는", "학교에", "간다", "[SEP]", "오늘", "날씨가", "좋다", "[SEP]"]
        assert feature["token_type_ids"] == [0] * 5 + [1] * 4
    else:
        assert tokens == ["<s>", "나는", "학교에", "간다", "</s>", "</s>", "오늘", "날씨가", "좋다", "</s>"]
    assert feature["labels"] == 3.5 and feature["attention_mask"] == [1] * len(tokens)


def test_pair_layout_with_trained_korean_tokenizer(korean_tokenizer):
    rows = [{"sentence1": "한 남자가 춤을 추고 있다.", "sentence2": "남자가 노래한다.", "score": "1.0"}]
    feature = task_encoding.encode_sequence_task(get_task("korsts"), rows, korean_tokenizer, 64, None)[0]
    ids, types = feature["input_ids"], feature["token_type_ids"]
    cls, sep = korean_tokenizer.cls_token_id, korean_tokenizer.sep_token_id
    assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2
    first_sep = ids.index(sep)
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    assert korean_tokenizer.decode(ids[1:first_sep]).replace(" ", "") == rows[0]["sentence1"].replace(" ", "")


# --- training ---------------------------------------------------------------------------------------------------
def args_for(model: Path, task: str, data_dir: Path, out: Path, *extra) -> "argparse.Namespace":  # noqa: F821
    return finetune_cli.build_parser().parse_args(["--model", str(model), "--task", task, "--data-dir", str(data_dir),
                                               "--output-dir", str(out), *quick(*extra)])


def prepared(args):
    spec = spec_from_cli(args.task)
    splits = load_task_data(spec, args.data_dir, args.max_train_samples, args.max_eval_samples)
    args.trust_remote_code = task_model.trusts_remote_code(args.model, args.trust_remote_code)
    tokenizer, config = task_model.load_tokenizer_and_config(args.model, spec, args.trust_remote_code)
    features = task_encoding.build_features(spec, splits, tokenizer, 64, 16, config)
    return spec, splits, tokenizer, config, features


def test_training_loss_falls_on_nsmc_slice(shared_data, korean_bert, tmp_path):
    # A random 32-wide BERT sits near ln 2 for a few epochs before it starts to fit 256 reviews; a high
    # learning rate shortens that plateau (the paper's 5e-5 is for pretrained encoders).
    args = args_for(korean_bert, "nsmc", shared_data / "tasks" / "nsmc", tmp_path, "--max-train-samples", 256,
                    "--max-eval-samples", 64, "--epochs", 6, "--learning-rate", 3e-3, "--batch-size", 16)
    spec, splits, tokenizer, config, features = prepared(args)
    run, _ = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    losses = [epoch["train_loss"] for epoch in run["epochs"]]
    assert len(run["step_losses"]) == 6 * 16
    assert losses[-1] < 0.6 < 0.68 < losses[0], losses
    assert 1 <= run["best_epoch"] <= 6 and 0.0 <= run["dev"] <= 100.0 and run["test"] is None


def test_same_seed_gives_identical_results(shared_data, korean_bert, tmp_path, capsys):
    common = ["--model", korean_bert, "--task", "korsts", "--data-dir", shared_data / "tasks" / "korsts",
              *quick("--max-train-samples", 48, "--max-eval-samples", 32, "--epochs", 2, "--seeds", "0,1")]
    results, losses = [], []
    for name in ("a", "b"):
        assert finetune.main([*map(str, common), "--output-dir", str(tmp_path / name)]) == 0
        results.append(json.loads((tmp_path / name / "results.json").read_text()))
        losses.append(json.loads((tmp_path / name / "runs" / "seed_0.json").read_text())["step_losses"])
    assert results[0]["scores"] == results[1]["scores"] and results[0]["runs"] == results[1]["runs"]
    assert losses[0] == losses[1]
    assert results[0]["scores"][0] != results[0]["scores"][1]  # and another seed is another run
    assert results[0]["split"] == "test" and results[0]["seeds"] == [0, 1]
    # without progress bars each epoch still reports one line, with the dev score that results.json holds
    printed = capsys.readouterr().out
    dev = json.loads((tmp_path / "b" / "runs" / "seed_1.json").read_text())["epochs"][2]["dev"]["spearman"]
    assert sum(f"seed {seed} epoch {epoch}: train loss" in printed for seed in (0, 1) for epoch in (1, 2)) == 4
    assert "seed 1 epoch 2: train loss" in printed and f"dev spearman {dev:.2f} (" in printed


def test_cli_xpt_folder_on_korsts_writes_results_json(shared_data, korean_tokenizer, tmp_path):
    """The acceptance command on a real XPT folder (remote code), training_summary.json copied over."""
    model = xpt_model_dir(tmp_path / "xpt", korean_tokenizer, train_sentences=4321)
    out = tmp_path / "out"
    result = run_cli("--model", model, "--task", "korsts", "--data-dir", shared_data / "tasks" / "korsts",
                     "--seeds", 2, "--output-dir", out, "--max-train-samples", 64, "--epochs", 1,
                     "--max-eval-samples", 32, "--batch-size", 16)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert (results["task"], results["metric"], results["split"]) == ("korsts", "spearman", "test")
    assert results["seeds"] == [0, 1] and len(results["scores"]) == 2
    assert results["mean"] == pytest.approx(sum(results["scores"]) / 2)
    assert results["std"] == pytest.approx(abs(results["scores"][0] - results["scores"][1]) / 2 ** 0.5)
    assert results["post_training"]["method"] == "xpt" and results["post_training"]["train_sentences"] == 4321
    # STS: `--pair-encoding auto` is the bi-encoder (CoSENT by default), whose epoch 0 (the zero-shot cosine) counts on dev
    assert results["hyperparameters"]["pair_encoding"] == "bi" and results["hyperparameters"]["sts_loss"] == "cosent"
    assert [r["seed"] for r in results["runs"]] == [0, 1] and all(r["best_epoch"] in (0, 1) for r in results["runs"])
    assert (out / "runs" / "seed_1.json").is_file()
    assert "mean ± std" in result.stdout and "| seed | best epoch | dev | test |" in result.stdout
    # the bi-encoder's epoch 0 is said as it is measured; a seed that kept it is marked as the untrained encoder's
    assert result.stdout.count("epoch 0 (before training: the untrained encoder's cosine): dev spearman") == 2
    untrained = [r["seed"] for r in results["runs"] if r["best_epoch"] == 0]
    assert all(f"| {seed} | 0 (untrained) |" in result.stdout for seed in untrained)
    assert ("best epoch 0 (untrained): no epoch of fine-tuning beat" in result.stdout) == bool(untrained)
    # the saved bi-encoder is a sentence encoder: the printed line loads it as one and says how it pools
    assert (f'load the model: from sentence_transformers import SentenceTransformer; SentenceTransformer("'
            f'{out / "model"}", trust_remote_code=True), or from transformers import AutoModel; AutoModel.from_pretrained('
            f'"{out / "model"}", trust_remote_code=True): a sentence vector is the mean of last_hidden_state') in result.stdout


def test_predictions_come_back_in_the_features_order(tmp_path):
    # predict batches examples of similar length together; each output must still be its own example's
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = xpt_model_dir(tmp_path / "m", tokenizer)
    spec = spec_from_cli("nsmc")
    config = task_model.load_tokenizer_and_config(str(model_dir), spec, True)[1]
    model = task_model.load_model(str(model_dir), spec, config, spec.labels, trust_remote_code=True)
    texts = [" ".join(KOREAN_WORDS[i:i + n]) for i, n in enumerate((9, 2, 7, 4, 11, 3, 8, 5, 10, 6, 1, 12))]
    features = [{**dict(tokenizer(text)), "labels": 0} for text in texts]
    lengths = [len(f["input_ids"]) for f in features]
    assert lengths != sorted(lengths)  # sorted by length, the examples change order
    inputs = {"input_ids", "attention_mask", "token_type_ids"}
    batched = finetune.predict(model, features, 4, tokenizer.pad_token_id, "single", torch.device("cpu"), inputs)
    with torch.no_grad():  # each example on its own, no padding at all
        alone = [model.eval()(**{k: torch.tensor([f[k]]) for k in inputs if k in f}).logits[0].numpy()
                 for f in features]
    assert len(batched) == len(features)
    assert all(np.allclose(b, a, rtol=0, atol=1e-6) for b, a in zip(batched, alone))
    assert not any(np.allclose(alone[i], alone[j], rtol=0, atol=1e-6)  # and the outputs tell the examples apart
                   for i in range(len(alone)) for j in range(i))


@pytest.mark.parametrize("kind", ["bert", "xpt"])
@pytest.mark.parametrize("speed_paths", ["auto", "off"])
def test_speed_paths_on_cpu_follow_post_training(kind, speed_paths, tmp_path, monkeypatch):
    from training import step
    from training.masked_lm import THRESHOLD_EAGER, ThresholdDropout

    retained, fused, masks = [], [], []
    monkeypatch.setattr(step, "retain_freed_memory", lambda: retained.append(1) or True)
    adamw, keep_mask = torch.optim.AdamW, ThresholdDropout.keep_mask
    monkeypatch.setattr(torch.optim, "AdamW", lambda *a, **k: fused.append(k.get("fused")) or adamw(*a, **k))
    monkeypatch.setattr(ThresholdDropout, "keep_mask", lambda self, like: masks.append(like.shape) or keep_mask(self, like))
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = (stock_model_dir_with(tokenizer, tmp_path / "m", dropout=0.1) if kind == "bert"
                 else xpt_model_dir(tmp_path / "m", tokenizer, dropout=0.1))
    args = args_for(model_dir, "nsmc", toy_sentiment_dir(tmp_path / "data"), tmp_path / "out", "--epochs", 2,
                    "--learning-rate", 1e-2, "--speed-paths", speed_paths)
    spec, splits, tokenizer, config, features = prepared(args)
    run, model = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    fast = speed_paths == "auto"
    assert (run["speed_paths"], bool(retained), fused) == (speed_paths, fast, [True if fast else None])
    # post-training's threshold masks, drawn in training only for an XPT encoder (hidden states and, through
    # the explicit attention, attention probabilities: 4-d masks)
    assert bool(masks) == (fast and kind == "xpt") and (not masks or any(len(shape) == 4 for shape in masks))
    # the model that is scored on test and saved has its own attention and dropout again
    dropouts = {type(m) for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert model.config._attn_implementation != THRESHOLD_EAGER and dropouts == {torch.nn.Dropout}
    assert len(run["step_losses"]) > 0 and all(0 < loss < 10 for loss in run["step_losses"])


@pytest.mark.parametrize("kind", ["bert", "xpt"])
def test_lora_trains_only_adapters_and_head(kind, tmp_path):
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = (stock_model_dir_with(tokenizer, tmp_path / "m") if kind == "bert"
                 else xpt_model_dir(tmp_path / "m", tokenizer))
    data = toy_sentiment_dir(tmp_path / "data")
    args = args_for(model_dir, "nsmc", data, tmp_path / "out", "--peft", "lora", "--epochs", 2, "--learning-rate", 1e-2)
    spec, splits, tokenizer, config, features = prepared(args)
    finetune.set_seed(0)
    reference = task_model.load_model(str(model_dir), spec, config, spec.labels,
                                    trust_remote_code=args.trust_remote_code).state_dict()
    run, model = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable), trainable
    assert any("lora_" in n for n in trainable) and any("modules_to_save" in n for n in trainable)
    assert run["trainable_parameters"] < run["total_parameters"] / 2
    merged = model.merge_and_unload()  # base weights + LoRA deltas; frozen non-LoRA weights must be untouched
    changed = {n for n, t in merged.state_dict().items() if not torch.equal(t, reference[n])}
    encoder_prefix = merged.base_model_prefix + "."
    fresh = {n for n in changed if n.startswith(encoder_prefix + "pooler.")}  # random: not in the MLM checkpoint
    assert fresh == ({encoder_prefix + "pooler.dense.weight", encoder_prefix + "pooler.dense.bias"}
                     if kind == "bert" else set())
    for name in changed - fresh:  # only attention query/value (LoRA-merged) and the head moved
        assert not name.startswith(encoder_prefix) or name.rsplit(".", 2)[-2] in ("query", "value"), name
    assert any(not n.startswith(encoder_prefix) for n in changed)  # the head trained
    assert any(".query." in n for n in changed) and any(".value." in n for n in changed)


def test_lora_wraps_the_model_without_warnings_the_user_cannot_act_on(tmp_path):
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = xpt_model_dir(tmp_path / "m", tokenizer)
    args = args_for(model_dir, "nsmc", toy_sentiment_dir(tmp_path / "data"), tmp_path / "out", "--peft", "lora")
    spec, _, _, config, _ = prepared(args)
    model = task_model.load_model(str(model_dir), spec, config, spec.labels, trust_remote_code=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = task_model.apply_lora(model, spec, rank=4, alpha=8, dropout=0.0)
    assert any("lora_" in n for n, p in wrapped.named_parameters() if p.requires_grad)
    assert not [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


# --- the saved model --------------------------------------------------------------------------------------------
def sts_rows(n: int, seed: int) -> list[list]:
    """Toy STS: the score grows with the words two sentences share."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        first = [KOREAN_WORDS[j] for j in torch.randint(len(KOREAN_WORDS), (3,), generator=gen).tolist()]
        shared = i % 4
        second = first[:shared] + [KOREAN_WORDS[j] for j in torch.randint(len(KOREAN_WORDS), (3 - min(shared, 3),),
                                                                         generator=gen).tolist()]
        rows.append([" ".join(first), " ".join(second), f"{min(shared, 3) * 5 / 3:.2f}"])
    return rows


def toy_sts_dir(root: Path) -> Path:
    for split, n, seed in (("train", 48, 0), ("dev", 24, 1), ("test", 24, 2)):
        write_tsv(root / f"{split}.tsv", ["sentence1", "sentence2", "score"], sts_rows(n, seed))
    return root


FRESH_LOGITS = r"""
import importlib.abc, json, sys
args = json.loads(sys.argv[1])


class BlockProject(importlib.abc.MetaPathFinder):  # as a user without this project (an editable install too)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("modeling_xpt", "training", "cards", "tokenization", "tests"):
            raise ModuleNotFoundError(name)


sys.meta_path.insert(0, BlockProject())
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
torch.set_num_threads(1)
if args["usage"]:  # the line fine-tuning prints for it
    imports, call = args["usage"].split("; ", 1)
    exec(imports)
    loaded = eval(call)
    from transformers import Pipeline
    model = loaded.model if isinstance(loaded, Pipeline) else loaded  # a pipeline holds its model
else:
    model = AutoModelForSequenceClassification.from_pretrained(args["dir"], trust_remote_code=args["trust"])
tokenizer = AutoTokenizer.from_pretrained(args["dir"], trust_remote_code=args["trust"])
encoded = tokenizer(args["texts"], padding=True, return_tensors="pt", return_token_type_ids=True)
with torch.no_grad():
    logits = model.eval()(**encoded).logits
config = model.get_base_model().config if args["adapter"] else model.config
print("FRESH " + json.dumps({"logits": logits.tolist(), "id2label": {str(k): v for k, v in config.id2label.items()},
                             "module": type(model.get_base_model() if args["adapter"] else model).__module__}))
"""


def fresh_logits(folder: Path, texts: list[str], trust: bool, adapter: bool = False, usage: str = "") -> dict:
    """Load `folder` in a new interpreter that cannot import this project (`python -I`, another working
    directory, no PYTHONPATH, an empty remote-code cache) and return its logits on `texts`."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(folder.parent / ".modules"), OMP_NUM_THREADS="1")
    args = json.dumps({"dir": str(folder), "texts": texts, "trust": trust, "adapter": adapter, "usage": usage})
    proc = subprocess.run([sys.executable, "-I", "-c", FRESH_LOGITS, args], cwd=folder.parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("FRESH ", 1)[1])


SAVE_CASES = {  # name: (base model, fine-tuning options, folders written)
    "xpt, full fine-tune": ("xpt", [], {"model"}),
    "stock bert, full fine-tune": ("bert", [], {"model"}),
    "xpt, lora merged": ("xpt", ["--peft", "lora", "--merge"], {"adapter", "model"}),
    "xpt, lora merged, mean pooling": ("xpt", ["--peft", "lora", "--merge", "--pooling", "mean"], {"adapter", "model"}),
    "stock bert, lora adapter only": ("bert", ["--peft", "lora"], {"adapter"}),
}


@pytest.mark.parametrize("case", sorted(SAVE_CASES))
def test_saved_folders_reload_in_a_fresh_process_with_identical_logits(case, tmp_path):
    from training.finetuned_model import save_selected, saved_model_record

    kind, options, folders = SAVE_CASES[case]
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = (stock_model_dir_with(tokenizer, tmp_path / "m") if kind == "bert"
                 else xpt_model_dir(tmp_path / "m", tokenizer))
    data = toy_sentiment_dir(tmp_path / "data")
    args = args_for(model_dir, "nsmc", data, tmp_path / "out", *options, "--learning-rate", 1e-2)
    spec, splits, tokenizer, config, features = prepared(args)
    run, model = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    texts = [row["document"] for row in splits["dev"][:5]]
    encoded = tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        expected = model.eval()(**encoded).logits
        merged = copy.deepcopy(model).merge_and_unload()(**encoded).logits if args.peft else expected
    assert torch.allclose(merged, expected, atol=1e-5)  # merging LoRA changes the rounding only
    results = {"task": "nsmc", "saved_model": saved_model_record(run, args.peft, args.merge)}
    written = save_selected(model, tokenizer, tmp_path / "out", results, base_model=str(model_dir), peft=args.peft,
                            merge=args.merge)
    assert set(written) == folders and sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(folders)
    trust = kind == "xpt"
    if "adapter" in written:
        adapter = written["adapter"]
        assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "results.json"} <= {
            p.name for p in adapter.iterdir()}
        assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
            model_dir.resolve())
        from training.finetuned_model import adapter_usage

        usage = adapter_usage(adapter, "single", spec.shown_labels(spec.labels), trust, args.pooling)
        fresh = fresh_logits(adapter, texts, trust, adapter=True, usage=usage)
        assert fresh["logits"] == expected.tolist()  # the LoRA matrices and the trained head, on the base model
        assert fresh["id2label"] == {"0": "negative", "1": "positive"}  # NSMC's names, not LABEL_0 or "1"
    if "model" in written:
        folder = written["model"]
        config_json = json.loads((folder / "config.json").read_text())
        assert config_json["id2label"] == {"0": "negative", "1": "positive"}
        assert config_json["label2id"] == {"negative": 0, "positive": 1}
        assert json.loads((folder / "results.json").read_text())["saved_model"]["seed"] == 0
        assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
        assert not any(p.name.startswith("adapter") for p in folder.iterdir())  # a plain model, no PEFT files
        if kind == "xpt":  # remote code: this package's own two files, so finetune.py trusts the folder
            assert task_model.written_by_this_package(str(folder)) and "auto_map" in config_json
            assert (folder / "training_summary.json").read_text() == (model_dir / "training_summary.json").read_text()
        else:
            assert not (folder / "modeling_xpt.py").exists() and "auto_map" not in config_json
        from training.finetuned_model import model_usage

        usage = model_usage(folder, "single", bi_encoder=False)
        assert usage.startswith('from transformers import pipeline; pipeline("text-classification"')
        assert ("trust_remote_code=True" in usage) == trust
        fresh = fresh_logits(folder, texts, trust, usage=usage)
        assert fresh["logits"] == merged.tolist()
        assert fresh["id2label"] == {"0": "negative", "1": "positive"}
        assert fresh["module"].startswith("transformers_modules." if trust else "transformers.models.bert")


def test_saving_is_atomic(tmp_path, monkeypatch):
    """A save that fails halfway leaves the earlier folder as it was and no temporary folder behind."""
    from training import finetuned_model

    folder = tmp_path / "out" / "model"
    with finetuned_model.atomic_folder(folder) as tmp:
        (tmp / "config.json").write_text("first")
    with pytest.raises(OSError, match="disk full"):
        with finetuned_model.atomic_folder(folder) as tmp:
            (tmp / "config.json").write_text("second")
            raise OSError("disk full")
    assert [p.name for p in folder.parent.iterdir()] == ["model"] and (folder / "config.json").read_text() == "first"
    with finetuned_model.atomic_folder(folder) as tmp:
        (tmp / "config.json").write_text("third")
    assert [p.name for p in folder.parent.iterdir()] == ["model"] and (folder / "config.json").read_text() == "third"
    # a run killed while saving leaves a temporary folder: the next run into the folder removes it
    (folder.parent / ".model.tmp-dead").mkdir()
    finetuned_model.remove_stale(folder.parent)
    assert [p.name for p in folder.parent.iterdir()] == ["model"]


@pytest.fixture(scope="module")
def sts_run(tmp_path_factory):
    """One CLI run: a tiny XPT model, three seeds, four epochs on a toy STS with a test split, saved and
    checked for publication (--push-to-hub --push-dry-run: card, validation, fresh-process load check).
    fp32, so that the rescoring below (fp32) reproduces the scores exactly and the selection this
    setting exercises does not depend on whether the CPU has native bf16."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("sts-run")
    model_dir = xpt_model_dir(root / "xpt", word_tokenizer("bert", KOREAN_WORDS))
    data = toy_sts_dir(root / "data")
    out = root / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = finetune.main(["--model", str(model_dir), "--task", "korsts", "--data-dir", str(data),
                              "--output-dir", str(out), "--no-progress", "--seeds", "0,1,2", "--epochs", "4",
                              "--batch-size", "16", "--learning-rate", "3e-3", "--mixed-precision", "no",
                              "--push-to-hub", "org/xpt-toy-sts",
                              "--push-dry-run", "--license", "apache-2.0", "--base-model", "org/xpt-ko-toy"])
    return {"code": code, "stdout": stdout.getvalue(), "out": out, "model": model_dir, "data": data}


def test_a_base_model_that_is_not_a_hub_id_is_refused_before_fine_tuning(tmp_path, capsys):
    """The card's base_model names a Hub repo: a local path would leak into the published metadata, so it is
    refused in one line before anything trains."""
    model_dir = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
    code = finetune.main(["--model", str(model_dir), "--task", "korsts", "--data-dir", str(toy_sts_dir(tmp_path / "d")),
                          "--output-dir", str(tmp_path / "out"), "--no-progress", "--push-to-hub", "org/xpt-toy-sts",
                          "--push-dry-run", "--license", "apache-2.0", "--base-model", "../models/roberta-base"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "--base-model '../models/roberta-base' is not a Hub model id" in errors[0]
    assert not (tmp_path / "out" / "runs").exists()


def test_the_saved_model_is_the_best_dev_seed_at_its_best_epoch(sts_run):
    from transformers import AutoModelForSequenceClassification

    assert sts_run["code"] == 0, sts_run["stdout"][-3000:]
    out = sts_run["out"]
    results = json.loads((out / "results.json").read_text())
    devs = [run["dev"] for run in results["runs"]]
    best = results["runs"][devs.index(max(devs))]
    saved = results["saved_model"]
    assert (saved["seed"], saved["best_epoch"], saved["dev"], saved["test"]) == (
        best["seed"], best["best_epoch"], best["dev"], best["test"])
    assert saved["selected_by"] == "dev" and saved["folders"] == {"model": "model"}
    assert json.loads((out / "model" / "results.json").read_text()) == results
    epochs = json.loads((out / "runs" / f"seed_{saved['seed']}.json").read_text())["epochs"]
    # this setting exercises the selection: not the first seed, and not the last epoch
    assert saved["seed"] != results["seeds"][0] and saved["best_epoch"] < len(epochs)
    assert epochs[-1]["dev"]["spearman"] != saved["dev"]
    # scored again, the saved weights give that seed's best-epoch dev and test scores
    args = finetune_cli.build_parser().parse_args(["--model", str(out / "model"), "--task", "korsts", "--data-dir",
                                               str(sts_run["data"]), "--output-dir", str(out / "rescore"),
                                               "--batch-size", "16"])
    spec, splits, tokenizer, config, features = prepared(args)
    model = AutoModelForSequenceClassification.from_pretrained(str(out / "model"), trust_remote_code=True)
    accepted = finetune.accepted_inputs(model)
    for split in ("dev", "test"):
        scores = finetune.evaluate_split(model, spec, features[split], splits[split], args, tokenizer.pad_token_id,
                                         torch.device("cpu"), accepted)
        assert scores["spearman"] == pytest.approx(saved[split], abs=1e-9), split
    assert model.config.id2label == {0: "score"} and model.config.problem_type == "regression"


def test_push_dry_run_of_the_saved_model_and_its_card(sts_run, tmp_path):
    from cards.make_card import build_card, write_card
    from cards.public import find_local_paths
    from cards.validate import validate_folder

    assert sts_run["code"] == 0, sts_run["stdout"][-3000:]
    stdout = sts_run["stdout"]
    assert "load check in a fresh isolated process" in stdout and "dry run: publishable and loadable" in stdout
    results = json.loads((sts_run["out"] / "results.json").read_text())
    saved = results["saved_model"]
    folder = tmp_path / "model"  # the card is written into a copy (the run's folder stays as saved)
    __import__("shutil").copytree(sts_run["out"] / "model", folder)
    card = build_card(folder, repo_id="org/xpt-toy-sts", license="apache-2.0", base_model="org/xpt-ko-toy")
    meta = card.data.to_dict()
    assert (meta["pipeline_tag"], meta["license"], meta["base_model"]) == ("text-classification", "apache-2.0",
                                                                          "org/xpt-ko-toy")
    assert "kakaobrain/kor_nlu" in meta["datasets"] and meta["language"] == "ko"
    metrics = {(r["dataset"]["split"], m["name"]): m["value"] for r in meta["model-index"][0]["results"]
               for m in r["metrics"]}
    assert metrics[("test", f"spearman (this model: seed {saved['seed']})")] == round(saved["test"], 2)
    assert metrics[("validation", f"spearman (this model: seed {saved['seed']})")] == round(saved["dev"], 2)
    assert metrics[("test", "spearman (mean of 3 seeds)")] == round(results["mean"], 2)
    assert not any("perplexity" in name or "hits" in name for _, name in metrics)  # no fill-mask claims
    for run in results["runs"]:  # every seed's dev and test, this checkpoint's marked
        seed = f"**{run['seed']} (this model)**" if run["seed"] == saved["seed"] else str(run["seed"])
        assert f"| {seed} | {run['best_epoch']} | {run['dev']:.2f} | {run['test']:.2f} |" in card.text
    assert "'text_pair'" in card.text and "A Korean sentence-pair scoring model, fine-tuned on KorSTS" in card.text
    assert not find_local_paths(card.text) and str(sts_run["model"]) not in card.text
    # without a Hub id for the model it started from, the card names none (and no local path either)
    plain = build_card(folder, license="apache-2.0")
    assert "base_model" not in plain.data.to_dict() and "from a post-trained XPT model (`local model`)" in plain.text
    write_card(folder, repo_id="org/xpt-toy-sts", license="apache-2.0", base_model="org/xpt-ko-toy")
    report = validate_folder(folder)
    assert report.ok, report.format()


def test_token_classification_ner_fixture(tmp_path):
    """NER on a tiny local JSONL fixture: tags on the first sub-token, entity F1 through the CLI."""
    sentences = [
        (["김철수", "는", "서울", "에", "산다"], ["B-PS", "O", "B-LC", "O", "O"]),
        (["이영희", "가", "부산", "으로", "갔다"], ["B-PS", "O", "B-LC", "O", "O"]),
        (["삼성", "전자", "는", "서울", "에", "있다"], ["B-OG", "I-OG", "O", "B-LC", "O", "O"]),
        (["박민수", "는", "삼성", "전자", "에", "다닌다"], ["B-PS", "O", "B-OG", "I-OG", "O", "O"]),
    ] * 4
    words = sorted({w for s, _ in sentences for w in s})
    tokenizer = word_tokenizer("bert", words)
    model_dir = stock_model_dir_with(tokenizer, tmp_path / "m")
    data = tmp_path / "ner"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"tokens": s, "tags": t}, ensure_ascii=False) + "\n"
                                                     for s, t in sentences), encoding="utf-8")
    spec = json.dumps({"task_type": "token", "tokens_column": "tokens", "label_column": "tags",
                       "labels": ["O", "B-PS", "I-PS", "B-LC", "I-LC", "B-OG", "I-OG"]})
    out = tmp_path / "out"
    assert finetune.main(["--model", str(model_dir), "--task", "toy-ner", "--task-spec", spec, "--data-dir", str(data),
                          "--output-dir", str(out), *quick("--epochs", 15, "--learning-rate", 5e-3, "--batch-size", 8)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["metric"] == "entity_f1" and results["split"] == "dev"
    assert results["mean"] > 80.0, results  # memorises 16 sentences: the decoding path really maps tags back
    tokens = task_encoding.encode_token_task(finetune.spec_from_cli("x", task_spec=spec), [
        {"tokens": ["김철수", "는"], "tags": ["B-PS", "O"]}], tokenizer, 64, json.loads(spec)["labels"])[0]
    assert tokens["labels"] == [-100, 1, 0, -100] and tokens["tag_positions"] == [1, 2]


def character_tags(text: str, entity_words: range, kind: str) -> list[str]:
    """Gold KLUE-style tags for `text`: its words `entity_words` (split at spaces) form one entity, the
    first character B-, every later one up to the last word's end I- (spaces included), the rest O."""
    starts = [i for i, c in enumerate(text) if i == 0 or (text[i - 1] == " " and c != " ")]
    start = starts[entity_words.start]
    end = text.index(" ", starts[entity_words.stop - 1]) if " " in text[starts[entity_words.stop - 1]:] else len(text)
    return ["O" if not start <= c < end else ("B-" if c == start else "I-") + kind for c in range(len(text))]


def test_character_tagged_ner_is_tokenized_as_whole_sentences_and_decoded_back_to_characters():
    """KLUE-NER tags characters, spaces included. A SentencePiece-style tokenizer fed one character per
    word makes a bare "▁" piece carry a tag; tokenized whole, the sentence keeps its own pieces, every
    tag sits on a real character and the decoding gives each character its gold tag back."""
    from tests.conftest import KOREAN_SENTENCES
    from tokenization.train_tokenizer import train_tokenizer
    from training.metrics_downstream import compute

    tokenizer = train_tokenizer(KOREAN_SENTENCES * 3, 150, family="bert")
    spec = get_task("klue-ner")
    text = "우리는 내일 부산으로 여행을 간다."
    tags = character_tags(text, range(1, 3), "LC")  # "내일 부산으로": two words, the space between tagged I-LC
    assert tags[3:12] == ["O", "B-LC"] + ["I-LC"] * 6 + ["O"]
    row = {"tokens": list(text), "ner_tags": tags}

    per_character = tokenizer(list(text), is_split_into_words=True)["input_ids"]
    assert "▁" in tokenizer.convert_ids_to_tokens(per_character)  # what encoding per character gives
    feature = task_encoding.encode_token_task(spec, [row], tokenizer, 64, spec.labels)[0]
    assert feature["input_ids"] == tokenizer(text)["input_ids"] and len(feature["input_ids"]) < len(per_character)
    pieces = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    labelled = [(piece, spec.labels[i]) for piece, i in zip(pieces, feature["labels"]) if i != -100]
    assert len(labelled) == len([p for p in pieces if p.strip("▁") and p not in ("[CLS]", "[SEP]")])
    entity = [tag for _, tag in labelled if tag != "O"]
    assert entity[0] == "B-LC" and set(entity[1:]) == {"I-LC"} and len(labelled) < len(text)

    # logits that predict exactly the training labels decode to the gold character tags
    logits = np.zeros((len(feature["labels"]), len(spec.labels)))
    for position, label in enumerate(feature["labels"]):
        logits[position, label if label != -100 else spec.labels.index("O")] = 1.0
    assert task_encoding.token_tags(spec.labels, feature, logits) == tags
    assert compute(["entity_f1_macro"], [task_encoding.token_tags(spec.labels, feature, logits)], [tags]) == {
        "entity_f1_macro": 100.0}
    # cut off by truncation: the characters past the last token are O
    short = task_encoding.encode_token_task(spec, [row], tokenizer, 4, spec.labels)[0]
    assert task_encoding.token_tags(spec.labels, short, logits[:4])[-3:] == ["O", "O", "O"]


def test_tagged_words_are_tokenized_as_their_sentence_and_no_bare_piece_carries_a_tag():
    """Words handed to a SentencePiece-style tokenizer one by one come out as "▁" + the word when the
    word is known only inside sentences; the sentence tokenized whole tags each word's first real piece."""
    from tests.conftest import KOREAN_SENTENCES
    from tokenization.train_tokenizer import train_tokenizer

    tokenizer = train_tokenizer(KOREAN_SENTENCES * 3, 150, family="bert")
    spec = TaskSpec("toy-ner", "token", labels=["O", "B-LC", "I-LC"])
    words = "우리는 내일 부산으로 여행을 간다.".split()
    row = {"tokens": words, "label": ["O", "O", "B-LC", "O", "O"]}
    feature = task_encoding.encode_token_task(spec, [row], tokenizer, 64, spec.labels)[0]
    assert feature["input_ids"] == tokenizer(" ".join(words))["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    tagged = [pieces[p] for p in feature["tag_positions"]]
    assert len(tagged) == len(words) and all(piece.strip("▁") for piece in tagged)
    assert [feature["labels"][p] for p in feature["tag_positions"]] == [0, 0, 1, 0, 0]
    assert sum(label != -100 for label in feature["labels"]) == len(words)  # later pieces of a word: none
    logits = np.eye(len(spec.labels))[[max(label, 0) for label in feature["labels"]]]
    assert task_encoding.token_tags(spec.labels, feature, logits) == row["label"]


@pytest.mark.parametrize("character_tags", [False, True], ids=["words", "characters"])
def test_byte_level_bpe_gives_each_word_one_tagged_token(character_tags):
    """A byte-level BPE splits a Hangul syllable into byte tokens with the same offsets: only the first one of
    each word (or character) may carry its tag."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from tests.conftest import KOREAN_SENTENCES

    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(KOREAN_SENTENCES, vocab_size=300, min_frequency=1, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend._tokenizer, unk_token="<unk>")
    text = "서울 부산 광복"
    tokens = list(text) if character_tags else text.split()
    tags = ["O" if t == " " else "B-LC" for t in tokens]
    spec = TaskSpec("toy", "token", labels=["O", "B-LC"], character_tags=character_tags)
    feature = task_encoding.encode_token_task(spec, [{"tokens": tokens, "label": tags}], tokenizer, 64, spec.labels)[0]
    assert len(feature["input_ids"]) > len(text.replace(" ", ""))  # bytes: more tokens than syllables
    assert sum(label != -100 for label in feature["labels"]) == sum(t != " " for t in tokens)
    logits = np.eye(2)[[max(label, 0) for label in feature["labels"]]]
    assert task_encoding.token_tags(spec.labels, feature, logits) == tags


@pytest.mark.parametrize("after, space", [("I-LC", "I-LC"), ("B-LC", "O"), ("I-PS", "O")])
def test_a_space_joins_an_entity_only_when_the_next_character_continues_it(after, space):
    labels = ["O", "B-LC", "I-LC", "B-PS", "I-PS"]
    logits = np.eye(len(labels))[[0, labels.index("B-LC"), labels.index(after)]]
    feature = {"tag_positions": [1, 1, None, 2], "tag_continues": [False, True, False, False]}
    assert task_encoding.token_tags(labels, feature, logits) == ["B-LC", "I-LC", space, after]


def test_character_tagged_ner_trains_through_the_cli(tmp_path):
    """A user task with `character_tags`: fine-tuning memorises 12 sentences and scores them per character."""
    from tests.conftest import KOREAN_SENTENCES
    from tokenization.train_tokenizer import train_tokenizer

    tokenizer = train_tokenizer(KOREAN_SENTENCES * 3, 150, family="bert")
    model_dir = stock_model_dir_with(tokenizer, tmp_path / "m")
    rows = [{"chars": list(text), "tags": character_tags(text, words, kind)}
            for text, words, kind in [("대한민국의 수도는 서울이다.", range(2, 3), "LC"),
                                      ("우리는 내일 부산으로 여행을 간다.", range(1, 3), "DT"),
                                      ("지하철을 타고 회사에 출근했다.", range(2, 3), "OG")]] * 4
    data = tmp_path / "ner"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                             encoding="utf-8")
    spec = json.dumps({"task_type": "token", "tokens_column": "chars", "label_column": "tags", "character_tags": True,
                       "metric": "entity_f1_macro", "labels": ["O", "B-LC", "I-LC", "B-DT", "I-DT", "B-OG", "I-OG"]})
    out = tmp_path / "out"
    assert finetune.main(["--model", str(model_dir), "--task", "toy-char-ner", "--task-spec", spec, "--data-dir",
                          str(data), "--output-dir", str(out),
                          *quick("--epochs", 15, "--learning-rate", 5e-3, "--batch-size", 4)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["metric"] == "entity_f1_macro" and results["mean"] > 80.0, results


def test_extractive_qa_fixture(tmp_path):
    contexts = [("철수 는 서울 에 산다", "철수 는 어디 에 사나", "서울"),
                ("영희 는 부산 에서 일한다", "영희 는 어디 에서 일하나", "부산"),
                ("회의 는 내일 열린다", "회의 는 언제 열리나", "내일"),
                ("민수 는 학교 에 간다", "민수 는 어디 에 가나", "학교")] * 4
    rows = [{"id": str(i), "context": c, "question": q, "answers": {"text": [a], "answer_start": [c.index(a)]}}
            for i, (c, q, a) in enumerate(contexts)]
    words = sorted({w for c, q, _ in contexts for w in (c + " " + q).split()})
    tokenizer = word_tokenizer("bert", words)
    spec = finetune.spec_from_cli("toy-qa", task_type="qa")
    feature = task_encoding.encode_qa_task(spec, rows[:1], tokenizer, 64, 16)[0]
    span = feature["input_ids"][feature["start_positions"]:feature["end_positions"] + 1]
    assert tokenizer.decode(span) == "서울"
    # decoding: the best valid span from hand-set logits
    start, end = torch.full((len(feature["input_ids"]),), -5.0), torch.full((len(feature["input_ids"]),), -5.0)
    start[feature["start_positions"]], end[feature["end_positions"]] = 3.0, 3.0
    start[0] = end[0] = 9.0  # [CLS] is outside the context and must be ignored
    assert task_encoding.decode_qa([feature], [(start.numpy(), end.numpy())], rows[:1], spec) == ["서울"]
    # a question longer than half the window is cut, and the overlap shrinks to fit (tokenizers would abort)
    long = dict(rows[0], question=" ".join(["철수", "는", "어디", "에"] * 4))
    with pytest.warns(UserWarning, match=r"1 question\(s\) longer than 8 tokens .* cut to their first 8 tokens"):
        windows = task_encoding.encode_qa_task(spec, [long], tokenizer, 16, 8)
    assert all(len(w["input_ids"]) <= 16 for w in windows)
    assert [tokenizer.decode(w["input_ids"][w["start_positions"]:w["end_positions"] + 1]) for w in windows] == ["서울"]

    model_dir = stock_model_dir_with(tokenizer, tmp_path / "m")
    data = tmp_path / "qa"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.json").write_text(json.dumps({"data": rows}, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    assert finetune.main(["--model", str(model_dir), "--task", "toy-qa", "--task-type", "qa", "--data-dir", str(data),
                          "--output-dir", str(out), *quick("--epochs", 20, "--learning-rate", 5e-3, "--batch-size", 8)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["metric"] == "qa_f1" and set(results["metrics"]) == {"qa_f1"}
    assert results["mean"] > 70.0, results


# --- bad input -------------------------------------------------------------------------------------------------------
def bad_input_case(case: str, tmp_path: Path) -> list[str]:
    data = toy_sentiment_dir(tmp_path / "data")
    model = stock_model_dir(tmp_path / "m")
    task = ["--task", "nsmc"]
    if case == "missing label column":
        task = ["--task", "mine", "--task-type", "single", "--text-columns", "document", "--label-column", "stars"]
    elif case == "label outside the set":
        rows = sentiment_rows(16, 1)
        rows[3][2] = 7
        write_tsv(data / "dev.tsv", ["id", "document", "label"], rows)
        task += ["--hold-out-dev", "4", "--max-eval-samples", "2"]  # named as read, though dev becomes test, cut to 2
    elif case == "empty split":
        write_tsv(data / "dev.tsv", ["id", "document", "label"], [])
    elif case == "no head for the task type":
        from transformers import CLIPTextConfig

        CLIPTextConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=64).save_pretrained(model)
    elif case == "vocabulary mismatch":
        config = json.loads((model / "config.json").read_text())
        config["vocab_size"] = 8  # the tokenizer has len(KOREAN_WORDS) + 5 tokens
        (model / "config.json").write_text(json.dumps(config))
    elif case == "regression label out of range":
        write_tsv(data / "train.tsv", ["sentence1", "sentence2", "score"], [["나는", "간다", "7.5"]])
        write_tsv(data / "dev.tsv", ["sentence1", "sentence2", "score"], [["나는", "간다", "2"]])
        task = ["--task", "korsts"]
    elif case == "pooling on a stock model":  # with the probes, which run first: refused before them
        task += ["--pooling", "mean", "--mode", "both"]
    elif case == "no data dir or hub":
        return ["--model", str(model), "--task", "kqp", "--output-dir", str(tmp_path / "out"), *quick()]
    elif case == "merge without lora":
        task += ["--merge"]
    elif case == "push an adapter without merge":
        task += ["--peft", "lora", "--push-to-hub", "org/x", "--push-dry-run"]
    elif case == "push with --save-model none":
        task += ["--save-model", "none", "--push-to-hub", "org/x", "--push-dry-run"]
    elif case == "push to a repo id the Hub refuses":
        task += ["--push-to-hub", "org/bad--name", "--push-dry-run"]
    elif case == "push while offline":  # the test sets HF_HUB_OFFLINE
        task += ["--push-to-hub", "org/x"]
    elif case == "push a stock model":
        task += ["--push-to-hub", "org/x", "--push-dry-run"]
    elif case == "push without a known licence":  # the English source "tiny-bert" has no recorded licence
        model = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
        task += ["--push-to-hub", "org/x", "--push-dry-run"]
    elif case == "sts loss without the bi-encoder":
        task += ["--sts-loss", "mse"]
    elif case == "negative gradient clipping norm":
        task += ["--max-grad-norm", "-1"]
    elif case == "max length below 8 tokens":
        task += ["--max-length", "4"]
    elif case == "a negative learning rate":
        task += ["--learning-rate", "-1"]
    elif case == "a warmup ratio above 1":
        task += ["--warmup-ratio", "2"]
    elif case == "a negative weight decay":
        task += ["--weight-decay", "-0.1"]
    elif case == "card options without a push":
        task += ["--license", "mit"]
    elif case in ("seed count of zero", "seeds that are not numbers"):
        task += ["--seeds", "0" if case == "seed count of zero" else "one,two"]
    elif case == "zero epochs":
        task += ["--epochs", "0"]
    elif case == "pair pooling of one sentence":
        task += ["--pooling", "pair"]
    elif case == "a dropout of 1 or more":
        task += ["--dropout", "1.5"]
    elif case == "mean pooling with a LoRA adapter alone":
        model = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
        task += ["--peft", "lora", "--pooling", "mean"]
    elif case == "a negative hold-out count":
        task += ["--hold-out-test", "-3"]
    elif case == "a negative train sample count":
        task += ["--max-train-samples", "-1"]
    elif case == "mse for scores without a declared range":
        task = ["--task", "sts", "--task-type", "regression", "--text-columns", "sentence1,sentence2", "--label-column",
                "score", "--sts-loss", "mse"]
    elif case == "pooling for a token task":
        task = ["--task", "klue-ner", "--pooling", "mean"]
    elif case == "output folder would replace the model":
        model = stock_model_dir(tmp_path / "out" / "model")
    return ["--model", str(model), *quick(), *task, "--data-dir", str(data), "--output-dir", str(tmp_path / "out")]


BAD_INPUT = {
    "missing label column": "no column(s) ['stars']",
    "label outside the set": "dev row 3 has label '7', not in the declared label set ['0', '1']",
    "empty split": "the dev split is empty",
    "no head for the task type": "cannot get a single head: AutoModelForSequenceClassification has no class for CLIPTextConfig",
    "vocabulary mismatch": "tokenizer/model vocabulary mismatch",
    "regression label out of range": "outside the declared range [0.0, 5.0]",
    "no data dir or hub": "has no Hub dataset; pass --data-dir",
    "pooling on a stock model": "--pooling applies to XPT models",
    "merge without lora": "--merge merges LoRA weights into the base model: use it with --peft lora",
    "push an adapter without merge": "--push-to-hub with --peft lora publishes the merged model: add --merge",
    "push with --save-model none": "--push-to-hub publishes the saved model: drop --save-model none",
    "push to a repo id the Hub refuses": "repo id 'org/bad--name' is not valid on the Hub",
    "push while offline": "offline mode (HF_HUB_OFFLINE is set)",
    "push a stock model": "--push-to-hub publishes XPT models",
    "push without a known licence": "source 'tiny-bert' has no recorded licence): pass --license ID",
    "output folder would replace the model": "which is or holds --model",
    "card options without a push": "--license goes with --push-to-hub ORG/NAME",
    "negative gradient clipping norm": "--max-grad-norm -1.0: give a norm > 0, or 0 for no clipping",
    "max length below 8 tokens": "--max-length 4: give at least 8 tokens",
    "a negative learning rate": "--learning-rate -1.0: give a learning rate > 0",
    "a warmup ratio above 1": "--warmup-ratio 2.0: give the share of the training steps that warm up, in [0, 1]",
    "a negative weight decay": "--weight-decay -0.1: give a weight decay >= 0",
    "sts loss without the bi-encoder": "--sts-loss mse trains the STS bi-encoder (--pair-encoding bi); nsmc is not",
    "seed count of zero": "--seeds 0: give a count >= 1 (3 runs seeds 0, 1, 2) or a comma-separated list",
    "seeds that are not numbers": "--seeds one,two: give a count >= 1",
    "zero epochs": "--epochs 0: give at least 1",
    "pair pooling of one sentence": "--pooling pair reads the two sentences of a pair; nsmc has 1 text column(s)",
    "a dropout of 1 or more": "--dropout 1.5: give a probability in [0, 1)",
    "mean pooling with a LoRA adapter alone": "--pooling mean with --peft lora needs --merge",
    "a negative hold-out count": "--hold-out-test -3: give a number of train examples, or 0 for none",
    "a negative train sample count": "--max-train-samples -1: give at least 1",
    "pooling for a token task": "--pooling mean: a token head reads every token, it pools nothing",
    "mse for scores without a declared range": "--sts-loss mse maps the scores onto the cosine's range by the task's label_range",
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_fails_early_with_one_line(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    argv = bad_input_case(case, tmp_path)
    capsys.readouterr()  # drop the fixture's own output (weight-saving progress bars)
    assert finetune.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and BAD_INPUT[case] in err[0], err
    assert not (tmp_path / "out" / "results.json").exists()
    if case in ("pooling on a stock model", "a negative learning rate", "a warmup ratio above 1",
                "pair pooling of one sentence", "a dropout of 1 or more"):
        assert not (tmp_path / "out").exists()  # nothing ran


def test_max_grad_norm_zero_trains_without_clipping(tmp_path):
    """`--max-grad-norm 0` means no clipping, as in post-training (not a gradient scaled to zero): its losses
    are those of a norm no gradient here reaches."""
    data = toy_sentiment_dir(tmp_path / "data")
    model = stock_model_dir(tmp_path / "m")
    losses = {}
    for norm in ("0", "1e9"):
        argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(tmp_path / norm),
                *quick("--epochs", 2, "--learning-rate", 3e-3, "--max-grad-norm", norm, "--save-model", "none")]
        assert finetune.main(argv) == 0
        losses[norm] = json.loads((tmp_path / norm / "runs" / "seed_0.json").read_text())["step_losses"]
    assert losses["0"] == losses["1e9"] and len(set(losses["0"])) > 1


def test_custom_code_runs_only_when_it_is_ours_or_trusted(tmp_path):
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    ours = xpt_model_dir(tmp_path / "ours", tokenizer)
    assert task_model.written_by_this_package(str(ours))
    assert task_model.trusts_remote_code(str(ours), asked=False)
    edited = xpt_model_dir(tmp_path / "edited", tokenizer)
    with open(edited / "modeling_xpt.py", "a", encoding="utf-8") as f:
        f.write("\n# edited after saving\n")
    assert not task_model.trusts_remote_code(str(edited), asked=False)
    assert task_model.trusts_remote_code(str(edited), asked=True)
    assert not task_model.trusts_remote_code("some-org/some-model", asked=False)  # Hub ids: only when asked
    # A fresh process, as users run it (in this one the package's classes are registered and would be used).
    data = toy_sentiment_dir(tmp_path / "data")
    argv = ["--model", edited, "--task", "nsmc", "--data-dir", data, "--output-dir", tmp_path / "out", *quick()]
    refused = run_cli(*argv)
    assert refused.returncode == 2 and not (tmp_path / "out" / "results.json").exists()
    err = refused.stderr.strip().splitlines()
    assert len(err) == 1 and "pass --trust-remote-code" in err[0], refused.stderr
    assert run_cli(*argv, "--trust-remote-code").returncode == 0
    assert (tmp_path / "out" / "results.json").is_file()


def test_two_runs_cannot_share_an_output_folder(tmp_path, capsys):
    from training.checkpointing import folder_lock

    data = toy_sentiment_dir(tmp_path / "data")
    model = stock_model_dir(tmp_path / "m")
    out = tmp_path / "out"
    argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out), *quick()]
    capsys.readouterr()
    with folder_lock(out):
        assert finetune.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in use by process" in err[0], err
    assert not (out / "results.json").exists()
    assert finetune.main(argv) == 0 and (out / "results.json").is_file()


def test_the_same_command_runs_again_in_its_folder_when_the_task_spec_names_the_task(tmp_path):
    data = toy_sentiment_dir(tmp_path / "data")
    spec = json.dumps({"name": "reviews", "task_type": "single", "text_columns": ["document"], "labels": ["0", "1"]})
    argv = ["--model", str(stock_model_dir(tmp_path / "m")), "--task", "mine", "--task-spec", spec, "--data-dir",
            str(data), "--output-dir", str(tmp_path / "out"), *quick()]
    assert finetune.main(argv) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["task"] == "reviews"
    assert finetune.main(argv) == 0


def test_bad_input_cli_exit_2_without_traceback(tmp_path):
    result = run_cli(*bad_input_case("label outside the set", tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: task 'nsmc': dev row 3 has label '7'")


def test_hub_loader_conversion_with_in_memory_datasets():
    """The Hub path minus the download (impossible offline): ClassLabels become names, splits are
    renamed, KLUE-RE gets typed entity markers, and the records pass validation."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value

    from training.tasks import load_hub, validate

    ner = Features({"tokens": List(Value("string")), "ner_tags": List(ClassLabel(names=get_task("klue-ner").labels))})
    o, b_ps = get_task("klue-ner").labels.index("O"), get_task("klue-ner").labels.index("B-PS")
    ner_split = Dataset.from_dict({"tokens": [["철", "수", "가"]], "ner_tags": [[b_ps, b_ps + 1, o]]}, features=ner)
    calls = []

    def fake_load(path, name):
        calls.append((path, name))
        return DatasetDict(train=ner_split, validation=ner_split)

    spec = get_task("klue-ner")
    splits = load_hub(spec, load_dataset=fake_load)
    assert calls == [("klue/klue", "ner")] and set(splits) == {"train", "dev"}
    assert splits["train"][0]["ner_tags"] == ["B-PS", "I-PS", "O"]
    validate(spec, splits)

    entity = Features({"word": Value("string"), "start_idx": Value("int32"), "end_idx": Value("int32"), "type": Value("string")})
    re_features = Features({"sentence": Value("string"), "subject_entity": entity, "object_entity": entity,
                            "label": ClassLabel(names=["no_relation", "per:origin"])})
    re_split = Dataset.from_dict({"sentence": ["철수는 부산 출신이다."], "label": [1],
                                  "subject_entity": [{"word": "철수", "start_idx": 0, "end_idx": 1, "type": "PER"}],
                                  "object_entity": [{"word": "부산", "start_idx": 4, "end_idx": 5, "type": "LOC"}]},
                                 features=re_features)
    spec = TaskSpec.from_dict(get_task("klue-re").to_dict())  # a copy: load_hub fills in the label set
    splits = load_hub(spec, load_dataset=lambda path, name: DatasetDict(train=re_split, validation=re_split))
    assert splits["dev"][0]["sentence"] == "@ * PER * 철수 @는 # ^ LOC ^ 부산 # 출신이다."
    assert splits["dev"][0]["label"] == "per:origin" and spec.labels == ["no_relation", "per:origin"]
    validate(spec, splits)

    # declared labels "0"/"1" but ClassLabel names "neg"/"pos": keep the integers as strings
    paws = Dataset.from_dict({"sentence1": ["가"], "sentence2": ["나"], "label": [1]},
                             features=Features({"sentence1": Value("string"), "sentence2": Value("string"),
                                                "label": ClassLabel(names=["neg", "pos"])}))
    splits = load_hub(get_task("paws-x"), load_dataset=lambda p, n: DatasetDict(train=paws, validation=paws, test=paws))
    assert splits["test"][0]["label"] == "1"


def test_roberta_source_xpt_with_bert_style_tokenizer_gets_no_segment_ids(tmp_path):
    """type_vocab_size 1 (RoBERTa-sourced XPT) + a tokenizer that emits segment ids 1 for pairs: trains."""
    from modeling_xpt import from_source

    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    source = tiny_source("roberta", word_tokenizer("roberta", ["the", "a", "of"]))
    model_dir = tmp_path / "xpt-roberta"
    converted = from_source(source, word_tokenizer("roberta", KOREAN_WORDS))  # from_source refuses a bert tokenizer
    assert converted.config.vocab_size == len(tokenizer) and converted.config.type_vocab_size == 1
    converted.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)  # then paired with one, as a folder put together by hand may be
    rows = [[w1, w2, f"{i % 5}.0"] for i, (w1, w2) in enumerate(zip(KOREAN_WORDS, reversed(KOREAN_WORDS)))]
    data = tmp_path / "sts"
    write_tsv(data / "train.tsv", ["sentence1", "sentence2", "score"], rows)
    write_tsv(data / "dev.tsv", ["sentence1", "sentence2", "score"], rows[:8])
    assert finetune.main(["--model", str(model_dir), "--task", "korsts", "--data-dir", str(data),
                          "--output-dir", str(tmp_path / "out"), *quick()]) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["split"] == "dev"


@pytest.mark.parametrize("sts_loss", ["mse", "cosent"])
def test_regression_learns_a_toy_sts(sts_loss, tmp_path):
    """Predictions stay aligned with their references: a tiny bi-encoder fits a toy STS (score = shared
    words) with either loss, and the run records which."""
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model_dir = stock_model_dir_with(tokenizer, tmp_path / "m")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for i in range(64):
        first = [KOREAN_WORDS[j] for j in torch.randint(len(KOREAN_WORDS), (3,), generator=gen).tolist()]
        shared = i % 4
        second = first[:shared] + [KOREAN_WORDS[j] for j in torch.randint(len(KOREAN_WORDS), (3 - min(shared, 3),),
                                                                         generator=gen).tolist()]
        rows.append([" ".join(first), " ".join(second), f"{min(shared, 3) * 5 / 3:.2f}"])
    for split in ("train", "dev"):
        write_tsv(tmp_path / "d" / f"{split}.tsv", ["sentence1", "sentence2", "score"], rows)
    assert finetune.main(["--model", str(model_dir), "--task", "korsts", "--data-dir", str(tmp_path / "d"),
                          "--output-dir", str(tmp_path / "o"),
                          "--sts-loss", sts_loss, *quick("--epochs", 15, "--learning-rate", 3e-3, "--batch-size", 8)]) == 0
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["metric"] == "spearman" and results["mean"] > 40.0, results
    assert results["hyperparameters"]["sts_loss"] == sts_loss


def test_cosent_loss_is_the_sum_over_ordered_pairs_of_pairs():
    """CoSENT: log(1 + sum over (i, j) with score_i < score_j of exp(20 (cos_i - cos_j))), written out
    pair by pair; nothing to order (equal scores) gives 0, and cosines in the scores' order cost less."""
    from training.sentence_similarity import cosent_loss

    cosine = torch.tensor([0.9, 0.1, 0.5, 0.5, -0.2], dtype=torch.float64)
    labels = torch.tensor([4.0, 1.0, 2.5, 2.5, 0.0], dtype=torch.float64)
    terms = [math.exp(20 * (cosine[i] - cosine[j]).item()) for i in range(5) for j in range(5) if labels[i] < labels[j]]
    assert len(terms) == 9  # ten pairs of pairs, one of them tied
    assert cosent_loss(cosine, labels).item() == pytest.approx(math.log1p(sum(terms)), rel=1e-12)
    assert cosent_loss(cosine, torch.full((5,), 3.0, dtype=torch.float64)).item() == 0.0
    in_order = cosent_loss(labels / 4, labels)
    assert in_order < cosent_loss(-labels / 4, labels) and in_order < cosent_loss(cosine.flip(0), labels)


def test_bf16_autocast_learns_like_fp32(tmp_path):
    """--mixed-precision bf16 runs forward and backward under bf16 autocast (the losses differ from fp32 in
    the low bits) and learns the same toy task; the run record says which precision ran."""
    model_dir = stock_model_dir(tmp_path / "m")
    data = toy_sentiment_dir(tmp_path / "d")
    runs = {}
    for precision in ("no", "bf16"):
        out = tmp_path / precision
        assert finetune.main(["--model", str(model_dir), "--task", "nsmc", "--data-dir", str(data),
                              "--output-dir", str(out), "--mixed-precision", precision,
                              *quick("--epochs", 12, "--learning-rate", 3e-3, "--batch-size", 8)]) == 0
        runs[precision] = json.loads((out / "runs" / "seed_0.json").read_text())
    assert [r["mixed_precision"] for r in runs.values()] == ["no", "bf16"]
    assert runs["no"]["step_losses"] != runs["bf16"]["step_losses"]
    for run in runs.values():
        assert run["dev"] >= 87.5, run["dev"]  # 14 of 16 toy reviews or better


@pytest.mark.parametrize("task", ["nsmc", "korsts"])
def test_a_seed_whose_training_diverges_scores_nan_not_the_untrained_model(task, tmp_path):
    """A loss that turns NaN leaves NaN weights: a classifier would then predict one class (about half right),
    and the STS bi-encoder would keep its epoch 0, the untrained cosine. Neither is a fine-tuning result: the
    seed scores NaN, and the report counts it as diverged."""
    model_dir = xpt_model_dir(tmp_path / "m", word_tokenizer("bert", KOREAN_WORDS))
    data = toy_sentiment_dir(tmp_path / "d") if task == "nsmc" else toy_sts_dir(tmp_path / "d")
    out = tmp_path / "out"
    assert finetune.main(["--model", str(model_dir), "--task", task, "--data-dir", str(data), "--output-dir", str(out),
                          "--mixed-precision", "no", "--max-grad-norm", "0",
                          *quick("--epochs", 2, "--learning-rate", 1e12, "--batch-size", 8)]) == 0
    results = json.loads((out / "results.json").read_text())
    run = json.loads((out / "runs" / "seed_0.json").read_text())
    assert run["diverged_in_epoch"] == 1 and math.isnan(run["dev"])
    assert all(math.isnan(score) for score in results["scores"])
    assert "saved_model" not in results and not (out / "model").exists()  # NaN weights are never kept


def test_a_push_after_every_seed_diverged_publishes_nothing(tmp_path, capsys):
    model_dir = xpt_model_dir(tmp_path / "m", word_tokenizer("bert", KOREAN_WORDS))
    code = finetune.main(["--model", str(model_dir), "--task", "nsmc", "--data-dir", str(toy_sentiment_dir(tmp_path / "d")),
                          "--output-dir", str(tmp_path / "out"), "--mixed-precision", "no", "--max-grad-norm", "0",
                          "--push-to-hub", "org/xpt-toy", "--push-dry-run", "--license", "mit",
                          *quick("--epochs", 1, "--learning-rate", 1e12, "--batch-size", 8)])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "every seed diverged: nothing to publish" in errors[0], errors
    assert not (tmp_path / "out" / "model").exists()


def test_mixed_precision_auto_follows_the_hardware(monkeypatch):
    from training import step

    for native, expected in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda native=native: native)
        assert step.auto_mixed_precision("cpu") == expected


def test_the_precision_auto_picks_is_resolved_before_the_checks_and_recorded(monkeypatch, tmp_path):
    """`--mixed-precision auto` is resolved once, before anything reads it: results.json records what ran
    (bf16 and fp32 runs are told apart by `xpt-compare`), and a rerun with `auto` on the same machine is
    the same run, not one with another option."""
    from training import finetune_cli, step

    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: True)
    args = finetune_cli.build_parser().parse_args(["--model", "m", "--task", "nsmc", "--output-dir", str(tmp_path),
                                                   "--device", "cpu"])
    finetune_cli.resolve_options(args)
    assert args.mixed_precision == "bf16"
    recorded = finetune_cli.hyperparameters(args, get_task("nsmc"))
    assert recorded["mixed_precision"] == "bf16"
    (tmp_path / "results.json").write_text(json.dumps({"model": "m", "task": "nsmc", "mode": args.mode, "seeds": [0],
                                                       "peft": None, "data_seed": args.data_seed,
                                                       "hyperparameters": recorded}))
    again = finetune_cli.build_parser().parse_args(["--model", "m", "--task", "nsmc", "--output-dir", str(tmp_path),
                                                    "--device", "cpu"])
    finetune_cli.resolve_options(again)
    finetune_cli.check_reused_folder(again, [0], get_task("nsmc"))


@pytest.mark.parametrize("device, says", [("cuda", "torch sees no CUDA device on this machine"),
                                          ("cuda:0", "torch sees no CUDA device on this machine"),
                                          ("mps", "torch cannot use MPS on this machine"),
                                          ("gpu", "not a device torch knows")])
def test_a_device_torch_cannot_use_is_refused_before_anything_is_loaded(tmp_path, monkeypatch, capsys, device, says):
    """An explicit --device that torch cannot use here is one line, before the model loads or anything is
    written (no traceback after loading the weights, no empty runs/ left behind)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(finetune, "load_tokenizer_and_config", lambda *a, **k: pytest.fail("loaded the model"))
    model, data = stock_model_dir(tmp_path / "bert"), toy_sentiment_dir(tmp_path / "toy")
    capsys.readouterr()
    rc = finetune.main(["--model", str(model), "--task", "nsmc", "--data-dir", str(data),
                        "--output-dir", str(tmp_path / "out"), "--device", device, *quick()])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: --device {device}: {says}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_hub_qa_drops_unanswerable_questions():
    from datasets import Dataset, DatasetDict

    from training.tasks import load_hub

    split = Dataset.from_list([
        {"question": "어디?", "context": "서울 에 산다", "answers": {"text": ["서울"], "answer_start": [0]}},
        {"question": "언제?", "context": "서울 에 산다", "answers": {"text": [], "answer_start": []}},
    ])
    splits = load_hub(get_task("klue-mrc"), load_dataset=lambda p, n: DatasetDict(train=split, validation=split))
    assert [r["question"] for r in splits["dev"]] == ["어디?"]


PUSH_OUTCOMES = {  # what cards.push does -> exit status of finetune.py and what it says
    "uploaded": (0, "published: https://huggingface.co/org/xpt-toy-nsmc/commit/0"),
    "failed": (1, "push to org/xpt-toy-nsmc failed: upload to org/xpt-toy-nsmc failed: ConnectionError: reset by peer"),
}


@pytest.mark.parametrize("outcome", sorted(PUSH_OUTCOMES))
def test_push_after_training_uploads_or_says_how_to_retry(outcome, tmp_path, monkeypatch, capsys):
    """A real push (no dry run) goes through cards.push with the token, the licence and the saved folder;
    when it fails, the model stays saved and the one error line gives the command that retries."""
    import cards.push

    uploads = []

    def fake_upload(repo_id, files, card_text, **kwargs):  # the one networked function of cards.push
        if outcome == "failed":
            raise ConnectionError("reset by peer")
        uploads.append((repo_id, sorted(name for name, _ in files), card_text))
        return f"https://huggingface.co/{repo_id}/commit/0"

    from huggingface_hub import constants

    monkeypatch.setattr(cards.push, "hub_upload", fake_upload)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the upload itself is faked: nothing leaves the machine
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    model = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
    data, out = toy_sentiment_dir(tmp_path / "data"), tmp_path / "out"
    capsys.readouterr()
    code = finetune.main(["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out),
                          *quick(), "--push-to-hub", "org/xpt-toy-nsmc", "--license", "cc-by-4.0"])
    expected_code, message = PUSH_OUTCOMES[outcome]
    captured = capsys.readouterr()
    assert code == expected_code and (out / "model" / "model.safetensors").is_file()
    if outcome == "uploaded":
        assert message in captured.out and uploads[0][0] == "org/xpt-toy-nsmc"
        assert {"model.safetensors", "config.json", "modeling_xpt.py", "results.json", "README.md"} <= set(uploads[0][1])
        assert "\nlicense: cc-by-4.0\n" in uploads[0][2] and "pipeline_tag: text-classification" in uploads[0][2]
    else:
        errors = [line for line in captured.err.splitlines() if "error" in line.lower()]  # not the progress bars
        assert len(errors) == 1 and errors[0].startswith("error: " + message), errors
        assert f"The model is saved in {out / 'model'}; after fixing that, run `xpt-push --model-dir " \
               f"{out / 'model'} --repo-id org/xpt-toy-nsmc --license cc-by-4.0`" in errors[0]  # the same licence


def test_the_retry_command_of_a_failed_push_keeps_every_choice():
    """A push that failed before its repo existed must not, retried as told, create it public or under
    another licence or base model; a folder name with a space stays one word."""
    from training.publishing import retry_command

    assert retry_command("runs/my model", "org/x", private=True, license="cc-by-4.0", base_model="org/xpt-ko") == (
        "xpt-push --model-dir 'runs/my model' --repo-id org/x --private --license cc-by-4.0 --base-model org/xpt-ko")
    assert retry_command("runs/m", "org/x") == "xpt-push --model-dir runs/m --repo-id org/x"


def test_a_dev_score_that_is_never_a_number_keeps_the_first_epoch(tmp_path, monkeypatch):
    """A diverged run (NaN on dev every epoch) ends with its first epoch's weights, not a crash after training."""
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    args = args_for(xpt_model_dir(tmp_path / "m", tokenizer), "nsmc", toy_sentiment_dir(tmp_path / "data"),
                    tmp_path / "out", "--epochs", 2)
    spec, splits, tokenizer, config, features = prepared(args)
    monkeypatch.setattr(finetune, "evaluate_split", lambda *a, **k: {spec.metric: float("nan")})
    run, _ = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    assert run["best_epoch"] == 1 and len(run["epochs"]) == 2
    scores = iter([float("nan"), 60.0])  # diverged at first, a number after: the number wins
    monkeypatch.setattr(finetune, "evaluate_split", lambda *a, **k: {spec.metric: next(scores, 50.0)})
    run, _ = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"), False)
    assert run["best_epoch"] == 2


def test_the_saved_model_is_not_a_diverged_first_seed(tmp_path, monkeypatch):
    """The first seed's dev score is NaN (diverged), the second's a number: the second seed's model is saved."""
    args = ["--model", str(stock_model_dir(tmp_path / "m")), "--task", "nsmc", "--data-dir",
            str(toy_sentiment_dir(tmp_path / "data")), "--output-dir", str(tmp_path / "out"), *quick("--seeds", 2)]
    scores = iter([float("nan"), 55.0])
    train_one_seed = finetune.train_one_seed

    def diverging_first(*a, **k):
        record, model = train_one_seed(*a, **k)
        return {**record, "dev": next(scores)}, model

    monkeypatch.setattr(finetune, "train_one_seed", diverging_first)
    assert finetune.main(args) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["saved_model"]["seed"] == 1


def test_a_rerun_cut_short_leaves_no_results_of_the_earlier_run_beside_its_own_seeds(tmp_path, monkeypatch, capsys):
    """The same command again, stopped by Ctrl-C after its first seed: the earlier results.json is gone (it no
    longer describes the seed records), so the folder reads as an interrupted run, not as finished."""
    from training import compare

    args = ["--model", str(stock_model_dir(tmp_path / "m")), "--task", "nsmc", "--data-dir",
            str(toy_sentiment_dir(tmp_path / "data")), "--output-dir", str(tmp_path / "out"), *quick("--seeds", 2)]
    assert finetune.main(args) == 0 and (tmp_path / "out" / "results.json").is_file()
    train_one_seed, calls = finetune.train_one_seed, []

    def killed_after_one(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return train_one_seed(*a, **k)

    monkeypatch.setattr(finetune, "train_one_seed", killed_after_one)
    capsys.readouterr()
    assert finetune.main(args) == 130  # Ctrl-C: one line, no traceback
    err = capsys.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert [line for line in err.splitlines() if "interrupted" in line] == \
        [f"interrupted: no new results.json in {tmp_path / 'out'}; run it again (seeds train anew)"]
    assert not (tmp_path / "out" / "results.json").exists()
    assert compare.interrupted_runs(tmp_path / "out") == [(tmp_path / "out", 2)]


def test_a_task_file_saved_with_a_byte_order_mark_reads_its_header(tmp_path):
    from training.tasks import _read_table

    (tmp_path / "train.tsv").write_bytes("\ufeffsentence1\tsentence2\tscore\r\n나는\t간다\t2\r\n".encode("utf-8"))
    assert _read_table(tmp_path / "train.tsv") == [{"sentence1": "나는", "sentence2": "간다", "score": "2"}]
    for name, text in (("a.jsonl", '{"s": "나는"}\n'), ("b.json", '[{"s": "나는"}]')):  # JSON files too
        (tmp_path / name).write_bytes(("\ufeff" + text).encode("utf-8"))
        assert _read_table(tmp_path / name) == [{"s": "나는"}]


def test_labels_given_as_one_string_in_a_task_spec_are_split_at_commas():
    assert spec_from_cli("mine", task_spec='{"task_type": "single", "text_columns": ["t"], "labels": "neg,pos"}'
                         ).labels == ["neg", "pos"]


def test_hold_out_dev_scores_on_the_dev_texts_and_selects_on_train_examples(tmp_path):
    """`--hold-out-dev N`: the task's own dev split becomes test (texts a post-training corpus may lack), and train
    is split into N dev examples and the rest; with --hold-out-test as well it is refused."""
    data = toy_sentiment_dir(tmp_path / "data")
    spec = get_task("nsmc")
    plain = load_task_data(spec, data)
    splits = load_task_data(spec, data, hold_out_dev=10)
    assert splits["test"] == plain["dev"] and len(splits["dev"]) == 10 and len(splits["train"]) == 38
    rows = [sorted(tuple(row.values()) for row in splits[name]) for name in ("train", "dev")]
    assert sorted(rows[0] + rows[1]) == sorted(tuple(row.values()) for row in plain["train"])  # a partition of train
    with pytest.raises(TaskDataError, match="give one of them"):
        load_task_data(spec, data, hold_out_test=10, hold_out_dev=10)


def test_a_local_model_is_recorded_by_its_absolute_path(tmp_path, monkeypatch):
    """results.json and training_summary.json name a local model absolutely: a card or report made from another
    folder would otherwise read `runs/m` as the Hub repo of that name. Hub ids stay as given."""
    from training.inputs import recorded_ref

    (tmp_path / "runs" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert recorded_ref("runs/m") == str(tmp_path / "runs" / "m")
    assert recorded_ref("org/xpt-ko") == "org/xpt-ko" and recorded_ref("package:gt_x") == "package:gt_x"


@pytest.mark.parametrize("flags, encoding", [([], "bi"), (["--pooling", "mean"], "cross"),
                                             (["--peft", "lora", "--pooling", "mean"], "cross"),
                                             (["--pair-encoding", "cross"], "cross")])
def test_sts_falls_back_to_the_cross_encoder_only_with_a_note_naming_the_flag(flags, encoding, capsys):
    """On KorSTS the bi-encoder scores far higher; a flag that asks for a classification model switches to the
    cross-encoder, which is said with the flags that caused it, never silently. Asked for, it is not noted."""
    from training.finetune_cli import build_parser, resolve_pair_encoding

    args = build_parser().parse_args(["--model", "m", "--task", "korsts", "--output-dir", "o", *flags])
    resolve_pair_encoding(args, get_task("korsts"))
    err = capsys.readouterr().err
    assert args.pair_encoding == encoding
    noted = [line for line in err.splitlines() if line.startswith("note: pair encoding cross")]
    assert len(noted) == (encoding == "cross" and "--pair-encoding" not in flags), err
    if noted:
        assert " and ".join(f for f in flags if f in ("--peft", "--pooling")) in noted[0]


def test_the_seed_table_marks_an_untrained_best_epoch_and_shows_no_spread_for_one_seed():
    from training.finetune_tables import summary_table

    def table(*runs):
        tests = [r[2] for r in runs]
        return summary_table({"task": "korsts", "metric": "spearman", "split": "test", "model": "m",
                              "runs": [{"seed": s, "best_epoch": e, "dev": t - 1, "test": t} for s, e, t in runs],
                              "mean": sum(tests) / len(tests), "std": 0.5})

    one = table((0, 0, 41.0))
    assert "| 0 | 0 (untrained) | 40.00 | 41.00 |" in one and "mean ± std" not in one
    assert "best epoch 0 (untrained): no epoch of fine-tuning beat the untrained encoder on dev" in one
    two = table((0, 1, 41.0), (1, 2, 42.0))
    assert "| mean ± std | | 40.50 ± 0.71 | 41.50 ± 0.50 |" in two and "untrained" not in two


def test_a_folder_whose_model_code_is_not_this_packages_names_why_it_asks_for_trust(tmp_path):
    """A folder this package wrote loads without --trust-remote-code; the same folder with its modeling_xpt.py
    changed (another version's, or edited) is refused saying so, not only that custom code needs trust. Read in a
    fresh process, as the command does: one that has imported modeling_xpt has the XPT classes registered."""
    folder = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS))
    code = ("import sys\nfrom training import task_model\nfrom training.tasks import TaskDataError, spec_from_cli\n"
            "folder = sys.argv[1]\ntrusted = task_model.trusts_remote_code(folder, False)\n"
            "try:\n    task_model.load_tokenizer_and_config(folder, spec_from_cli('nsmc'), trusted)\n    print('LOADED')\n"
            "except TaskDataError as error:\n    print('REFUSED', error)\n")

    def load() -> str:
        done = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    assert load() == "LOADED"
    with (folder / "modeling_xpt.py").open("a", encoding="utf-8") as edited:
        edited.write("\n# edited\n")
    refusal = load()
    assert refusal.startswith("REFUSED") and ("its configuration_xpt.py and modeling_xpt.py are not this installed "
                                              "package's: written by another version of it, or edited; read them") in refusal


def test_an_xpt_cross_encoder_of_pairs_defaults_to_pair_pooling_its_post_training_dropout_and_the_label_mean(tmp_path):
    """For an XPT cross-encoder of sentence pairs the recipe's defaults: the pair head, the dropout its post-training
    recorded, and a new regression head that starts at the mean training score; what it ran with is recorded, and
    the saved model reloads with the pair head. Options given explicitly win."""
    from transformers import AutoModelForSequenceClassification

    model = xpt_model_dir(tmp_path / "xpt", word_tokenizer("bert", KOREAN_WORDS), dropout=0.1)
    summary = json.loads((model / "training_summary.json").read_text())
    (model / "training_summary.json").write_text(json.dumps({**summary, "config": {"post_training_dropout": 0.0}}))
    data = toy_sts_dir(tmp_path / "sts")
    args = args_for(model, "korsts", data, tmp_path / "out", "--pair-encoding", "cross", "--max-length", "32")
    results = finetune.run(args)
    assert results["hyperparameters"]["pooling"] == "pair" and results["hyperparameters"]["dropout"] == 0.0
    saved = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out" / "model", trust_remote_code=True)
    assert saved.config.classifier_pooling == "pair"

    spec, splits, tokenizer, config, features = prepared(args)
    run, trained = finetune.train_one_seed(args, spec, config, tokenizer, splits, features, 0, torch.device("cpu"),
                                           progress=False)
    assert all(m.p == 0.0 for m in trained.modules() if isinstance(m, torch.nn.Dropout))
    fresh = task_model.load_model(str(model), spec, config, None, "pair", True)
    scores = [f["labels"] for f in features["train"]]
    task_model.start_at_label_mean(fresh, scores)
    assert fresh.classifier.out_proj.bias.item() == pytest.approx(sum(scores) / len(scores))
    again = task_model.load_model(str(tmp_path / "out" / "model"), spec, saved.config, None, None, True)
    before = again.classifier.out_proj.bias.item()
    task_model.start_at_label_mean(again, scores)  # a trained head is left as it is
    assert again.classifier.out_proj.bias.item() == before

    explicit = args_for(model, "korsts", data, tmp_path / "out2", "--pair-encoding", "cross", "--max-length", "32",
                        "--pooling", "mean", "--dropout", "0.2")
    results = finetune.run(explicit)
    assert results["hyperparameters"]["pooling"] == "mean" and results["hyperparameters"]["dropout"] == 0.2
