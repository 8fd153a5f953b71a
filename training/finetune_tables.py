"""What a fine-tuning run prints: its seeds' scores (`summary_table`) and the no-model floor and probes
(`reads_table`), as Markdown tables; and the seeds' spread (`sample_std`), which results.json records."""
from __future__ import annotations

import math
import statistics
from typing import Any

from training.tasks import TaskSpec


def sample_std(values: list[float]) -> float:
    """The seeds' standard deviation (ddof 1; 0 for one seed, NaN when a diverged seed scored NaN)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    return statistics.stdev(values) if len(values) > 1 else 0.0


def reads_table(spec: TaskSpec, reads: dict[str, Any]) -> str:
    """The floor and the probes as lines of a Markdown table: dev, test, and STS's cosine without training."""
    rows = [("no-model floor (TF-IDF)", reads["floor"])] if "floor" in reads else []
    rows += [(f"linear probe, {pooling}-pooled", result) for pooling, result in reads.get("probe", {}).items()]
    lines = [f"{spec.name}: {spec.metric}, linear reads (regularisation chosen on dev)",
             "| read | estimator | dev | test | cosine, no training (dev / test) |", "| --- | --- | ---: | ---: | ---: |"]
    for name, r in rows:
        test = f"{r['test']:.2f}" if r.get("test") is not None else "-"
        cosine = " / ".join(f"{v:.2f}" for v in r["zero_shot"].values()) if r.get("zero_shot") else "-"
        lines.append(f"| {name} | {r['estimator']} | {r['dev']:.2f} | {test} | {cosine} |")
    return "\n".join(lines)


def summary_table(results: dict[str, Any]) -> str:
    split = results["split"]
    lines = [f"{results['task']}: {results['metric']} on {split}, model {results['model']}",
             "| seed | best epoch | dev | test |", "| ---: | ---: | ---: | ---: |"]
    for run in results["runs"]:
        test = f"{run['test']:.2f}" if run["test"] is not None else "-"
        epoch = f"{run['best_epoch']} (untrained)" if run["best_epoch"] == 0 else run["best_epoch"]
        lines.append(f"| {run['seed']} | {epoch} | {run['dev']:.2f} | {test} |")
    dev_scores = [run["dev"] for run in results["runs"]]
    if len(dev_scores) > 1:  # one seed has no spread to show
        test = f"{results['mean']:.2f} ± {results['std']:.2f}" if split == "test" else "-"
        lines.append(f"| mean ± std | | {statistics.fmean(dev_scores):.2f} ± {sample_std(dev_scores):.2f} | {test} |")
    if any(run["best_epoch"] == 0 for run in results["runs"]):
        lines.append("best epoch 0 (untrained): no epoch of fine-tuning beat the untrained encoder on dev, so that "
                     "seed's scores are the untrained encoder's")
    return "\n".join(lines)


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Whether fine-tuning beat what costs no fine-tuning: the frozen encoder's linear probe (`--mode both`; of
    its poolings the one best on dev) and the no-model floor (`--floor`; `linear_reads.floor_bar`, so STS faces
    the stronger of the trained TF-IDF ridge and the untrained TF-IDF cosine). Each bar is compared on dev and on
    the split the run reports, by the seeds' mean, with the number of seeds above it beside; a bar is beaten only
    where the mean is above it on both. `line` says it in one line, the last one `xpt-finetune` prints."""
    from training.linear_reads import floor_bar

    splits = ["dev"] + (["test"] if results["split"] == "test" else [])
    scores = {split: [run[split] for run in results["runs"]] for split in splits}
    bars: dict[str, dict[str, Any]] = {}
    if results.get("probe"):
        pooling, probe = max(results["probe"].items(), key=lambda item: item[1]["dev"])
        bars["probe"] = {"reading": f"linear probe, {pooling}-pooled (chosen on dev)",
                         "bar": {split: probe[split] for split in splits}}
    if results.get("floor"):
        readings = {split: floor_bar(results["floor"], split) for split in splits}
        bars["floor"] = {"reading": readings[results["split"]][1],
                         "bar": {split: reading[0] for split, reading in readings.items()}}
    for bar in bars.values():
        bar["finetuned_mean"] = {split: statistics.fmean(values) for split, values in scores.items()}
        bar["seeds_above"] = {split: sum(v > bar["bar"][split] for v in values) for split, values in scores.items()}
        bar["above"] = all(bar["finetuned_mean"][split] > bar["bar"][split] for split in splits)  # NaN: below
    split = results["split"]
    mean = statistics.fmean(scores[split])
    where = f"{mean:.2f} on {split}" + (f" (dev {statistics.fmean(scores['dev']):.2f})" if split != "dev" else "")
    if not bars:
        line = (f"verdict: fine-tuned {where}, compared with nothing: add --floor and --mode both to learn whether "
                "it beats the no-model floor and the frozen encoder's linear probe")
        return {"compared_with": [], "line": line}
    names = {"probe": "the frozen encoder's linear probe", "floor": "the no-model floor"}
    parts = []
    for name, bar in bars.items():
        figures = ", ".join(f"{bar['bar'][s]:.2f} on {s}" for s in reversed(splits))
        seeds = f"{bar['seeds_above'][split]}/{len(scores[split])} seeds above on {split}"
        parts.append(f"{'above' if bar['above'] else 'BELOW'} {names[name]} ({figures}; {seeds})")
    line = f"verdict: fine-tuned {where} is " + " and ".join(parts)
    if not all(bar["above"] for bar in bars.values()):
        better = " and ".join(names[n] for n, bar in bars.items() if not bar["above"])
        line += f": {better} serves this task at least as well as this fine-tuned model"
    return {"compared_with": list(bars), **bars, "above_all": all(bar["above"] for bar in bars.values()),
            "line": line}
