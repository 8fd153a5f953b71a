"""Offline checks of a post-training config (`validate_config`, once per run, before anything is
downloaded or trained), the rule for which settings a resumed run may change, and whether the data is
on this machine. Errors are `ConfigError`s naming the field.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from tokenization.errors import ConfigError
from training.config import (
    ATTENTION,
    AUTO_BOOL,
    DROPOUT_MASKS,
    MIXED_PRECISION,
    SCHEDULES,
    PhaseConfig,
    PostTrainConfig,
)
from training.inputs import (check_json_files, check_source_and_tokenizer, looks_like_hub_id, missing_path,
                             resolve_local, uncached)
from training.methods import ALL_GROUPS




# Fields a resumed run may change: they steer the process (where, whether to resume), what is logged
# or kept, and how batches are fetched, never the numbers. Every other field shapes the weights (data
# order, batches, schedule, model, seed, precision) or the recorded metrics, and must match the run's.
RUN_CONTROL = ("output_dir", "resume", "overwrite_output_dir", "dry_run")
RESUME_FREE = RUN_CONTROL + ("logging_steps", "save_steps", "save_total_limit", "keep_checkpoints", "report_to",
                             "push_to_hub", "hub_private", "hub_license", "num_workers", "cache_dir",
                             "retain_cpu_memory")


PATH_FIELDS = ("source", "tokenizer", "data", "data_fallback")  # settings that name what a run reads


def resolved_paths(settings: dict) -> dict:
    """`settings` with each of PATH_FIELDS that is a local path here as the absolute path it resolves to: the
    same folder spelled otherwise (`../tok` for `/abs/tok`) is the same setting. Hub ids, "konlpy" and
    "package:NAME" stay as they are."""
    out = dict(settings)
    for key in PATH_FIELDS:
        value = out.get(key)
        if isinstance(value, str) and not value.startswith("package:") and (local := resolve_local(value)) is not None:
            out[key] = str(local.resolve())
    return out


def resume_changes(saved: dict, now: dict) -> tuple[dict, dict]:
    """(shaping, free): the fields whose value differs between the settings a run was started with
    (`saved`, `PostTrainConfig.to_dict()`) and the settings it is resumed with, each as {field: [old, new]}.
    `eval_steps` is free unless early stopping reads the evaluations. A field the saved settings lack was
    added to the config since the checkpoint was written: that run had the field's default. `now` may be
    `PostTrainConfig.to_dict()` as it is: compared as a checkpoint saves it (tuples as lists). Folders are
    compared as the paths they resolve to (`resolved_paths`), as the output folder is."""
    now, defaults = json.loads(json.dumps(now)), json.loads(json.dumps(PostTrainConfig().to_dict()))
    saved = {**{k: defaults[k] for k in now.keys() - saved.keys() if k in defaults}, **saved}
    saved, now = resolved_paths(saved), resolved_paths(now)
    free_fields = set(RESUME_FREE)
    patience = [settings.get("early_stopping_patience") for settings in
                (saved, now, *(saved.get("phases") or []), *(now.get("phases") or []))]
    if all(p is None for p in patience):
        free_fields.add("eval_steps")
    changed = {k: [saved.get(k), now.get(k)] for k in sorted(set(saved) | set(now))
               if k not in RUN_CONTROL and saved.get(k) != now.get(k)}
    shaping = {k: v for k, v in changed.items() if k not in free_fields}
    return shaping, {k: v for k, v in changed.items() if k in free_fields}


def listed_changes(changes: dict) -> str:
    """{field: [old, new]} as one phrase for a message: "seed 1 -> 2, data 'a' -> 'b'"."""
    return ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())


def refuse_changed_resume(shaping: dict, checkpoint) -> None:
    """One line naming every changed field with its old and new value, and the ways forward."""
    if shaping:
        listed = listed_changes(shaping)
        raise ConfigError("resume", f"{checkpoint} was trained with other settings: {listed}. A resumed run "
                          "continues the saved schedule, batches and seed, so the change would not take effect or "
                          "would mix two runs: resume with the run's own settings (drop these options, or give the saved "
                          "values where a default changed), or start a new run in another --output-dir")


def validate_config(c: PostTrainConfig, world_size: int | None = None, check_data: bool = True) -> None:
    for name, value in dataclasses.asdict(c).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(name, f"{value} is not a finite number")
    method = c.method_entry()
    if c.push_to_hub is not None:
        _validate_push(c)
    if c.embedding_init not in ("random", "overlap", "fvt"):
        raise ConfigError("embedding_init", f"{c.embedding_init!r}: use 'random', 'overlap' or 'fvt'")
    if c.output_bias_init not in ("zeros", "unigram"):
        raise ConfigError("output_bias_init", f"{c.output_bias_init!r}: use 'zeros' or 'unigram'")
    if c.itl_init not in ("random", "copy"):
        raise ConfigError("itl_init", f"{c.itl_init!r}: use 'random' or 'copy'")
    if method.scratch and c.embedding_init != "random":
        raise ConfigError("embedding_init", f"{c.embedding_init!r} copies from the English model, which method "
                                            "'scratch' does not use: leave embedding_init random")
    if c.itl_init != "random" and (method.scratch or not method.itl):
        raise ConfigError("itl_init", f"{c.itl_init!r}, but method {c.method!r} has no ITLs copied from the English "
                                      "model: leave itl_init random")
    if method.adapters and c.adapter_size <= 0:
        raise ConfigError("adapter_size", f"must be > 0 for method {c.method!r}")
    if c.mixed_precision not in MIXED_PRECISION:
        raise ConfigError("mixed_precision", f"{c.mixed_precision!r} is not one of {MIXED_PRECISION}")
    for name in ("compile", "fused_adamw", "static_masked_head", "retain_cpu_memory"):
        if getattr(c, name) not in AUTO_BOOL:
            raise ConfigError(name, f"{getattr(c, name)!r} is not one of auto, true, false")
    if c.attn_implementation not in ATTENTION:
        raise ConfigError("attn_implementation", f"{c.attn_implementation!r} is not one of {ATTENTION}")
    if c.dropout_mask not in DROPOUT_MASKS:
        raise ConfigError("dropout_mask", f"{c.dropout_mask!r} is not one of {DROPOUT_MASKS}")
    if c.lr_schedule not in SCHEDULES:
        raise ConfigError("lr_schedule", f"{c.lr_schedule!r} is not one of {SCHEDULES}")
    for name in ("train_steps", "global_batch_size", "max_seq_length", "eval_steps", "save_steps", "logging_steps",
                 "save_total_limit", "tokenizer_vocab_size", "tokenizer_train_sentences", "learning_rate",
                 "adam_epsilon"):
        if getattr(c, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(c, name)}")
    if c.num_workers != "auto" and not (isinstance(c.num_workers, int) and c.num_workers >= 0):
        raise ConfigError("num_workers", f"{c.num_workers!r}: use auto or a number of processes >= 0")
    for name in ("warmup_steps", "weight_decay", "max_grad_norm", "valid_size", "test_size"):
        if getattr(c, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(c, name)}")
    for name in ("per_device_batch_size", "gradient_accumulation_steps", "max_steps", "max_train_sentences",
                 "max_eval_sentences", "early_stopping_patience", "phase1_learning_rate"):
        if getattr(c, name) is not None and getattr(c, name) <= 0:
            raise ConfigError(name, f"must be > 0 or null, got {getattr(c, name)}")
    for name in ("adam_beta1", "adam_beta2", "post_training_dropout"):
        if getattr(c, name) is not None and not 0 <= getattr(c, name) < 1:
            raise ConfigError(name, f"must be in [0, 1), got {getattr(c, name)}")
    if c.max_seq_length < 8:
        raise ConfigError("max_seq_length", f"must be at least 8 (a row holds [CLS], [SEP] and some text), got {c.max_seq_length}")
    if not 0 < c.mlm_probability < 1:
        raise ConfigError("mlm_probability", f"must be in (0, 1), got {c.mlm_probability}")
    for name in ("mask_replace_prob", "random_replace_prob", "wop_weight"):
        if getattr(c, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(c, name)}")
    if c.mask_replace_prob + c.random_replace_prob > 1:
        raise ConfigError("mask_replace_prob", "mask_replace_prob and random_replace_prob must sum to <= 1, got "
                                               f"{c.mask_replace_prob} + {c.random_replace_prob}")
    for name in ("seed", "eval_seed"):
        if not 0 <= getattr(c, name) < 2**32:
            raise ConfigError(name, f"must be in [0, 2**32), got {getattr(c, name)}")
    if not 0 <= c.min_script_share <= 1:
        raise ConfigError("min_script_share", f"must be in [0, 1], got {c.min_script_share}")
    if c.min_script_share > 0:
        from tokenization.korean_text import script_filter

        try:
            script_filter(c.language)
        except ValueError:
            raise ConfigError("language", f"no script is known for {c.language!r}: give a code such as ko, ja, ru, or "
                              "set min_script_share 0 to train without the script check") from None
    if not 0 <= c.wop_probability <= 1:
        raise ConfigError("wop_probability", f"must be in [0, 1], got {c.wop_probability}")
    if not 0 < c.wop_fraction <= 1:
        raise ConfigError("wop_fraction", f"must be in (0, 1], got {c.wop_fraction}")
    if not c.phases and method.phase1_groups is not None:
        if c.phase1_steps <= 0:
            raise ConfigError("phase1_steps", f"must be > 0, got {c.phase1_steps}")
        if c.phase1_steps >= c.train_steps:
            raise ConfigError("phase1_steps", f"{c.phase1_steps} leaves no steps for phase2 of train_steps={c.train_steps}; "
                              "lower phase1_steps or raise train_steps")
    if c.phases:  # explicit phases carry their own schedule: a top-level one set beside them would be ignored
        defaults = {f.name: f.default for f in dataclasses.fields(c)}
        ignored = [name for name in ("train_steps", "phase1_steps", "learning_rate", "phase1_learning_rate",
                                     "warmup_steps", "lr_schedule", "early_stopping_patience")
                   if getattr(c, name) != defaults[name]]
        if ignored:
            raise ConfigError(ignored[0], f"{', '.join(ignored)} set beside `phases`, which define the schedule: "
                              "set steps, learning_rate, warmup_steps, schedule and early_stopping_patience in each phase")
    phases = c.resolved_phases()
    if c.max_steps is not None and c.max_steps < len(phases):  # each phase keeps a step: fewer would not be obeyed
        raise ConfigError("max_steps", f"{c.max_steps} is fewer than the {len(phases)} phases "
                          f"({', '.join(p.name for p in phases)}), each of which runs at least one step; "
                          f"use max_steps {len(phases)} or more")
    for i, phase in enumerate(phases):
        _validate_phase(i, phase)
    if not c.data:
        raise ConfigError("data", "no training data given")
    if check_data:
        check_data_present(c)
    if c.resume not in (None, "latest") and not Path(c.resume).is_dir():
        raise ConfigError("resume", f"{c.resume!r} is neither 'latest' nor a checkpoint folder")
    if check_data:
        data = data_to_read(c)
        if data != "konlpy" and (unloadable := uncached("data", data, c.datasets_cache_dir(), c.streaming)):
            raise unloadable  # at once, not after the Hub client's retries
        local_tokenizer = resolve_local(c.tokenizer) if c.tokenizer else None
        if local_tokenizer is not None and local_tokenizer.is_dir():
            check_json_files(local_tokenizer, "tokenizer", "train it again (xpt-train-tokenizer) "
                             "or copy it again, and check the path")
        local_source = resolve_local(c.source) if not c.source.startswith("package:") else None
        if local_source is not None and local_source.is_dir():
            check_json_files(local_source, "source", "download or copy the model again, and check the path")
    if world_size is not None:
        c.batch_layout(world_size)
    else:
        c.batch_layout(1)
    _validate_paths(c, present=check_data)


def _validate_push(c: PostTrainConfig) -> None:
    """The repo id as the Hub validates it, a licence for the card and (for a run, not a dry run) a token,
    before any training (the checks the push makes at the end; `training.publishing`)."""
    from training.publishing import publisher

    hub = publisher()
    local = resolve_local(c.source) if not c.source.startswith("package:") else None
    try:
        hub.check(c.push_to_hub, license=c.hub_license, method=c.method, sources=[c.source, str(local) if local else None],
                  fix="set hub_license (`--hub-license ID`, or `hub_license: ID` in the config)", needs_token=not c.dry_run)
    except hub.Error as error:
        field = "hub_license" if error.field == "license" else "push_to_hub"
        raise ConfigError(field, str(error)) from None


def data_present(data: str) -> bool:
    """`data` can be read here or fetched: "konlpy", an existing local path, or a Hub dataset id (not a mistyped
    path, `training.inputs.missing_path`)."""
    return data == "konlpy" or resolve_local(data) is not None or looks_like_hub_id(data)


def data_to_read(c: PostTrainConfig) -> str:
    """`data`, or `data_fallback` when `data` is not present and a fallback is set."""
    return c.data if data_present(c.data) or not c.data_fallback else c.data_fallback


def missing_data(c: PostTrainConfig) -> bool:
    """Neither `data` nor its fallback is present on this machine."""
    return not data_present(data_to_read(c))


def check_data_present(c: PostTrainConfig) -> None:
    """The data (or its fallback) is here or can be fetched; else one line naming the path (a run, and a dry run)."""
    if missing_data(c):
        raise ConfigError("data", missing_path(c.data) or f"{c.data!r} is neither an existing path, 'konlpy', nor a Hub "
                          "dataset id")


def _validate_phase(i: int, phase: PhaseConfig) -> None:
    where = f"phases[{i}]"
    if phase.steps <= 0:
        raise ConfigError(f"{where}.steps", f"phase {phase.name!r} has {phase.steps} steps; must be > 0")
    groups = phase.trainable_groups
    if groups != ALL_GROUPS:
        if isinstance(groups, str) or not groups:
            raise ConfigError(f"{where}.trainable_groups", f"{groups!r}: give a list of group names or 'all'")
        from modeling_xpt import PARAMETER_GROUPS  # loads torch: not when the config is only parsed (--help)

        unknown = [g for g in groups if g not in PARAMETER_GROUPS]
        if unknown:
            raise ConfigError(f"{where}.trainable_groups", f"unknown parameter group(s) {unknown} in phase "
                              f"{phase.name!r}; valid groups: {list(PARAMETER_GROUPS)}")
    if not phase.learning_rate > 0 or not math.isfinite(phase.learning_rate):
        raise ConfigError(f"{where}.learning_rate", f"must be a finite number > 0, got {phase.learning_rate}")
    if phase.schedule not in SCHEDULES:
        raise ConfigError(f"{where}.schedule", f"{phase.schedule!r} is not one of {SCHEDULES}")
    if not 0 <= phase.warmup_steps <= phase.steps:
        raise ConfigError(f"{where}.warmup_steps", f"{phase.warmup_steps} must be in [0, steps={phase.steps}]")
    if phase.early_stopping_patience is not None and phase.early_stopping_patience <= 0:
        raise ConfigError(f"{where}.early_stopping_patience", f"must be > 0 or null, got {phase.early_stopping_patience}")


def _validate_paths(c: PostTrainConfig, present: bool) -> None:
    source = check_source_and_tokenizer(c.source, c.tokenizer, present=present)
    _refuse_output_over_inputs(c, source)


def check_output_is_a_folder(c: PostTrainConfig) -> None:
    """`output_dir` can be a folder: neither it nor a parent of it is a file."""
    from tokenization.folders import file_in_the_way

    if blocked := file_in_the_way(c.output_dir):
        raise ConfigError("output_dir", f"{c.output_dir} {blocked}; give a folder")


def _refuse_output_over_inputs(c: PostTrainConfig, source: str) -> None:
    """The output folder must not be, contain or lie inside a folder the run reads (the English source,
    the tokenizer, the data): saving would overwrite or mix with them."""
    from tokenization.folders import overlapping

    check_output_is_a_folder(c)
    for name, value in (("source", source), ("tokenizer", c.tokenizer), ("data", c.data)):
        local = resolve_local(value) if value else None
        if local is not None and overlapping(c.output_dir, local):
            raise ConfigError("output_dir", f"{c.output_dir} overlaps the {name} folder {local}: the run would "
                              f"write into what it reads; choose another output folder")
