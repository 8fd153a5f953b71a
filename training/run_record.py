"""The record of a post-training run: `training_summary.json`, next to the saved model.

`training/post_train.py` writes it (`RunRecord.write`); the model card and the push (`cards/`),
fine-tuning (`training/finetune.py`, which copies it into the folders it saves) and the study
(`training/study.py`) read it (`RunRecord.read`, or `RunRecord.read_if_present` where a folder
without one is fine, such as a conversion nobody has trained). This module imports nothing else of
the project, so the cards, which the training code uses, can read it too. The file carries `schema_version`; a record of another version
is refused in one line instead of being half understood. Every field may be missing when read:
readers leave out what a record does not hold, never invent it.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenization.errors import UserError
from tokenization.folders import write_text_atomic

SUMMARY_FILE = "training_summary.json"
LOSS_LOG = "losses.jsonl"  # one JSON line per logged step, written by post-training
CURVE_FILE = "learning_curve.json"  # probes of a run's checkpoints (training/learning_curve.py)
RESULTS_FILE = "results.json"  # what fine-tuning reports (training/finetune.py), beside a fine-tuned model
# The layout below. Folders written before the file carried a version hold this same layout and no
# `schema_version` field, so a record without the field is read as version 1.
SCHEMA_VERSION = 1


class RecordError(UserError):
    """A training_summary.json that cannot be read: missing, not JSON, another schema version, or a
    field this version does not have. The message is one line naming the file and what to do."""


@dataclass
class DataRecord:
    """What post-training read."""

    spec: str | None = None  # the data as given: prepared-corpus folder, files, Hub dataset id or "konlpy"
    train: str | None = None  # "<spec>:train", and the same for valid and test
    valid: str | None = None
    test: str | None = None
    train_sentences: int | None = None  # texts read (sentences of a prepared corpus)
    train_pieces: int | None = None  # what they make once texts longer than a row are cut into row-sized pieces
    train_rows: int | None = None  # packed rows of max_seq_length tokens
    train_tokens: int | None = None
    valid_sentences: int | None = None
    test_sentences: int | None = None
    datasets: list[str] | None = None  # Hub datasets the corpus came from (recorded in uploaded copies)


@dataclass
class PhaseRecord:
    """One phase as it ran."""

    name: str | None = None
    steps: int | None = None  # optimiser steps run (fewer than planned when it stopped early)
    planned_steps: int | None = None
    trainable_groups: list[str] = field(default_factory=list)  # parameter groups that trained
    learning_rate: float | None = None
    warmup_steps: int | None = None
    schedule: str | None = None
    stopped_early: bool | None = None
    end_step: int | None = None  # global step at the end of the phase
    valid_loss: float | None = None  # at the end of the phase
    trainable_parameters: int | None = None


@dataclass
class BatchRecord:
    global_batch_size: int | None = None  # rows per optimiser step, all processes together
    per_device_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    max_seq_length: int | None = None
    packing: bool | None = None


@dataclass
class RunRecord:
    """Everything a post-training run reports about itself (DEVELOPERS.md, "Files exchanged between stages")."""

    method: str | None = None  # training/methods.py
    source_model: str | None = None  # the English source as configured ("package:NAME (path)" for packages)
    tokenizer: str | None = None
    data: DataRecord | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    total_steps: int | None = None
    tokens_seen: int | None = None
    wall_time_s: float | None = None
    train_time_s: float | None = None  # optimiser steps with their batches (no tokenising, evaluation, saving)
    tokens_per_s: float | None = None
    hardware: dict[str, Any] | None = None  # kind of device, process count, mixed precision, versions, speed settings
    batch: BatchRecord | None = None
    valid_metrics: dict[str, float] = field(default_factory=dict)  # training/intrinsic.py metrics
    final_metrics: dict[str, float] = field(default_factory=dict)  # on `final_metrics_split`
    final_metrics_split: str | None = None  # "test", or "valid" without a test split
    frequency_baseline: dict[str, float] = field(default_factory=dict)  # on the same split and masks, context ignored
    valid_history: list[dict[str, Any]] = field(default_factory=list)  # every evaluation on valid
    resumed: bool | None = None
    source_has_mlm_head: bool | None = None  # False: the head transform was initialised fresh, not reused
    # settings changed on resume, where allowed (fields that cannot change the weights, training/config.py
    # RESUME_FREE): [{"step": N, "changed": {field: [old, new]}}], the change applying from step N + 1
    setting_changes: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None  # the PostTrainConfig of the run

    # -- JSON --------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict, source: str = SUMMARY_FILE) -> RunRecord:
        """A record from the file's JSON object; RecordError for another schema version or an unknown field."""
        if not isinstance(raw, dict):
            raise RecordError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        raw = dict(raw)
        version = raw.pop("schema_version", 1)
        if version != SCHEMA_VERSION:
            raise RecordError(f"{source}: a post-training record of schema version {version!r}; this code reads "
                              f"version {SCHEMA_VERSION} (use the xpt version that wrote it, or post-train again)")
        nested = {"data": DataRecord, "batch": BatchRecord}
        values = {}
        for key, value in raw.items():
            if key == "phases":
                value = [_build(PhaseRecord, item, f"{source}: phases[{i}]") for i, item in enumerate(value or [])]
            elif key in nested and value is not None:
                value = _build(nested[key], value, f"{source}: {key}")
            values[key] = value
        return _build(cls, values, source)

    def to_dict(self) -> dict:
        """The file's JSON object: `schema_version` first, then every field the run recorded (None and empty
        fields are left out)."""
        return {"schema_version": SCHEMA_VERSION, **_recorded_fields(self)}

    # -- files -------------------------------------------------------------------------------
    @classmethod
    def read(cls, folder: str | Path) -> RunRecord:
        """The record of a post-trained folder; RecordError when it has none or it cannot be read."""
        path = Path(folder) / SUMMARY_FILE
        if not path.is_file():
            raise RecordError(f"{folder} has no {SUMMARY_FILE}: not a post-trained model folder "
                              "(post-train it with training/post_train.py)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RecordError(f"{path} cannot be read ({type(error).__name__}: {error})") from None
        return cls.from_dict(raw, str(path))

    @classmethod
    def read_if_present(cls, folder: str | Path) -> RunRecord | None:
        """`read`, or None for a folder without a record (a conversion nobody trained, a stock model)."""
        return cls.read(folder) if (Path(folder) / SUMMARY_FILE).is_file() else None

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / SUMMARY_FILE
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, ensure_ascii=False))
        return path


def _build(cls, values, where: str):
    if not isinstance(values, dict):
        raise RecordError(f"{where}: expected a JSON object, got {values!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise RecordError(f"{where}: field {unknown[0]!r} is not part of schema version {SCHEMA_VERSION} "
                          f"(known: {', '.join(sorted(known))})")
    return cls(**values)


def _recorded_fields(record) -> dict:
    """The fields of a record dataclass that hold something (nested records likewise); free-form
    dicts such as `config` are kept as they are."""
    out = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if dataclasses.is_dataclass(value):
            value = _recorded_fields(value)
        elif isinstance(value, list):
            value = [_recorded_fields(v) if dataclasses.is_dataclass(v) else v for v in value]
        if value is not None and value != [] and value != {}:
            out[f.name] = value
    return out
