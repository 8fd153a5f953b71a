"""The data-efficiency study (training/study.py): the `tiny` preset end to end, resume after kill -9,
the report's numbers traced back to the runs, the data-efficiency factor (training/study_report.py),
and bad specs.

The end-to-end test runs the real pipeline (prepare_corpus, tokenizer training, post-training of
four methods at three sizes, fine-tuning on KorSTS and NSMC) on the `tiny` preset with one change:
the source is a random 2-layer BERT of hidden size 32 (tests/model_factories.py) instead of the
offline MiniLM, which keeps its 12 post-training and 48 fine-tuning runs within a minute or two.
It needs ../shared/data and skips without it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from training import study, study_report, study_spec

PYTHON = sys.executable


# --- the data-efficiency factor and the separation verdict (pure functions) -------------------------
def _runs(table: dict[str, dict[int, float]], spread: float = 0.5) -> list[dict]:
    return [{"method": method, "sentences": size, "mlm_test": {"perplexity": 100.0 - value},
             "tasks": {"t": {"mean": value, "min": value - spread, "max": value + spread,
                             "scores": [value - spread, value + spread] if spread else [value]}}}
            for method, row in table.items() for size, value in row.items()]


@pytest.mark.parametrize("xpt, scratch, factor, pair, bounded", [
    # XPT at 1K beats Scratch at 16K, the largest size: k = 16, a lower bound
    ({1000: 60, 4000: 62, 16000: 63}, {1000: 20, 4000: 30, 16000: 40}, 16, (1000, 16000), True),
    # XPT at 1K only beats Scratch at 4K; XPT at 4K beats Scratch at 16K, the largest: k = 4, a lower bound
    ({1000: 35, 4000: 45, 16000: 50}, {1000: 20, 4000: 30, 16000: 40}, 4, (1000, 4000), True),
    # XPT at 1K beats Scratch at 4K; no XPT size reaches Scratch at 16K: k = 4 exactly
    ({1000: 35, 4000: 38, 16000: 39}, {1000: 20, 4000: 30, 16000: 40}, 4, (1000, 4000), False),
    # XPT only matches Scratch at the same size, short of Scratch's largest: k = 1
    ({1000: 20, 4000: 30, 16000: 39}, {1000: 20, 4000: 30, 16000: 40}, 1, (1000, 1000), False),
    # the best pair (1K vs 4K) is not against Scratch's largest size, but XPT at 4K beats that size (8K): XPT at
    # 4K might match Scratch at 32K, so k = 4 is a lower bound
    ({1000: 70, 2000: 71, 4000: 76, 8000: 80}, {1000: 60, 2000: 65, 4000: 69, 8000: 75}, 4, (1000, 4000), True),
])
def test_efficiency_factor(xpt, scratch, factor, pair, bounded):
    result = study_report.efficiency_factor(_runs({"xpt": xpt, "scratch": scratch}), "t")
    assert result["factor"] == factor
    assert (result["xpt_sentences"], result["scratch_sentences"]) == pair
    assert result["lower_bound"] is bounded
    assert f"{factor:g}x" in result["text"]
    assert result["seed_ranges_disjoint"] is (result["xpt_score"] - 0.5 > result["scratch_score"] + 0.5)
    assert ("(seed ranges disjoint)" if result["seed_ranges_disjoint"] else "(seed ranges overlap)") in result["text"]


def test_efficiency_factor_says_when_the_curves_cross():
    # XPT at 1K beats Scratch at 16K, but Scratch is ahead at 16K: the factor is reported with that caveat
    result = study_report.efficiency_factor(_runs({"xpt": {1000: 62, 4000: 62, 16000: 58},
                                                   "scratch": {1000: 59, 4000: 58, 16000: 60}}), "t")
    assert result["factor"] == 16 and result["xpt_behind_at"] == [16000]
    assert "below Scratch at the same size at 16,000 sentences" in result["text"]
    ordered = study_report.efficiency_factor(_runs({"xpt": {1000: 35, 4000: 45}, "scratch": {1000: 20, 4000: 30}}), "t")
    assert "xpt_behind_at" not in ordered and "below Scratch" not in ordered["text"]


def test_one_seed_has_no_range_to_be_disjoint():
    one_seed = _runs({"xpt": {1000: 70}, "scratch": {1000: 60}}, spread=0)
    assert study_report.separation(one_seed, "t") == {"1000": {"xpt_above": True, "ranges_disjoint": False,
                                                               "one_seed": True}}
    assert "(one seed: no range to compare)" in study_report.efficiency_factor(one_seed, "t")["text"]


def test_efficiency_factor_not_reached_and_on_perplexity():
    runs = _runs({"xpt": {1000: 10, 4000: 11}, "scratch": {1000: 20, 4000: 30}})
    assert study_report.efficiency_factor(runs, "t") == {"factor": None, "text": "not reached within the sizes run"}
    # on MLM perplexity lower is better: the same numbers give XPT the higher perplexity
    assert study_report.efficiency_factor(runs, None)["factor"] is None
    on_perplexity = study_report.efficiency_factor(_runs({"xpt": {1000: 30}, "scratch": {1000: 20}}), None)
    assert on_perplexity["factor"] == 1 and "seed ranges" not in on_perplexity["text"]


def test_floor_verdict_counts_seeds_at_the_largest_size():
    spec = study.StudySpec(sizes=[1000, 4000], tasks={"t": study_spec.TaskEntry(data_dir="x")})
    runs = [{"method": "xpt", "sentences": 1000, "tasks": {"t": {"scores": [90.0, 91.0, 92.0]}}},
            {"method": "xpt", "sentences": 4000, "tasks": {"t": {"scores": [79.0, 81.0, 82.0]}}}]
    floor = {"score": 80.0, "estimator": "ridge"}
    verdict = study_report.floor_verdict(runs, spec, "t", floor)
    assert "at 4,000 sentences" in verdict and "above with 2 of 3 seeds" in verdict
    runs[1]["tasks"]["t"]["scores"] = [80.5, 81.0, 82.0]
    assert "above with every seed" in study_report.floor_verdict(runs, spec, "t", floor)
    # STS: the cosine without training is the bar when it is the stronger no-model read
    assert "above with 1 of 3 seeds" in study_report.floor_verdict(runs, spec, "t", {**floor, "zero_shot": 81.5})
    rows = study_report.reference_rows(spec, {"score": 80.0, "zero_shot": 65.0}, {"probe": {"mean": 60.0, "first": 55.0}}, "probes")
    assert rows == ["| no-model floor (TF-IDF) | **80.0** | **80.0** |", "| English source as it is | 60.0 / 55.0 | 60.0 / 55.0 |"]


def test_separation_needs_disjoint_seed_ranges():
    runs = _runs({"xpt": {1000: 21, 4000: 40}, "scratch": {1000: 20, 4000: 30}}, spread=1.0)
    verdict = study_report.separation(runs, "t")
    assert verdict["1000"] == {"xpt_above": True, "ranges_disjoint": False, "one_seed": False}  # [20, 22] vs [19, 21]
    assert verdict["4000"] == {"xpt_above": True, "ranges_disjoint": True, "one_seed": False}
    nan = float("nan")  # a diverged seed is above or below nothing, wherever it sits in the list
    for scores in ([80.0, nan, 81.0], [nan, 80.0, 81.0]):
        xpt = {"scores": scores, "min": 80.0, "max": 81.0, "diverged": 1, "mean": nan}
        scratch = {"scores": [70.0, 71.0, 72.0], "min": 70.0, "max": 72.0, "diverged": 0, "mean": 71.0}
        assert not study_report._disjoint_above(xpt, scratch)


# --- specs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", study.PRESETS)
def test_presets_load_and_plan(preset):
    spec = study.load_spec(preset, None, [])
    assert len(spec.sizes) >= 3 and spec.sizes[-1] >= 8 * spec.sizes[0]
    assert {"xpt", "xpt-sp", "scratch"} <= set(spec.methods)
    if preset == "tiny":  # the end-to-end test runs every method
        assert "adapters" in spec.methods
    assert {"korsts", "nsmc"} <= set(spec.tasks)
    assert len(spec.seeds(spec.sizes[0])) >= (2 if preset == "tiny" else 3)
    assert all(len(spec.seeds(n)) >= 2 for n in spec.sizes)
    from training.config import config_from_dict
    from training.config_checks import validate_config

    import dataclasses

    fvt = dataclasses.replace(spec, post_training={**spec.post_training, "embedding_init": "fvt", "itl_init": "copy"})
    for method in spec.methods:  # every run's post-training config is valid, with initialisations from the source too
        for settings in (spec, fvt):
            raw = {**study.method_settings(settings, method), "method": method, "source": spec.source, "data": "x",
                   "tokenizer": "x", "max_train_sentences": spec.sizes[0]}
            validate_config(config_from_dict(raw), world_size=1, check_data=False)
    assert "embedding_init" not in study.method_settings(fvt, "scratch")
    assert study.method_settings(fvt, "xpt")["itl_init"] == "copy" and "itl_init" not in study.method_settings(fvt, "adapters")
    assert "post-training runs" in study.plan(spec)  # load_spec passed every task's fine-tuning options


@pytest.mark.parametrize("content, message", [
    ({"sizes": [0, 10]}, "sizes must be positive"),
    ({"finetune": {"sts_loss": "mse"}, "tasks": {"korsts": "a", "nsmc": "b"}},
     "tasks.nsmc fine-tuning: --sts-loss mse trains the STS bi-encoder"),
    ({"finetune": {"merge": True}}, "tasks.korsts fine-tuning: --merge merges LoRA weights into the base model"),
    ({"finetune": {"max_grad_norm": -1}}, "tasks.korsts fine-tuning: --max-grad-norm -1.0: give a norm > 0"),
    ({"finetune": {"colour": "blue"}}, "tasks.korsts fine-tuning: unrecognized arguments: --colour blue"),
    ({"finetune": {"epochs": "many"}}, "tasks.korsts fine-tuning: argument --epochs: invalid int value: 'many'"),
    ({"finetune": {"push_to_hub": "org/x"}}, "tasks.korsts fine-tuning: push_to_hub: a study fine-tunes a model per run"),
    ({"methods": ["xpt", "magic"]}, "unknown method(s) ['magic']"),
    ({"tasks": {}}, "no tasks"),
    ({"post_training": {"method": "xpt"}}, "post_training.method is set by the study"),
    ({"colour": "blue"}, "unknown study spec field(s) ['colour']"),
    ({"tasks": {"korsts": {"data_dir": "a", "finetune": {"seeds": 1}}}}, "tasks.korsts.finetune.seeds: every task runs"),
    ({"sizes": [10, 20], "seeds_by_size": {20: 0}}, "seeds_by_size[20]: --seeds 0: give a count >= 1"),
    ({"finetune": {"seeds": "0,0"}}, "finetune.seeds: --seeds 0,0: give a count >= 1"),
])
def test_bad_specs_are_one_clear_line(tmp_path, content, message):
    raw = {"tasks": {"korsts": "somewhere"}, **content}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = subprocess.run([PYTHON, str(REPO_ROOT / "training" / "study.py"), "--spec", str(path),
                             "--out", str(tmp_path / "out"), "--dry-run"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_on_off_and_lora_options_reach_fine_tuning_but_not_the_source_probes(tmp_path):
    """A spec's `true` is finetune.py's bare flag, `false` and `null` leave the option out; LoRA and merging
    apply to the fine-tuned models, not to the English source, which is only probed."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"tasks": {"nsmc": "somewhere"},
                                    "finetune": {"peft": "lora", "merge": True, "hub_private": False, "patience": None}}))
    spec = study.load_spec(None, str(path), [])
    model = study.finetune_args(spec, "nsmc", Path("m"), Path("d"), Path("o"), spec.sizes[0])
    source = study.finetune_args(spec, "nsmc", Path("m"), Path("d"), Path("o"), None)
    assert model[model.index("--peft") + 1] == "lora" and "--merge" in model
    assert "--peft" not in source and "--merge" not in source and source[source.index("--mode") + 1] == "probe"
    assert not {"--hub-private", "--patience", "True", "False", "None"} & set(model + source)


@pytest.mark.parametrize("seeds, by_size, expected", [
    (3, {}, [0, 1, 2]), ("0,4", {}, [0, 4]), ([2, 5], {}, [2, 5]), (3, {20: 1}, [0]), ("7,", {}, [7])])
def test_fine_tuning_seeds_reach_finetune_as_the_spec_says(tmp_path, seeds, by_size, expected):
    from training.finetune_cli import parse_seeds

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"tasks": {"nsmc": "x"}, "sizes": [10, 20], "finetune": {"seeds": seeds},
                                    "seeds_by_size": by_size}))
    spec = study.load_spec(None, str(path), [])
    args = study.finetune_args(spec, "nsmc", Path("m"), Path("d"), Path("o"), 20)
    assert parse_seeds(args[args.index("--seeds") + 1]) == spec.seeds(20) == expected


def test_resume_refuses_a_changed_spec_but_not_reworded_prose(tmp_path):
    spec = study.load_spec("tiny", None, [])
    for entry in spec.tasks.values():  # folders that exist, so that only the spec decides (no data is read)
        entry.data_dir = str(tmp_path)
    out = tmp_path / "study"
    out.mkdir()
    saved = json.loads(json.dumps(spec.to_dict()))
    saved["description"] = "the preset's earlier wording"
    assert study_spec.spec_changes(saved, spec) == {}
    del saved["seeds_by_size"]  # a folder saved before the field existed resumes as it ran: with its default
    assert study_spec.spec_changes(saved, spec) == {}
    saved["sizes"] = [*spec.sizes, 10 * spec.sizes[-1]]
    (out / study.SPEC_FILE).write_text(json.dumps(saved))
    with pytest.raises(study.StudyError, match=r"another spec .*sizes"):
        study.run_study(spec, out, resume=True)


def test_report_only_reads_the_spec_the_study_was_started_with(tmp_path, capsys):
    spec = study.load_spec("tiny", None, [])
    out = tmp_path / "study"
    out.mkdir()
    (out / study.SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    assert study.main(["--out", str(out), "--report-only"]) == 0  # no --preset: not the default cpu preset
    report = json.loads((out / "report" / "results.json").read_text())
    assert report["spec"]["sizes"] == spec.sizes and "xpt-100" in report["missing"]
    assert "Machine: no run has finished yet." in capsys.readouterr().out
    assert study.main(["--out", str(out), "--report-only", "--preset", "cpu"]) == 2  # another spec: refused
    assert "holds a study with another spec" in capsys.readouterr().err
    assert study.main(["--out", str(tmp_path / "none"), "--report-only"]) == 2


def test_a_corpus_too_small_for_the_sizes_leaves_the_folder_open_to_smaller_sizes(tmp_path):
    text = tmp_path / "ko.txt"
    text.write_text("\n".join(f"오늘 {i}번째 문장을 여기에 적어 둡니다." for i in range(60)) + "\n", encoding="utf-8")
    out = tmp_path / "study"
    spec = study_spec.StudySpec(corpus=[str(text)], valid_sentences=5, test_sentences=5, sizes=[10, 100],
                                tasks={"t": study_spec.TaskEntry(data_dir="x")})
    out.mkdir()
    (out / study.SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    with pytest.raises(study.StudyError, match="50 train sentences, fewer than the largest size 100"):
        study.stage_corpus(spec, out)
    assert not (out / study.SPEC_FILE).exists()  # nothing trained: the next run may change the spec
    prepared = (out / "corpus" / "stats.json").stat().st_mtime_ns
    smaller = study_spec.StudySpec(**{**spec.__dict__, "sizes": [10, 40]})
    assert study.stage_corpus(smaller, out) == out / "data"
    assert (out / "corpus" / "stats.json").stat().st_mtime_ns == prepared  # the same sentences, not prepared again
    other = study_spec.StudySpec(**{**smaller.__dict__, "test_sentences": 8})
    shutil.rmtree(out / "data")
    study.stage_corpus(other, out)
    assert json.loads((out / "corpus" / "stats.json").read_text())["splits"]["test"]["sentences"] == 8


def test_extra_task_must_be_name_equals_dir():
    with pytest.raises(study.StudyError, match="NAME=DIR"):
        study.load_spec("tiny", None, ["paws-x"])
    spec = study.load_spec("tiny", None, ["paws-x=data/paws"])
    assert spec.tasks["paws-x"].data_dir == "data/paws"


# --- the tiny preset end to end, interrupted and resumed -----------------------------------------------
def _start(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, str(REPO_ROOT / "training" / "study.py"), "--spec", str(spec), "--out", str(out),
                             *extra], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})


def _tiny_spec(tmp_path: Path) -> Path:
    """configs/study-tiny.yaml with a tiny random BERT as the English source."""
    from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer

    source = tmp_path / "tiny-bert"
    tiny_source("bert", word_tokenizer("bert", KOREAN_WORDS), source)
    raw = yaml.safe_load((REPO_ROOT / "configs" / "study-tiny.yaml").read_text())
    raw["source"] = str(source)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


@pytest.mark.slow
def test_tiny_study_survives_kill_and_resumes(shared_data, tmp_path):
    out = tmp_path / "study"
    spec_file = _tiny_spec(tmp_path)
    process = _start(spec_file, out)
    first = out / "models" / "xpt-100"
    deadline = time.time() + 600
    while not (first / "_DONE").is_file() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert (first / "_DONE").is_file(), process.communicate()[0][-3000:]
    time.sleep(1.0)  # into the next run: fine-tuning or the second post-training
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished_before = {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir() if (p / "_DONE").is_file()}
    assert "xpt-100" in finished_before
    # no half-written folder under a final name
    for folder in [*(out / "models").iterdir(), *(out / "finetune").glob("*/*")]:
        assert folder.name.startswith(".tmp-") or (folder / "_DONE").is_file(), folder

    refused = _start(spec_file, out)
    assert refused.wait() == 2 and "--resume" in refused.communicate()[0]

    resumed = _start(spec_file, out, "--resume")
    log = resumed.communicate(timeout=900)[0]
    assert resumed.returncode == 0, log[-3000:]
    assert "post-training xpt-100" not in log  # finished runs are not redone
    for name, mtime in finished_before.items():
        assert (out / "models" / name).stat().st_mtime_ns == mtime

    spec = study.load_spec(None, str(spec_file), [])
    report = json.loads((out / "report" / "results.json").read_text())
    assert len(report["runs"]) == len(spec.sizes) * len(spec.methods)
    for run in report["runs"]:  # every number traces back to a run folder's own files
        summary = json.loads((out / run["model"] / "training_summary.json").read_text())
        assert run["mlm_test"] == summary["final_metrics"] and run["tokens_seen"] == summary["tokens_seen"] > 0
        assert summary["data"]["train_sentences"] >= run["sentences"]
        for task in spec.tasks:
            results = json.loads((out / "finetune" / Path(run["model"]).name / task / "results.json").read_text())
            entry = run["tasks"][task]
            assert entry["scores"] == results["scores"] and len(entry["scores"]) == len(spec.seeds(run["sentences"]))
            assert entry["min"] <= entry["mean"] <= entry["max"]
            assert entry["split"] == "test"
    # the same token budget for every method at a size (same seed, steps and batches)
    for size in spec.sizes:
        seen = {r["tokens_seen"] for r in report["runs"] if r["sentences"] == size}
        assert len(seen) == 1
    # NSMC's test split was held out of its train split, disjoint from what fine-tuning trained on
    held = out / "tasks" / "nsmc"
    test_ids = {json.loads(line)["id"] for line in (held / "test.jsonl").read_text().splitlines()}
    train_ids = {json.loads(line)["id"] for line in (held / "train.jsonl").read_text().splitlines()}
    assert len(test_ids) == 200 and not test_ids & train_ids
    # the floor and the probes were computed on exactly fine-tuning's splits: recomputed, the same figures
    from training import linear_reads
    from training.tasks import get_task, load_task_data

    markdown = (out / "report" / "results.md").read_text()
    for task in spec.tasks:
        options = study_spec.finetune_options(spec, task)
        data_dir = out / "tasks" / task if spec.tasks[task].hold_out_test else study.resolve_relative(spec.tasks[task].data_dir)
        splits = load_task_data(get_task(task), data_dir, options["max_train_samples"], options["max_eval_samples"], 0)
        floor = linear_reads.floor(get_task(task), splits)
        assert report["floor"][task]["score"] == floor["score"]
        assert f"No-model floor (TF-IDF of character 1-3-grams, {floor['estimator']}): **{floor['score']:.1f}**" in markdown
        assert f"| no-model floor (TF-IDF) | **{floor['score']:.1f}** |" in markdown  # a row of the tables
        first = report["runs"][0]
        probe = linear_reads.probe(out / first["model"], get_task(task), splits, options["max_length"])
        assert first["tasks"][task]["probe"] == {p: r["score"] for p, r in probe.items()}
        assert report["source"][task]["probe"]["mean"] is not None
    assert all("zero_shot" not in run["tasks"]["nsmc"] and "zero_shot" in run["tasks"]["korsts"] for run in report["runs"])
    for task in spec.tasks:
        assert (out / "report" / f"{task}.png").stat().st_size > 1000
        assert report["data_efficiency"][task]["text"] in markdown
        assert f"XPT fine-tuned at {max(spec.sizes):,} sentences against the no-model floor" in markdown
    assert "Machine: CPU class " in markdown
    # every model folder is a normal output folder: the Auto classes load it
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(out / "models" / "scratch-800", trust_remote_code=True)
    assert model.config.model_type == "xpt"


def test_a_missing_task_folder_stops_the_study_before_anything_is_written(tmp_path):
    """Found before the corpus and tokenizer stages, and before the spec is saved: the corrected spec then
    starts the same folder afresh instead of being refused as another spec."""
    spec = study.load_spec("tiny", None, ["paws-x=/nonexistent/typo"])
    with pytest.raises(study.StudyError, match="task paws-x: data folder /nonexistent/typo not found"):
        study.run_study(spec, tmp_path / "study")
    assert not (tmp_path / "study").exists()


def test_the_inputs_are_checked_as_the_corpus_stage_reads_them(tmp_path, monkeypatch):
    """Globs (recursive too) and folders count as the corpus preparation expands them; a missing input is one
    line; a study whose sentences are already prepared resumes without its raw text."""
    from tokenization.corpus_io import COMPLETE_MARKER

    monkeypatch.chdir(tmp_path)
    (tmp_path / "g" / "a").mkdir(parents=True)
    (tmp_path / "g" / "a" / "x.txt").write_text("문장\n")
    (tmp_path / "tasks").mkdir()
    spec = study.StudySpec(corpus=["g/**/*.txt", "g"], tasks={"t": study_spec.TaskEntry(data_dir="tasks")})
    study.check_inputs(spec)
    gone = study.StudySpec(corpus=["gone/*.txt"], tasks=spec.tasks)
    with pytest.raises(study.StudyError, match=r"corpus: gone/\*\.txt: the glob matches no files"):
        study.check_inputs(gone, tmp_path / "out")
    (tmp_path / "out" / "corpus").mkdir(parents=True)
    (tmp_path / "out" / "corpus" / COMPLETE_MARKER).write_text("")
    study.check_inputs(gone, tmp_path / "out")  # prepared: the raw text is not read again
