"""Output folders holding what a command did not write are refused in one line, before any work, and left
byte for byte as they were: post-training (a converted model, raw text, a fine-tuning output; with
--overwrite-output-dir a saved model is replaced, other files never deleted), fine-tuning (an --output-dir
that is, holds or lies inside --model or --data-dir, or holds another model or a post-training run), the study (an --out that is no study folder, in the dry run too) and
the demo Space (the model folder itself, or other files unless --overwrite). A crashed run's folder, a
study whose spec was dropped and an earlier Space are still written again.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.post_train_helpers import reset_accelerate, run_args, run_inprocess
from training import convert, post_train

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test

KOREAN_LINES = [f"오늘 {i}번째 문장을 여기에 적어 둡니다." for i in range(60)]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def converted(tiny, tmp_path):
    """An `xpt-convert` output: config.json, weights, tokenizer and remote code; no run of post-training."""
    source, tok = tiny["bert"]
    out = tmp_path / "conv-copy"
    assert convert.main(["--source", str(source), "--tokenizer", str(tok), "--out", str(out)]) == 0
    return out


# --- post-training --------------------------------------------------------------------------------------------
def test_post_training_refuses_a_converted_model_and_replaces_it_only_on_request(tiny, converted, capsys):
    before = snapshot(converted)
    for extra in ([], ["--resume", "latest"]):  # a resume that finds no checkpoint would replace it as well
        reset_accelerate()
        assert post_train.main(run_args(tiny, converted, train_steps=3, phase1_steps=1) + extra) == 2
        line = one_line(capsys)
        assert "`output_dir`" in line and f"{converted} holds a saved model that is not a post-training run" in line
        assert "config.json" in line and "--overwrite-output-dir true" in line, line
        assert snapshot(converted) == before
    reset_accelerate()
    summary = run_inprocess(run_args(tiny, converted, train_steps=3, phase1_steps=1, overwrite_output_dir="true"))
    assert summary["total_steps"] == 3
    assert (converted / "model.safetensors").read_bytes() != before["model.safetensors"]


@pytest.mark.parametrize("kind", ["raw text", "fine-tuning output", "card written by hand"])
@pytest.mark.parametrize("overwrite", ["false", "true"])
def test_post_training_never_mixes_into_or_deletes_files_that_are_no_run_s(kind, overwrite, tiny, converted,
                                                                         tmp_path, capsys):
    folder = tmp_path / "folder"
    if kind == "raw text":
        folder.mkdir()
        (folder / "wiki-ko.txt").write_text("\n".join(KOREAN_LINES) + "\n", encoding="utf-8")
    elif kind == "fine-tuning output":
        shutil.copytree(converted, folder / "model")
        (folder / "runs").mkdir()
        (folder / "runs" / "seed_0.json").write_text("{}")
        (folder / "results.json").write_text('{"task": "nsmc"}')
    else:  # the model's own description, not this project's output
        shutil.copytree(converted, folder)
        (folder / "README.md").write_text("# my converted model\n")
    before = snapshot(folder)
    for extra in ([], ["--resume", "latest"]):
        argv = run_args(tiny, folder, train_steps=3, phase1_steps=1, overwrite_output_dir=overwrite) + extra
        assert post_train.main(argv) == 2
        reset_accelerate()
        line = one_line(capsys)
        assert "`output_dir`" in line and f"{folder} holds files that are not a post-training run's (" in line, line
        assert "choose another output folder" in line and "deletes only a run's own files" in line
        assert snapshot(folder) == before


@pytest.mark.parametrize("command", ["post_train", "dry_run", "prepare_corpus"])
@pytest.mark.parametrize("under", [False, True])
def test_an_output_folder_where_a_file_is_is_one_line(command, under, tiny, tmp_path, capsys):
    """--output-dir (--out) naming a file, or a path under one: one line naming both, the file untouched."""
    from tokenization import prepare_corpus
    from tokenization.errors import run_cli

    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    out = blocker / "run" if under else blocker
    if command == "prepare_corpus":
        rc = run_cli(prepare_corpus.main, ["--input", str(tiny["corpus"]), "--out", str(out)])
    else:
        rc = post_train.main(run_args(tiny, out) + (["--dry-run"] if command == "dry_run" else []))
    line = one_line(capsys)
    assert rc == 2 and str(out) in line and line.endswith("; give a folder")
    assert (f"lies under {blocker}, which is a file" if under else f"{out} is a file") in line
    assert blocker.read_text() == "mine\n"


def test_a_folder_a_run_left_before_its_first_checkpoint_is_trained_in_again(tiny, tmp_path, capsys):
    """Lock, loss log, trained tokenizer, half-written files: a run stopped before its first checkpoint."""
    out = tmp_path / "crashed"
    (out / "checkpoints" / ".tmp-checkpoint-2").mkdir(parents=True)
    (out / "tokenizer").mkdir()
    (out / ".tmp-tokenizer").mkdir()
    (out / ".lock").write_text("process 1")
    (out / "losses.jsonl").write_text('{"step": 1, "loss": 9.0}\n')
    (out / "losses.jsonl.123.tmp").write_text("")
    assert run_inprocess(run_args(tiny, out, train_steps=3, phase1_steps=1))["total_steps"] == 3
    reset_accelerate()
    (out / "notes.txt").write_text("mine\n")  # a finished run's folder with the user's file: overwriting spares it
    before = snapshot(out)
    capsys.readouterr()
    assert post_train.main(run_args(tiny, out, train_steps=3, phase1_steps=1, overwrite_output_dir="true")) == 2
    assert "holds files that are not a post-training run's (notes.txt)" in one_line(capsys)
    assert snapshot(out) == before


# --- fine-tuning ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["the model folder", "inside it", "around it"])
def test_fine_tuning_never_writes_into_or_around_the_model_it_reads(where, tmp_path, capsys, monkeypatch):
    from tests.test_finetune import quick, stock_model_dir, toy_sentiment_dir
    from training import finetune

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = stock_model_dir(tmp_path / "run1" / "m" if where == "around it" else tmp_path / "run1")
    out = {"the model folder": model, "inside it": model / "ft", "around it": tmp_path / "run1"}[where]
    data = toy_sentiment_dir(tmp_path / "data")
    before = snapshot(tmp_path / "run1")
    capsys.readouterr()
    argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out), *quick(),
            "--save-model", "none"]
    assert finetune.main(argv) == 2
    line = one_line(capsys)
    assert f"--output-dir {out}" in line and f"--model {model}" in line and "choose another output folder" in line
    assert ("lies inside" if where == "inside it" else "which is or holds") in line, line
    assert snapshot(tmp_path / "run1") == before



@pytest.mark.parametrize("where", ["the data folder", "inside it", "another model", "a post-training run"])
def test_fine_tuning_never_writes_into_its_data_or_among_other_files(where, tiny, converted, tmp_path, capsys,
                                                                      monkeypatch):
    """The task data, another model's folder (whose card would then describe this run's scores) and a
    post-training run are refused, whatever the options; an earlier fine-tuning run's folder is not."""
    from tests.test_finetune import quick, stock_model_dir, toy_sentiment_dir
    from training import finetune

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, data = stock_model_dir(tmp_path / "m"), toy_sentiment_dir(tmp_path / "data")
    if where == "a post-training run":
        run_inprocess(run_args(tiny, tmp_path / "pt", train_steps=2, phase1_steps=1, eval_steps=2))
    held = {"the data folder": data, "inside it": data, "another model": converted, "a post-training run": tmp_path / "pt"}
    out = data / "ft" if where == "inside it" else held[where]
    before = snapshot(held[where])
    capsys.readouterr()
    argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out), *quick(),
            "--save-model", "none", "--overwrite-output-dir"]
    assert finetune.main(argv) == 2
    line = one_line(capsys)
    if where.startswith(("the data", "inside")):
        assert f"--data-dir {data}" in line and "choose another output folder" in line, line
    else:
        assert "holds files that are not a fine-tuning run's (" in line and "choose a new or empty folder" in line
        assert "config.json" in line, line
    assert snapshot(held[where]) == before
    argv[argv.index("--output-dir") + 1] = str(tmp_path / "ft")  # a new folder, then the same run again into it
    assert finetune.main(argv) == 0 and finetune.main(argv) == 0

# --- the study ------------------------------------------------------------------------------------------------
def small_study(tmp_path: Path, sizes=(10, 100)) -> Path:
    """A spec whose corpus (50 train sentences) is too small for its largest size: the study stops at its corpus."""
    from tests.test_finetune import toy_sentiment_dir

    text = tmp_path / "ko.txt"
    text.write_text("\n".join(KOREAN_LINES) + "\n", encoding="utf-8")
    spec, tasks = tmp_path / "spec.yaml", {"nsmc": str(toy_sentiment_dir(tmp_path / "nsmc"))}
    spec.write_text(yaml.safe_dump({"corpus": [str(text)], "valid_sentences": 5, "test_sentences": 5,
                                    "sizes": list(sizes), "tasks": tasks}))
    return spec


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--resume"]])
def test_a_study_refuses_an_out_that_is_no_study_folder(extra, converted, tmp_path, capsys):
    from training import study

    spec, out = small_study(tmp_path), converted.resolve()
    before = snapshot(out)
    assert study.main(["--spec", str(spec), "--out", str(out), *extra]) == 2
    line = one_line(capsys)
    assert f"--out {out} holds files that are not a study's (config.json, configuration_xpt.py, model.safetensors " \
           "and 3 more)" in line, line
    assert "choose a new or empty folder for --out" in line
    assert snapshot(out) == before


def test_a_study_resumed_where_there_is_none_says_it_starts_afresh(tmp_path, capsys):
    from training import study

    spec, out = small_study(tmp_path), tmp_path / "missing"
    assert study.main(["--spec", str(spec), "--out", str(out), "--resume"]) == 2  # stops at its small corpus
    printed = capsys.readouterr()
    note = f"--resume: no study in {out.resolve()} ({study.SPEC_FILE}), starting from scratch"
    assert note in printed.out and note in (out / "study.log").read_text(encoding="utf-8")
    assert "fewer than the largest size 100" in printed.err
    # what it left (log, task copies, prepared sentences; its spec dropped) is still a study's folder
    assert sorted(p.name for p in out.iterdir()) == ["corpus", "study.log"]
    smaller = study.load_spec(None, str(small_study(tmp_path, sizes=(10, 40))), [])
    study.check_out(smaller, out, resume=False)
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(study.StudyError, match=r"holds files that are not a study's \(notes.txt\)"):
        study.check_out(smaller, out, resume=False)


# --- the demo Space -------------------------------------------------------------------------------------------
@pytest.fixture
def carded(converted):
    from cards import make_card

    assert make_card.main(["--model-dir", str(converted), "--license", "apache-2.0"]) == 0
    return converted


def test_the_space_never_writes_into_the_model_folder(carded, tmp_path, capsys):
    from cards import space

    before = snapshot(carded)
    for out, flags in ((carded, []), (carded, ["--overwrite"]), (carded / "space", [])):
        capsys.readouterr()
        assert space.main([str(carded), "--out", str(out), *flags]) == 2
        line = one_line(capsys)
        assert f"--out {out} overlaps the input {carded}" in line and "choose another output folder" in line, line
        assert snapshot(carded) == before


def test_the_space_replaces_other_files_only_with_overwrite_and_rewrites_its_own(carded, tmp_path, capsys):
    from cards import space

    out = tmp_path / "run1copy"
    shutil.copytree(carded, out)  # a copy of the model folder, its card README.md included
    before = snapshot(out)
    assert space.main([str(carded), "--out", str(out)]) == 2
    line = one_line(capsys)
    assert f"--out {out} already holds files that are not this command's output (README.md, " \
           "card_options.json, config.json and 5 more)" in line and "pass --overwrite" in line, line
    assert snapshot(out) == before
    assert space.main([str(carded), "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "app.py", "requirements.txt"]
    assert space.main([str(carded), "--out", str(out), "--repo-id", "org/xpt-ko"]) == 0  # its own Space: again
    assert "'org/xpt-ko'" in (out / "app.py").read_text(encoding="utf-8")
    (out / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    assert space.main([str(carded), "--out", str(out)]) == 2
    assert "(notes.txt)" in one_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "app.py", "notes.txt", "requirements.txt"]
