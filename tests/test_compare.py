"""training/compare.py on results.json files produced by real tiny fine-tuning runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.model_factories import KOREAN_WORDS, word_tokenizer
from tests.test_finetune import quick, stock_model_dir_with, toy_sentiment_dir, xpt_model_dir
from training import compare, finetune

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def result_dirs(tmp_path_factory):
    """Five real runs: XPT and Scratch folders at two post-training sizes each, plus a stock baseline."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("compare")
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    data = toy_sentiment_dir(root / "data")
    models = {"stock": stock_model_dir_with(tokenizer, root / "stock")}
    for method in ("xpt", "scratch"):
        for sentences in (1000, 10000):
            models[f"{method}-{sentences}"] = xpt_model_dir(root / f"{method}-{sentences}", tokenizer, sentences, method)
    outs = []
    for name, model in models.items():
        out = root / "runs" / name
        argv = ["--model", str(model), "--task", "nsmc", "--data-dir", str(data), "--output-dir", str(out),
                *quick("--seeds", 2, "--epochs", 2, "--learning-rate", 1e-3)]
        assert finetune.main(argv) == 0
        outs.append(out)
    torch.set_num_threads(previous)
    return root, outs


def test_compare_builds_table_and_png(result_dirs, tmp_path):
    root, outs = result_dirs
    study_report = root / "runs" / "report" / "results.json"  # what a study folder holds beside the runs: skipped
    study_report.parent.mkdir(exist_ok=True)
    study_report.write_text(json.dumps({"spec": {}, "runs": [], "missing": []}))
    report = compare.compare([str(root / "runs")], tmp_path / "report")  # a folder is searched recursively
    assert len(report["rows"]) == 5
    table = (tmp_path / "report" / "results.md").read_text()
    assert "### nsmc (accuracy)" in table
    lines = [line for line in table.splitlines() if line.startswith("| ") and "method" not in line and "---" not in line]
    assert len(lines) == 5
    methods = [line.split("|")[1].strip() for line in lines]
    sizes = [line.split("|")[2].strip() for line in lines]
    assert methods == ["scratch", "scratch", "stock", "xpt", "xpt"] and sizes == ["1K", "10K", "-", "1K", "10K"]
    results = json.loads((root / "runs" / "xpt-10000" / "results.json").read_text())
    assert f"{results['mean']:.2f} ± {results['std']:.2f} | 2 |" in table
    png = tmp_path / "report" / "nsmc.png"
    assert report["plots"] == [str(png)]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_compare_cli_and_errors(result_dirs, tmp_path):
    root, outs = result_dirs
    script = REPO_ROOT / "training" / "compare.py"
    files = [str(out / "results.json") for out in outs[:3]]
    result = subprocess.run([sys.executable, str(script), *files, "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r" / "results.md").is_file() and (tmp_path / "r" / "nsmc.png").is_file()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task": "nsmc"}))
    assert compare.main([str(bad), "--out", str(tmp_path / "x")]) == 2
    assert compare.main([str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    other = json.loads((outs[0] / "results.json").read_text())
    (tmp_path / "other.json").write_text(json.dumps({**other, "metric": "f1_macro"}))  # the same task, another metric
    with pytest.raises(compare.CompareError, match="task nsmc: the results report different metrics"):
        compare.load_results([outs[1] / "results.json", tmp_path / "other.json"])


def test_rows_scored_on_different_splits_are_separate_series():
    rows = [{"method": "xpt", "peft": None, "split": "test"}, {"method": "xpt", "peft": None, "split": "dev"}]
    labels = {compare.series_label(row, mixed_splits=True) for row in rows}
    assert labels == {"xpt [test]", "xpt [dev]"} and compare.series_label(rows[0], mixed_splits=False) == "xpt"


def test_results_of_other_recipes_are_labelled_apart_and_interrupted_runs_named(result_dirs, tmp_path, capsys):
    """Two results of one model on other splits (a held-out dev split as test) never share a row or a plot
    line: the settings in which they differ label them; a floor is labelled by its split settings only;
    scores without seeds (probes, floors) carry no ±; a run folder without results.json is named, not counted."""
    _, outs = result_dirs
    base = json.loads((outs[1] / "results.json").read_text())
    other = json.loads(json.dumps(base))
    other["hyperparameters"].update(hold_out_dev=40, epochs=3)
    other["num_examples"]["train"] += 7
    # a floor and a probe as --floor / --mode both add them (their scores do not matter here)
    base["floor"] = {"kind": "floor", "split": "test", "train_examples": base["num_examples"]["train"], "score": 55.0}
    other["floor"] = {**base["floor"], "train_examples": base["num_examples"]["train"] + 7, "score": 56.0}
    other["probe"] = {"mean": {**base["floor"], "kind": "probe", "score": 61.0}}
    for name, data in (("a", base), ("b", other)):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "results.json").write_text(json.dumps(data))
    (tmp_path / "in" / "cut" / "runs").mkdir(parents=True)  # an interrupted run: seed records only
    (tmp_path / "in" / "cut" / "runs" / "seed_0.json").write_text(json.dumps({"seed": 0, "dev": 50.0, "test": 50.0}))
    probe_only = {k: base[k] for k in ("task", "metric", "model", "post_training", "num_examples", "data_seed")}
    (tmp_path / "in" / "p").mkdir()  # a --mode probe result records no training settings: it hides no difference
    (tmp_path / "in" / "p" / "results.json").write_text(json.dumps({**probe_only, "probe": {
        "first": {**base["floor"], "kind": "probe", "score": 60.0}}}))
    report = compare.compare([str(tmp_path / "in")], tmp_path / "out")
    method = base["post_training"]["method"]
    labels = sorted(r["method"] for r in report["rows"])
    n, m = base["num_examples"]["train"], other["num_examples"]["train"]
    assert labels == sorted([f"{method} [epochs=2, hold_out_dev=0, train_examples={n}]",
                             f"{method} [epochs=3, hold_out_dev=40, train_examples={m}]",
                             f"{method} probe (mean) [epochs=3, hold_out_dev=40, train_examples={m}]",
                             f"{compare.FLOOR} [hold_out_dev=0, train_examples={n}]",
                             f"{method} probe (first) [train_examples={n}]",
                             f"{compare.FLOOR} [hold_out_dev=40, train_examples={m}]"])
    assert "| 61.00 | - |" in report["markdown"] and "61.00 ±" not in report["markdown"]
    assert f"{tmp_path / 'in' / 'cut'}: 1 seed(s) finished but no results.json" in capsys.readouterr().err
    with pytest.raises(compare.CompareError, match=r"no fine-tuning results.json .*\(only interrupted runs\)"):
        compare.find_results([str(tmp_path / "in" / "cut")])
    # a model folder an earlier run saved, beside the results of a later run that saved none: counted once
    (tmp_path / "in" / "a" / "model").mkdir()
    (tmp_path / "in" / "a" / "model" / "results.json").write_text(json.dumps(base))
    saved_none = {k: v for k, v in base.items() if k != "saved_model"}
    (tmp_path / "in" / "a" / "results.json").write_text(json.dumps(saved_none))
    found = compare.find_results([str(tmp_path / "in" / "a")])
    assert found == [tmp_path / "in" / "a" / "results.json"]
    # a rerun cut short there (its seed records, no results.json yet): the old model's copy is not a result either
    (tmp_path / "in" / "a" / "results.json").unlink()
    (tmp_path / "in" / "a" / "runs").mkdir()
    (tmp_path / "in" / "a" / "runs" / "seed_0.json").write_text(json.dumps({"seed": 0, "dev": 50.0, "test": 50.0}))
    with pytest.raises(compare.CompareError, match=r"\(only interrupted runs\)"):
        compare.find_results([str(tmp_path / "in" / "a")])


def test_models_of_one_label_at_one_size_are_separate_plot_lines(monkeypatch, tmp_path):
    """A sweep gives several models of one method and size: one line each, named by model, never one line
    that doubles back at the same size."""
    drawn = []
    import matplotlib.axes

    errorbar = matplotlib.axes.Axes.errorbar

    def record(self, x, y, **kw):
        drawn.append((kw["label"], x))
        return errorbar(self, x, y, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", record)
    row = {"task": "nsmc", "metric": "accuracy", "split": "test", "method": "xpt", "peft": None, "std": 0.1, "n": 3}
    rows = [{**row, "model": "runs/sweep-p1-250", "sentences": 1000, "mean": 70.0},
            {**row, "model": "runs/sweep-p1-1000", "sentences": 1000, "mean": 72.0},
            {**row, "method": "scratch", "model": "runs/scratch", "sentences": 1000, "mean": 65.0}]
    compare.plot_task("nsmc", rows, tmp_path)
    assert sorted(drawn) == [("scratch", [1000]), ("xpt (sweep-p1-1000)", [1000]), ("xpt (sweep-p1-250)", [1000])]


def test_two_studies_of_one_recipe_keep_a_line_each_across_sizes(monkeypatch, tmp_path):
    """The same recipe run in two study folders: their models share names (xpt-1000, ...), so each study's line is
    named by the part of the model paths that differs, and keeps its points at every size."""
    drawn = []
    import matplotlib.axes

    errorbar = matplotlib.axes.Axes.errorbar

    def record(self, x, y, **kw):
        drawn.append((kw["label"], list(x), list(y)))
        return errorbar(self, x, y, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", record)
    row = {"task": "nsmc", "metric": "accuracy", "split": "test", "method": "xpt", "peft": None, "std": 0.5, "n": 3}
    rows = [{**row, "model": f"runs/{study}/models/xpt-{size}", "sentences": size, "mean": mean + shift}
            for study, shift in (("study-bf16", 0.0), ("study-fp32", -3.0))
            for size, mean in ((1000, 61.0), (4000, 62.0), (16000, 57.0))]
    rows.append({**row, "model": "runs/study-fp32/models/xpt-64000", "sentences": 64000, "mean": 50.0})
    compare.plot_task("nsmc", rows, tmp_path)
    assert sorted(drawn) == [("xpt (study-bf16)", [1000, 4000, 16000], [61.0, 62.0, 57.0]),
                             ("xpt (study-fp32)", [1000, 4000, 16000, 64000], [58.0, 59.0, 54.0, 50.0])]


def test_studies_at_different_depths_keep_a_line_each_named_by_their_folders():
    """Two studies of one recipe, one deeper in the file system than the other: a line per study across
    sizes, each named by the folders that tell them apart, never an empty or root name."""
    from training.compare import model_groups

    points = [{"model": f"{root}/models/xpt-{n}", "sentences": n}
              for root in ("/home/u/runs/s1", "/data/s2") for n in (1000, 4000)]
    lines = {name: [p["sentences"] for p in group] for name, group in model_groups(points).items()}
    assert lines == {"home/u/runs/s1": [1000, 4000], "data/s2": [1000, 4000]}


def test_models_right_under_top_level_folders_are_never_grouped_at_the_root():
    from training.compare import model_groups

    points = [{"model": m, "sentences": n} for m, n in (("/a/xpt-1000", 1000), ("/b/xpt-4000", 4000),
                                                        ("/c/d/xpt-1000", 1000), ("/c/d/xpt-4000", 4000))]
    lines = {name: [p["model"] for p in group] for name, group in model_groups(points).items()}
    assert lines == {"a": ["/a/xpt-1000"], "b": ["/b/xpt-4000"], "c/d": ["/c/d/xpt-1000", "/c/d/xpt-4000"]}
    bare = [{"model": m, "sentences": 1000} for m in ("one-seed", "untrained")]  # names of one part, no folder
    assert {name: [p["model"] for p in group] for name, group in model_groups(bare).items()} == {
        "one-seed": ["one-seed"], "untrained": ["untrained"]}


def test_one_seed_shows_its_score_alone_and_best_epoch_0_is_marked(result_dirs, tmp_path, capsys):
    """A single seed has no spread: its score is shown without ±. A seed whose best epoch is 0 kept the untrained
    model: its row is marked and the mark explained. An interrupted run is named with the command to rerun."""
    _, outs = result_dirs
    base = json.loads((outs[1] / "results.json").read_text())
    one = {**base, "scores": base["scores"][:1], "seeds": base["seeds"][:1], "runs": base["runs"][:1],
           "mean": base["scores"][0], "std": 0.0, "model": "runs/one-seed"}
    untrained = json.loads(json.dumps({**base, "model": "runs/untrained"}))
    untrained["runs"][0]["best_epoch"] = 0
    for name, data in (("one", one), ("untrained", untrained)):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "results.json").write_text(json.dumps(data))
    (tmp_path / "in" / "cut" / "runs").mkdir(parents=True)
    (tmp_path / "in" / "cut" / "runs" / "seed_0.json").write_text(json.dumps({"seed": 0, "dev": 50.0, "test": 50.0}))
    table = compare.compare([str(tmp_path / "in")], tmp_path / "out")["markdown"]
    rows = {line.split("|")[3].strip(): line for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows["runs/one-seed"].endswith(f"| {base['scores'][0]:.2f} | 1 |") and "±" not in rows["runs/one-seed"]
    assert rows["runs/untrained"].endswith(f"| {base['mean']:.2f} ± {base['std']:.2f} {compare.UNTRAINED} (1 of 2 seeds) | 2 |")
    assert compare.UNTRAINED_NOTE in table and "no epoch of fine-tuning beat the untrained model on dev" in table
    assert "run its `xpt-finetune` command again to finish it" in capsys.readouterr().err
    assert compare.UNTRAINED not in compare.markdown_table(compare.load_results([outs[1] / "results.json"]))


def test_the_plot_legend_sits_beside_the_axes_whole_and_without_a_warning(monkeypatch, tmp_path):
    import warnings

    import matplotlib.pyplot as plt

    figures, close = [], plt.close
    monkeypatch.setattr(plt, "close", figures.append)  # kept open to be measured
    row = {"task": "nsmc", "metric": "accuracy", "split": "test", "peft": None, "std": 0.5, "n": 3}
    rows = [{**row, "method": f"a rather long method label number {i} [hold_out_dev=5000, epochs=3]",
             "model": f"runs/m{i}-{n}", "sentences": n, "mean": 60.0 + i + n / 1000} for i in range(5) for n in (1000, 4000)]
    rows.append({**row, "method": compare.FLOOR, "model": "-", "sentences": None, "mean": 61.0, "n": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = compare.plot_task("nsmc", rows, tmp_path)
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))  # no point hidden under it
    tight = fig.get_tightbbox(renderer)  # what the saved image holds, in inches
    assert tight.x1 * fig.dpi >= legend.x1 and tight.y0 * fig.dpi <= legend.y0  # nothing of it clipped
    height, width = plt.imread(path).shape[:2]
    assert width >= tight.width * fig.dpi and height >= tight.height * fig.dpi  # the saved image holds it all
    close(fig)
