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
