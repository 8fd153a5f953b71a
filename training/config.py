"""Typed configuration of XPT post-training: one dataclass, YAML plus `--field-name value` overrides.

`load_config(argv)` reads `--config FILE.yaml`, applies every `--field-name value` given on the
command line (any field of `PostTrainConfig`; values are parsed as YAML scalars, so `--phases`
takes a YAML/JSON list), and validates what can be validated offline. Errors are
`ConfigError`s whose message starts with the offending field name, raised before any download or
training.

Phases are data. Unless `phases` is given explicitly, they follow from `method` (the table of methods
is `training/methods.py`): `resolved_phases` turns the method's phase plan into `PhaseConfig`s with
the config's steps, learning rates and warmup.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cards.folder import looks_like_hub_id
from tokenization.errors import UserError
from training.methods import ALL_GROUPS, METHODS, Method

REPO_ROOT = Path(__file__).resolve().parents[1]

SCHEDULES = ("linear", "cosine", "constant")
MIXED_PRECISION = ("auto", "no", "fp16", "bf16")
AUTO_BOOL = ("auto", True, False)
ATTENTION = ("auto", "sdpa", "eager")
DROPOUT_MASKS = ("auto", "threshold", "torch")


class ConfigError(UserError):
    """A bad configuration; the message names the field."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        self.message = message
        super().__init__(f"config field `{field_name}`: {message}")


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
        "help": "stop after this many evaluations without a better valid loss; None: never"})

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
    max_train_sentences: int | None = arg(None, "use only the first N train sentences (data-efficiency settings)")
    max_eval_sentences: int | None = arg(5000, "cap valid/test for evaluation cost")
    max_seq_length: int = arg(128, "tokens per packed row (sentences longer than this are cut into consecutive chunks)")
    packing: bool = arg(True, "pack sentences into full rows (block attention); False: pad with length grouping")
    cache_dir: str = arg(".cache/xpt-data", "tokenised + packed splits, keyed by data/tokenizer/length")
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
    warmup_steps: int = arg(1000, "linear warmup steps at the start of each phase (capped at the phase length)")
    lr_schedule: str = arg("linear", "linear | cosine | constant, after the warmup, within each phase")
    early_stopping_patience: int | None = arg(None, "stop a phase after this many evaluations without a better valid loss (None: off)")
    global_batch_size: int = arg(256, "rows per optimiser step, over all processes and accumulation steps")
    per_device_batch_size: int | None = arg(None, "rows per forward pass per process; None: from gradient_accumulation_steps (default 1)")
    gradient_accumulation_steps: int | None = arg(None, "micro-batches per optimiser step; None: derived from world size and per_device_batch_size")
    weight_decay: float = arg(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    adam_beta1: float = arg(0.9, "AdamW beta1")
    adam_beta2: float = arg(0.98, "AdamW beta2")
    adam_epsilon: float = arg(1e-6, "AdamW epsilon")
    max_grad_norm: float = arg(1.0, "gradient clipping norm (0: off)")
    mixed_precision: str = arg("auto", "auto | no | fp16 | bf16; auto: bf16 on CUDA with bf16 and on CPUs with AVX512-BF16/AMX, else no")
    compile: str | bool = arg("auto", "torch.compile (inductor) of the training step's forward+backward; auto: CUDA, long CPU runs")
    fused_adamw: str | bool = arg("auto", "AdamW(fused=True); auto: on")
    static_masked_head: str | bool = arg("auto", "LM head on a static number of rows (no recompiles); auto: when compiling")
    attn_implementation: str = arg("auto", "sdpa | eager attention while post-training (the same function; the saved model "
                                   "loads with sdpa); auto: eager on CPU (softmax(QK^T)V computed explicitly in fp32, as "
                                   "SDPA's math path does, and faster to train there), sdpa on CUDA")
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
    keep_checkpoints: bool = arg(False, "keep OUTPUT/checkpoints after a successful run (default: delete them)")
    logging_steps: int = arg(10, "log loss, learning rate and tokens/s every N steps")
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"], metadata={"help": "trackers: [tensorboard], or [] for none"})
    push_to_hub: str | None = arg(None, "ORG/NAME: after saving, validate, write the card and upload (cards.push)")
    hub_private: bool = arg(False, "with push_to_hub: create the repo private")
    hub_license: str | None = arg(None, "with push_to_hub: licence id of the weights for the card (default: the English "
                                  "source's known licence; a source without one, or method scratch, needs it)")
    num_workers: int = arg(0, "data-loader worker processes (0: batches built in the training process)")
    max_steps: int | None = arg(None, "quick runs: scale every phase down so all phases total N steps (each keeps >= 1); train_steps/phase1_steps set the full plan")
    resume: str | None = arg(None, "continue an interrupted run: \"latest\" (the newest complete checkpoint in output_dir) or a checkpoint folder")
    overwrite_output_dir: bool = arg(False, "a fresh run into a folder that holds checkpoints or a summary: delete them first")
    dry_run: bool = arg(False, "validate the config and print the plan; nothing is downloaded or trained")

    # ------------------------------------------------------------------------------------------
    def method_entry(self) -> Method:
        """The entry of `method` in the table of methods (training/methods.py)."""
        if self.method not in METHODS:
            raise ConfigError("method", f"{self.method!r} is not one of {tuple(METHODS)}")
        return METHODS[self.method]

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
            phases = [PhaseConfig("train", ALL_GROUPS, self.train_steps, self.learning_rate, self.warmup_steps,
                                  self.lr_schedule, self.early_stopping_patience)]
        if self.max_steps is not None:
            total = sum(p.steps for p in phases)
            if self.max_steps < total:
                scaled = [max(1, int(p.steps * self.max_steps / total)) for p in phases]
                scaled[-1] = max(1, self.max_steps - sum(scaled[:-1]))
                for phase, steps in zip(phases, scaled):
                    phase.warmup_steps = int(phase.warmup_steps * steps / phase.steps) if phase.steps else 0
                    phase.steps = steps
        return phases

    def batch_layout(self, world_size: int) -> tuple[int, int]:
        """(per-device micro-batch, gradient-accumulation steps) for `world_size` processes."""
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
        return micro, g // (world_size * micro)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------

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


def _phase_from_dict(index: int, raw) -> PhaseConfig:
    if isinstance(raw, PhaseConfig):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"phases[{index}]", f"expected a mapping, got {raw!r}")
    known = {f.name for f in dataclasses.fields(PhaseConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"phases[{index}].{unknown[0]}", f"unknown phase field; known: {sorted(known)}")
    if "name" not in raw:
        raise ConfigError(f"phases[{index}].name", "every phase needs a name")
    values = {k: _coerce(f"phases[{index}].{k}", v, _PHASE_HINTS[k]) for k, v in raw.items()}
    return PhaseConfig(**values)


def config_from_dict(raw: dict) -> PostTrainConfig:
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ConfigError(unknown[0], f"unknown field; known fields: {', '.join(sorted(FIELDS))}")
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
    path = Path(path_text)
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
    """YAML file, then command-line overrides; offline validation. Raises ConfigError."""
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
    config = config_from_dict(raw)
    validate_config(config, check_data=not config.dry_run)
    return config


# ----------------------------------------------------------------------------------------------
# Validation (offline: nothing is downloaded)
# ----------------------------------------------------------------------------------------------


def resolve_source(source: str) -> str:
    """A local folder for "package:NAME" sources (a package exposing get_model_path()); else unchanged."""
    if source.startswith("package:"):
        import importlib

        name = source.removeprefix("package:")
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise ConfigError("source", f"package {name!r} is not installed ({error}); `pip install {name.replace('_', '-')}`") from error
        return str(module.get_model_path())
    return source


def resolve_local(path: str) -> Path | None:
    """An existing local path, tried as given (relative to the working directory) and relative to the repo root."""
    for candidate in (Path(path).expanduser(), REPO_ROOT / path):
        if candidate.exists():
            return candidate
    return None


# Fields a resumed run may change: they steer the process (where, whether to resume), what is logged
# or kept, and how batches are fetched, never the numbers. Every other field shapes the weights (data
# order, batches, schedule, model, seed, precision) or the recorded metrics, and must match the run's.
RUN_CONTROL = ("output_dir", "resume", "overwrite_output_dir", "dry_run")
RESUME_FREE = RUN_CONTROL + ("logging_steps", "save_steps", "save_total_limit", "keep_checkpoints", "report_to",
                             "push_to_hub", "hub_private", "hub_license", "num_workers", "cache_dir",
                             "retain_cpu_memory")


def resume_changes(saved: dict, now: dict) -> tuple[dict, dict]:
    """(shaping, free): the fields whose value differs between the settings a run was started with
    (`saved`, `PostTrainConfig.to_dict()`) and the settings it is resumed with, each as {field: [old, new]}.
    `eval_steps` is free unless early stopping reads the evaluations."""
    free_fields = set(RESUME_FREE)
    if now.get("early_stopping_patience") is None and saved.get("early_stopping_patience") is None:
        free_fields.add("eval_steps")
    changed = {k: [saved.get(k), now.get(k)] for k in sorted(set(saved) | set(now))
               if k not in RUN_CONTROL and saved.get(k) != now.get(k)}
    shaping = {k: v for k, v in changed.items() if k not in free_fields}
    return shaping, {k: v for k, v in changed.items() if k in free_fields}


def refuse_changed_resume(shaping: dict, checkpoint) -> None:
    """One line naming every changed field with its old and new value, and the ways forward."""
    if shaping:
        listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in shaping.items())
        raise ConfigError("resume", f"{checkpoint} was trained with other settings: {listed}. A resumed run "
                          "continues the saved schedule, batches and seed, so the change would not take effect or "
                          "would mix two runs: resume with the run's own settings (drop these options), or start a "
                          "new run in another --output-dir")


def check_json_files(folder: Path, role: str, fix: str) -> None:
    """Every JSON file transformers reads from a local model or tokenizer folder must parse: a file cut
    short or damaged is named in one line with `fix`, before anything is written."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                raise ConfigError(role, f"{path} does not parse ({type(error).__name__}: "
                                  f"{str(error).splitlines()[0][:120]}): the file is damaged or cut short; {fix}") from None


def validate_config(c: PostTrainConfig, world_size: int | None = None, check_data: bool = True) -> None:
    for name, value in dataclasses.asdict(c).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(name, f"{value} is not a finite number")
    method = c.method_entry()
    if c.push_to_hub is not None:
        _validate_push(c)
    if c.embedding_init not in ("random", "overlap", "fvt"):
        raise ConfigError("embedding_init", f"{c.embedding_init!r}: use 'random', 'overlap' or 'fvt'")
    if c.output_bias_init not in ("zeros", "unigram"):
        raise ConfigError("output_bias_init", f"{c.output_bias_init!r}: use 'zeros' or 'unigram'")
    if c.itl_init not in ("random", "copy"):
        raise ConfigError("itl_init", f"{c.itl_init!r}: use 'random' or 'copy'")
    if method.adapters and c.adapter_size <= 0:
        raise ConfigError("adapter_size", f"must be > 0 for method {c.method!r}")
    if c.mixed_precision not in MIXED_PRECISION:
        raise ConfigError("mixed_precision", f"{c.mixed_precision!r} is not one of {MIXED_PRECISION}")
    for name in ("compile", "fused_adamw", "static_masked_head", "retain_cpu_memory"):
        if getattr(c, name) not in AUTO_BOOL:
            raise ConfigError(name, f"{getattr(c, name)!r} is not one of auto, true, false")
    if c.attn_implementation not in ATTENTION:
        raise ConfigError("attn_implementation", f"{c.attn_implementation!r} is not one of {ATTENTION}")
    if c.dropout_mask not in DROPOUT_MASKS:
        raise ConfigError("dropout_mask", f"{c.dropout_mask!r} is not one of {DROPOUT_MASKS}")
    if c.lr_schedule not in SCHEDULES:
        raise ConfigError("lr_schedule", f"{c.lr_schedule!r} is not one of {SCHEDULES}")
    for name in ("train_steps", "global_batch_size", "max_seq_length", "eval_steps", "save_steps", "logging_steps",
                 "save_total_limit", "tokenizer_vocab_size", "tokenizer_train_sentences", "learning_rate",
                 "adam_epsilon"):
        if getattr(c, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(c, name)}")
    for name in ("warmup_steps", "weight_decay", "max_grad_norm", "num_workers", "valid_size", "test_size"):
        if getattr(c, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(c, name)}")
    for name in ("per_device_batch_size", "gradient_accumulation_steps", "max_steps", "max_train_sentences",
                 "max_eval_sentences", "early_stopping_patience", "phase1_learning_rate"):
        if getattr(c, name) is not None and getattr(c, name) <= 0:
            raise ConfigError(name, f"must be > 0 or null, got {getattr(c, name)}")
    for name in ("adam_beta1", "adam_beta2", "post_training_dropout"):
        if getattr(c, name) is not None and not 0 <= getattr(c, name) < 1:
            raise ConfigError(name, f"must be in [0, 1), got {getattr(c, name)}")
    if c.max_seq_length < 8:
        raise ConfigError("max_seq_length", f"must be at least 8 (a row holds [CLS], [SEP] and some text), got {c.max_seq_length}")
    if not 0 < c.mlm_probability < 1:
        raise ConfigError("mlm_probability", f"must be in (0, 1), got {c.mlm_probability}")
    if c.mask_replace_prob < 0 or c.random_replace_prob < 0 or c.mask_replace_prob + c.random_replace_prob > 1:
        raise ConfigError("mask_replace_prob", "mask_replace_prob and random_replace_prob must be >= 0 and sum to <= 1")
    if not 0 <= c.min_script_share <= 1:
        raise ConfigError("min_script_share", f"must be in [0, 1], got {c.min_script_share}")
    if c.min_script_share > 0:
        from tokenization.korean_text import script_filter

        try:
            script_filter(c.language)
        except ValueError:
            raise ConfigError("language", f"no script is known for {c.language!r}: give a code such as ko, ja, ru, or "
                              "set min_script_share 0 to train without the script check") from None
    if not 0 <= c.wop_probability <= 1:
        raise ConfigError("wop_probability", f"must be in [0, 1], got {c.wop_probability}")
    if not 0 < c.wop_fraction <= 1:
        raise ConfigError("wop_fraction", f"must be in (0, 1], got {c.wop_fraction}")
    if not c.phases and method.phase1_groups is not None:
        if c.phase1_steps <= 0:
            raise ConfigError("phase1_steps", f"must be > 0, got {c.phase1_steps}")
        if c.phase1_steps >= c.train_steps:
            raise ConfigError("phase1_steps", f"{c.phase1_steps} leaves no steps for phase2 of train_steps={c.train_steps}; "
                              "lower phase1_steps or raise train_steps")
    for i, phase in enumerate(c.resolved_phases()):
        _validate_phase(i, phase)
    if not c.data:
        raise ConfigError("data", "no training data given")
    if check_data and missing_data(c):
        raise ConfigError("data", f"{c.data!r} is neither an existing path, 'konlpy', nor a Hub dataset id")
    if c.resume not in (None, "latest") and not Path(c.resume).is_dir():
        raise ConfigError("resume", f"{c.resume!r} is neither 'latest' nor a checkpoint folder")
    if check_data:
        local_tokenizer = resolve_local(c.tokenizer) if c.tokenizer else None
        if local_tokenizer is not None and local_tokenizer.is_dir():
            check_json_files(local_tokenizer, "tokenizer", "train it again (python -m tokenization.train_tokenizer) "
                             "or copy it again, and check the path")
        local_source = resolve_local(c.source) if not c.source.startswith("package:") else None
        if local_source is not None and local_source.is_dir():
            check_json_files(local_source, "source", "download or copy the model again, and check the path")
    if world_size is not None:
        c.batch_layout(world_size)
    else:
        c.batch_layout(1)
    _validate_paths(c)


def _validate_push(c: PostTrainConfig) -> None:
    """The repo id as the Hub validates it, and a licence for the card, before any training (the same
    checks `cards.push` makes at the end)."""
    from cards.make_card import known_license, license_unknown
    from cards.push import PushError, check_repo_id

    try:
        check_repo_id(c.push_to_hub)
    except PushError as error:
        raise ConfigError("push_to_hub", str(error).removesuffix(" (nothing uploaded)")) from None
    local = resolve_local(c.source) if not c.source.startswith("package:") else None
    if known_license(c.hub_license, c.method, [c.source, str(local) if local else None]) is None:
        raise ConfigError("hub_license", str(license_unknown(
            c.method, c.source, fix="set hub_license (`--hub-license ID`, or `hub_license: ID` in the config)")))


def missing_data(c: PostTrainConfig) -> bool:
    """`data` is a local path that does not exist (and there is no fallback)."""
    return (c.data != "konlpy" and resolve_local(c.data) is None and not looks_like_hub_id(c.data)
            and not c.data_fallback)


def _validate_phase(i: int, phase: PhaseConfig) -> None:
    where = f"phases[{i}]"
    if phase.steps <= 0:
        raise ConfigError(f"{where}.steps", f"phase {phase.name!r} has {phase.steps} steps; must be > 0")
    groups = phase.trainable_groups
    if groups != ALL_GROUPS:
        if isinstance(groups, str) or not groups:
            raise ConfigError(f"{where}.trainable_groups", f"{groups!r}: give a list of group names or 'all'")
        from modeling_xpt import PARAMETER_GROUPS  # loads torch: not when the config is only parsed (--help)

        unknown = [g for g in groups if g not in PARAMETER_GROUPS]
        if unknown:
            raise ConfigError(f"{where}.trainable_groups", f"unknown parameter group(s) {unknown} in phase "
                              f"{phase.name!r}; valid groups: {list(PARAMETER_GROUPS)}")
    if phase.learning_rate <= 0:
        raise ConfigError(f"{where}.learning_rate", f"must be > 0, got {phase.learning_rate}")
    if phase.schedule not in SCHEDULES:
        raise ConfigError(f"{where}.schedule", f"{phase.schedule!r} is not one of {SCHEDULES}")
    if not 0 <= phase.warmup_steps <= phase.steps:
        raise ConfigError(f"{where}.warmup_steps", f"{phase.warmup_steps} must be in [0, steps={phase.steps}]")


def _validate_paths(c: PostTrainConfig) -> None:
    source = check_source_and_tokenizer(c.source, c.tokenizer)
    _refuse_output_over_inputs(c, source)


def check_source_and_tokenizer(source: str, tokenizer: str | None) -> str:
    """The English source (Hub id, folder or "package:NAME") and the target tokenizer, checked before
    anything loads: missing local paths, folders without a checkpoint or tokenizer, and families that do
    not match fail here (Hub ids pass: not checked offline). Returns the source as a loadable reference.
    Shared by post-training and `python -m modeling_xpt.convert`."""
    given, source = source, resolve_source(source)
    if resolve_local(source) is None and not looks_like_hub_id(source):
        raise ConfigError("source", f"{given!r} is neither an existing folder nor a Hub model id")
    local = resolve_local(source)
    if local is not None and not (local / "config.json").is_file():
        raise ConfigError("source", f"{local} has no config.json: not a transformers checkpoint")
    if tokenizer is not None:
        if resolve_local(tokenizer) is None and not looks_like_hub_id(tokenizer):
            raise ConfigError("tokenizer", f"{tokenizer!r} is neither an existing folder nor a Hub tokenizer id")
        local_tok = resolve_local(tokenizer)
        if local_tok is not None and local_tok.is_dir() and not any(
                (local_tok / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
            raise ConfigError("tokenizer", f"{local_tok} holds no tokenizer files (tokenizer.json / tokenizer_config.json)")
    families = {"source": source_family(source), "tokenizer": tokenizer_family(tokenizer) if tokenizer else None}
    if families["source"] and families["tokenizer"] and families["source"] != families["tokenizer"]:
        raise ConfigError("tokenizer", f"tokenizer family {families['tokenizer']!r} does not match the source family "
                          f"{families['source']!r} ({given}); train the tokenizer with --family {families['source']}")
    return str(local) if local is not None else source


def _refuse_output_over_inputs(c: PostTrainConfig, source: str) -> None:
    """The output folder must not be, contain or lie inside a folder the run reads (the English source,
    the tokenizer, the data): saving would overwrite or mix with them."""
    from modeling_xpt._cli import overlapping

    for name, value in (("source", source), ("tokenizer", c.tokenizer), ("data", c.data)):
        local = resolve_local(value) if value else None
        if local is not None and overlapping(c.output_dir, local):
            raise ConfigError("output_dir", f"{c.output_dir} overlaps the {name} folder {local}: the run would "
                              f"write into what it reads; choose another output folder")


def source_family(source: str) -> str | None:
    """model_type of a local source checkpoint (None for Hub ids: not looked up offline)."""
    local = resolve_local(source)
    if local is None or not (local / "config.json").is_file():
        return None
    return json.loads((local / "config.json").read_text()).get("model_type")


def _json_object(path: Path) -> dict:
    """The JSON object in `path`; {} when it holds something else or no valid JSON (the loader reports that)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def tokenizer_family(tokenizer) -> str | None:
    """'bert' ([CLS]/[MASK]) or 'roberta' (<s>/<mask>) from the special tokens of a loaded tokenizer, or of a
    local tokenizer folder read without loading it (its tokenizer_config.json / special_tokens_map.json, else
    the special tokens of tokenizer.json); None when neither or not local."""
    if not isinstance(tokenizer, (str, Path)):
        specials = set(tokenizer.all_special_tokens)
    else:
        local = resolve_local(str(tokenizer))
        if local is None or not local.is_dir():
            return None
        specials = set()
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            if (local / name).is_file():
                for key, value in _json_object(local / name).items():
                    if key.endswith("_token"):
                        specials.add(value.get("content") if isinstance(value, dict) else value)
        if not specials and (local / "tokenizer.json").is_file():
            added = _json_object(local / "tokenizer.json").get("added_tokens") or []
            specials = {token.get("content") for token in added if isinstance(token, dict) and token.get("special")}
    if specials & {"[MASK]", "[CLS]"}:
        return "bert"
    if specials & {"<mask>", "<s>"}:
        return "roberta"
    return None


def describe_plan(c: PostTrainConfig, world_size: int) -> str:
    """Human-readable plan: phases, steps, sequences and tokens, batch per device."""
    micro, accumulation = c.batch_layout(world_size)
    phases = c.resolved_phases()
    total = sum(p.steps for p in phases)
    tokens_per_step = c.global_batch_size * c.max_seq_length
    lines = [
        f"method              {c.method}",
        f"source              {c.source}" + (f" -> {resolve_source(c.source)}" if c.source.startswith("package:") else ""),
        f"tokenizer           {c.tokenizer or f'trained on the train split (vocab {c.tokenizer_vocab_size})'}",
        f"data                {c.data}" + (f" (fallback {c.data_fallback})" if c.data_fallback else ""),
        f"processes           {world_size}, per-device batch {micro}, gradient accumulation {accumulation}, "
        f"global batch {c.global_batch_size} x {c.max_seq_length} tokens ({'packed' if c.packing else 'padded'})",
        f"mixed precision     {c.mixed_precision}",
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

