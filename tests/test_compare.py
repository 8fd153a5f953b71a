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
                             f"{compare.FLOOR} (TF-IDF) [hold_out_dev=0, train_examples={n}]",
                             f"{method} probe (first) [train_examples={n}]",
                             f"{compare.FLOOR} (TF-IDF) [hold_out_dev=40, train_examples={m}]"])
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
    rows.append({**row, "method": f"{compare.FLOOR} (TF-IDF)", "model": "-", "sentences": None, "mean": 61.0, "n": 0})
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


def test_a_korsts_floor_is_shown_at_the_bar_the_card_and_the_study_report_use(shared_data, tmp_path, monkeypatch):
    """For KorSTS the floor is the higher of the trained ridge and the untrained TF-IDF cosine: the table and the
    plot show that bar and name it, as the study's report and the model card do."""
    import matplotlib.axes

    from cards.card_facts import floor_readings
    from training import linear_reads
    from training.study_report import floor_bar, linear_reads_of
    from training.tasks import get_task, load_task_data

    drawn = []
    axhline = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda self, y, **kw: drawn.append((y, kw["label"])) or axhline(self, y, **kw))
    spec = get_task("korsts")
    floor = linear_reads.floor(spec, load_task_data(spec, shared_data / "tasks" / "korsts", 300, 200))
    assert floor["zero_shot"]["test"] > floor["score"] == floor["test"]  # the case here: the cosine scores higher
    results = {"task": "korsts", "metric": spec.metric, "num_examples": {"train": 300, "dev": 200, "test": 200},
               "data_seed": 0, "floor": floor}
    (tmp_path / "in" / "sts").mkdir(parents=True)
    (tmp_path / "in" / "sts" / "results.json").write_text(json.dumps(results))
    report = compare.compare([str(tmp_path / "in")], tmp_path / "out")
    bar = floor["zero_shot"]["test"]
    assert floor_bar(linear_reads_of(results)["floor"]) == (bar, "TF-IDF cosine, no training")  # the study's bar
    assert floor_readings(floor, "test")[0][0] == "TF-IDF cosine, no training"  # the card's floor
    [row] = report["rows"]
    assert row["mean"] == bar and row["method"] == "no-model floor (TF-IDF cosine, no training)"
    assert f"| no-model floor (TF-IDF cosine, no training) | - | - | test | {bar:.2f} | - |" in report["markdown"]
    assert drawn == [(bar, "no-model floor (TF-IDF cosine, no training)")]


def test_out_may_not_overlap_an_input_nor_lie_in_a_model_folder(result_dirs, tmp_path, capsys):
    """--out that is or lies inside an input folder, the run folder of an input results.json, or a model folder
    is refused in one line before anything is written (a later fine-tuning there would refuse the folder)."""
    root, outs = result_dirs
    run, model = outs[1], root / "xpt-1000"
    cases = [([run], run, "overlaps the input"), ([run], run / "report", "overlaps the input"),
             ([run / "results.json"], run / "report", "overlaps the input"),
             ([root / "runs"], root, "overlaps the input"),
             ([run], model, f"is the model folder {model}"), ([run], model / "report", "lies inside the model folder")]
    for inputs, out, says in cases:
        assert compare.main([*map(str, inputs), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out} {says}") and err.count("\n") == 1, err
    assert not (run / "report").exists() and not (model / "report").exists()
    assert sorted(p.name for p in run.iterdir()) == ["model", "results.json", "runs"]
    assert not (model / "results.md").exists() and not (root / "results.md").exists()
    assert compare.main([str(run), "--out", str(tmp_path / "report")]) == 0  # beside them: written


def test_a_later_compare_leaves_no_plot_of_a_task_it_no_longer_compares(result_dirs, tmp_path):
    """Plots are drawn per task: a compare of fewer tasks into the same --out removes the plots of the tasks an
    earlier compare there drew, and nothing it did not write."""
    _, outs = result_dirs
    sts = tmp_path / "in" / "sts"
    sts.mkdir(parents=True)
    (sts / "results.json").write_text(json.dumps({"task": "korsts", "metric": "spearman", "floor": {
        "split": "test", "train_examples": 10, "score": 30.0, "test": 30.0, "estimator": "ridge alpha=1"}}))
    out = tmp_path / "out"
    compare.compare([str(outs[1]), str(sts)], out)
    assert sorted(p.name for p in out.iterdir()) == ["korsts.png", "nsmc.png", "results.md"]
    (out / "notes.png").write_bytes(b"mine")
    report = compare.compare([str(outs[1])], out)
    assert report["plots"] == [str(out / "nsmc.png")]
    assert sorted(p.name for p in out.iterdir()) == ["notes.png", "nsmc.png", "results.md"]
