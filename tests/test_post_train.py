"""Post-training end to end (training/post_train.py): what each phase and method trains and leaves
bit-identical, the source's dropout overridden for the run only, two processes crossing the phase boundary
like one, the optional word-order objective, a tokenizer trained when none is given, and the finished
folder (loadable with its own code, pushed to the Hub when the config asks). Runs use the tiny models and
corpus of the `tiny` fixture (tests/conftest.py) on the CPU, seconds each.
"""
from __future__ import annotations

import contextlib
import json
import math
import time

import numpy as np
import pytest
import torch

from tests.model_factories import tiny_source, word_tokenizer
from tests.post_train_helpers import (PHASE1, PYTHON, REUSED_GROUPS, WORDS, checkpoint_weights, losses,
                                      reset_accelerate, reused_pairs, run_args, run_inprocess, run_subprocess,
                                      source_weights)
from training import post_train
from training.checkpointing import list_checkpoints
from training.step import cpu_class, cpu_model_name

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


# ----------------------------------------------------------------------------------------------
# Phases and methods
# ----------------------------------------------------------------------------------------------


def test_phase1_trains_only_its_groups_and_phase2_trains_everything(tiny, tmp_path):
    out = tmp_path / "xpt"
    summary = run_inprocess(run_args(tiny, out, save_steps=1, attn_implementation="eager", language="ja",
                                     min_script_share=0))  # Korean text, recorded as Japanese: what was asked
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
    assert (hardware["cpu"], hardware["cpu_class"]) == (cpu_model_name(), cpu_class())  # what the card states
    # trained with eager attention, saved without it: the Auto classes load sdpa
    assert hardware["speed"]["attention"] == "eager"
    assert hardware["speed"]["num_workers"] == 0  # auto on a CPU: batches built in the training process
    saved = json.loads((out / "config.json").read_text())
    assert not [k for k in saved if "attn" in k]
    assert saved["language"] == "ja"  # --language: neither the text file nor the tokenizer records one

    source = source_weights(tiny["bert"][0])
    ckpts = dict(list_checkpoints(out))
    assert sorted(ckpts) == [1, 2, 3, 4, 5, 6, 7, 8]  # every step, the run's end too; 4 ends phase 1
    step1, step3, step4, step5 = (checkpoint_weights(ckpts[s]) for s in (1, 3, 4, 5))
    pairs = reused_pairs(step1, "bert")
    assert len(pairs) > 20
    for name, src in pairs:  # frozen in phase 1: bit-identical to the English source
        assert torch.equal(step1[name], source[src]), name
        assert torch.equal(step4[name], source[src]), name
    # (the attention key bias adds the same q.b_k to every score of a row: softmax-invariant, its
    # gradient is zero up to rounding, so it may legitimately stay put)
    pairs = [(n, s) for n, s in pairs if not n.endswith("attention.self.key.bias")]
    changed = [n for n, _ in pairs if not torch.equal(step5[n], step3[n])]
    assert set(n for n, _ in pairs) - set(changed) == set(), sorted(set(n for n, _ in pairs) - set(changed))
    from modeling_xpt import parameter_group_of

    for name in step1:  # phase-1 groups do train in phase 1
        if parameter_group_of(name) in PHASE1 and name != "lm_head.decoder.weight":
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
    reset_accelerate()
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


def test_post_training_dropout_overrides_the_source_for_the_run_only(tiny, tmp_path):
    """post_training_dropout 0 on a source with dropout 0.1 trains exactly like the same weights with
    dropout 0 in their config; without it the source's dropout applies; config.json keeps 0.1."""
    tok = word_tokenizer("bert", WORDS)
    with_dropout, without = tmp_path / "src-0.1", tmp_path / "src-0"
    tiny_source("bert", tok, with_dropout, dropout=0.1)
    tiny_source("bert", tok, without, dropout=0.0)  # the same weights (same seed)
    same = dict(attn_implementation="eager")  # `auto` may pick SDPA for post_training_dropout 0 alone
    overridden = run_inprocess(run_args(tiny, tmp_path / "a", source=with_dropout, post_training_dropout=0.0, **same))
    plain = run_inprocess(run_args(tiny, tmp_path / "b", source=without, **same))
    source_dropout = run_inprocess(run_args(tiny, tmp_path / "c", source=with_dropout, **same))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert losses(tmp_path / "a") != losses(tmp_path / "c")
    assert overridden["final_metrics"] == plain["final_metrics"] != source_dropout["final_metrics"]
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == saved["attention_probs_dropout_prob"] == 0.1


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


def test_the_command_line_run_ends_by_destroying_its_process_group(tiny, tmp_path):
    """A launched run (torchrun, `accelerate launch`) destroys its torch.distributed process group before it
    exits, as torch documents, rather than leaving gloo's threads to interpreter exit (which can abort the
    process after everything is saved). Here a one-process gloo group stands in for the launcher's."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        run_inprocess(run_args(tiny, tmp_path / "run", train_steps=2, phase1_steps=1, eval_steps=2))
        assert not torch.distributed.is_initialized()
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        reset_accelerate()


def test_a_diverged_run_stops_in_one_line_and_records_no_metrics(tiny, tmp_path, capsys):
    """A learning rate of 1e4 without clipping makes every loss NaN: the run stops at the step whose loss
    went non-finite, says so in one line and exits 1; its summary says `diverged` and holds no metrics (NaN
    logits once scored hits@1 = 1.0), and no model is saved. A resume of it says the same, trains nothing."""
    out = tmp_path / "diverged"
    args = run_args(tiny, out, learning_rate=1e4, phase1_learning_rate=1e4, max_grad_norm=0)
    assert post_train.main(args) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    summary = json.loads((out / "training_summary.json").read_text())
    step = summary["diverged"]["step"]
    assert "went non-finite" in errors[0] and f"at step {step} " in errors[0] and "learning_rate" in errors[0]
    logged = losses(out)
    assert math.isfinite(logged[0]["loss"]) and logged[-1]["step"] == step  # the training loss, or the valid loss after it
    assert not math.isfinite(logged[-1]["loss"]) or summary["diverged"]["what"] == "valid loss"
    assert summary["total_steps"] == step < 8 and summary["diverged"]["loss"] in ("nan", "inf", "-inf")
    assert not {"valid_metrics", "final_metrics", "frequency_baseline"} & set(summary)
    assert all(math.isfinite(h["loss"]) and h["hits@1"] < 1 for h in summary.get("valid_history", []))
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
    reset_accelerate()
    assert post_train.main(args + ["--resume", "latest"]) == 1
    again = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(again) == 1 and f"at step {step} " in again[0]


def test_cpu_default_splits_a_large_batch_into_micro_batches_with_the_same_losses(tiny, tmp_path, monkeypatch, capsys):
    """Without per_device_batch_size a CPU runs at most CPU_MICRO_BATCH_TOKENS tokens per forward pass
    (lowered here to 2 rows of 32 tokens); the step's gradient is the same token mean as one forward pass."""
    import training.config

    common = dict(mixed_precision="no", post_training_dropout=0.0, save_steps=100)
    whole = run_inprocess(run_args(tiny, tmp_path / "whole", per_device_batch_size=8, **common))
    reset_accelerate()
    monkeypatch.setattr(training.config, "CPU_MICRO_BATCH_TOKENS", 64)
    capsys.readouterr()
    split = run_inprocess(run_args(tiny, tmp_path / "split", **common))
    assert "8 packed rows x 32 tokens per step = 1 process(es) on cpu x 4 micro-batch(es) of 2 rows (a CPU's default: " \
        "at most 64 tokens" in capsys.readouterr().out
    assert (whole["batch"]["per_device_batch_size"], whole["batch"]["gradient_accumulation_steps"]) == (8, 1)
    assert (split["batch"]["per_device_batch_size"], split["batch"]["gradient_accumulation_steps"]) == (2, 4)
    np.testing.assert_allclose([x["loss"] for x in losses(tmp_path / "split")],
                               [x["loss"] for x in losses(tmp_path / "whole")], rtol=1e-5, atol=1e-6)
    assert split["final_metrics"]["loss"] == pytest.approx(whole["final_metrics"]["loss"], rel=1e-4)


def test_logged_tokens_per_second_leave_out_evaluation(tiny, tmp_path, monkeypatch):
    """train/tokens_per_s (TensorBoard, the progress bar) counts step time only, as the summary's tokens/s: an
    evaluation of a second between two logged steps does not show up as a slow step."""
    from accelerate import Accelerator

    logged = []
    monkeypatch.setattr(Accelerator, "log", lambda self, values, step=None, **kw: logged.append(values))
    slow_eval = post_train.evaluate_during_phase

    def evaluate_slowly(*args):
        time.sleep(1.0)
        return slow_eval(*args)

    monkeypatch.setattr(post_train, "evaluate_during_phase", evaluate_slowly)
    summary = run_inprocess(run_args(tiny, tmp_path / "rate", eval_steps=3, logging_steps=1, save_steps=100))
    rates = [v["train/tokens_per_s"] for v in logged if "train/tokens_per_s" in v]
    assert len(rates) == 8 and summary["wall_time_s"] - summary["train_time_s"] > 2  # two slow evaluations
    assert min(rates) > 0.2 * summary["tokens_per_s"], (rates, summary["tokens_per_s"])


def test_rows_longer_than_the_models_positions_are_cut_to_them_and_said(tiny, tmp_path, capsys):
    """The tiny BERT has 64 positions: max_seq_length 100 trains rows of 64 tokens, says so, and records 64."""
    summary = run_inprocess(run_args(tiny, tmp_path / "long", max_seq_length=100, train_steps=2, phase1_steps=1,
                                     cache_dir=tmp_path / "cache"))
    assert "max_seq_length 100 is more than the model's 64 positions: rows of 64 tokens" in capsys.readouterr().out
    assert summary["batch"]["max_seq_length"] == 64 and summary["config"]["max_seq_length"] == 100
    from datasets import load_from_disk

    (built,) = [d.parent for d in (tmp_path / "cache").glob("*/DONE")]  # the token rows' cache
    assert max(len(ids) for split in ("train", "valid") for ids in load_from_disk(str(built / split))["input_ids"]) == 64


# ----------------------------------------------------------------------------------------------
# Optional word-order prediction (off by default), own tokenizer, push to the Hub
# ----------------------------------------------------------------------------------------------


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
    # a fresh run over that folder, its tokenizer from 10 sentences, trains its own, never the earlier run's
    argv = [a for a in run_args(tiny, out, train_steps=3, phase1_steps=1, tokenizer_vocab_size=300,
                                tokenizer_train_sentences=10, overwrite_output_dir="true")]
    i = argv.index("--tokenizer")
    del argv[i:i + 2]
    run_inprocess(argv)
    assert len(AutoTokenizer.from_pretrained(out / "tokenizer")) < len(tok)
    # a run stopped before its first checkpoint left its tokenizer: `--resume latest` finds no checkpoint,
    # starts afresh and so trains its own tokenizer from its own settings
    crashed = tmp_path / "crashed"
    tok.save_pretrained(crashed / "tokenizer")  # the first run's, from all train sentences
    argv = [a for a in run_args(tiny, crashed, train_steps=3, phase1_steps=1, tokenizer_vocab_size=300,
                                tokenizer_train_sentences=10, resume="latest")]
    i = argv.index("--tokenizer")
    del argv[i:i + 2]
    assert run_inprocess(argv)["resumed"] is False
    assert len(AutoTokenizer.from_pretrained(crashed / "tokenizer")) < len(tok)


def test_a_given_tokenizer_is_used_as_it_is_and_a_vocabulary_size_set_beside_it_is_named_unused(tiny, tmp_path):
    """`--tokenizer X --tokenizer-vocab-size 8000` used to train with X's vocabulary in silence: the size is
    named as unused. Left at its default, or equal to X's size (a config file's), nothing is said."""
    from training.config import PostTrainConfig
    from training.run_setup import get_tokenizer

    tok_dir = tiny["bert"][1]
    size = len(get_tokenizer(PostTrainConfig(tokenizer=str(tok_dir)), tmp_path, None, "bert", None, print, None)[0])
    for vocab_size, named in ((8000, True), (PostTrainConfig.tokenizer_vocab_size, False), (size, False)):
        said = []
        tokenizer, ref = get_tokenizer(PostTrainConfig(tokenizer=str(tok_dir), tokenizer_vocab_size=vocab_size),
                                       tmp_path, None, "bert", None, said.append, None)
        assert len(tokenizer) == size and ref == str(tok_dir)
        assert bool(said) is named, (vocab_size, said)
        if named:
            assert said == [f"note: tokenizer_vocab_size 8000 is not used: the tokenizer {tok_dir} is used as it is, "
                            f"with {size:,} tokens (leave out tokenizer to train one of that size on the train split)"]


def test_max_train_sentences_is_a_seeded_sample_not_the_first_sentences(tmp_path):
    """A prepared corpus keeps its documents' order: the first N train sentences would be one topic. The
    cut is a sample, the same in every run."""
    from training.config import config_from_dict
    from training.run_setup import load_splits

    class Single:
        def main_process_first(self):
            return contextlib.nullcontext()

    data = tmp_path / "prepared"
    data.mkdir()
    topics = ["축구 경기 결과", "요리 재료 손질", "주식 시장 동향", "여행 숙소 예약"]
    (data / "train.txt").write_text("".join(f"{t} {i}\n" for t in topics for i in range(50)), encoding="utf-8")
    for split in ("valid", "test"):
        (data / f"{split}.txt").write_text("오늘 날씨 맑음\n" * 5, encoding="utf-8")
    config = config_from_dict({"data": str(data), "max_train_sentences": 20, "cache_dir": str(tmp_path / "cache")})
    texts = load_splits(config, str(data), Single())["train"]["text"]
    assert len(texts) == 20 and len(set(texts)) == 20
    assert {t.rsplit(" ", 1)[0] for t in texts} == set(topics)  # every part of the corpus, not the first topic
    assert load_splits(config, str(data), Single())["train"]["text"] == texts


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
