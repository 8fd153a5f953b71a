"""Typed configuration of XPT post-training: one dataclass, YAML plus `--field-name value` overrides.

`load_config(argv)` reads `--config FILE.yaml` and applies every `--field-name value` given on the
command line (any field of `PostTrainConfig`; values are parsed as YAML scalars, so `--phases`
takes a YAML/JSON list); `validate_config` checks what can be checked offline, once per run, before
any download or training. Errors are `ConfigError`s (tokenization/errors.py) whose message starts
with the offending field name.

Phases are data. Unless `phases` is given explicitly, they follow from `method` (the table of methods
is `training/methods.py`): `resolved_phases` turns the method's phase plan into `PhaseConfig`s with
the config's steps, learning rates and warmup.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tokenization.errors import ConfigError
from training.inputs import resolve_local, resolve_source
from training.methods import ALL_GROUPS, METHODS, Method

SCHEDULES = ("linear", "cosine", "constant")
MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
AUTO_BOOL = ("auto", True, False)
ATTENTION = ("auto", "sdpa", "eager")
DROPOUT_MASKS = ("auto", "threshold", "torch")
# Tokens per forward pass on a CPU when the config does not set the micro-batch. Memory grows with
# it (peak RSS at MiniLM size, 128-token rows, bf16: 2.1 GiB at 16 rows, 5.1 GiB at 64; a 256-row
# forward pass passed 16 GB and was killed) while tokens/s barely does (docs/BENCHMARKS.md,
# "Micro-batch on a CPU").
CPU_MICRO_BATCH_TOKENS = 4096


def cpu_micro_batch(rows: int, row_length: int) -> int:
    """The largest divisor of `rows` whose micro-batch holds at most `CPU_MICRO_BATCH_TOKENS` tokens
    (at least 1 row)."""
    limit = max(1, CPU_MICRO_BATCH_TOKENS // max(1, row_length))
    return max(d for d in range(1, min(rows, limit) + 1) if rows % d == 0)


@dataclass
class PhaseConfig:
    """One post-training phase: which parameter groups train, for how long, at which learning rate."""

    name: str = field(metadata={"help": "the phase's name in logs, checkpoints and the card (phase1, phase2, train)"})
    trainable_groups: list[str] | str = field(default=ALL_GROUPS, metadata={
        "help": "parameter groups that train (modeling_xpt.PARAMETER_GROUPS names), or \"all\""})
    steps: int = field(default=1000, metadata={
        "help": "optimiser steps (the cap when early stopping is on; the schedule spans it)"})
    learning_rate: float = field(default=1e-4, metadata={"help": "peak learning rate"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warmup steps at the start of the phase"})
    schedule: str = field(default="linear", metadata={
        "help": "linear | cosine | constant decay after the warmup"})
    early_stopping_patience: int | None = field(default=None, metadata={
        "help": "stop after this many evaluations without a better valid loss (the phase keeps its last "
                "weights, not the best evaluation's); None: never"})

    def groups(self) -> list[str]:
        """The parameter groups that train (`modeling_xpt.PARAMETER_GROUPS` names)."""
        if self.trainable_groups != ALL_GROUPS:
            return list(self.trainable_groups)
        from modeling_xpt import PARAMETER_GROUPS  # loads torch: not when the config is only parsed (--help)

        return list(PARAMETER_GROUPS)


def arg(default, help: str):
    """A config field with its `--help` text (as PEFT's config dataclasses keep theirs)."""
    return field(default=default, metadata={"help": help})


@dataclass
class PostTrainConfig:
    """Every setting of a post-training run; `--help` prints each field's help and current value."""

    # --- model -------------------------------------------------------------------------------
    method: str = arg("xpt", " | ".join(METHODS) + " (models and phases per method: training/methods.py)")
    source: str = arg("roberta-base", "Hub id, folder, or \"package:NAME\" (a package with get_model_path())")
    tokenizer: str | None = arg(None, "folder or Hub id of the Korean tokenizer; None: train one on the train split")
    tokenizer_vocab_size: int = arg(32000, "vocabulary of the tokenizer trained when `tokenizer` is None")
    tokenizer_train_sentences: int = arg(200000, "sentences of the train split the tokenizer is trained on")
    embedding_init: str = arg("random", "random (paper) | overlap (copy shared tokens) | fvt (mean of source pieces)")
    itl_init: str = arg("random", "random (paper) | copy")
    output_bias_init: str = arg("unigram", "zeros (paper) | unigram: start the MLM output bias b (Eq. 5) at the log frequencies "
                                "of the training tokens, so the first steps need not learn the frequency baseline "
                                "through the hidden states (which collapses them to one vector at small budgets)")
    adapter_size: int = arg(64, "bottleneck width, method adapters only")
    post_training_dropout: float | None = arg(None, "null: the source's hidden and attention dropout while post-training "
                                              "(paper); a value sets both for post-training only (0: none; at small "
                                              "budgets measured faster and better, docs/BENCHMARKS.md). config.json "
                                              "keeps the source's values, so fine-tuning uses them")
    train_fresh_head_in_phase1: bool = arg(True, "a source without an MLM head (e.g. all-MiniLM-L6-v2) gets a random head transform: train it in phase 1 (frozen it would stay random)")
    # --- data --------------------------------------------------------------------------------
    data: str = arg("", "prepared-splits folder, text/jsonl/parquet file(s) or folder, Hub dataset id, or \"konlpy\"")
    data_fallback: str | None = arg(None, "used when `data` is a path that does not exist (e.g. \"konlpy\")")
    data_config: str | None = arg(None, "Hub dataset configuration name")
    streaming: bool = arg(False, "Hub data: stream only max_train_sentences + valid_size + test_size records")
    text_column: str = arg("text", "text column of Hub datasets and .jsonl/.parquet files")
    language: str = arg("ko", "ISO 639 code of the target language; its script (Hangul for ko, as prepare_corpus --language) is "
                        "what min_script_share looks for (none: no script check)")
    min_script_share: float = arg(0.5, "refuse to train when fewer than this share of (up to 1,000 randomly sampled) training "
                                  "texts hold a character of the language's script, e.g. English text given for ko; 0: no check")
    valid_size: int = arg(2000, "sentences held out for valid when the data has no valid split")
    test_size: int = arg(2000, "sentences held out for test when the data has no test split")
    max_train_sentences: int | None = arg(None, "train on N train sentences, a seeded sample (data-efficiency "
                                                "settings; with streaming, the first N records read)")
    max_eval_sentences: int | None = arg(5000, "cap valid/test for evaluation cost")
    max_seq_length: int = arg(128, "tokens per packed row (sentences longer than this are cut into consecutive chunks)")
    packing: bool = arg(True, "pack sentences into full rows (block attention); False: pad with length grouping")
    cache_dir: str = arg(".cache/xpt-data", "tokenised + packed splits, keyed by data/tokenizer/length, and "
                                         "datasets' copy of the text read (hf/); safe to delete")
    # --- masking -----------------------------------------------------------------------------
    mlm_probability: float = arg(0.15, "share of the real non-special tokens selected for MLM (exact count per row)")
    mask_replace_prob: float = arg(0.8, "of the selected tokens: [MASK]")
    random_replace_prob: float = arg(0.1, "of the selected tokens: a random token (rest unchanged)")
    whole_word_masking: bool = arg(False, "select whole words (all their pieces) instead of single tokens")
    # --- optional auxiliary objective: word-order prediction (KoreALBERT), off by default -----------
    wop_probability: float = arg(0.0, "share of rows whose word order is partly shuffled")
    wop_fraction: float = arg(0.15, "at most this share of a sentence's (unmasked, non-special) tokens moves")
    wop_weight: float = arg(1.0, "weight of the word-order loss added to the MLM loss")
    # --- phases and optimisation ----------------------------------------------------------------
    phases: list[PhaseConfig] | None = arg(None, "explicit phases (YAML list of {name, trainable_groups, steps, learning_rate, ...}); None: derived from method")
    train_steps: int = arg(2000, "total optimiser steps of all phases together (each method spends the same number)")
    phase1_steps: int = arg(1000, "steps of phase 1 (two-phase methods xpt, xpt-no-itl); phase 2 gets train_steps - phase1_steps")
    learning_rate: float = arg(1e-4, "peak learning rate (phase 2, and single-phase methods)")
    phase1_learning_rate: float | None = arg(None, "peak learning rate of phase 1; None: learning_rate")
    warmup_steps: int = arg(100, "linear warmup steps at the start of each phase (capped at the phase length; the paper: 1000 of 60K-100K steps)")
    lr_schedule: str = arg("linear", "linear | cosine | constant, after the warmup, within each phase")
    early_stopping_patience: int | None = arg(None, "stop a phase after this many evaluations without a better valid "
                                                    "loss; it keeps its last weights, not the best ones (None: off)")
    global_batch_size: int = arg(256, "rows per optimiser step, over all processes and accumulation steps")
    per_device_batch_size: int | None = arg(None, "rows per forward pass per process; None: from gradient_accumulation_steps, else "
                                            "the whole per-process batch on a GPU and at most "
                                            f"{CPU_MICRO_BATCH_TOKENS:,} tokens (rows x max_seq_length) on a CPU")
    gradient_accumulation_steps: int | None = arg(None, "micro-batches per optimiser step; None: derived from world size and per_device_batch_size")
    weight_decay: float = arg(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    adam_beta1: float = arg(0.9, "AdamW beta1")
    adam_beta2: float = arg(0.98, "AdamW beta2")
    adam_epsilon: float = arg(1e-6, "AdamW epsilon")
    max_grad_norm: float = arg(1.0, "gradient clipping norm (0: off)")
    mixed_precision: str = arg("auto", "auto | no | fp16 | bf16; auto: bf16 on CUDA with bf16 and on CPUs with AVX512-BF16/AMX, else no")
    compile: str | bool = arg("auto", "torch.compile (inductor) of the training step's forward+backward; auto: on CUDA only (eager was faster on every CPU class measured)")
    fused_adamw: str | bool = arg("auto", "AdamW(fused=True); auto: on")
    static_masked_head: str | bool = arg("auto", "LM head on a static number of rows (no recompiles); auto: when compiling")
    attn_implementation: str = arg("auto", "sdpa | eager attention while post-training (the same function; the saved model "
                                   "loads with sdpa); auto: sdpa on CUDA and on CPU in fp32 with post_training_dropout 0, "
                                   "else eager on CPU (softmax(QK^T)V computed explicitly in fp32, as SDPA's math "
                                   "path does, with cheaper dropout masks: faster to train there)")
    dropout_mask: str = arg("auto", "threshold | torch: how dropout masks are drawn on CPU (threshold: 16-bit numbers "
                            "compared with round(p * 2^16), about half the cost of torch's Bernoulli masks; torch: "
                            "torch's dropout); auto: threshold. Other devices always use torch's dropout")
    retain_cpu_memory: str | bool = arg("auto", "keep memory freed by tensors inside the process for the next step's "
                                        "tensors (glibc malloc without mmap for large blocks and without trimming), "
                                        "instead of faulting in fresh pages every step; the process keeps its peak "
                                        "footprint; auto: on CPU runs")
    seed: int = arg(42, "seed of the batch order, the masks and the initialisation")
    eval_seed: int = arg(1234, "fixed masking of valid/test, comparable across runs and methods")
    # --- bookkeeping -------------------------------------------------------------------------
    output_dir: str = arg("runs/xpt", "run folder: checkpoints while training, then the model, tokenizer, training_summary.json, losses.jsonl")
    eval_steps: int = arg(500, "evaluate on valid every N steps (and at the end of each phase)")
    save_steps: int = arg(500, "checkpoint every N steps (atomic; resume with --resume latest)")
    save_total_limit: int = arg(3, "checkpoints kept (oldest deleted first)")
    keep_checkpoints: bool = arg(False, "keep OUTPUT/checkpoints after a successful run (false: deleted at its end)")
    logging_steps: int = arg(10, "log loss, learning rate and tokens/s every N steps")
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"], metadata={"help": "trackers: [tensorboard], or [] for none"})
    push_to_hub: str | None = arg(None, "ORG/NAME: after saving, validate, write the card and upload (cards.push)")
    hub_private: bool = arg(False, "with push_to_hub: create the repo private")
    hub_license: str | None = arg(None, "with push_to_hub: licence id of the weights for the card (default: the English "
                                  "source's known licence; a source without one, or method scratch, needs it)")
    num_workers: int | str = arg("auto", "data-loader worker processes (0: batches built in the training process); "
                                 "auto: 0 on a CPU, where workers would share the training threads' cores; on a GPU "
                                 "one per spare CPU core of the process, at most 8")
    max_steps: int | None = arg(None, "quick runs: scale every phase down so all phases total N steps (each keeps >= 1); train_steps/phase1_steps set the full plan")
    resume: str | None = arg(None, "continue an interrupted run: \"latest\" (the newest complete checkpoint in output_dir) or a checkpoint folder")
    overwrite_output_dir: bool = arg(False, "a fresh run into a folder holding another run or a saved model: delete its files "
                                         "first (never files that are not a run's: those are refused)")
    dry_run: bool = arg(False, "validate the config and print the plan; nothing is downloaded or trained")

    # ------------------------------------------------------------------------------------------
    def method_entry(self) -> Method:
        """The entry of `method` in the table of methods (training/methods.py)."""
        if self.method not in METHODS:
            raise ConfigError("method", f"{self.method!r} is not one of {tuple(METHODS)}")
        return METHODS[self.method]

    def datasets_cache_dir(self) -> str:
        """Where `datasets` keeps the raw text it loads (Hub downloads, local files read as datasets)."""
        return str(Path(self.cache_dir) / "hf")

    def resolved_phases(self) -> list[PhaseConfig]:
        """The phases to run: explicit ones, or the method's, scaled to `max_steps` when set."""
        if self.phases:
            phases = [dataclasses.replace(p) for p in self.phases]
        elif self.method_entry().phase1_groups is not None:
            lr1 = self.phase1_learning_rate if self.phase1_learning_rate is not None else self.learning_rate
            phases = [
                PhaseConfig("phase1", list(self.method_entry().phase1_groups), self.phase1_steps, lr1,
                            min(self.warmup_steps, self.phase1_steps), self.lr_schedule, self.early_stopping_patience),
                PhaseConfig("phase2", ALL_GROUPS, self.train_steps - self.phase1_steps, self.learning_rate,
                            min(self.warmup_steps, max(0, self.train_steps - self.phase1_steps)), self.lr_schedule,
                            self.early_stopping_patience),
            ]
        else:
            phases = [PhaseConfig("train", ALL_GROUPS, self.train_steps, self.learning_rate,
                                  min(self.warmup_steps, self.train_steps), self.lr_schedule, self.early_stopping_patience)]
        if self.max_steps is not None:
            total = sum(p.steps for p in phases)
            if self.max_steps < total:
                scaled = [max(1, int(p.steps * self.max_steps / total)) for p in phases]
                scaled[-1] = max(1, self.max_steps - sum(scaled[:-1]))
                for phase, steps in zip(phases, scaled):
                    phase.warmup_steps = int(phase.warmup_steps * steps / phase.steps) if phase.steps else 0
                    phase.steps = steps
        return phases

    def batch_layout(self, world_size: int, device: str = "cuda") -> tuple[int, int]:
        """(per-device micro-batch, gradient-accumulation steps) for `world_size` processes on `device`.

        Unless `per_device_batch_size` or `gradient_accumulation_steps` says otherwise, a process's whole
        share of the batch is one forward pass, except on a CPU: there the micro-batch is the largest
        divisor of that share with at most `CPU_MICRO_BATCH_TOKENS` tokens (`cpu_micro_batch`). The
        step's gradient is the same token mean either way (training/post_train.py), so only memory
        and speed change."""
        g = self.global_batch_size
        if self.gradient_accumulation_steps is not None:
            accumulation = self.gradient_accumulation_steps
            if g % (world_size * accumulation):
                raise ConfigError("global_batch_size", f"{g} is not divisible by world size x accumulation = "
                                  f"{world_size} x {accumulation} = {world_size * accumulation}")
            micro = g // (world_size * accumulation)
            if self.per_device_batch_size is not None and micro != self.per_device_batch_size:
                raise ConfigError("per_device_batch_size", f"{self.per_device_batch_size} disagrees with "
                                  f"global_batch_size / (world size x gradient_accumulation_steps) = {micro}")
            return micro, accumulation
        micro = self.per_device_batch_size or max(1, g // world_size)
        if g % (world_size * micro):
            raise ConfigError("global_batch_size", f"{g} is not divisible by world size x per-device batch = "
                              f"{world_size} x {micro} (accumulation would not be a whole number)")
        if self.per_device_batch_size is None and device == "cpu":
            micro = cpu_micro_batch(micro, self.max_seq_length)
        return micro, g // (world_size * micro)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------
# Written here rather than with transformers' HfArgumentParser, which cannot express three things
# this config needs: `phases` is a list of PhaseConfig dataclasses (HfArgumentParser maps each field
# to one flat argparse option); the speed fields take "auto" or a boolean (`str | bool`: it accepts
# no Union but Optional, "one type per argument"); and values come from a YAML file with command-line
# overrides on top, with `--help` showing the file's values.

FIELDS = {f.name: f for f in dataclasses.fields(PostTrainConfig)}
_HINTS = typing.get_type_hints(PostTrainConfig)
_PHASE_HINTS = typing.get_type_hints(PhaseConfig)


def _base_types(hint) -> tuple[set, bool]:
    """({int, float, str, bool, list, ...} allowed by a type hint, whether None is allowed)."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    allowed, nullable = set(), False
    for arg in args:
        if arg is type(None):
            nullable = True
        else:
            allowed.add(typing.get_origin(arg) or arg)
    return allowed, nullable


def _coerce(name: str, value, hint):
    allowed, nullable = _base_types(hint)
    if value is None:
        if nullable:
            return None
        if list in allowed:  # --report-to none
            return []
        raise ConfigError(name, "must not be null")
    if bool in allowed and isinstance(value, bool):
        return value
    if name == "mixed_precision" and value is False:  # YAML 1.1 reads an unquoted `no` as false
        return "no"
    if int in allowed and isinstance(value, int) and not isinstance(value, bool):
        return value
    if float in allowed and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if str in allowed and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if float in allowed and isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string
        try:
            return float(value)
        except ValueError:
            pass
    if list in allowed and isinstance(value, (list, tuple)):
        return list(value)
    if list in allowed and isinstance(value, str):  # "a,b" on the command line
        return [v for v in value.split(",") if v]
    names = sorted(t.__name__ for t in allowed) + (["null"] if nullable else [])
    raise ConfigError(name, f"expected {' or '.join(names)}, got {value!r}")


def unknown_fields(given, known, where: str = "") -> ConfigError | None:
    """Every field of `given` that is not in `known`, each with the known field it most resembles, in one line."""
    import difflib

    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    guesses = [f"{name} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(name, known, n=1)) else name
               for name in unknown]
    return ConfigError(f"{where}{unknown[0]}", f"unknown field{'s' * (len(unknown) > 1)} {', '.join(guesses)}; known "
                       f"fields: {', '.join(sorted(known))}")


def _phase_from_dict(index: int, raw) -> PhaseConfig:
    if isinstance(raw, PhaseConfig):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"phases[{index}]", f"expected a mapping, got {raw!r}")
    known = {f.name for f in dataclasses.fields(PhaseConfig)}
    if error := unknown_fields(raw, known, f"phases[{index}]."):
        raise error
    if "name" not in raw:
        raise ConfigError(f"phases[{index}].name", "every phase needs a name")
    values = {k: _coerce(f"phases[{index}].{k}", v, _PHASE_HINTS[k]) for k, v in raw.items()}
    return PhaseConfig(**values)


def config_from_dict(raw: dict) -> PostTrainConfig:
    if error := unknown_fields(raw, FIELDS):
        raise error
    values = {}
    for name, value in raw.items():
        if name == "phases":
            if isinstance(value, str):
                value = yaml.safe_load(value)
            if value is not None and not isinstance(value, list):
                raise ConfigError("phases", f"expected a list of phases, got {value!r}")
            values[name] = None if value is None else [_phase_from_dict(i, p) for i, p in enumerate(value)]
        else:
            values[name] = _coerce(name, value, _HINTS[name])
    return PostTrainConfig(**values)


def build_arg_parser(current: dict | None = None) -> argparse.ArgumentParser:
    """One `--field-name VALUE` option per config field, with the field's help and its value:
    `current` (the values of the `--config` file) where given, else the code's default."""
    current = current or {}
    parser = argparse.ArgumentParser(
        description="XPT post-training of an English BERT/RoBERTa encoder into Korean (Accelerate).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any config field can be given as --field-name VALUE (YAML syntax for lists: --phases '[...]').\n"
               "With --config FILE, --help shows that file's values.\n\nFields of each entry of --phases:\n"
               + "\n".join(f"  {f.name}: {f.metadata['help']}"
                           + ("" if f.default is dataclasses.MISSING else f" (default: {f.default})")
                           for f in dataclasses.fields(PhaseConfig)).replace("%", "%%"))
    parser.add_argument("--config", help="YAML config file (its values show below as 'config:')")
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        if name == "dry_run":
            parser.add_argument(flag, action="store_const", const=True, default=None, help=f.metadata["help"])
            continue
        if name in current:
            shown = f"config: {current[name]}"
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            shown = f"default: {default}"
        parser.add_argument(flag, dest=name, default=None, metavar="VALUE",
                            help=f"{f.metadata['help']} ({shown})".replace("%", "%%"))
    return parser


def _read_yaml_config(path_text: str) -> dict:
    from training.inputs import shipped_config

    path = Path(path_text)
    if not path.is_file() and path.parent in (Path("."), Path("configs")):  # a shipped config, by name
        path = shipped_config(path.name) or path
    if not path.is_file():
        raise ConfigError("config", f"{path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError("config", f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(raw, dict):
        raise ConfigError("config", f"{path} must hold a mapping of field: value")
    return raw


def _parse_cli_value(name: str, text: str):
    allowed, _ = _base_types(_HINTS[name])
    if allowed == {str} and text.lower() not in ("null", "none", "~"):
        return text
    value = yaml.safe_load(text)
    if isinstance(value, str) and value.lower() == "none":
        return None
    return value


def load_config(argv: list[str] | None = None) -> PostTrainConfig:
    """YAML file, then command-line overrides. Raises ConfigError for values that do not parse; the
    run validates the whole config once (`validate_config`), knowing its world size."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    raw: dict = _read_yaml_config(known.config) if known.config else {}
    args = build_arg_parser(raw).parse_args(argv)
    for name in FIELDS:
        value = getattr(args, name)
        if value is None:
            continue
        raw[name] = value if name == "dry_run" else _parse_cli_value(name, value)
    return config_from_dict(raw)


def describe_batch(c: PostTrainConfig, world_size: int, device: str) -> str:
    """The step's rows split over processes and micro-batches, and why, where the CPU default split it."""
    micro, accumulation = c.batch_layout(world_size, device)
    why = (f" (a CPU's default: at most {CPU_MICRO_BATCH_TOKENS:,} tokens per forward pass; set per_device_batch_size "
           "to change it)" if (micro, accumulation) != c.batch_layout(world_size, "cuda") else "")
    rows = f"{c.global_batch_size} {'packed' if c.packing else 'padded'} rows x {c.max_seq_length} tokens per step"
    return f"{rows} = {world_size} process(es) on {device} x {accumulation} micro-batch(es) of {micro} rows{why}"


def describe_plan(c: PostTrainConfig, world_size: int, device: str = "cuda") -> str:
    """Human-readable plan: phases, steps, sequences and tokens, batch per device."""
    phases = c.resolved_phases()
    total = sum(p.steps for p in phases)
    tokens_per_step = c.global_batch_size * c.max_seq_length
    lines = [
        f"method              {c.method}",
        f"source              {c.source}" + (f" -> {resolve_source(c.source)}" if c.source.startswith("package:") else ""),
        f"tokenizer           {c.tokenizer or f'trained on the train split (vocab {c.tokenizer_vocab_size})'}",
        f"data                {c.data}" + (f" (fallback {c.data_fallback})" if c.data_fallback else ""),
        f"batch               {describe_batch(c, world_size, device)}",
        "phases:",
    ]
    head_note = ""
    local = resolve_local(resolve_source(c.source))
    if local is not None and (local / "config.json").is_file() and c.train_fresh_head_in_phase1:
        architectures = json.loads((local / "config.json").read_text()).get("architectures") or []
        if architectures and not any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in architectures):
            head_note = " + lm_head_transform (the source has no MLM head)"
    for p in phases:
        stop = f", early stop after {p.early_stopping_patience} evals w/o improvement" if p.early_stopping_patience else ""
        lines.append(f"  {p.name:<10} {p.steps:>8} steps  lr {p.learning_rate:g} ({p.schedule}, warmup {p.warmup_steps})"
                     f"  trains {', '.join(p.groups()) + head_note if p.trainable_groups != ALL_GROUPS else 'all groups'}{stop}")
    lines.append(f"total               {total} steps, {total * c.global_batch_size:,} sequences, "
                 f"<= {total * tokens_per_step:,} tokens")
    lines.append(f"eval every {c.eval_steps} steps, checkpoint every {c.save_steps} (keep {c.save_total_limit}), "
                 f"output {c.output_dir}")
    return "\n".join(lines)


def flat_hparams(c: PostTrainConfig) -> dict:
    """Scalars only, for tracker hyper-parameter tables."""
    out = {}
    for k, v in c.to_dict().items():
        if isinstance(v, (int, float, str, bool)):
            out[k] = v
        elif v is None:
            out[k] = "none"
        else:
            out[k] = json.dumps(v)
    return out

