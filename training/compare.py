#!/usr/bin/env python
"""Collect fine-tuning `results.json` files into a Markdown table and PNG plots.

    xpt-compare runs/ft/xpt-100k runs/ft/xpt-400k runs/ft/scratch-100k ... --out runs/report

Each argument is a `results.json` file or a folder searched recursively for them (the copies that
finetune.py puts in the model folders it saves are not counted twice). Output in ``--out``:

- ``results.md``: one row per (task, model) with method, post-training sentences, metric, split,
  mean ± std and seed count, grouped by task; rows of the same method are sorted by data size.
- ``<task>.png``: metric versus post-training data size (log x axis), one line per method with
  ±std error bars, like Figures 3 and 4 of the XPT paper. Results without a data size (e.g. a stock
  Korean model) are drawn as horizontal dashed reference lines. Models of one method at one size (two
  study folders of one recipe, a sweep) are drawn a line per study folder, or per model, named by the
  part of their paths that differs.

``--out`` may not overlap an input folder nor be or lie inside a model folder; the plots an earlier compare
left there for tasks this one does not compare are removed. A no-model floor (``--floor``) is shown at the
bar fine-tuned scores face (`training.linear_reads.floor_bar`: for KorSTS the higher of the trained ridge and
the untrained TF-IDF cosine), as in the model card and the study's report.

Method and data size come from ``results.json["post_training"]`` (copied by finetune.py from the model
folder's training_summary.json, or given with --post-training-method/--post-training-sentences).
Results of one task fine-tuned with different settings or on different splits (``hyperparameters``,
``num_examples``) are told apart: the settings that differ are added to their labels, e.g.
``xpt [hold_out_dev=5000, hold_out_test=0]``. A folder with per-seed records but no results.json (an
interrupted run) is named on stderr, not counted.
"""
from __future__ import annotations

import sys
from pathlib import Path


import argparse
import json
import math
import re
from collections import defaultdict
from typing import Any

from tokenization.errors import UserError, report_error
from tokenization.folders import file_in_the_way, overlapping
from training.finetuned_model import ADAPTER_DIR, MODEL_DIR
from training.linear_reads import floor_bar
from training.run_record import RESULTS_FILE

REQUIRED = ("task", "metric")
FLOOR = "no-model floor"  # labelled with its bar: "no-model floor (TF-IDF cosine, no training)"
# the settings that decide a floor's splits (the rest of the recipe only changes fine-tuned scores)
DATA_SETTINGS = ("hold_out_test", "hold_out_dev", "max_train_samples", "max_eval_samples", "data_seed")


class CompareError(UserError):
    """Results that cannot be compared: printed as one line, exit status 2."""


def saved_model_copy(path: Path) -> bool:
    """`path` is the copy of a run's results.json that finetune.py put in the model or adapter folder it
    saved (OUT/model/results.json beside OUT/results.json): the run is counted once, from OUT. A model
    folder left by an earlier run in OUT is not counted either, whether the later run saved none or was
    cut short (OUT then holds its seed records and no results.json)."""
    run = path.parent.parent
    return path.parent.name in (MODEL_DIR, ADAPTER_DIR) and (
        (run / RESULTS_FILE).is_file() or any((run / "runs").glob("seed_*.json")))


def names_a_task(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return True  # load_results names the broken file
    return isinstance(data, dict) and "task" in data


def find_results(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            # a folder search skips the results.json files that fine-tuning did not write (a study's report/)
            found = [f for f in sorted(path.rglob(RESULTS_FILE)) if not saved_model_copy(f) and names_a_task(f)]
            unfinished = interrupted_runs(path)
            for folder, seeds in unfinished:
                print(f"note: {folder}: {seeds} seed(s) finished but no {RESULTS_FILE} (an interrupted run): not "
                      "counted; run its `xpt-finetune` command again to finish it", file=sys.stderr)
            if not found:
                raise CompareError(f"{path}: no fine-tuning results.json found under this folder"
                                   + (" (only interrupted runs)" if unfinished else ""))
            files.extend(found)
        else:
            raise CompareError(f"{path}: no such file or folder")
    return list(dict.fromkeys(p.resolve() for p in files))


def interrupted_runs(root: Path) -> list[tuple[Path, int]]:
    """Folders under `root` (itself included) holding finetune.py's per-seed records without its results.json."""
    folders = sorted({seed.parent.parent for seed in root.rglob("runs/seed_*.json")})
    return [(f, len(list((f / "runs").glob("seed_*.json")))) for f in folders if not (f / RESULTS_FILE).is_file()]


def recipe(data: dict[str, Any]) -> dict[str, Any]:
    """What decides a result besides the model: the fine-tuning settings and the split sizes."""
    return {**(data.get("hyperparameters") or {}), "data_seed": data.get("data_seed"),
            **{f"{split}_examples": n for split, n in (data.get("num_examples") or {}).items()}}


def label_recipes(rows: list[dict[str, Any]]) -> None:
    """Add to each row's method the settings in which its task's rows differ (nothing when they agree), so
    that a table row or plot line never merges results of different recipes or splits; a floor's label takes
    only the settings that decide its splits."""
    for task in {r["task"] for r in rows}:
        task_rows = [r for r in rows if r["task"] == task]
        # a setting differs where the rows that record it disagree (a probe-only result records no training)
        differ = sorted(k for k in set().union(*(r["recipe"] for r in task_rows))
                        if len({json.dumps(r["recipe"][k]) for r in task_rows if k in r["recipe"]}) > 1)
        for r in task_rows:
            keys = [k for k in differ if k in r["recipe"]
                    and (not r.get("floor") or k in DATA_SETTINGS or k.endswith("_examples"))]
            if keys:
                r["method"] += " [" + ", ".join(f"{k}={r['recipe'][k]}" for k in keys) + "]"


def load_results(files: list[Path]) -> list[dict[str, Any]]:
    """A row per fine-tuned model, per probe and per distinct no-model floor found in the files."""
    rows, floors = [], set()
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise CompareError(f"{path}: not valid JSON ({error})") from None
        missing = [k for k in REQUIRED if k not in data] or \
            ([] if any(k in data for k in ("scores", "probe", "floor")) else ["scores"])
        if missing:
            raise CompareError(f"{path}: not a finetune.py results.json (missing {missing})")
        post = data.get("post_training") or {}
        method = post.get("method") or Path(str(data.get("model", path.parent))).name
        row = {"file": str(path), "task": data["task"], "metric": data["metric"], "split": data.get("split", "?"),
               "model": str(data.get("model", "")), "method": method, "sentences": post.get("train_sentences"),
               "peft": data.get("peft"), "recipe": recipe(data)}
        if "scores" in data:
            rows.append({**row, "mean": float(data["mean"]), "std": float(data["std"]), "n": len(data["scores"]),
                         "untrained": untrained_seeds(data)})
        for pooling, probe in (data.get("probe") or {}).items():  # one score, no seeds
            rows.append({**row, "method": f"{method} probe ({pooling})", "split": probe["split"],
                         "mean": float(probe["score"]), "std": 0.0, "n": 0, "peft": None})
        if "floor" in data:  # the same splits give the same floor: listed once
            floor = data["floor"]
            bar, what = floor_bar(floor)  # for STS the stronger of its two no-model reads, as cards and studies
            key = (data["task"], floor["split"], floor["train_examples"], round(float(bar), 6))
            if key not in floors:
                floors.add(key)
                rows.append({**row, "method": f"{FLOOR} ({what})", "model": "-", "sentences": None,
                             "split": floor["split"], "mean": float(bar), "std": 0.0, "n": 0, "peft": None,
                             "floor": True})
    for task in sorted({r["task"] for r in rows}):  # one table and one axis per task: its scores must be comparable
        metrics = sorted({r["metric"] for r in rows if r["task"] == task})
        if len(metrics) > 1:
            raise CompareError(f"task {task}: the results report different metrics ({', '.join(metrics)}); compare "
                               "results scored with the same metric (fine-tune them again with the same version)")
    label_recipes(rows)
    return rows


UNTRAINED = "†"
UNTRAINED_NOTE = (f"{UNTRAINED} best epoch 0: no epoch of fine-tuning beat the untrained model on dev; the score is "
                  "the untrained model's (where a count is given, in that many of the seeds).")


def untrained_seeds(data: dict[str, Any]) -> int:
    """How many seeds of a results.json kept the untrained model (best epoch 0) and scored a number."""
    split = data.get("split", "test")
    return sum(r.get("best_epoch") == 0 and isinstance(r.get(split), (int, float)) and math.isfinite(r[split])
               for r in data.get("runs") or [])


def score_cell(row: dict[str, Any]) -> str:
    """mean ± std over two seeds or more; one seed's score, or a probe's or floor's, alone; marked where the
    best epoch was 0."""
    score = f"{row['mean']:.2f} ± {row['std']:.2f}" if row["n"] >= 2 else f"{row['mean']:.2f}"
    count = row.get("untrained") or 0
    if count:
        score += f" {UNTRAINED}" if count == row["n"] else f" {UNTRAINED} ({count} of {row['n']} seeds)"
    return score


def _size(n) -> str:
    if n is None:
        return "-"
    n = int(n)
    for unit, div in (("M", 1_000_000), ("K", 1_000)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = []
    by_task = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    for task in sorted(by_task):
        task_rows = sorted(by_task[task], key=lambda r: (r["method"], r["sentences"] is None, r["sentences"] or 0, r["model"]))
        metric = task_rows[0]["metric"]
        lines += [f"### {task} ({metric})", "",
                  "| method | post-training sentences | model | split | " + metric + " (mean ± std) | seeds |",
                  "| --- | ---: | --- | --- | ---: | ---: |"]
        for r in task_rows:
            method = r["method"] + (f" + {r['peft']}" if r["peft"] else "")
            lines.append(f"| {method} | {_size(r['sentences'])} | {r['model']} | {r['split']} | {score_cell(r)} | "
                         f"{r['n'] or '-'} |")
        lines += ["", UNTRAINED_NOTE, ""] if any(r.get("untrained") for r in task_rows) else [""]
    return "\n".join(lines)


def plot_task(task: str, rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    series = defaultdict(list)
    references = []
    splits = sorted({row["split"] for row in rows})
    for row in rows:
        label = series_label(row, len(splits) > 1)
        (series[label] if row["sentences"] else references).append(row if row["sentences"] else (label, row))
    for label in [k for k, points in series.items() if len({p["sentences"] for p in points}) < len(points)]:
        # models of one label at one size (two studies, a sweep): a line per group of models, named by the part
        # of their paths that differs
        for name, points in model_groups(series.pop(label)).items():
            series[f"{label} ({name})"] += points
    sizes = sorted({r["sentences"] for r in rows if r["sentences"]})
    for label in sorted(series):
        points = sorted(series[label], key=lambda r: r["sentences"])
        seeded = any(p["n"] >= 2 for p in points)  # probes and single seeds have one score each: no error bars
        ax.errorbar([p["sentences"] for p in points], [p["mean"] for p in points],
                    yerr=[p["std"] for p in points] if seeded else None, marker="o", capsize=3, label=label)
    for label, row in references:
        name = Path(row["model"]).name
        ax.axhline(row["mean"], linestyle="--", linewidth=1, color="gray",
                   label=label if name in (label, "-") else f"{label} ({name})")
    return save_size_plot(fig, ax, sizes, f"{rows[0]['metric']} ({', '.join(splits)})", task, out / f"{task}.png")


def model_groups(points: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`points` of one plot label split into lines, each with one point per size: grouped by the folder
    their models sit in, as few groups as keep the sizes of every group distinct (OUT/models/xpt-1000 and
    OUT/models/xpt-4000 of one study make one line), else a line per model; of the folder levels giving
    those groups, the one nearest the models. Each group is named by the part of its path that the groups
    do not share (the study folder's name, or the model's)."""
    # a local path written relative (results from before models were recorded absolute) as the absolute one
    paths = [(Path(p["model"]).resolve() if Path(p["model"]).exists() else Path(p["model"])).parts for p in points]
    best: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for up in range(min(len(parts) for parts in paths) - 1):  # a folder `up` levels above each model, never the root
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for parts, point in zip(paths, points):
            groups.setdefault(parts[:len(parts) - up], []).append(point)
        distinct = all(len({p["sentences"] for p in group}) == len(group) for group in groups.values())
        if distinct and (not best or len(groups) < len(best)):
            best = groups
    for parts, point in zip(paths, points) if not best else ():  # models named by one folder each: a line per model
        best.setdefault(parts, []).append(point)
    keys = list(best)
    shared_head = 0
    while all(len(k) > shared_head + 1 and k[shared_head] == keys[0][shared_head] for k in keys):
        shared_head += 1
    shared_tail = 0
    while all(len(k) > shared_head + shared_tail + 1 and k[-1 - shared_tail] == keys[0][-1 - shared_tail]
              for k in keys):
        shared_tail += 1
    return {str(Path(*k[shared_head:len(k) - shared_tail])): group for k, group in best.items()}


def series_label(row: dict[str, Any], mixed_splits: bool) -> str:
    """A plot's legend entry for a row: its method (and PEFT), and its split where a task's rows were scored
    on different splits (a held-out test split beside dev scores), which one axis must not merge."""
    return row["method"] + (f" + {row['peft']}" if row["peft"] else "") + (f" [{row['split']}]" if mixed_splits else "")


def save_size_plot(fig, ax, sizes: list[int], ylabel: str, title: str, path: Path) -> Path:
    """Finish a plot of scores against post-training sentences (log x, one tick per size) and save it."""
    import matplotlib.pyplot as plt

    if sizes:
        ax.set_xscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([_size(s) for s in sizes])
        ax.minorticks_off()
    ax.set_xlabel("post-training sentences")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    # beside the axes, not over the points; the saved image is cropped to hold it whole
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


TITLE = "# Fine-tuning comparison"
MODEL_FILES = ("config.json", "adapter_config.json")


def check_out(out: Path, paths: list[str], rows: list[dict[str, Any]]) -> None:
    """`--out` may not overlap what compare reads (an input folder, or the run folder of an input results.json,
    which a later fine-tuning there would refuse) nor be or lie inside a model folder (saved and published with
    the model): refused in one line before anything is written."""
    if blocked := file_in_the_way(out):
        raise CompareError(f"--out {out} {blocked}; give a folder")
    for raw in paths:
        read = Path(raw)
        if read.is_file() and read.name == RESULTS_FILE:
            read = read.parent  # a fine-tuning run's folder
        if overlapping(out, read):
            raise CompareError(f"--out {out} overlaps the input {raw}: results.md and the plots would go among the "
                               "results it reads; choose another output folder")
    target = out.expanduser().resolve()
    models = {Path(r["model"]).expanduser().resolve() for r in rows if r["model"] and Path(r["model"]).is_dir()}
    for folder in (target, *target.parents):
        if folder in models or any((folder / name).is_file() for name in MODEL_FILES):
            raise CompareError(f"--out {out} {'is' if folder == target else 'lies inside'} the model folder {folder}: "
                               "results.md and the plots would be saved with the model; choose another output folder")


def earlier_plots(out: Path, tasks: set[str]) -> list[Path]:
    """The plots an earlier compare wrote in `out` for tasks this one has not (the tasks its results.md lists)."""
    table = out / "results.md"
    text = table.read_text(encoding="utf-8", errors="replace") if table.is_file() else ""
    if not text.startswith(TITLE):  # not compare's
        return []
    before = set(re.findall(r"^### (\S+) \(", text, flags=re.MULTILINE))
    return [out / f"{task}.png" for task in sorted(before - tasks) if (out / f"{task}.png").is_file()]


def compare(paths: list[str], out: str | Path) -> dict[str, Any]:
    rows = load_results(find_results(paths))
    out = Path(out)
    check_out(out, paths, rows)
    out.mkdir(parents=True, exist_ok=True)
    by_task = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    for stale in earlier_plots(out, set(by_task)):  # one plot per task compared now, none of an earlier compare's
        stale.unlink()
    table = markdown_table(rows)
    (out / "results.md").write_text(f"{TITLE}\n\n" + table, encoding="utf-8")
    plots = [str(plot_task(task, task_rows, out)) for task, task_rows in sorted(by_task.items())]
    return {"table": str(out / "results.md"), "plots": plots, "rows": rows, "markdown": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Markdown table and PNG plots from finetune.py results.json files")
    parser.add_argument("results", nargs="+", help="results.json files or folders holding them")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    try:
        report = compare(args.results, args.out)
    except UserError as error:
        return report_error(error)
    print(report["markdown"])
    print(f"wrote {report['table']} and {len(report['plots'])} plot(s): {', '.join(report['plots'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
