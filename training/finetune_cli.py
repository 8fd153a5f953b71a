"""The command line of `training/finetune.py`: its parser, the options settled from others or from the
machine (`resolve_options`), and the checks of the options against each other, the task, the model and
an earlier run in the output folder, all made before any training.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from tokenization.errors import ConfigError
from tokenization.folders import local_input, other_files, overlapping
from training import metrics_downstream, sentence_similarity
from training.config_checks import listed_changes
from training.checkpointing import LOCK_FILE
from training.finetuned_model import ADAPTER_DIR, MODEL_DIR, SAVE_CHOICES, SAVING_PREFIXES
from training.inputs import recorded_ref, resolve_source
from training.publishing import publisher
from training.run_record import RESULTS_FILE
from training.task_model import trusts_remote_code
from training.tasks import TaskDataError, TaskSpec

DESCRIPTION = "Fine-tune any encoder checkpoint on a Korean downstream task, over N seeds: `results.json`."
MODES = ("finetune", "probe", "both")
PAPER_DEFAULTS = {"batch_size": 32, "learning_rate": 5e-5, "epochs": 10, "warmup_ratio": 0.06,
                  "weight_decay": 0.01, "max_length": 128}


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where there is a default worth showing (not None or False)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=DESCRIPTION, formatter_class=_DefaultsFormatter)
    p.add_argument("--model", required=True, help="model folder or Hub id")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the model's own Python code (needed for XPT models from the Hub or written by another "
                        "version of this package; folders this package wrote are trusted without it)")
    p.add_argument("--task", required=True, help="registered task (python -m training.tasks lists them) or a new name")
    p.add_argument("--data-dir", help="folder with train/dev[/test].{tsv,csv,json,jsonl}; omit to use the task's Hub dataset")
    p.add_argument("--output-dir", required=True, help="where results.json and runs/seed_<s>.json are written")
    p.add_argument("--seeds", default="3", help="a count N (seeds 0..N-1) or a comma-separated list: 0,4 or 2, (seed 2 alone)")
    p.add_argument("--task-spec", help="JSON object (or file) defining/overriding the task, see training/tasks.py")
    p.add_argument("--task-type", choices=["single", "pair", "regression", "token", "qa"],
                   help="task type of a new task (with --text-columns and --label-column)")
    p.add_argument("--text-columns", help="comma-separated input columns (1 or 2)")
    p.add_argument("--label-column", help="column holding the label (or score, tags, answers)")
    p.add_argument("--labels", help="comma-separated label set; labels seen in train when omitted")
    p.add_argument("--metric", choices=sorted(metrics_downstream.METRICS),
                   help="metric that selects the best epoch and is reported (the task's own by default)")
    p.add_argument("--max-train-samples", type=int, help="fine-tune on this many train examples (subsampled with --data-seed)")
    p.add_argument("--max-eval-samples", type=int, help="cap dev and test (for quick runs)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the subsampling (shared by all runs)")
    p.add_argument("--hold-out-test", type=int, default=0, metavar="N",
                   help="a task without a test split (NSMC here): hold N train examples out as its test split "
                        "(shuffled with --data-seed; the split the study holds out), before --max-train-samples")
    p.add_argument("--hold-out-dev", type=int, default=0, metavar="N",
                   help="a task without a test split: its dev split becomes the test split and N train examples "
                        "(shuffled with --data-seed) become dev. For a model post-trained on text that may hold the "
                        "task's train texts (the shared corpus holds NSMC's train reviews, not its dev reviews)")
    p.add_argument("--epochs", type=int, default=PAPER_DEFAULTS["epochs"], help="training epochs (the paper: 10 or 15)")
    p.add_argument("--batch-size", type=int, default=PAPER_DEFAULTS["batch_size"], help="training batch size")
    p.add_argument("--eval-batch-size", type=int, help="batch size of dev/test scoring (2 x --batch-size when omitted)")
    p.add_argument("--learning-rate", type=float, default=PAPER_DEFAULTS["learning_rate"],
                   help="peak AdamW learning rate (the paper: 5e-5 or 1e-5)")
    p.add_argument("--warmup-ratio", type=float, default=PAPER_DEFAULTS["warmup_ratio"],
                   help="share of the steps with linear warmup; linear decay to 0 after")
    p.add_argument("--weight-decay", type=float, default=PAPER_DEFAULTS["weight_decay"],
                   help="AdamW weight decay (not on biases and LayerNorm weights)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping norm (0: no clipping)")
    p.add_argument("--max-length", type=int, default=PAPER_DEFAULTS["max_length"],
                   help="tokens per example after truncation (pairs: both sentences together)")
    p.add_argument("--doc-stride", type=int, default=128, help="QA window overlap (capped at max_length/4)")
    p.add_argument("--patience", type=int, default=0, help="stop after this many epochs without dev improvement (0: off)")
    p.add_argument("--pair-encoding", choices=["auto", "cross", "bi"], default="auto",
                   help="sentence-pair regression (STS): cross = both sentences in one sequence with a regression "
                        "head; bi = the cosine of the two mean-pooled sentence vectors, trained with --sts-loss "
                        "(training/sentence_similarity.py; the saved model/ is the encoder); auto: bi for "
                        "sentence-pair regression unless --peft, --pooling or --push-to-hub is given, else cross")
    p.add_argument("--sts-loss", choices=list(sentence_similarity.LOSSES), default="cosent",
                   help="with --pair-encoding bi: cosent = the order of the cosines within a batch (CoSENT); mse = "
                        "the cosine regressed on the score scaled to [0, 1]. On KorSTS cosent scored 68.1 against "
                        "67.0 for mse on test, 3 seeds of 3 epochs each, one encoder (docs/BENCHMARKS.md)")
    p.add_argument("--pooling", choices=["first", "mean", "pair"],
                   help="what an XPT sentence head reads: the first token or the mean over tokens "
                        "or, for a sentence pair in one sequence, [u, v, |u-v|, u*v] of each sentence's mean state (pair). Default: "
                        "pair for an XPT cross-encoder of sentence pairs (on KorSTS and XNLI-ko dev it learned where the "
                        "mean over both sentences did not, docs/BENCHMARKS.md), else the model's classifier_pooling, "
                        "'first' unless set")
    p.add_argument("--dropout", type=float,
                   help="hidden and attention dropout while fine-tuning (default: the model's own; for an XPT "
                        "cross-encoder of sentence pairs, the dropout its post-training ran with, when its "
                        "training_summary.json records one: the ITLs and E_T learned without the model's 0.1)")
    p.add_argument("--mode", choices=MODES, default="finetune",
                   help="finetune: fine-tune over --seeds; probe: linear probes of the frozen encoder only "
                        "(mean- and first-token-pooled states, regularisation chosen on dev; no seeds, seconds on "
                        "CPU); both: the probes, then fine-tuning (sentence-level tasks; training/linear_reads.py)")
    p.add_argument("--floor", action="store_true",
                   help="also score the no-model floor on the same splits: TF-IDF of character 1-3-grams with "
                        "logistic regression / ridge (and cosine for STS); an encoder is worth using where it "
                        "scores above it")
    p.add_argument("--peft", choices=["lora"], help="parameter-efficient fine-tuning instead of full fine-tuning")
    p.add_argument("--lora-r", type=int, default=8, help="LoRA rank (with --peft lora)")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA scaling alpha (with --peft lora)")
    p.add_argument("--lora-dropout", type=float, default=0.1, help="dropout on the LoRA path (with --peft lora)")
    p.add_argument("--merge", action="store_true",
                   help="with --peft lora: also save the LoRA weights merged into the base model (OUTPUT/model), "
                        "a full model that loads without PEFT")
    p.add_argument("--save-model", choices=SAVE_CHOICES, default="best",
                   help="best: keep the model of the seed with the best dev score, at its best dev epoch (the one "
                        "its test score is measured with), in OUTPUT/model (--peft lora: the adapter in "
                        "OUTPUT/adapter, and with --merge the merged model in OUTPUT/model); none: scores only")
    p.add_argument("--push-to-hub", metavar="ORG/NAME",
                   help="after the run, publish OUTPUT/model through cards.push: model card, validation, a load "
                        "check in a fresh process, one upload (XPT sequence-task models; needs `hf auth login`)")
    p.add_argument("--push-dry-run", action="store_true",
                   help="with --push-to-hub: write the card, validate and load-check what would be uploaded; "
                        "upload nothing")
    p.add_argument("--hub-private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument("--license", help="licence id of the published weights (default: the known licence of --model "
                        "or of its English source; otherwise --push-to-hub asks for it)")
    p.add_argument("--base-model", metavar="ORG/NAME",
                   help="Hub id of --model, named as the card's base_model (default: --model when it is a Hub id; "
                        "a local folder is described, never named)")
    p.add_argument("--post-training-method", help="label for results.json post_training.method (default: from training_summary.json)")
    p.add_argument("--post-training-sentences", type=int, help="post-training data size, if not in training_summary.json")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ...; auto: cuda when available")
    p.add_argument("--mixed-precision", choices=["auto", "no", "bf16"], default="auto",
                   help="bf16 autocast of forward and backward (weights and AdamW stay fp32); auto: bf16 on CUDA "
                        "with bf16 and on CPUs with native bf16 (AVX512-BF16 or AMX), where it is faster, else no")
    p.add_argument("--speed-paths", choices=["auto", "off"], default="auto",
                   help="auto: post-training's speed choices for this device (training.step.resolve_speed): fused "
                        "AdamW; on CPU also freed memory kept in the process and, for XPT encoders, the explicit "
                        "fp32 attention with threshold dropout masks (same function, other random draws); off: "
                        "PyTorch's defaults")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--overwrite-output-dir", action="store_true",
                   help="replace the results of an earlier run with other options in --output-dir")
    return p


def parse_seeds(text: str) -> list[int]:
    """`--seeds 3` -> [0, 1, 2]; `--seeds 2,` -> [2]; `--seeds 0,4` -> [0, 4]."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) < len(seeds) or min(seeds) < 0:
        raise TaskDataError(f"--seeds {text}: give a count >= 1 (3 runs seeds 0, 1, 2) or a comma-separated list "
                            f"of distinct seeds (2, runs seed 2 alone)")
    return seeds


def resolve_options(args) -> None:
    """Set, once and before any check reads them, the options whose value follows from others or from the
    machine: `--device auto` (cuda when available, else cpu; a device given that torch cannot use here is
    refused, `check_device`), `--model package:NAME` (the folder of that installed package, as post-training and
    `xpt-convert` read it; results.json names it as given, `recorded_model`), `--save-model`
    under `--mode probe` (none: a probe is a scikit-learn estimator over frozen states, nothing to save) and
    `--trust-remote-code` (also true for folders this package wrote, `trusts_remote_code`), and
    `--mixed-precision auto` (bf16 where the device runs it natively, else no: `auto_mixed_precision`)."""
    import torch

    from training.step import auto_mixed_precision

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        check_device(args.device)
    if str(args.model).startswith("package:"):
        try:
            args.given_model, args.model = args.model, resolve_source(args.model)
        except ConfigError as error:
            raise TaskDataError(f"--model {error.message}") from None
    if args.mixed_precision == "auto":
        args.mixed_precision = auto_mixed_precision(torch.device(args.device).type)
    if args.mode == "probe":
        args.save_model = "none"
    args.trust_remote_code = trusts_remote_code(args.model, args.trust_remote_code)


def check_device(device: str) -> None:
    """A --device that torch can use on this machine, else one line before anything is loaded or written."""
    import torch

    try:
        kind = torch.device(device)
    except RuntimeError:
        raise TaskDataError(f"--device {device}: not a device torch knows; give cpu, cuda, cuda:N or mps, or auto "
                            "(cuda when available, else cpu)") from None
    if kind.type == "cuda" and not torch.cuda.is_available():
        raise TaskDataError(f"--device {device}: torch sees no CUDA device on this machine (no GPU, or a torch "
                            "built without CUDA); use --device cpu, or auto")
    if kind.type == "cuda" and kind.index is not None and kind.index >= torch.cuda.device_count():
        raise TaskDataError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                            f"numbered from 0; give cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise TaskDataError(f"--device {device}: torch cannot use MPS on this machine (Apple silicon with a torch "
                            "built for it only); use --device cpu, or auto")


def recorded_model(args) -> str:
    """How results.json names --model: a local path absolute (`recorded_ref`), a "package:NAME" source as
    given (`resolve_options` loads its folder)."""
    return recorded_ref(str(getattr(args, "given_model", args.model)))


# What only fine-tuning reads: given to the command with --mode probe, they are named as unused
TRAINING_ONLY = ("seeds", "epochs", "batch_size", "learning_rate", "warmup_ratio", "weight_decay", "max_grad_norm",
                 "patience")


def unused_by_a_probe(args) -> str | None:
    """A note naming the fine-tuning options given to a `--mode probe` run, which trains nothing; else None."""
    if args.mode != "probe":
        return None
    defaults = build_parser()
    unused = [f"--{name.replace('_', '-')}" for name in TRAINING_ONLY if getattr(args, name) != defaults.get_default(name)]
    if not unused:
        return None
    return (f"note: --mode probe trains no model, so {', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not used "
            "(--mode both also fine-tunes)")


def check_save_options(args) -> None:
    """The saving and publishing options against each other, before anything is loaded."""
    if args.mode == "probe":
        for flag, value in (("--push-to-hub", args.push_to_hub), ("--peft", args.peft), ("--merge", args.merge)):
            if value:
                raise TaskDataError(f"{flag} goes with fine-tuning; --mode probe trains no model (use --mode both)")
    if args.merge and args.peft != "lora":
        raise TaskDataError("--merge merges LoRA weights into the base model: use it with --peft lora")
    if args.merge and args.save_model == "none":
        raise TaskDataError("--merge saves a merged model: drop --save-model none")
    if not args.push_to_hub:
        for flag, value in (("--push-dry-run", args.push_dry_run), ("--hub-private", args.hub_private),
                            ("--license", args.license), ("--base-model", args.base_model)):
            if value:
                raise TaskDataError(f"{flag} goes with --push-to-hub ORG/NAME (to publish the saved model later, "
                                    f"pass it to `xpt-push`)")
        return
    if args.save_model == "none":
        raise TaskDataError("--push-to-hub publishes the saved model: drop --save-model none")
    if args.peft and not args.merge:
        raise TaskDataError(f"--push-to-hub with --peft {args.peft} publishes the merged model: add --merge "
                            "(the adapter alone is saved in OUTPUT/adapter)")
    hub = publisher()
    try:  # the repo id and the Hub's reach, before anything is loaded
        hub.check(args.push_to_hub, needs_token=not args.push_dry_run)
    except hub.Error as error:
        raise TaskDataError(f"--push-to-hub: {error}" + (", or add --push-dry-run" if error.field == "token" else "")) from None


def check_options(args, spec: TaskSpec) -> list[int]:
    """The options' values and their fit with each other and the task, before anything is loaded (after
    `resolve_options`); returns the seeds. training/study.py runs the same checks on a study's options."""
    if args.max_length < 8:
        raise TaskDataError(f"--max-length {args.max_length}: give at least 8 tokens")
    if not args.max_grad_norm >= 0:  # NaN too
        raise TaskDataError(f"--max-grad-norm {args.max_grad_norm}: give a norm > 0, or 0 for no clipping")
    if not 0 < args.learning_rate < math.inf:  # torch's AdamW refuses it only once the output folder is made
        raise TaskDataError(f"--learning-rate {args.learning_rate}: give a learning rate > 0")
    if not 0 <= args.warmup_ratio <= 1:
        raise TaskDataError(f"--warmup-ratio {args.warmup_ratio}: give the share of the training steps that warm up, "
                            "in [0, 1]")
    if not 0 <= args.weight_decay < math.inf:
        raise TaskDataError(f"--weight-decay {args.weight_decay}: give a weight decay >= 0")
    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size),
                        ("--max-train-samples", args.max_train_samples), ("--max-eval-samples", args.max_eval_samples)):
        if value is not None and value < 1:
            raise TaskDataError(f"{flag} {value}: give at least 1")
    for flag, value in (("--hold-out-test", args.hold_out_test), ("--hold-out-dev", args.hold_out_dev)):
        if value < 0:
            raise TaskDataError(f"{flag} {value}: give a number of train examples, or 0 for none")
    if args.pooling and spec.task_type not in ("single", "pair", "regression"):
        raise TaskDataError(f"--pooling {args.pooling}: a {spec.task_type} head reads every token, it pools "
                            "nothing; drop --pooling")
    if args.peft == "lora" and args.pooling in ("mean", "pair") and not args.merge:
        # the adapter reloads onto the base model's own config, which pools the first token
        raise TaskDataError(f"--pooling {args.pooling} with --peft lora needs --merge: a LoRA adapter alone reloads with "
                            "first-token pooling; add --merge, or drop --pooling")
    if args.pooling == "pair" and len(spec.text_columns) != 2:
        raise TaskDataError(f"--pooling pair reads the two sentences of a pair; {spec.name} has "
                            f"{len(spec.text_columns)} text column(s): use mean or first")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise TaskDataError(f"--dropout {args.dropout}: give a probability in [0, 1)")
    seeds = parse_seeds(args.seeds)
    check_save_options(args)
    resolve_pair_encoding(args, spec)
    return seeds


def pair_recipe(args, spec: TaskSpec, config, post_training_dropout: float | None) -> None:
    """The defaults of an XPT cross-encoder of sentence pairs, set once the model's config is read: `--pooling pair`
    (unless a LoRA adapter alone is saved: it reloads with the base model's pooling) and `--dropout` at the
    dropout its post-training ran with. Chosen on KorSTS and XNLI-ko dev splits (docs/BENCHMARKS.md)."""
    if getattr(config, "model_type", None) != "xpt" or len(spec.text_columns) != 2 or args.pair_encoding != "cross":
        return
    if args.pooling is None and not (args.peft == "lora" and not args.merge):
        args.pooling = "pair"
    if args.dropout is None:
        args.dropout = post_training_dropout


def sentence_pair_regression(spec: TaskSpec) -> bool:
    return spec.task_type == "regression" and len(spec.text_columns) == 2


def resolve_pair_encoding(args, spec: TaskSpec) -> None:
    """`--pair-encoding auto`: bi for sentence-pair regression (STS), unless an option asks for a
    classification model (--peft, --pooling, --push-to-hub), else cross. On KorSTS dev (2,000 training
    pairs, 3 epochs, the `cpu-hour` run's phase-1 checkpoint) the bi-encoder reached 71.5 Spearman x 100
    and the cross-encoder with its pair head 55.8 (docs/BENCHMARKS.md, "Sentence pairs"). Then `bi`
    only where it means something, and alone."""
    if args.pair_encoding == "auto":
        given = [flag for flag, value in (("--peft", args.peft), ("--pooling", args.pooling),
                                          ("--push-to-hub", args.push_to_hub)) if value]
        args.pair_encoding = "bi" if sentence_pair_regression(spec) and not given else "cross"
        if sentence_pair_regression(spec) and given:  # the weaker model for STS: never chosen silently
            print(f"note: pair encoding cross (a regression head on both sentences in one sequence), because "
                  f"{' and '.join(given)} asks for a classification model; {spec.name}'s default, the bi-encoder, "
                  "scores far higher on sentence similarity (drop the flag to get it)", file=sys.stderr)
    if args.pair_encoding != "bi":
        if args.sts_loss != "cosent":
            raise TaskDataError(f"--sts-loss {args.sts_loss} trains the STS bi-encoder (--pair-encoding bi); "
                                f"{spec.name} is not fine-tuned as one here: drop --sts-loss")
        return
    if not sentence_pair_regression(spec):
        raise TaskDataError(f"--pair-encoding bi fine-tunes sentence-pair regression (STS) tasks; {spec.name} is a "
                            f"{spec.task_type} task with {len(spec.text_columns)} text column(s)")
    for flag, value in (("--peft", args.peft), ("--pooling", args.pooling), ("--push-to-hub", args.push_to_hub)):
        if value:
            raise TaskDataError(f"{flag} does not go with --pair-encoding bi (mean pooling, full fine-tuning; the "
                                "saved model/ is a sentence encoder, not a classification model)")
    if args.sts_loss == "mse" and spec.label_range is None:
        raise TaskDataError(f"--sts-loss mse maps the scores onto the cosine's range by the task's label_range, which "
                            f"{spec.name} does not declare: add \"label_range\": [low, high] to --task-spec, or drop "
                            "--sts-loss (CoSENT needs only the scores' order)")


def check_publishable(args, spec: TaskSpec, config, post_training: dict[str, Any] | None) -> None:
    """What saving and publishing need from the model and task, checked before any training."""
    if not args.push_to_hub:
        return
    if getattr(config, "model_type", None) != "xpt":
        raise TaskDataError(f"--push-to-hub publishes XPT models (their card, remote code and checks); {args.model} "
                            f"is a {config.model_type!r} model: its fine-tuned copy is saved in OUTPUT/model")
    if spec.task_type not in ("single", "pair", "regression"):
        raise TaskDataError(f"--push-to-hub publishes text-classification models (single, pair and regression "
                            f"tasks); a {spec.task_type} task's model is saved in OUTPUT/model, not published")
    method = (post_training or {}).get("method")
    english = getattr(config, "source_name_or_path", None) or (post_training or {}).get("source_model")
    hub = publisher()
    try:
        hub.check(args.push_to_hub, license=args.license, method=method, fix="pass --license ID",
                  sources=[english, args.base_model, args.model, (post_training or {}).get("source_model")],
                  base_model=args.base_model)
    except hub.Error as error:
        raise TaskDataError(f"--push-to-hub: {error}") from None


def hyperparameters(args, spec: TaskSpec) -> dict[str, Any]:
    """The options that shape a fine-tuning run's results: what results.json records under `hyperparameters`,
    `check_reused_folder` compares and `xpt-compare` tells runs apart by. An option without effect on this run
    is left out (LoRA's without --peft lora, --doc-stride outside QA, --sts-loss outside the STS bi-encoder), so
    that changing it neither refuses a rerun in the same folder nor shows as another setting. A probe run
    (`--mode probe`) trains nothing: only the data and the input length shape its scores."""
    if args.mode == "probe":
        return {k: getattr(args, k) for k in ("max_length", "max_train_samples", "max_eval_samples", "hold_out_test",
                                              "hold_out_dev")}
    names = ["batch_size", "learning_rate", "epochs", "warmup_ratio", "weight_decay", "max_length", "patience",
             "max_train_samples", "max_eval_samples", "hold_out_test", "hold_out_dev", "max_grad_norm", "pooling",
             "pair_encoding", "speed_paths", "mixed_precision", "dropout"]
    if args.peft == "lora":
        names += ["lora_r", "lora_alpha", "lora_dropout"]
    if spec.task_type == "qa":
        names.append("doc_stride")
    if args.pair_encoding == "bi":
        names.append("sts_loss")
    return {k: getattr(args, k) for k in names}


def fine_tuning_output(path: Path) -> bool:
    """What a fine-tuning run writes in its output folder (the temporary and replaced copies of a saved
    folder included)."""
    name = path.name
    return name in (RESULTS_FILE, "runs", MODEL_DIR, ADAPTER_DIR, LOCK_FILE) or name.startswith(SAVING_PREFIXES)


def check_reused_folder(args, seeds: list[int], spec: TaskSpec) -> None:
    """An output folder that is, holds or lies inside --model's or --data-dir's folder is refused, whatever the
    options: the run's results.json, runs/ and model/ would go among the files it reads (and be published with
    them); so is one holding anything but a fine-tuning run's files (another model, a post-training run). One
    holding the results of a run with other options is refused (its results.json and runs/ would describe two
    runs at once) unless --overwrite-output-dir; the same options may run again."""
    for flag, value in (("--model", args.model), ("--data-dir", args.data_dir)):
        read = local_input(value) if value else None
        if read is not None and overlapping(args.output_dir, read):
            if read.expanduser().resolve() in Path(args.output_dir).expanduser().resolve().parents:
                raise TaskDataError(f"--output-dir {args.output_dir} lies inside {flag} {value}: the run would write "
                                    "results.json, runs/ and model/ into what it reads; choose another output folder")
            raise TaskDataError(f"--output-dir {args.output_dir}: the run writes results.json, runs/ and model/ into "
                                f"this folder, which is or holds {flag} {value}; choose another output folder")
    if others := other_files(args.output_dir, fine_tuning_output):
        raise TaskDataError(f"--output-dir {args.output_dir} holds files that are not a fine-tuning run's ({others}): "
                            "results.json, runs/ and model/ would go among them (a model folder's card would then "
                            "describe them); choose a new or empty folder")
    path = Path(args.output_dir) / RESULTS_FILE
    if not path.is_file():
        return
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    now = {"model": recorded_model(args), "task": spec.name, "mode": args.mode, "seeds": seeds,
           "peft": args.peft, "data_seed": args.data_seed, **hyperparameters(args, spec)}
    was = {"mode": "finetune", **before, **(before.get("hyperparameters") or {})}
    if isinstance(was.get("model"), str):
        was["model"] = recorded_ref(was["model"])  # as recorded now (results written before named it as typed)
    if was.get("pair_encoding") == "bi":
        was.setdefault("sts_loss", "mse")  # results from before --sts-loss: the bi-encoder trained with MSE
    changed = {k: (was.get(k), v) for k, v in now.items() if k in was and was.get(k) != v and
               not (k == "seeds" and now["mode"] == "probe")}
    if changed and not args.overwrite_output_dir:
        listed = listed_changes(changed)
        raise TaskDataError(f"--output-dir {args.output_dir} holds the results of a run with other options ({listed}): "
                            "choose another --output-dir, or pass --overwrite-output-dir to replace them")
