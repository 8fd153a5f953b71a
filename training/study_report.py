"""The report of the data-efficiency study (`training/study.py`, stage 5): the finished runs and their
scores collected for `results.json`, the data-efficiency factor and the per-size XPT/Scratch verdict,
the tables of `results.md` and one PNG per task.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from tokenization.folders import write_text_atomic
from training.compare import UNTRAINED, UNTRAINED_NOTE, save_size_plot
from training.linear_reads import floor_bar
from training.run_record import RESULTS_FILE, RecordError, RunRecord
from training.study import SOURCE_RUN, StudyError, StudySpec, finished, run_name

BASELINE = "scratch"
FOCUS = "xpt"


def collect(spec: StudySpec, out: Path) -> dict[str, Any]:
    """results.json content: every finished (method, size) with its post-training record and task scores.

    A run whose post-training or any fine-tuning has not finished is listed under "missing"."""
    runs, missing = [], []
    for size in spec.sizes:
        for method in spec.methods:
            folder = out / "models" / run_name(method, size)
            if not finished(folder) or not all(finished(out / "finetune" / folder.name / n) for n in spec.tasks):
                missing.append(folder.name)
                continue
            try:
                summary = RunRecord.read(folder)
            except RecordError as error:
                raise StudyError(str(error)) from None
            record = {
                "method": method, "sentences": size, "model": str(folder.relative_to(out)),
                "mlm_test": summary.final_metrics, "mlm_split": summary.final_metrics_split,
                "tokens_seen": summary.tokens_seen, "post_training_wall_s": summary.wall_time_s,
                "post_training_steps": summary.total_steps, "hardware": summary.hardware, "tasks": {}}
            for name in spec.tasks:
                results = json.loads((out / "finetune" / folder.name / name / RESULTS_FILE).read_text(encoding="utf-8"))
                walls = [json.loads(p.read_text())["wall_time_s"]
                         for p in sorted((out / "finetune" / folder.name / name / "runs").glob("seed_*.json"))]
                finite = [x for x in results["scores"] if math.isfinite(x)]
                record["tasks"][name] = {
                    "metric": results["metric"], "split": results["split"], "mean": results["mean"],
                    "sd": results["std"], "scores": results["scores"], "seeds": results["seeds"],
                    # over the seeds that did not diverge (min and max of a list holding NaN depend on its order)
                    "min": min(finite, default=math.nan), "max": max(finite, default=math.nan),
                    "diverged": len(results["scores"]) - len(finite),
                    "dev_scores": [r["dev"] for r in results["runs"]],
                    "best_epochs": [r.get("best_epoch") for r in results["runs"]],
                    "examples": results["num_examples"], "fine_tuning_wall_s": round(sum(walls), 1)}
                record["tasks"][name].update(linear_reads_of(results))
            runs.append(record)
    floors, source = {}, {}
    for name in spec.tasks:
        path = out / "finetune" / SOURCE_RUN / name / RESULTS_FILE
        if finished(path.parent):
            results = json.loads(path.read_text(encoding="utf-8"))
            source[name] = linear_reads_of(results)
            floors[name] = source[name]["floor"]
    factors = {name: efficiency_factor(runs, name, floor_bar(floors[name])[0] if name in floors else None)
               for name in spec.tasks}
    factors["mlm_perplexity"] = efficiency_factor(runs, None)
    return {"spec": spec.to_dict(), "runs": runs, "missing": missing, "data_efficiency": factors,
            "separation": {name: separation(runs, name) for name in spec.tasks}, "floor": floors, "source": source}


def linear_reads_of(results: dict[str, Any]) -> dict[str, Any]:
    """The probes' scores by pooling, STS's cosine without training (mean pooling) and the floor's score,
    from a finetune.py results.json written with --mode probe|both --floor."""
    probe = results.get("probe") or {}
    reads: dict[str, Any] = {"probe": {pooling: r["score"] for pooling, r in probe.items()}}
    if probe.get("mean", {}).get("zero_shot"):
        reads["zero_shot"] = probe["mean"]["zero_shot"][probe["mean"]["split"]]
    if results.get("floor"):
        floor = results["floor"]
        reads["floor"] = {"score": floor["score"], "split": floor["split"], "estimator": floor["estimator"],
                          "zero_shot": (floor.get("zero_shot") or {}).get(floor["split"])}
    return reads


def _score(run: dict[str, Any], task: str | None) -> float:
    """Higher is better: the task's mean over seeds, or minus the MLM perplexity."""
    return run["tasks"][task]["mean"] if task else -run["mlm_test"]["perplexity"]


def _one_seed(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One of the two cells has a single seed: no range to compare."""
    return min(len(a["scores"]), len(b["scores"])) < 2


def _disjoint_above(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every seed of `a` scored above every seed of `b`, each with two seeds or more (one seed has no range) and
    none diverged (a NaN score is above or below nothing)."""
    return not _one_seed(a, b) and not a.get("diverged") and not b.get("diverged") and a["min"] > b["max"]


TIE = 1e-9  # scores closer than this are the same score


def _shown(score: float, task: str | None) -> str:
    return f"{score:.1f}" if task else f"perplexity {-score:.1f}"


def no_factor(xpt: dict[int, Any], scratch: dict[int, Any], task: str | None,
              floor: float | None = None) -> dict[str, Any] | None:
    """Why no factor can be read from these runs, or None when one can: every XPT and Scratch run scores the
    same (no difference between the methods in this range), or Scratch does not improve with more sentences
    over the sizes it was run at (then XPT matching Scratch at a larger size says nothing about sentences)."""
    scores = [_score(r, task) for r in (*xpt.values(), *scratch.values())]
    if max(scores) - min(scores) <= TIE:
        same = floor is not None and abs(floor - scores[0]) <= TIE
        return {"factor": None, "no_difference": True,
                "text": f"none: no difference between XPT and Scratch in this range (every run scores "
                        f"{_shown(scores[0], task)}{', as does the no-model floor' if same else ''})"}
    sizes = sorted(scratch)
    if len(sizes) > 1 and not any(_score(scratch[m], task) > _score(scratch[s], task) + TIE
                                  for s in sizes for m in sizes if m > s):
        listed = ", ".join(f"{_shown(_score(scratch[n], task), task)} at {n:,}" for n in sizes)
        return {"factor": None, "scratch_flat": True,
                "text": f"none: Scratch does not improve with more sentences in this range ({listed}), so no "
                        "score of XPT can be read as a number of Scratch's sentences"}
    return None


def _scratch_gains(scratch: dict[int, Any], task: str | None, n: int, m: int) -> bool:
    """Scratch at `m` sentences scores above Scratch at the first size it was run at from `n` on (itself when
    that is `m`): the extra sentences made Scratch better, so matching it there is worth them."""
    start = min(s for s in scratch if s >= n)
    return m == start or _score(scratch[m], task) > _score(scratch[start], task) + TIE


def _listed(sizes) -> str:
    return ", ".join(f"{n:,}" for n in sizes)


def efficiency_factor(runs: list[dict[str, Any]], task: str | None, floor: float | None = None) -> dict[str, Any]:
    """Largest k such that XPT at N sentences matches or beats Scratch at k x N (means over seeds), where
    Scratch at k x N is better than Scratch at N: without that gain, the sentences buy nothing to match.

    k is read off the sizes that were run, so it is a lower bound whenever some XPT size matches Scratch's
    largest size (Scratch was not run beyond it). For tasks the record also says whether the two seed
    ranges are disjoint, since a mean that "matches" inside the seed spread proves little. No factor is
    given where every run ties (`floor`: the no-model floor's score, named when it ties too) or where
    Scratch does not improve with more sentences."""
    xpt = {r["sentences"]: r for r in runs if r["method"] == FOCUS}
    scratch = {r["sentences"]: r for r in runs if r["method"] == BASELINE}
    if not xpt or not scratch:
        return {"factor": None, "text": "needs finished XPT and Scratch runs"}
    refused = no_factor(xpt, scratch, task, floor)
    if refused:
        return refused
    best = None
    for n, run in sorted(xpt.items()):
        for m, reference in sorted(scratch.items()):
            if m >= n and _score(run, task) >= _score(reference, task) and _scratch_gains(scratch, task, n, m) \
                    and (best is None or m / n > best["factor"]):
                best = {"factor": m / n, "xpt_sentences": n, "scratch_sentences": m,
                        "xpt_score": _score(run, task), "scratch_score": _score(reference, task)}
                if task:
                    best["seed_ranges_disjoint"] = _disjoint_above(run["tasks"][task], reference["tasks"][task])
                    best["one_seed"] = _one_seed(run["tasks"][task], reference["tasks"][task])
    if best is None:
        return {"factor": None, "text": "not reached within the sizes run"}
    # Scratch was not run above its largest size: where any XPT size matches that largest size, a larger
    # Scratch size might still be matched (a larger factor), so the factor is a lower bound
    top = max(scratch)
    bounded = any(_score(xpt[n], task) >= _score(scratch[top], task) for n in xpt)
    best["lower_bound"] = bounded
    # The factor reads as data efficiency only where XPT is not behind Scratch at the same size.
    behind = [n for n in sorted(xpt) if n in scratch and _score(xpt[n], task) < _score(scratch[n], task)]
    if behind:
        best["xpt_behind_at"] = behind
    if best["factor"] == 1:  # "at least 1x" would read as a gain where XPT only keeps level at equal data
        level = [n for n in sorted(xpt) if n in scratch and n not in behind]
        best["text"] = ("1x within the sizes run, no gain: XPT matches or beats Scratch only with as many sentences "
                        f"(at {_listed(level)})" + (f" and is below it at {_listed(behind)}" if behind else ""))
        return best
    best["text"] = (f"{'at least ' if bounded else ''}{best['factor']:g}x: XPT at {best['xpt_sentences']:,} "
                    f"sentences matches or beats Scratch at {best['scratch_sentences']:,}")
    if best.get("one_seed"):
        best["text"] += " (one seed: no range to compare)"
    elif "seed_ranges_disjoint" in best:
        best["text"] += " (seed ranges disjoint)" if best["seed_ranges_disjoint"] else " (seed ranges overlap)"
    if behind:
        best["text"] += (f"; but XPT is below Scratch at the same size at {_listed(behind)} "
                         "sentences, so the curves cross and the factor is not a data-efficiency gain")
    return best


def separation(runs: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """Per size: XPT above Scratch, and whether their seed ranges overlap."""
    table = {}
    for size in sorted({r["sentences"] for r in runs}):
        by_method = {r["method"]: r["tasks"][task] for r in runs if r["sentences"] == size}
        if FOCUS in by_method and BASELINE in by_method:
            a, b = by_method[FOCUS], by_method[BASELINE]
            table[str(size)] = {"xpt_above": a["mean"] > b["mean"],
                                "ranges_disjoint": _disjoint_above(a, b) or _disjoint_above(b, a),
                                "one_seed": _one_seed(a, b)}
    return table


def untrained_seeds(t: dict[str, Any]) -> int:
    """How many seeds kept the untrained model (best epoch 0) and scored a number (a diverged seed scores NaN)."""
    return sum(epoch == 0 and math.isfinite(score) for epoch, score in zip(t.get("best_epochs") or [], t["scores"]))


def _untrained_mark(t: dict[str, Any]) -> str:
    count = untrained_seeds(t)
    if not count:
        return ""
    return f" {UNTRAINED}" if count == len(t["scores"]) else f" {UNTRAINED} ({count} of {len(t['scores'])} seeds)"


def _seed_cell(t: dict[str, Any]) -> str:
    """A task cell of the results table: mean ± sd [min, max] over seeds, how many diverged, and a mark where
    the best epoch was 0 (the untrained model's score)."""
    if len(t["scores"]) < 2:
        return f"{t['mean']:.1f} (1 seed){_untrained_mark(t)}"
    diverged = f" ({t['diverged']} diverged)" if t.get("diverged") else ""
    return f"{t['mean']:.1f} ± {t['sd']:.1f} [{t['min']:.1f}, {t['max']:.1f}]{diverged}{_untrained_mark(t)}"


def markdown(report: dict[str, Any], spec: StudySpec) -> str:
    runs = report["runs"]
    lines = ["# Data-efficiency study", "", spec.description.strip(), "", machine_line(runs), ""]
    if report["missing"]:
        lines += [f"**Incomplete: not finished yet: {', '.join(report['missing'])}.**", ""]
    if not runs:
        return "\n".join(lines) + "\n"
    for task in spec.tasks:
        first = runs[0]["tasks"][task]
        lines += [f"## {task}: {first['metric']} on {first['split']} (mean ± sd over seeds [min, max])", ""]
        lines += method_by_size(runs, spec, _seed_cell, task)
        lines += reference_rows(spec, report["floor"].get(task), report["source"].get(task), "probe")
        if any(untrained_seeds(r["tasks"][task]) for r in runs):
            lines += ["", UNTRAINED_NOTE]
        lines += ["", floor_verdict(runs, spec, task, report["floor"].get(task)),
                  "", f"Data-efficiency factor (XPT vs Scratch): {report['data_efficiency'][task]['text']}.", ""]
        verdicts = report["separation"][task]
        lines.append("XPT above Scratch with disjoint seed ranges: " + (", ".join(
            f"{int(n):,}: {'yes' if v['xpt_above'] and v['ranges_disjoint'] else ('above, one seed' if v['xpt_above'] and v.get('one_seed') else 'above, ranges overlap' if v['xpt_above'] else 'no')}"
            for n, v in verdicts.items()) or "no size has both finished") + ".")
        lines.append("")
        lines += reads_table(runs, spec, task, report["floor"].get(task), report["source"].get(task))
    lines += ["## Held-out MLM (test split, fixed masks)", "",
              "| method | sentences | perplexity | hits@1 | hits@10 | MRR | tokens seen | post-training wall s |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        m = r["mlm_test"]
        lines.append(f"| {r['method']} | {r['sentences']:,} | {m['perplexity']:.1f} | {m['hits@1']:.3f} | "
                     f"{m['hits@10']:.3f} | {m['mrr']:.3f} | {r['tokens_seen']:,} | {r['post_training_wall_s']:.0f} |")
    lines += ["", f"Data-efficiency factor on MLM perplexity: {report['data_efficiency']['mlm_perplexity']['text']}.", ""]
    lines += ["## Fine-tuning cost", "", "| task | train / dev / test examples | wall s per model (all seeds, median) |",
              "| --- | --- | ---: |"]
    for task in spec.tasks:
        ex = runs[0]["tasks"][task]["examples"]
        walls = [r["tasks"][task]["fine_tuning_wall_s"] for r in runs]
        lines.append(f"| {task} | {ex.get('train')} / {ex.get('dev')} / {ex.get('test', '-')} | {statistics.median(walls):.0f} |")
    return "\n".join(lines) + "\n"


def method_by_size(runs: list[dict[str, Any]], spec: StudySpec, cell, task: str) -> list[str]:
    """A markdown table, a row per method and a column per size; `cell` formats a run's entry for `task`."""
    lines = ["| method | " + " | ".join(f"{n:,} sentences" for n in spec.sizes) + " |",
             "| --- |" + " ---: |" * len(spec.sizes)]
    for method in spec.methods:
        found = {r["sentences"]: r["tasks"][task] for r in runs if r["method"] == method}
        lines.append(f"| {method} | " + " | ".join(cell(found[n]) if n in found else "not run" for n in spec.sizes) + " |")
    return lines


def reference_rows(spec: StudySpec, floor: dict[str, Any] | None, source: dict[str, Any] | None, kind: str) -> list[str]:
    """Rows for a method-by-size table: the no-model floor and the English source as it is, the same at
    every size (they do not post-train). `kind`: "probe" (one score: the floor's, the source's
    mean-pooled probe), "probes" (mean / first token) or "zero_shot" (cosine without training)."""
    def row(label: str, text: str | None) -> list[str]:
        return [f"| {label} | " + " | ".join([text] * len(spec.sizes)) + " |"] if text else []

    floor_text = source_text = None
    if floor:
        cosine = f"{floor['zero_shot']:.1f}" if floor.get("zero_shot") is not None else None
        floor_text = cosine if kind == "zero_shot" else f"**{floor['score']:.1f}**"
        if kind == "probe" and cosine:  # fine-tuned scores face both no-model reads: the stronger in bold
            bar = floor_bar(floor)[0]
            floor_text = (f"{floor['score']:.1f}; cosine **{cosine}**" if bar != floor["score"] else
                          f"**{floor['score']:.1f}**; cosine {cosine}")
    probe = (source or {}).get("probe") or {}
    if kind == "zero_shot":
        source_text = f"{source['zero_shot']:.1f}" if source and "zero_shot" in source else None
    elif kind == "probes":
        source_text = " / ".join(f"{probe[p]:.1f}" for p in ("mean", "first") if p in probe) or None
    elif "mean" in probe:
        source_text = f"{probe['mean']:.1f} (probe)"
    return row("no-model floor (TF-IDF)", floor_text) + row("English source as it is", source_text)


def floor_verdict(runs: list[dict[str, Any]], spec: StudySpec, task: str, floor: dict[str, Any] | None) -> str:
    """At the largest size: is fine-tuned XPT above the floor's bar (`floor_bar`) with every seed?"""
    largest = max(spec.sizes)
    xpt = next((r["tasks"][task] for r in runs if r["method"] == FOCUS and r["sentences"] == largest), None)
    if not floor or xpt is None:
        return f"XPT against the floor at {largest:,} sentences: not available (a run has not finished)."
    bar, what = floor_bar(floor)
    scores = xpt["scores"]
    above = sum(score > bar for score in scores)
    verdict = "above with every seed" if above == len(scores) else f"above with {above} of {len(scores)} seeds"
    seeds = ", ".join(f"{score:.1f}" for score in scores)
    return (f"XPT fine-tuned at {largest:,} sentences against the no-model floor ({bar:.1f}, {what}): "
            f"{verdict} (seeds {seeds}).")


def machine_line(runs: list[dict[str, Any]]) -> str:
    """Where the post-training ran (device, CPU class or GPU, precision, versions) and the total wall time."""
    if not runs:
        return "Machine: no run has finished yet."
    hardware = [r.get("hardware") or {} for r in runs]
    kinds = sorted({h.get("gpu") or f"CPU class {h.get('cpu_class', '?')}" for h in hardware})
    precision = sorted({str(h.get("mixed_precision")) for h in hardware})
    versions = sorted({f"torch {h.get('torch')}, transformers {h.get('transformers')}" for h in hardware})
    post = sum(r.get("post_training_wall_s") or 0 for r in runs)
    tuned = sum(t.get("fine_tuning_wall_s") or 0 for r in runs for t in r["tasks"].values())
    return (f"Machine: {', '.join(kinds)} ({'/'.join(precision)} mixed precision; {'; '.join(versions)}). "
            f"Wall time: {post / 60:.0f} min of post-training and {tuned / 60:.0f} min of fine-tuning seeds "
            "(probes, floors and set-up not counted).")


def reads_table(runs: list[dict[str, Any]], spec: StudySpec, task: str, floor: dict[str, Any] | None,
                source: dict[str, Any] | None) -> list[str]:
    """The linear probes by method and size, the cosine without training for STS, and the two references:
    the no-model floor and the English source as it is."""
    lines = [f"### {task}: linear probes of the frozen encoders (mean-pooled / first token; the same splits)", ""]
    lines += method_by_size(runs, spec, lambda t: " / ".join(f"{t['probe'][p]:.1f}" for p in ("mean", "first")
                                                             if p in t.get("probe", {})) or "not run", task)
    lines += reference_rows(spec, floor, source, "probes")
    if any("zero_shot" in r["tasks"][task] for r in runs):
        lines += ["", f"{task} without any training: Spearman x 100 of the cosine of mean-pooled states", ""]
        lines += method_by_size(runs, spec, lambda t: f"{t['zero_shot']:.1f}" if "zero_shot" in t else "-", task)
        lines += reference_rows(spec, floor, source, "zero_shot")
    lines.append("")
    if floor:
        cosine = f"; the cosine of the TF-IDF vectors, no training: {floor['zero_shot']:.1f}" if floor.get("zero_shot") is not None else ""
        lines.append(f"No-model floor (TF-IDF of character 1-3-grams, {floor['estimator']}): **{floor['score']:.1f}**{cosine}.")
    if source and source.get("probe"):
        cosine = f"; cosine without training {source['zero_shot']:.1f}" if "zero_shot" in source else ""
        lines.append(f"The English source as it is (its own tokenizer, no post-training), probed: "
                     f"{source['probe']['mean']:.1f} / {source['probe']['first']:.1f}{cosine}.")
    return lines + [""]


def plot(report: dict[str, Any], spec: StudySpec, folder: Path) -> list[Path]:
    """One PNG per task: metric against post-training sentences (log x), a line per method, seed min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    if not report["runs"]:
        return paths
    for task in spec.tasks:
        fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
        for method in spec.methods:
            points = sorted((r["sentences"], r["tasks"][task]) for r in report["runs"] if r["method"] == method)
            xs = [p[0] for p in points]
            ax.plot(xs, [p[1]["mean"] for p in points], marker="o", label=method)
            ax.fill_between(xs, [p[1]["min"] for p in points], [p[1]["max"] for p in points], alpha=0.15)
        floor, source = report["floor"].get(task), report["source"].get(task)
        if floor:
            bar, what = floor_bar(floor)
            ax.axhline(bar, color="gray", linestyle="--", linewidth=1, label=f"no-model floor ({what})")
        if source and source.get("probe"):
            ax.axhline(source["probe"]["mean"], color="black", linestyle=":", linewidth=1,
                       label="English source, probed")
        first = report["runs"][0]["tasks"][task]
        paths.append(save_size_plot(fig, ax, spec.sizes, f"{first['metric']} ({first['split']})",
                                    f"{task}: mean over seeds, band = seed min-max", folder / f"{task}.png"))
    return paths


def rewrite(folder: Path) -> Path:
    """A report folder's results.md and plots written again from its own results.json (after a change in how
    the report is drawn): nothing is collected from runs, nothing is run."""
    path = folder / "results.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        spec = StudySpec.from_dict(report["spec"])
        write_text_atomic(folder / "results.md", markdown(report, spec))
        plot(report, spec, folder)
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise StudyError(f"{path} is not the results.json of a study report ({type(error).__name__}: {error}); "
                         "give --out a study folder or a report folder") from None
    return folder
