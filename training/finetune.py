#!/usr/bin/env python
"""Fine-tune any encoder checkpoint on a Korean downstream task, over N seeds: `results.json`.

    xpt-finetune --model DIR --task korsts --data-dir ../shared/data/tasks/korsts \
        --seeds 3 --output-dir runs/ft/korsts [--max-train-samples N] [--epochs N] [--peft lora [--merge]] \
        [--push-to-hub ORG/NAME [--push-dry-run]]

Works with XPT folders (through the Auto classes; their code runs unasked only when it is this package's own, else
pass ``--trust-remote-code``) and stock Hub/local models (e.g. ``klue/roberta-base``) alike, compared on equal terms.
An MLM-only folder is fine: the Auto class adds a fresh task head.

Defaults follow the XPT paper's fine-tuning table (Table A2): batch 32, learning rate 5e-5 (use
``--learning-rate 1e-5`` for its other setting), 10 epochs (15 with ``--epochs 15``), linear decay with
6% warmup. After every epoch the dev split is scored; the epoch with the best dev score is kept
(``--patience K`` stops after K epochs without improvement), and its test score is reported when the
task has a test split, otherwise its dev score (``results.json["split"]`` says which).

Why a plain PyTorch loop rather than `transformers.Trainer`: five task types (classification,
regression, NER, extractive QA) share one ~40-line loop in which per-epoch dev scoring, best-state
selection, QA span post-processing and per-seed determinism are all visible; with Trainer the same
needs a `compute_metrics` per type, a QA post-processing subclass, and callbacks, and its
argument set moves between major versions (this must run on transformers 5.17-5.x). The run is
deterministic for a given seed on CPU (same data order, dropout and head init); GPU kernels may
differ in the last digits.

Outputs in ``--output-dir``: ``results.json`` (schema in DEVELOPERS.md), ``runs/seed_<s>.json`` (one
per run: per-epoch train loss and dev metrics, step losses, best epoch) and a summary table on stdout.
With ``--save-model best`` (the default) also the model of the seed with the best dev score, at its
best dev epoch: ``model/`` (a full fine-tune, or with ``--peft lora --merge`` the merged model), loadable
with ``AutoModelForSequenceClassification.from_pretrained(dir, trust_remote_code=True)``, and with
``--peft lora`` its adapter in ``adapter/`` (see `training/finetuned_model.py`). ``--push-to-hub ORG/NAME``
then publishes ``model/`` through ``cards.push`` (card, validation, fresh-process load check, one upload;
``--push-dry-run`` checks without uploading); the options are checked before any training.
Bad input (missing columns, labels outside the label set, empty split, no head for the task type,
tokenizer/model vocabulary mismatch) exits with status 2 and a one-line message.

This module holds the run: the training loop, dev/test scoring, results.json and its tables, saving and
publishing. The command line and its option checks are in `training/finetune_cli.py`, the encoding of
task data and decoding of predictions in `training/task_encoding.py`, the model with its task head in
`training/task_model.py`.
"""
from __future__ import annotations

import inspect
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from tokenization.errors import UserError, report_error
from training import metrics_downstream, sentence_similarity
from training.finetune_cli import (build_parser, check_options, check_publishable, check_reused_folder,
                                   hyperparameters, pair_recipe, recorded_model, resolve_options, unused_by_a_probe)
from training.finetune_tables import reads_table, sample_std, summary_table, verdict
from training.publishing import publisher, retry_command
from training.run_record import RESULTS_FILE, RecordError, RunRecord
from training.task_encoding import MODEL_INPUTS, build_features, collate, score
from training.task_model import (apply_lora, check_pooling, load_model, load_tokenizer_and_config, max_input_length,
                                 post_training_dropout, start_at_label_mean)
from training.tasks import TaskDataError, TaskSpec, load_task_data, spec_from_cli


# --- evaluation ----------------------------------------------------------------------------------------------
def autocast(device, mixed_precision: str):
    """bf16 autocast on `device` when `mixed_precision` is "bf16" (weights and the optimiser stay fp32)."""
    import torch

    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16")


def predict(model, features, batch_size: int, pad_token_id: int, task_type: str, device, accepted: set[str],
            mixed_precision: str = "no"):
    import torch

    model.eval()
    # Batches of similar length, so that little of each batch is padding; outputs in the features' order.
    order = sorted(range(len(features)), key=lambda i: (len(features[i]["input_ids"]),
                                                         len(features[i].get("input_ids_b", ()))))
    outputs = [None] * len(features)
    for start in range(0, len(order), batch_size):
        chosen = order[start:start + batch_size]
        batch = collate([features[i] for i in chosen], pad_token_id, task_type)
        inputs = {k: v.to(device) for k, v in batch.items() if k in accepted}
        with torch.no_grad(), autocast(device, mixed_precision):
            result = model(**inputs)
        if task_type == "qa":  # one copy to the host per batch, then a row per example
            starts, ends = result.start_logits.float().cpu().numpy(), result.end_logits.float().cpu().numpy()
            for row, i in enumerate(chosen):
                outputs[i] = (starts[row], ends[row])
        else:
            logits = result.logits.float().cpu().numpy()
            for row, i in enumerate(chosen):
                outputs[i] = logits[row]
    return outputs


def evaluate_split(model, spec, features, rows, args, pad_token_id, device, accepted) -> dict[str, float]:
    outputs = predict(model, features, args.eval_batch_size or 2 * args.batch_size, pad_token_id,
                      spec.task_type, device, accepted, args.mixed_precision)
    return score(spec, features, outputs, rows)


# --- training ------------------------------------------------------------------------------------------------
def set_seed(seed: int) -> None:
    from transformers import set_seed as hf_set_seed

    hf_set_seed(seed)  # python random, numpy, torch (CPU and CUDA)


def accepted_inputs(model) -> set[str]:
    parameters = inspect.signature(model.forward).parameters
    names = set(MODEL_INPUTS) | {"labels", "start_positions", "end_positions"} | set(sentence_similarity.SECOND)
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        # Remote-code and stock encoders take **kwargs; keep token_type_ids only where named.
        return {n for n in names if n in parameters or n != "token_type_ids"}
    return {n for n in names if n in parameters}


class SpeedPaths:
    """Post-training's speed choices for this device, from the same function (`training.step.resolve_speed`),
    unless `--speed-paths off`: fused AdamW (`fused`); on CPU, freed memory kept in the process
    (`retain_freed_memory`) and, for an XPT encoder, the explicit fp32 attention with threshold dropout
    masks while it trains (`use_speed_paths`; written and tested for XPT's attention module and mask,
    so other encoders keep their own). Dev and test are scored with the model's own attention and
    dropout (`own`), so that every reported score and the saved model compute what a reloaded model
    computes."""

    def __init__(self, model, args, device):
        from training.config import PostTrainConfig
        from training.step import resolve_speed, retain_freed_memory

        self.model, self.fused, self.training_paths, self.own_attention = model, False, None, None
        if args.speed_paths == "off":
            return
        speed = resolve_speed(PostTrainConfig(mixed_precision=args.mixed_precision), device.type)
        self.fused = speed.fused_adamw
        if speed.retain_memory:
            retain_freed_memory()
        if getattr(model.config, "model_type", None) == "xpt":
            self.training_paths = (speed.attention, speed.dropout_mask)
            self.own_attention = model.config._attn_implementation

    def train(self) -> None:
        self._use(self.training_paths)

    def own(self) -> None:
        self._use((self.own_attention, "torch"))

    def _use(self, paths) -> None:
        from training.masked_lm import use_speed_paths

        if self.training_paths:  # an XPT encoder with the speed settings on; others are never changed
            use_speed_paths(self.model, *paths)


def train_one_seed(args, spec: TaskSpec, config, tokenizer, splits, features, seed: int, device,
                   progress: bool = True) -> tuple[dict[str, Any], Any]:
    """Train from `args.model` with `seed`; keep the best-dev epoch's weights; return (run record, model)."""
    import torch

    from training.step import WarmupSchedule, weight_decay_groups

    set_seed(seed)
    if args.pair_encoding == "bi":
        from transformers import AutoModel

        model = sentence_similarity.CosineSimilarityRegressor(
            AutoModel.from_pretrained(args.model, trust_remote_code=args.trust_remote_code), spec.label_range or (0.0, 1.0),
            loss=args.sts_loss, max_seq_length=max_input_length(args.max_length, tokenizer, config))
    else:
        model = load_model(args.model, spec, config, spec.labels, args.pooling, args.trust_remote_code)
    accepted = accepted_inputs(model)
    if spec.task_type == "regression" and args.pair_encoding != "bi":
        start_at_label_mean(model, [f["labels"] for f in features["train"]])
    if args.dropout is not None:
        from training.masked_lm import set_dropout  # with torch, loaded only when a run trains

        set_dropout(model, args.dropout, args.dropout)
    if args.peft == "lora":
        model = apply_lora(model, spec, args.lora_r, args.lora_alpha, args.lora_dropout)
    model.to(device)
    pad = tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(features["train"], batch_size=args.batch_size, shuffle=True,
                                         generator=generator, collate_fn=lambda b: collate(b, pad, spec.task_type))
    speed = SpeedPaths(model, args, device)
    optimizer = torch.optim.AdamW(weight_decay_groups(model, args.weight_decay), lr=args.learning_rate,
                                  fused=speed.fused or None)
    total_steps = args.epochs * len(loader)
    # the warmup schedule of post-training: the first step already trains (transformers' starts at 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupSchedule(math.ceil(args.warmup_ratio * total_steps), total_steps, "linear"))

    best_score, best_epoch, best_state, best_dev, stale, diverged = -math.inf, 0, None, {}, 0, None
    epochs, step_losses = [], []
    started = time.time()
    if args.pair_encoding == "bi":  # it starts at the zero-shot cosine: fine-tuning must beat it on dev to count
        best_dev = evaluate_split(model, spec, features["dev"], splits["dev"], args, pad, device, accepted)
        best_score = best_dev[spec.metric]
        best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        epochs.append({"epoch": 0, "train_loss": None, "dev": best_dev})
        tqdm.write(f"seed {seed} epoch 0 (before training: the untrained encoder's cosine): dev {spec.metric} "
                   f"{best_score:.2f}")
    for epoch in range(1, args.epochs + 1):
        model.train()
        speed.train()
        losses = []
        bar = tqdm(loader, desc=f"seed {seed} epoch {epoch}/{args.epochs}", leave=False, disable=not progress)
        for batch in bar:
            inputs = {k: v.to(device) for k, v in batch.items() if k in accepted}
            with autocast(device, args.mixed_precision):
                loss = model(**inputs).loss
            loss.backward()
            if args.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        step_losses.extend(losses)
        speed.own()
        dev = evaluate_split(model, spec, features["dev"], splits["dev"], args, pad, device, accepted)
        if not all(math.isfinite(x) for x in losses):  # diverged: the weights are NaN, their scores are no result
            diverged, dev = epoch, {name: math.nan for name in dev}
            tqdm.write(f"seed {seed} diverged in epoch {epoch} (training loss not finite): lower --learning-rate")
        epochs.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "dev": dev})
        # One line per epoch even without bars: a log of a long run shows where it is and how dev moves.
        tqdm.write(f"seed {seed} epoch {epoch}: train loss {np.mean(losses):.4f}, dev {spec.metric} "
                   f"{dev[spec.metric]:.2f} ({time.time() - started:.0f} s)")
        if best_state is None or improves(dev[spec.metric], best_score):  # a NaN one still keeps its first epoch
            best_score, best_epoch, best_dev, stale = dev[spec.metric], epoch, dev, 0
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            stale += 1
            if args.patience and stale >= args.patience:
                break
        if diverged:
            break
    model.load_state_dict(best_state)
    failed = diverged is not None and best_epoch in (0, diverged)  # no fine-tuned epoch kept: it scores NaN
    test = None
    if "test" in features:
        test = evaluate_split(model, spec, features["test"], splits["test"], args, pad, device, accepted)
        test = {name: math.nan for name in test} if failed else test
    if failed:
        best_score, best_dev = math.nan, {name: math.nan for name in best_dev}
    run = {"seed": seed, "dev": best_score, "test": test[spec.metric] if test else None, "best_epoch": best_epoch,
           "diverged_in_epoch": diverged,
           "dev_metrics": best_dev, "test_metrics": test, "epochs": epochs, "step_losses": step_losses,
           "train_examples": len(features["train"]), "wall_time_s": round(time.time() - started, 2),
           "mixed_precision": args.mixed_precision, "speed_paths": args.speed_paths,
           "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
           "total_parameters": sum(p.numel() for p in model.parameters())}
    return run, model


# --- results -------------------------------------------------------------------------------------------------
def post_training_info(model: str, method: str | None, sentences: int | None) -> dict[str, Any] | None:
    """Method and data size from the model folder's post-training record (training_summary.json), or the CLI."""
    info: dict[str, Any] = {}
    try:
        record = RunRecord.read_if_present(model)
    except RecordError as error:
        raise TaskDataError(str(error)) from None
    if record is not None:
        info = {"method": record.method, "train_sentences": record.data.train_sentences if record.data else None,
                "source_model": record.source_model, "total_steps": record.total_steps,
                "tokens_seen": record.tokens_seen}
    if method:
        info["method"] = method
    if sentences is not None:
        info["train_sentences"] = sentences
    return info or None


def improves(score: float, best: float) -> bool:
    """`score` is a better dev score than `best`, the epoch's or the seed's to beat; a NaN score (a diverged
    run) loses to any number."""
    return score > best or (math.isnan(best) and not math.isnan(score))


def summarize(spec: TaskSpec, runs: list[dict[str, Any]], args, post_training, splits) -> dict[str, Any]:
    split = "test" if runs[0]["test"] is not None else "dev"
    scores = [run[split] for run in runs]
    extra = {}
    for name in [spec.metric] + spec.extra_metrics:
        values = [run[f"{split}_metrics"][name] for run in runs]
        extra[name] = {"mean": statistics.fmean(values), "std": sample_std(values)}
    return {
        **summary_fields(spec, args, post_training, splits),
        "seeds": [run["seed"] for run in runs], "scores": scores,
        "mean": statistics.fmean(scores), "std": sample_std(scores),
        "std_ddof": 1, "split": split,
        "runs": [{"seed": r["seed"], "dev": r["dev"], "test": r["test"], "best_epoch": r["best_epoch"]} for r in runs],
        "metrics": extra,
        "peft": args.peft,
        "hyperparameters": hyperparameters(args, spec),
    }


def summary_fields(spec: TaskSpec, args, post_training, splits) -> dict[str, Any]:
    """What every results.json says, whatever the mode: the task, the model, the data, the machine."""
    import torch
    import transformers

    return {
        "task": spec.name, "metric": spec.metric, "model": recorded_model(args), "post_training": post_training,
        "num_examples": {name: len(rows) for name, rows in splits.items()},
        "data_seed": args.data_seed, "task_spec": spec.to_dict(),
        "environment": {"device": str(args.device), "torch": torch.__version__, "transformers": transformers.__version__,
                        "python": platform.python_version(), "machine": platform.machine()},
    }


def linear_reads(args, spec: TaskSpec, splits, max_length: int, device) -> dict[str, Any]:
    """The no-model floor (`--floor`) and the probes (`--mode probe|both`) on the splits fine-tuning uses."""
    from training import linear_reads as reads

    wanted = args.floor or args.mode != "finetune"
    if wanted and not reads.applies_to(spec):
        raise TaskDataError(f"--floor and --mode probe read sentence-level tasks (single, pair, regression); "
                            f"{spec.name} is a {spec.task_type} task")
    found: dict[str, Any] = {}
    if args.floor:
        found["floor"] = reads.floor(spec, splits)
    if args.mode != "finetune":
        found["probe"] = reads.probe(args.model, spec, splits, max_length, trust_remote_code=args.trust_remote_code,
                                     device=str(device))
    return found


def clear_earlier_run(out_dir: Path) -> None:
    """Before a probe run writes its results.json (no model, no seeds): an earlier run's results, saved model or
    adapter, per-seed records and half-saved copies, which would otherwise stay beside results they do not match."""
    import shutil

    from training.finetuned_model import ADAPTER_DIR, MODEL_DIR, remove_stale

    (out_dir / RESULTS_FILE).unlink(missing_ok=True)
    remove_stale(out_dir)
    for name in (MODEL_DIR, ADAPTER_DIR):
        shutil.rmtree(out_dir / name, ignore_errors=True)
    for seed in (out_dir / "runs").glob("seed_*.json"):
        seed.unlink()
    if (out_dir / "runs").is_dir() and not any((out_dir / "runs").iterdir()):
        (out_dir / "runs").rmdir()


# --- the run -------------------------------------------------------------------------------------------------
def run(args) -> dict[str, Any]:
    """Fine-tune into `args.output_dir`, which no other run may write to meanwhile."""
    from training.checkpointing import FolderInUse, folder_lock

    try:
        with folder_lock(args.output_dir):
            return fine_tune(args)
    except FolderInUse as error:  # raised only by the lock, before anything is read or written
        raise TaskDataError(str(error)) from None


class PushFailed(RuntimeError):
    """The run finished and saved its model, but publishing it failed; the message says how to retry."""
    exit_code = 1  # not the user's input (2): the Hub or the network


def publish(args, model_dir: Path) -> None:
    """The push (`training.publishing`) of the saved model: card, validation, fresh-process load check,
    upload (or dry run)."""
    hub = publisher()
    card = {k: v for k, v in dict(license=args.license, base_model=args.base_model).items() if v}
    try:
        hub.push(model_dir, args.push_to_hub, private=args.hub_private, dry_run=args.push_dry_run,
                 require_license=True, **card)
    except hub.Error as error:
        retry = retry_command(model_dir, args.push_to_hub, private=args.hub_private, dry_run=args.push_dry_run, **card)
        raise PushFailed(f"push to {args.push_to_hub} failed: {error}. The model is saved in {model_dir}; after "
                         f"fixing that, run `{retry}`") from None


def fine_tune(args) -> dict[str, Any]:
    import torch

    from training.finetuned_model import (MODEL_DIR, adapter_usage, model_usage, remove_stale, save_selected,
                                         saved_model_record, write_json)

    resolve_options(args)
    spec = spec_from_cli(args.task, args.task_spec, args.task_type, args.text_columns, args.label_column,
                         args.labels, args.metric)
    seeds = check_options(args, spec)
    allowed = metrics_downstream.METRICS_FOR_TYPE[spec.task_type]
    for name in [spec.metric] + spec.extra_metrics:
        if name not in allowed:
            raise TaskDataError(f"metric {name!r} does not fit a {spec.task_type} task; use one of {list(allowed)}")
    splits = load_task_data(spec, args.data_dir, args.max_train_samples, args.max_eval_samples, args.data_seed,
                            args.hold_out_test, args.hold_out_dev)
    tokenizer, config = load_tokenizer_and_config(args.model, spec, args.trust_remote_code)
    pair_recipe(args, spec, config, post_training_dropout(args.model))
    check_reused_folder(args, seeds, spec)
    if args.mode != "probe":  # before the probes, which run first
        check_pooling(args.model, config, args.pooling)
    post_training = post_training_info(args.model, args.post_training_method, args.post_training_sentences)
    check_publishable(args, spec, config, post_training)
    max_length = max_input_length(args.max_length, tokenizer, config)
    device = torch.device(args.device)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reads = linear_reads(args, spec, splits, max_length, device)
    if args.mode == "probe":
        clear_earlier_run(out_dir)
        results = {**summary_fields(spec, args, post_training, splits), "mode": "probe",
                   "hyperparameters": hyperparameters(args, spec), **reads, "split": reads["probe"]["mean"]["split"]}
        write_json(out_dir / RESULTS_FILE, results)
        print(reads_table(spec, reads))
        print(f"wrote {out_dir / RESULTS_FILE}")
        return results
    features = build_features(spec, splits, tokenizer, max_length, args.doc_stride, config, args.pair_encoding)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    remove_stale(out_dir)
    (out_dir / RESULTS_FILE).unlink(missing_ok=True)  # an earlier run's: this run, if cut short, reads as interrupted
    runs, kept = [], None  # kept: (run record, model) of the best dev score so far
    import transformers

    verbosity = transformers.logging.get_verbosity()
    try:
        for seed in tqdm(seeds, desc=f"{spec.name} seeds", disable=args.no_progress):
            run_record, model = train_one_seed(args, spec, config, tokenizer, splits, features, seed, device,
                                               progress=not args.no_progress)
            if args.save_model == "best" and not math.isnan(run_record["dev"]) and (
                    kept is None or improves(run_record["dev"], kept[0]["dev"])):  # a diverged seed is never kept
                kept = (run_record, model.to("cpu"))  # one model at a time on the device
            del model
            # The weight-loading report is the same for every seed: show it once.
            transformers.logging.set_verbosity_error()
            write_json(out_dir / "runs" / f"seed_{seed}.json", run_record, indent=1)
            runs.append(run_record)
    finally:
        transformers.logging.set_verbosity(verbosity)
    results = {**summarize(spec, runs, args, post_training, splits), "mode": args.mode, **reads}
    results["verdict"] = verdict(results)
    written = {}
    if kept is not None:
        results["saved_model"] = saved_model_record(kept[0], args.peft, args.merge)
        written = save_selected(kept[1], tokenizer, out_dir, results, base_model=args.model, peft=args.peft,
                                merge=args.merge)
        del kept
    write_json(out_dir / RESULTS_FILE, results)
    for stale in (out_dir / "runs").glob("seed_*.json"):  # seeds of an earlier run that this one did not train
        if stale.stem.removeprefix("seed_") not in {str(s) for s in seeds}:
            stale.unlink()
    print(summary_table(results))
    if reads:
        print(reads_table(spec, reads))
    print(f"wrote {out_dir / 'results.json'}")
    if written:
        saved = results["saved_model"]
        print(f"saved the model of seed {saved['seed']} (best dev {spec.metric} {saved['dev']:.2f}, epoch "
              f"{saved['best_epoch']}): " + ", ".join(str(path) for path in written.values()))
        if "model" in written:
            print("  load the model: " + model_usage(written["model"], spec.task_type, args.pair_encoding == "bi"))
        if "adapter" in written:
            print("  load the adapter: " + adapter_usage(written["adapter"], spec.task_type, spec.shown_labels(spec.labels or []),
                                                         args.trust_remote_code, args.pooling))
    elif args.save_model == "none" and any((out_dir / name).exists() for name in (MODEL_DIR, "adapter")):
        print(f"note: {out_dir} holds a model saved by an earlier run (its own results.json describes it)")
    elif args.save_model == "best":
        print(f"note: every seed diverged (dev {spec.metric} NaN): no model saved; a lower --learning-rate may converge")
        if args.push_to_hub:
            raise TaskDataError(f"every seed diverged: nothing to publish to {args.push_to_hub} (scores in "
                                f"{out_dir / RESULTS_FILE}); fine-tune again with a lower --learning-rate")
    if args.push_to_hub:
        publish(args, out_dir / MODEL_DIR)
    print(results["verdict"]["line"])
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if note := unused_by_a_probe(args):
        print(note, file=sys.stderr)
    try:
        run(args)
        return 0
    except (UserError, PushFailed) as error:
        return report_error(error)
    except KeyboardInterrupt:
        pass  # said below, once the run's frames are released and its progress bars have ended their lines
    print(f"interrupted: no new {RESULTS_FILE} in {args.output_dir}; run it again (seeds train anew)", file=sys.stderr)
    return 130

if __name__ == "__main__":
    sys.exit(main())
