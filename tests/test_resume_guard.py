"""Resuming post-training with changed settings: refused where the change would shape the weights,
recorded where it cannot; damaged tokenizer and source files named in one line."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.post_train_helpers import losses, run_args, run_killed_after, run_subprocess
from training import post_train
from training.tasks import get_task

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test

COMMON = dict(train_steps=8, phase1_steps=4, save_steps=2, save_total_limit=10)


@pytest.fixture(scope="module")
def killed(tiny, tmp_path_factory):
    """A run killed after step 3 (one checkpoint, at step 2: a resumed run crosses the phase boundary at
    step 4), and the same run uninterrupted."""
    root = tmp_path_factory.mktemp("resume-guard")
    full, cut = root / "full", root / "cut"
    run_subprocess(run_args(tiny, full, **COMMON))
    run_killed_after(3, run_args(tiny, cut, **COMMON))
    return full, cut


# field class -> a change on resume, and the text naming it in the refusal
REFUSED = {
    "schedule": ({"learning_rate": "1e-4"}, "learning_rate 0.003 -> 0.0001"),
    "schedule-length": ({"train_steps": "12"}, "train_steps 8 -> 12"),
    "batch": ({"global_batch_size": "4"}, "global_batch_size 8 -> 4"),
    "data": ({"max_train_sentences": "100"}, "max_train_sentences None -> 100"),
    "model": ({"method": "xpt-sp"}, "method 'xpt' -> 'xpt-sp'"),
    "seed": ({"seed": "7"}, "seed 42 -> 7"),
    "precision": ({"mixed_precision": "bf16"}, "mixed_precision 'auto' -> 'bf16'"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_resume_that_changes_the_run_is_refused_in_one_line(case, killed, tiny, tmp_path):
    _, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    change, named = REFUSED[case]
    args = run_args(tiny, folder, **{**COMMON, **change}) + ["--resume", "latest"]
    proc = run_subprocess(args, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and named in lines[0] and "checkpoint-2" in lines[0] and "--output-dir" in lines[0]
    assert not (folder / "training_summary.json").exists()
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["checkpoint-2"]


def test_a_resume_with_another_process_count_is_refused_in_one_line(killed, tiny, tmp_path):
    _, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    state_file = folder / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["num_processes"] == 1  # recorded by the run
    state_file.write_text(json.dumps({**state, "num_processes": 2}))  # as a two-process launch saves it,
    shutil.copy(state_file.parent / "random_states_0.pkl", state_file.parent / "random_states_1.pkl")  # with both RNGs
    proc = run_subprocess(run_args(tiny, folder, **COMMON) + ["--resume", "latest"], check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "trained by 2 process(es), this run has 1" in lines[0] and "--num_processes 2" in lines[0]


def test_a_resume_where_auto_precision_resolves_otherwise_is_said_and_recorded(killed, tiny, tmp_path):
    """`mixed_precision: auto` is bf16 on a CPU with native bf16 and fp32 elsewhere: a run moved between such
    machines resumes (no explicit setting could match the saved `auto`), says so, and records the change."""
    _, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    state_file = folder / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    here = state["precision"]  # recorded by the run: what auto resolved to on this machine
    other = "no" if here == "bf16" else "bf16"
    state_file.write_text(json.dumps({**state, "precision": other}))  # as the other kind of machine saves it
    proc = run_subprocess(run_args(tiny, folder, **COMMON) + ["--resume", "latest"])
    assert f"mixed_precision 'auto' is {here!r} on this machine, {other!r} where" in proc.stdout + proc.stderr
    summary = json.loads((folder / "training_summary.json").read_text())
    assert summary["setting_changes"] == [{"step": 2, "changed": {"precision": [other, here]}}]


@pytest.mark.parametrize("edit", ["append", "touch"])
def test_a_resume_reads_the_token_rows_it_started_with(edit, tiny, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(tiny["corpus"], corpus)
    args = run_args(tiny, tmp_path / "run", data=corpus, cache_dir=tmp_path / "cache", **COMMON)
    run_killed_after(3, args)
    part = corpus / "part-1.txt"
    if edit == "append":  # more text in the corpus since the crash: other rows in another order
        part.write_text(part.read_text(encoding="utf-8") + "오늘 날씨 맑다\n" * 40, encoding="utf-8")
    else:  # the same text saved again: the rows are built anew, and are the same
        os.utime(part, (part.stat().st_atime, part.stat().st_mtime + 100))
    proc = run_subprocess(args + ["--resume", "latest"], check=False)
    if edit == "touch":
        assert proc.returncode == 0, proc.stderr[-2000:]
        return
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # after the rows' progress bars
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
    assert "checkpoint-2 was trained on other token rows" in errors[0] and "the data or the tokenizer changed" in errors[0]
    assert not (tmp_path / "run" / "training_summary.json").exists()


def test_a_resume_with_other_valid_text_is_refused(tiny, tmp_path):
    """Early stopping and the final metrics read the valid and test rows: a resume on other held-out text
    would compare losses across two sets, so it is refused naming the split; the same files resume."""
    lines = [line for part in sorted(tiny["corpus"].glob("part-*.txt")) for line in part.read_text().splitlines()]
    splits = tmp_path / "splits"
    splits.mkdir()
    for name, chunk in (("train", lines[:-80]), ("valid", lines[-80:-40]), ("test", lines[-40:])):
        (splits / f"{name}.txt").write_text("\n".join(chunk) + "\n", encoding="utf-8")
    args = run_args(tiny, tmp_path / "run", data=splits, cache_dir=tmp_path / "cache", **COMMON)
    run_killed_after(3, args)
    shutil.copy(splits / "test.txt", splits / "valid.txt")
    proc = run_subprocess(args + ["--resume", "latest"], check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
    assert "checkpoint-2 was evaluated on other valid rows" in errors[0]
    (splits / "valid.txt").write_text("\n".join(lines[-80:-40]) + "\n", encoding="utf-8")
    run_subprocess(args + ["--resume", "latest"])
    assert (tmp_path / "run" / "training_summary.json").is_file()


def test_a_harmless_change_resumes_exactly_and_is_recorded(killed, tiny, tmp_path):
    full, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    # a subprocess with one thread, as the runs it is compared with: bit-for-bit equality needs the same threads
    proc = run_subprocess(run_args(tiny, folder, **{**COMMON, "save_steps": 3, "save_total_limit": 4})
                          + ["--resume", "latest"])
    summary = json.loads((folder / "training_summary.json").read_text())
    assert losses(folder) == losses(full)  # checkpoint cadence changes no number
    assert summary["setting_changes"] == [{"step": 2, "changed": {"save_steps": [2, 3], "save_total_limit": [10, 4]}}]
    assert summary["config"]["save_steps"] == 3
    assert "resumed with changed settings that do not change the weights" in proc.stdout + proc.stderr
    assert "setting_changes" not in json.loads((full / "training_summary.json").read_text())


def test_a_resume_with_the_same_folders_spelled_otherwise_resumes_exactly(killed, tiny, tmp_path):
    """The tokenizer and data given relative to another working folder (`../tok` for `/abs/tok`) are the same
    folders: compared resolved, as the output folder is, not refused as a changed setting."""
    from tests.conftest import REPO_ROOT

    full, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    source, tokenizer = tiny["bert"]
    spelled = {"tokenizer": os.path.relpath(tokenizer, REPO_ROOT), "data": os.path.relpath(tiny["corpus"], REPO_ROOT),
               "source": f"{source.parent}/./{source.name}"}
    assert all(not Path(value).is_absolute() or "/./" in value for value in spelled.values())
    run_subprocess(run_args(tiny, folder, **{**COMMON, **spelled}) + ["--resume", "latest"])  # from REPO_ROOT
    assert losses(folder) == losses(full)
    assert "setting_changes" not in json.loads((folder / "training_summary.json").read_text())


def test_eval_cadence_is_free_unless_early_stopping_reads_it(killed, tiny, tmp_path):
    _, cut = killed
    folder = tmp_path / "cut"
    shutil.copytree(cut, folder)
    proc = run_subprocess(run_args(tiny, folder, **{**COMMON, "eval_steps": 5, "early_stopping_patience": 3})
                          + ["--resume", "latest"], check=False)
    assert proc.returncode == 2 and "eval_steps 3 -> 5" in proc.stderr and "early_stopping_patience" in proc.stderr


@pytest.mark.parametrize("role", ["tokenizer", "source"])
def test_a_damaged_json_file_is_named_in_one_line_and_nothing_is_written(role, tiny, tmp_path, capsys):
    source, tokenizer = tiny["bert"]
    folder = tmp_path / role
    shutil.copytree(tokenizer if role == "tokenizer" else source, folder)
    damaged = folder / ("tokenizer.json" if role == "tokenizer" else "config.json")
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # cut short, as by a failed copy
    out = tmp_path / "out"
    assert post_train.main(run_args(tiny, out, **{role: folder})) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and str(damaged) in err[0] and "damaged or cut short" in err[0]
    assert not out.exists()


def test_a_finetuning_folder_reused_with_other_options_is_refused(tmp_path, capsys, monkeypatch):
    """Fine-tuning has no resume, but a folder holding another run's results would describe two runs:
    other options are refused in one line, the same options (a relative --model among them) run again,
    --overwrite-output-dir replaces."""
    from tests.test_finetune import stock_model_dir, toy_sentiment_dir
    from training import finetune

    stock_model_dir(tmp_path / "bert")
    data, out = toy_sentiment_dir(tmp_path / "toy"), tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    base = ["--model", "bert", "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out),
            "--no-progress", "--epochs", "1", "--batch-size", "16", "--save-model", "none"]
    assert finetune.main(base + ["--seeds", "2"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["seed_0.json", "seed_1.json"]
    capsys.readouterr()
    assert finetune.main(base + ["--seeds", "1", "--learning-rate", "1e-4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "learning_rate 5e-05 -> 0.0001" in err and "seeds [0, 1] -> [0]" in err
    assert finetune.main(base + ["--seeds", "2"]) == 0  # the same options: runs again
    assert finetune.main(base + ["--seeds", "1", "--overwrite-output-dir"]) == 0
    assert json.loads((out / "results.json").read_text())["seeds"] == [0]
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["seed_0.json"]  # no seed of the earlier run left


def test_a_bi_encoder_folder_from_before_the_sts_loss_option_counts_as_mse(tmp_path):
    """Results written before `--sts-loss` existed came from the MSE bi-encoder: reusing the folder with
    the CoSENT default is refused as another option, with --sts-loss mse it is the same run."""
    from training import finetune_cli
    from training.tasks import TaskDataError

    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"task": "korsts", "seeds": [0],
                                                  "hyperparameters": {"pair_encoding": "bi"}}))
    argv = ["--model", "m", "--task", "korsts", "--output-dir", str(out), "--pair-encoding", "bi", "--seeds", "1"]
    korsts = get_task("korsts")
    with pytest.raises(TaskDataError, match="sts_loss 'mse' -> 'cosent'"):
        finetune_cli.check_reused_folder(finetune_cli.build_parser().parse_args(argv), [0], korsts)
    finetune_cli.check_reused_folder(finetune_cli.build_parser().parse_args(argv + ["--sts-loss", "mse"]), [0], korsts)


def test_a_fine_tuning_folder_is_reused_when_only_options_without_effect_change(tmp_path):
    """LoRA's options without --peft lora and --doc-stride outside QA change nothing in a run: they are not
    recorded, and a rerun in the same folder that changes only them is the same run; a learning rate is
    another run and is refused."""
    from training import finetune_cli
    from training.tasks import TaskDataError

    out = tmp_path / "out"
    out.mkdir()
    nsmc = get_task("nsmc")
    argv = ["--model", "m", "--task", "nsmc", "--output-dir", str(out), "--seeds", "1"]
    args = finetune_cli.build_parser().parse_args(argv)
    recorded = finetune_cli.hyperparameters(args, nsmc)
    assert "lora_r" not in recorded and "doc_stride" not in recorded and recorded["learning_rate"] == args.learning_rate
    lora = finetune_cli.build_parser().parse_args(argv + ["--peft", "lora"])
    assert finetune_cli.hyperparameters(lora, nsmc)["lora_r"] == lora.lora_r
    (out / "results.json").write_text(json.dumps({"model": "m", "task": "nsmc", "mode": args.mode, "seeds": [0],
                                                  "peft": None, "data_seed": args.data_seed,
                                                  "hyperparameters": recorded}))
    finetune_cli.check_reused_folder(finetune_cli.build_parser().parse_args(
        argv + ["--lora-r", "64", "--lora-alpha", "3", "--doc-stride", "32"]), [0], nsmc)
    with pytest.raises(TaskDataError, match="learning_rate"):
        finetune_cli.check_reused_folder(finetune_cli.build_parser().parse_args(argv + ["--learning-rate", "0.5"]),
                                         [0], nsmc)


def test_a_study_resumed_with_another_spec_is_refused_naming_the_fields(tmp_path):
    from training import study

    spec = study.StudySpec.from_dict({"sizes": [100, 200], "tasks": {"korsts": "../shared/data/tasks/korsts"},
                                      "post_training": {"train_steps": 10}})
    out = tmp_path / "study"
    out.mkdir()
    saved = {**json.loads(json.dumps(spec.to_dict())), "sizes": [100, 400]}
    (out / study.SPEC_FILE).write_text(json.dumps(saved))
    with pytest.raises(study.StudyError, match=r"sizes \[100, 400\] -> \[100, 200\]"):
        study.run_study(spec, out, resume=True)
    assert sorted(p.name for p in out.iterdir()) == [study.SPEC_FILE]  # nothing started


def test_eval_cadence_is_fixed_when_an_explicit_phase_stops_early():
    """Early stopping set inside a phase reads the evaluations as the top-level setting does."""
    from training.config_checks import resume_changes

    phases = [{"name": "a", "steps": 100, "early_stopping_patience": 2}]
    shaping, free = resume_changes({"phases": phases, "eval_steps": 500}, {"phases": phases, "eval_steps": 7})
    assert shaping == {"eval_steps": [500, 7]} and free == {}
    no_stop = [{"name": "a", "steps": 100}]
    shaping, free = resume_changes({"phases": no_stop, "eval_steps": 500}, {"phases": no_stop, "eval_steps": 7})
    assert shaping == {} and free == {"eval_steps": [500, 7]}


def test_a_setting_added_since_the_checkpoint_counts_as_its_default():
    """A checkpoint written before a config field existed ran with that field's default: the resume goes
    on with the default and refuses another value, naming the default as the old one."""
    from training.config import PostTrainConfig
    from training.config_checks import resume_changes

    now = json.loads(json.dumps(PostTrainConfig().to_dict()))
    saved = {k: v for k, v in now.items() if k != "min_script_share"}
    assert resume_changes(saved, now) == ({}, {})
    shaping, _ = resume_changes(saved, {**now, "min_script_share": 0.0})
    assert shaping == {"min_script_share": [0.5, 0.0]}
