#!/usr/bin/env python
"""The learning curve of a post-training run: linear probes of every checkpoint against tokens seen.

    xpt-learning-curve runs/cpu-hour --task nsmc=../shared/data/tasks/nsmc \
        --task korsts=../shared/data/tasks/korsts --max-train-samples 2000

Every checkpoint a run kept (`keep_checkpoints: true`), and its finished model when there is one,
is read with `training.linear_reads.probe` (frozen encoder, mean- and first-token pooling,
regularisation chosen on dev) on the same task splits; the no-model floor is computed once per task
on those splits. Writes `RUN/learning_curve.json` after every point (a rerun with the same tasks and
settings keeps its points and probes only the missing ones) and prints one Markdown table: step, real tokens
seen, each task's probe score beside its floor (test split where the task has one, else dev; STS
also without training, the cosine).

A checkpoint holds weights, not a model folder: its weights are put into the run's architecture,
rebuilt from the run's settings (saved in each checkpoint; `--config` for checkpoints of earlier
versions) and the run's tokenizer, and saved as a model folder in a temporary directory.
"""
from __future__ import annotations

import sys
from pathlib import Path


import argparse
import json
import tempfile
from typing import Any

from tokenization.errors import UserError, report_error
from tokenization.folders import write_text_atomic
from training.checkpointing import list_checkpoints, read_state
from training.run_record import CURVE_FILE, SUMMARY_FILE
from training.tasks import TaskDataError, get_task, load_task_data


def run_config(run: Path, checkpoint: Path, config_file: str | None):
    """The PostTrainConfig of the run: saved in the checkpoint, else read from `config_file`."""
    from training.config import config_from_dict, load_config

    settings = read_state(checkpoint).get("settings")
    if settings is not None:
        return config_from_dict(settings)
    if config_file is None:
        raise TaskDataError(f"{checkpoint} holds no record of the run's settings (written by an earlier version): "
                            "pass the run's --config")
    return load_config(["--config", config_file, "--output-dir", str(run)])


def checkpoint_model(run: Path, checkpoint: Path, config, out: Path) -> Path:
    """The checkpoint's weights as a model folder in `out` (model, tokenizer, remote code)."""
    import torch
    from transformers import AutoTokenizer

    from modeling_xpt import save_model_folder
    from training.inputs import resolve_source

    tokenizer_dir = config.tokenizer or str(run / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = config.method_entry().build(resolve_source(config.source), tokenizer, embedding_init=config.embedding_init,
                                        itl_init=config.itl_init, adapter_size=config.adapter_size)
    state = torch.load(checkpoint / "pytorch_model.bin", map_location="cpu", weights_only=True)
    # the checkpoint holds the training module: with word-order prediction on, its head too (not part of the model)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("wop_head.")})
    save_model_folder(model, tokenizer, out)
    return out


def learning_curve(run: str | Path, tasks: dict[str, str], max_train_samples: int | None, max_length: int,
                   config_file: str | None = None, data_seed: int = 0, steps: list[int] | None = None,
                   hold_out_test: dict[str, int] | None = None, max_eval_samples: int | None = None) -> dict[str, Any]:
    """The curve of `run` (see the module docstring); `steps`: only the checkpoints (and finished model) of
    these steps. `RUN/learning_curve.json` is rewritten after every point, and the points it already holds
    for the same tasks and settings are kept, not probed again: an interrupted or partial curve goes on."""
    from training.linear_reads import floor, probe

    run = Path(run)
    if not run.is_dir():
        raise TaskDataError(f"{run}: no such folder (give a post-training output folder)")
    for name, folder in tasks.items():
        if not Path(folder).is_dir():
            raise TaskDataError(f"--task {name}={folder}: no such folder (give the task's data folder)")
    if (run / "results.json").is_file():  # a fine-tuned model carries its post-training run's record too
        raise TaskDataError(f"{run} is a fine-tuned model (it holds results.json), not a post-training run: give the "
                            "folder xpt-post-train wrote")
    checkpoints = list_checkpoints(run)
    finished = (run / SUMMARY_FILE).is_file()
    if not checkpoints and not finished:
        raise TaskDataError(f"{run} holds no checkpoint and no finished model: post-train with keep_checkpoints: true")
    total = json.loads((run / SUMMARY_FILE).read_text(encoding="utf-8"))["total_steps"] if finished else None
    available = sorted({step for step, _ in checkpoints} | ({total} if finished else set()))
    if steps is not None and set(steps) - set(available):
        raise TaskDataError(f"{run}: no checkpoint or finished model at step(s) "
                            f"{', '.join(map(str, sorted(set(steps) - set(available))))}; steps kept: "
                            f"{', '.join(map(str, available))}")
    settings = {"tasks": tasks, "max_train_samples": max_train_samples, "max_length": max_length,
                "data_seed": data_seed, "hold_out_test": hold_out_test or {},
                **({"max_eval_samples": max_eval_samples} if max_eval_samples is not None else {})}
    specs = {name: get_task(name, or_else="") for name in tasks}  # each filled in by its data (labels) and used throughout
    splits = {name: load_task_data(specs[name], folder, max_train_samples, max_eval_samples, data_seed,
                                   (hold_out_test or {}).get(name, 0))
              for name, folder in tasks.items()}
    curve = {"run": str(run), **settings, "floor": {name: floor(specs[name], splits[name]) for name in tasks},
             "points": []}
    earlier = read_curve(run)
    if earlier and all(earlier.get(key) == value for key, value in settings.items()):
        curve["points"] = earlier["points"]
    elif earlier:
        print(f"{run / CURVE_FILE} was made with other tasks or settings: replaced", flush=True)
    done = {point["step"] for point in curve["points"]}

    def add(step: int, tokens: int, folder: Path) -> None:
        reads = {name: probe(folder, specs[name], splits[name], max_length) for name in tasks}
        curve["points"] = sorted([*curve["points"], {"step": step, "tokens_seen": tokens, "probe": reads}],
                                 key=lambda point: point["step"])
        write_curve(run, curve)
        print(f"step {step}: " + ", ".join(f"{n} {r['mean']['score']:.2f}" for n, r in reads.items()), flush=True)

    for step, checkpoint in checkpoints:  # the run's last step: read from the finished model, below, when there is one
        if (steps is None or step in steps) and step not in done and not (finished and step == total):
            with tempfile.TemporaryDirectory(prefix="xpt-curve-") as tmp:
                folder = checkpoint_model(run, checkpoint, run_config(run, checkpoint, config_file), Path(tmp))
                add(step, read_state(checkpoint)["tokens_seen"], folder)
    if finished:
        summary = json.loads((run / SUMMARY_FILE).read_text(encoding="utf-8"))
        step = summary["total_steps"]
        if (steps is None or step in steps) and step not in {point["step"] for point in curve["points"]}:
            add(step, summary["tokens_seen"], run)
    write_curve(run, curve)
    return curve


def read_curve(run: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run / CURVE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_curve(run: Path, curve: dict[str, Any]) -> None:
    write_text_atomic(run / CURVE_FILE, json.dumps(curve, indent=1, ensure_ascii=False) + "\n")


def table(curve: dict[str, Any]) -> str:
    tasks = list(curve["floor"])
    head = "| step | real tokens seen | " + " | ".join(
        f"{t} probe (mean / first) | {t} floor" for t in tasks) + " |"
    lines = [head, "|" + " ---: |" * (2 + 2 * len(tasks))]
    for point in curve["points"]:
        cells = []
        for t in tasks:
            reads = point["probe"][t]
            cells.append(f"{reads['mean']['score']:.1f} / {reads['first']['score']:.1f}")
            cells.append(f"{curve['floor'][t]['score']:.1f}")
        lines.append(f"| {point['step']:,} | {point['tokens_seen']:,} | " + " | ".join(cells) + " |")
    zero_shot = [t for t in tasks if "zero_shot" in curve["floor"][t]]
    for t in zero_shot:
        split = curve["floor"][t]["split"]
        lines += ["", f"{t} without training (Spearman of the cosine, {split}): floor "
                      f"{curve['floor'][t]['zero_shot'][split]:.1f}; probe (mean) by step: " + ", ".join(
                          f"{p['step']:,}: {p['probe'][t]['mean']['zero_shot'][split]:.1f}" for p in curve["points"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("run", help="post-training output folder")
    p.add_argument("--task", action="append", required=True, metavar="NAME=DIR",
                   help="a registered sentence-level task and its data folder (repeatable)")
    p.add_argument("--max-train-samples", type=int, default=2000, help="train examples of every probe (and floor)")
    p.add_argument("--max-eval-samples", type=int, help="dev and test examples of every probe (and floor); default: all")
    p.add_argument("--max-length", type=int, default=64, help="tokens per text")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the train subsample")
    p.add_argument("--config", help="the run's config, for checkpoints that do not hold their settings")
    p.add_argument("--hold-out-test", action="append", default=[], metavar="NAME=N",
                   help="a task without a test split: hold N train examples out as test (as finetune.py does)")
    p.add_argument("--steps", help="comma-separated steps to probe, among the kept checkpoints and the finished model "
                   "(default: all of them)")
    args = p.parse_args(argv)
    try:
        tasks = {}
        for item in args.task:
            name, sep, folder = item.partition("=")
            if not sep:
                raise TaskDataError(f"--task {item!r}: expected NAME=DIR")
            tasks[name] = folder
        try:
            steps = [int(s) for s in args.steps.split(",") if s.strip()] if args.steps else None
        except ValueError:
            raise TaskDataError(f"--steps {args.steps}: give checkpoint steps as whole numbers, e.g. 1000,2000") from None
        held = {}
        for item in args.hold_out_test:
            name, sep, count = item.partition("=")
            if not sep or not count.isdigit():
                raise TaskDataError(f"--hold-out-test {item!r}: expected NAME=N, e.g. nsmc=1000")
            held[name] = int(count)
        curve = learning_curve(args.run, tasks, args.max_train_samples, args.max_length, args.config, args.data_seed,
                               steps, held, args.max_eval_samples)
    except UserError as error:
        return report_error(error)
    print(table(curve))
    note = only_the_finished_model(Path(args.run))
    if note:
        print(note)
    return 0


def only_the_finished_model(run: Path) -> str | None:
    """A note for a run that kept no checkpoints: its curve is the finished model alone, one point."""
    if list_checkpoints(run) or not (run / SUMMARY_FILE).is_file():
        return None
    return (f"note: only the finished model is in this curve: {run} kept no checkpoints (keep_checkpoints false); "
            "post-train with `--keep-checkpoints true` to get a curve")


if __name__ == "__main__":
    sys.exit(main())
