"""training/learning_curve.py on real tiny post-training runs: what the command says about the points it has."""
from __future__ import annotations

import random

import pytest

from tests.post_train_helpers import WORDS, run_args, run_inprocess
from tests.test_finetune import one_thread  # noqa: F401 - autouse: tiny models gain nothing from threads
from tests.test_finetune import write_tsv
from training import learning_curve as lc

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


def test_a_run_that_kept_no_checkpoints_is_one_point_and_says_why(tiny, tmp_path, capsys):
    task_dir = tmp_path / "toy"
    rows = [[i, " ".join(random.Random(i).sample(WORDS, 4)), i % 2] for i in range(40)]
    for split, part in (("train", rows[:28]), ("dev", rows[28:])):
        write_tsv(task_dir / f"{split}.tsv", ["id", "document", "label"], part)
    run = tmp_path / "run"
    run_inprocess(run_args(tiny, run, train_steps=4, phase1_steps=2, save_steps=2, keep_checkpoints="false"))
    capsys.readouterr()
    assert lc.main([str(run), "--task", f"nsmc={task_dir}"]) == 0
    out = capsys.readouterr().out
    assert [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| 4 ")] == ["4"]
    assert out.strip().splitlines()[-1] == (
        f"note: only the finished model is in this curve: {run} kept no checkpoints (keep_checkpoints false); "
        "post-train with `--keep-checkpoints true` to get a curve")
    kept = tmp_path / "kept"
    run_inprocess(run_args(tiny, kept, train_steps=4, phase1_steps=2, save_steps=2))  # keep_checkpoints true
    capsys.readouterr()
    assert lc.main([str(kept), "--task", f"nsmc={task_dir}"]) == 0
    out = capsys.readouterr().out
    assert "| 2 |" in out and "note:" not in out


def test_a_fine_tuned_folder_or_an_unknown_task_is_refused_in_the_curves_own_terms(tiny, tmp_path):
    """A fine-tuned model folder carries its post-training run's record, but it is no run to draw a curve of; an
    unknown task lists the registered ones without naming options this command does not have."""
    task_dir = tmp_path / "toy"
    task_dir.mkdir()
    run = tmp_path / "run"
    run_inprocess(run_args(tiny, run, train_steps=2, phase1_steps=1))
    with pytest.raises(lc.TaskDataError, match="unknown task 'nsmcc'; registered tasks: .*klue-ner.*[a-z]$") as refused:
        lc.learning_curve(run, {"nsmcc": str(task_dir)}, None, 32)
    assert "--task-spec" not in str(refused.value)
    (run / "results.json").write_text("{}", encoding="utf-8")
    with pytest.raises(lc.TaskDataError, match=rf"{run} is a fine-tuned model \(it holds results.json\), not a "):
        lc.learning_curve(run, {"nsmc": str(task_dir)}, None, 32)
