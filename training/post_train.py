"""XPT post-training with Accelerate: an English BERT/RoBERTa encoder becomes a Korean one.

    accelerate launch training/post_train.py --config configs/demo.yaml --output-dir runs/demo [--max-steps N]
    python training/post_train.py --config configs/xpt-ko-400k.yaml --dry-run      # plan only, offline
    python training/post_train.py --config configs/demo.yaml --output-dir runs/demo --resume latest

Any config field (`training/config.py`) can be overridden as `--field-name value`.

The run, top to bottom (`run_post_training`), over a `RunState` that every checkpoint saves:
1. `start_run` and `prepare_run`: Accelerate, the output folder (and the checkpoint to resume
   from), config, tokenizer (loaded, or trained on the train split), text splits -> token rows
   (tokenised once, packed, cached; `training/mlm_data.py`), the method's model (`training/methods.py`).
2. `run_phase`, for each phase (data, `PhaseConfig`): set the trainable parameter groups on the *unwrapped*
   model, build a fresh AdamW over the trainable parameters only (no weight decay on biases and
   LayerNorm weights) and its warmup schedule, and `accelerator.prepare` them. At the phase
   boundary the prepared objects are released (`accelerator.free_memory()`), the model is
   unwrapped, `requires_grad` changes and everything is prepared again.
   Why: DDP records the parameters that require grad when it wraps the module and only
   all-reduces their gradients. Unfreezing parameters of an already wrapped model makes DDP
   either error out or, worse, leave the newly trainable parameters unsynchronised so ranks
   silently diverge. Re-wrapping after the change avoids both (tests/test_post_train.py runs two
   processes across the boundary and checks they match the single-process run).
   FSDP: with FSDP1, flat parameters mix frozen and trainable tensors, so use
   `use_orig_params=True` (or FSDP2, which shards per parameter) and re-prepare at the boundary
   as done here; the optimiser must be rebuilt after re-wrapping because FSDP replaces the
   parameter objects. DeepSpeed: its engine builds its optimiser from the parameters that
   require grad at `prepare` time and leaves frozen ones out of its (ZeRO-partitioned) state,
   so phase 2 needs a new engine: `free_memory()` destroys the old engine, and the re-prepare
   here builds a new one with all parameters. Neither path is exercised by the tests (CPU only).
3. Each optimiser step (`training/step.py`, `training_step`) consumes one global batch of `global_batch_size` rows, dealt to
   world_size x gradient_accumulation micro-batches. Each micro-batch loss is the sum of masked
   token losses divided by the number of masked tokens in the whole global batch (all-reduced)
   times world size, so after DDP's gradient averaging the update is exactly the global
   token-mean gradient, whatever the number of processes or accumulation steps.
4. `evaluate` every `eval_steps` and at the end of each phase on valid (fixed seeded masks), early
   stopping per phase on valid loss, final metrics on test; checkpoints every `save_steps`
   (atomic, keep last K, `training/checkpointing.py`); `--resume latest` restores model,
   optimiser, scheduler, RNG states, phase and data position (the data position is a function of
   the global step and masks of (seed, epoch, row), so nothing else is needed).
5. `write_outputs`: the `save_pretrained` model with its remote code, the tokenizer,
   `training_summary.json` (DEVELOPERS.md), `losses.jsonl` (loss per step) and TensorBoard logs.

Streaming (`--streaming true`, Hub ids): only the first max_train_sentences + valid + test records
are read and materialised once; the tokenised rows are memory-mapped Arrow files either way, so a
4M-sentence corpus never has to fit in RAM.

Optional auxiliary objective (off by default): word-order prediction (KoreALBERT's WOP), with
`--wop-probability P`: a share P of the rows shuffles up to `wop_fraction` of the tokens of each
sentence (never masked tokens, never across sentences) and a linear head on the last hidden state
predicts each shuffled token's original position; its loss (token mean over the global batch)
is added with weight `wop_weight`. The head is not saved with the model.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path


import numpy as np
import torch
import torch.nn.functional as F
import transformers
from accelerate import Accelerator
from accelerate.utils import is_tensorboard_available, set_seed
from tqdm.auto import tqdm
from transformers import AutoTokenizer
from transformers.modeling_outputs import MaskedLMOutput

from cards.push import PushError, push_to_hub
from modeling_xpt import save_model_folder
from modeling_xpt.modeling_xpt import XPTSelfAttention
from modeling_xpt.tokenizer_files import recorded_language
from tokenization.errors import UserError, report_error
from tokenization.train_tokenizer import train_tokenizer
from training.checkpointing import (
    DiskFull,
    FolderInUse,
    checkpoint_problem,
    folder_lock,
    latest_checkpoint,
    latest_usable_checkpoint,
    list_checkpoints,
    read_state,
    save_checkpoint,
)
from cards.folder import looks_like_hub_id
from training.config import (
    ConfigError,
    PhaseConfig,
    PostTrainConfig,
    describe_plan,
    flat_hparams,
    load_config,
    missing_data,
    resolve_local,
    refuse_changed_resume,
    resume_changes,
    resolve_source,
    source_family,
    tokenizer_family,
    validate_config,
)
from training.intrinsic import MetricSums
from training.mlm_data import (
    BatchSchedule,
    Masker,
    TrainMicroBatches,
    build_token_rows,
    check_target_script,
    describe_data_source,
    eval_batches,
    load_text_splits,
    row_stats,
    train_loader,
)
from training.run_record import SUMMARY_FILE, BatchRecord, DataRecord, PhaseRecord, RunRecord
from training.step import (
    SpeedSettings,
    cpu_class,
    describe_speed,
    resolve_speed,
    retain_freed_memory,
    training_step,
    use_attention,
    use_dropout_mask,
    weight_decay_groups,
)

LOSS_LOG = "losses.jsonl"


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------


class WarmupSchedule:
    """Linear warmup to 1, then linear decay to 0, cosine decay to 0, or constant (picklable).

    Hand-written rather than transformers' `get_scheduler`: its warmup starts at a learning rate of
    0, so the first step of every phase would train nothing; this one starts at 1/(warmup + 1)."""

    def __init__(self, warmup: int, total: int, kind: str):
        self.warmup, self.total, self.kind = warmup, total, kind

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        if self.kind == "constant":
            return 1.0
        progress = (step - self.warmup) / max(1, self.total - self.warmup)
        progress = min(1.0, progress)
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return max(0.0, 1.0 - progress)


def build_optimizer(model, phase, config: PostTrainConfig, fused: bool = False):
    """AdamW over the trainable parameters (`training.step.weight_decay_groups`), and the warmup
    schedule. `fused`: the single-kernel AdamW (CPU and CUDA), else torch's default."""
    optimizer = torch.optim.AdamW(weight_decay_groups(model, config.weight_decay), lr=phase.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
                                  **({"fused": True} if fused else {}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupSchedule(phase.warmup_steps, phase.steps, phase.schedule))
    return optimizer, scheduler


def set_dropout(model: torch.nn.Module, hidden: float | None, attention: float | None) -> None:
    """Set the attention-probability dropouts (the `dropout` of XPT's self-attention modules) to
    `attention` and every other dropout of `model` to `hidden`; None leaves that kind as it is. For
    this run only: `model.config` keeps the source's values, which the saved config.json carries to
    fine-tuning."""
    attention_dropouts = {id(m.dropout) for m in model.modules() if isinstance(m, XPTSelfAttention)}
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            value = attention if id(module) in attention_dropouts else hidden
            if value is not None:
                module.p = value


@dataclass
class WOPOutput(MaskedLMOutput):
    """The MLM output plus the summed word-order-prediction loss of the batch. A field of its own, so
    that it survives Accelerate's conversion of outputs to fp32 under mixed precision."""

    wop_loss_sum: torch.Tensor | None = None


class MLMWithWOP(torch.nn.Module):
    """MLM model plus KoreALBERT's word-order prediction head: from the last hidden state of every
    shuffled token, predict its original in-sentence position (`wop_labels`). The head is
    auxiliary: it is checkpointed with the run but not part of the saved model."""

    def __init__(self, mlm, num_positions: int):
        super().__init__()
        self.mlm = mlm
        self.wop_head = torch.nn.Linear(mlm.config.hidden_size, num_positions)

    def forward(self, wop_labels=None, **batch) -> WOPOutput:
        out = self.mlm(**batch, output_hidden_states=wop_labels is not None)
        wop_loss_sum = torch.zeros((), device=batch["input_ids"].device)
        if wop_labels is not None:
            chosen = wop_labels.ne(-100)
            logits = self.wop_head(out.hidden_states[-1][chosen]).float()
            # an empty selection still runs the head, so DDP sees its (zero) gradient
            wop_loss_sum = F.cross_entropy(logits, wop_labels[chosen], reduction="sum") \
                if logits.shape[0] else logits.sum()
        return WOPOutput(loss=out.loss, logits=out.logits, wop_loss_sum=wop_loss_sum)


def _root_cause(error: BaseException) -> str:
    """The innermost error of a chain (datasets wraps the reader's error), as one line."""
    while error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
        error = error.__cause__ or error.__context__
    text = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _logged_step(line: str) -> int | None:
    """The step of a losses.jsonl line; None for a line torn by a crash in mid-write (dropped on resume)."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def unigram_log_probs(train_rows, special_ids, vocab_size: int, size: int) -> torch.Tensor:
    """log p(v): the add-one-smoothed frequency of token v in the training rows, as a float64 tensor of
    `size` entries (>= vocab_size: padded embedding rows); special tokens, never MLM labels, and the
    padding rows get the smallest value."""
    counts = np.zeros(max(size, vocab_size), dtype=np.int64)
    for batch in train_rows.iter(batch_size=8192):
        counts += np.bincount(np.concatenate([np.asarray(ids) for ids in batch["input_ids"]]), minlength=counts.size)
    counts[list(special_ids)] = 0
    log_p = np.log((counts[:vocab_size] + 1) / (counts[:vocab_size].sum() + vocab_size))
    values = np.full(counts.size, log_p.min())
    values[:vocab_size] = log_p
    values[list(special_ids)] = log_p.min()
    return torch.from_numpy(values[:size])


def init_output_bias(model, train_rows, special_ids) -> None:
    """b of Eq. 5 := log p(v) (`unigram_log_probs`). Softmax(b) is then the unigram distribution at
    step 0. With b = 0 a small-budget run reaches that distribution through E_T g(h) instead, by
    pushing every hidden state towards one direction, and fine-tuning starts from a collapsed
    encoder. Written here because no library offers a prior-initialised output bias."""
    bias = model.lm_head.bias
    with torch.no_grad():
        bias.copy_(unigram_log_probs(train_rows, special_ids, model.config.vocab_size, bias.numel()).to(bias.dtype))


def get_tokenizer(config: PostTrainConfig, output_dir: Path, splits, source_fam: str | None, accelerator, log):
    """The configured tokenizer, the one trained by an earlier (resumed) run, or a new one."""
    if config.tokenizer:
        path = resolve_local(config.tokenizer)
        return AutoTokenizer.from_pretrained(str(path) if path else config.tokenizer), config.tokenizer
    trained = output_dir / "tokenizer"
    if accelerator.is_main_process and not (trained / "tokenizer_config.json").is_file():
        n = min(config.tokenizer_train_sentences, len(splits["train"]))
        log(f"training a {source_fam or 'roberta'} tokenizer (vocab {config.tokenizer_vocab_size}) on {n} train sentences")
        texts = splits["train"].select(range(n))["text"]
        tmp = output_dir / ".tmp-tokenizer"
        train_tokenizer(texts, config.tokenizer_vocab_size, family=source_fam or "roberta", out_dir=str(tmp))
        os.replace(tmp, trained)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(str(trained)), str(trained)


def hardware(accelerator) -> dict:
    # What a reader needs to place the figures (kind of device, versions), not this machine's details
    # (host platform string, core count): the summary travels with the published weights.
    device = str(accelerator.device)
    info = {"device": device, "machine": platform.machine(), "num_processes": accelerator.num_processes,
            "mixed_precision": accelerator.mixed_precision, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}
    if torch.cuda.is_available() and device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(accelerator.device)
    else:
        info["cpu_class"] = cpu_class()
    return info


def compile_for_training(module):
    """torch.compile (inductor, static shapes) of a prepared training module."""
    return torch.compile(module, backend="inductor", dynamic=False)


def launched_multi_cpu() -> bool:
    """True for several processes started by torchrun / `accelerate launch --multi_gpu` on a machine
    without CUDA: Accelerate then needs `cpu=True` to set up DDP over gloo (else every process would
    silently train alone)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


# ----------------------------------------------------------------------------------------------
# The run and its state
# ----------------------------------------------------------------------------------------------


@dataclass
class RunState:
    """Where a run is and what it has recorded: saved in every checkpoint (`trainer_state.json`), so a
    resumed run continues from exactly here (the data position is a function of `step`)."""

    step: int = 0  # optimiser steps done, all phases together
    phase_index: int = 0  # the phase running (len(phases) once all are done)
    phase_step: int = 0  # optimiser steps done in that phase
    best_valid_loss: float | None = None  # early stopping, per phase
    bad_evals: int = 0  # evaluations since the phase's best valid loss
    tokens_seen: int = 0
    wall_time_s: float = 0.0  # up to the last checkpoint (then to the end)
    train_time_s: float = 0.0  # optimiser steps only (no data preparation, evaluation, saving)
    phase_records: list[PhaseRecord] = field(default_factory=list)  # one per finished phase
    valid_history: list[dict] = field(default_factory=list)  # every evaluation on valid
    settings: dict | None = None  # the run's PostTrainConfig.to_dict(), checked when it is resumed
    setting_changes: list[dict] = field(default_factory=list)  # allowed changes on resume (RunRecord)

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> RunState:
        raw = read_state(checkpoint)
        return cls(**{**raw, "phase_records": [PhaseRecord(**p) for p in raw["phase_records"]]})

    def start_phase(self, phase_index: int) -> None:
        self.phase_index, self.phase_step, self.best_valid_loss, self.bad_evals = phase_index, 0, None, 0


@dataclass
class Run:
    """What `prepare_run` builds once: the data, tokenizer and model of a run, and how it trains."""

    config: PostTrainConfig
    accelerator: Accelerator
    speed: SpeedSettings
    phases: list[PhaseConfig]
    micro: int  # rows per forward pass per process
    accumulation: int  # micro-batches per optimiser step per process
    output_dir: Path
    trackers: list[str]
    resume_from: Path | None
    data: str  # the data spec read (after `data_fallback`)
    source: str  # the English source, loadable
    tokenizer: transformers.PreTrainedTokenizerBase
    tokenizer_ref: str
    model: torch.nn.Module  # the XPTForMaskedLM, unwrapped
    train_module: torch.nn.Module  # what trains: the model, or the model plus the WOP head
    rows: dict  # split -> token rows
    stats: dict  # split -> row_stats
    micro_batches: TrainMicroBatches
    capacity: dict | None  # static LM-head capacity (`training_step`)
    eval_kwargs: dict  # collate arguments of evaluation (fixed masks)
    clock: float  # when wall time was last added to the state

    @property
    def use_wop(self) -> bool:
        return self.config.wop_probability > 0

    @property
    def loss_log(self) -> Path:
        return self.output_dir / LOSS_LOG

    def log(self, message: str) -> None:
        self.accelerator.print(message)

    def add_wall_time(self, state: RunState) -> None:
        now = time.time()
        state.wall_time_s += now - self.clock
        self.clock = now


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


def train(config: PostTrainConfig, on_step_end: Callable[[RunState], None] | None = None) -> RunRecord:
    """One post-training run into `config.output_dir`, which no other run may write to meanwhile.
    `on_step_end(state)` runs after every optimiser step, once its logging, evaluation and checkpoint are done."""
    try:
        with folder_lock(config.output_dir, enabled=int(os.environ.get("RANK", "0")) == 0):
            return run_post_training(config, on_step_end)
    except (FolderInUse, DiskFull) as error:  # the lock, before anything is written; a checkpoint on a full disk
        message = str(error)
    # raised once the error (and with it the run's frames and open progress bar) is released, so that the
    # bar ends its line before the message is printed
    raise ConfigError("output_dir", message)


def run_post_training(config: PostTrainConfig, on_step_end: Callable[[RunState], None] | None = None) -> RunRecord:
    clock = time.time()
    accelerator, speed, trackers = start_run(config)
    output_dir = Path(config.output_dir)
    claim_output_dir(config, accelerator)
    if config.resume == "latest" and (output_dir / SUMMARY_FILE).exists():
        accelerator.print(f"{output_dir} holds a finished run ({SUMMARY_FILE}); nothing to resume")
        return RunRecord.read(output_dir)
    resume_from = resume_point(config, accelerator.print)
    state = RunState.from_checkpoint(resume_from) if resume_from else RunState()
    check_resumed_settings(config, state, resume_from, accelerator.print)
    set_seed(config.seed)
    run = prepare_run(config, accelerator, speed, trackers, resume_from, state, clock)
    progress = tqdm(total=sum(p.steps for p in run.phases), initial=state.step,
                    disable=not accelerator.is_local_main_process, dynamic_ncols=True, desc="post-train")
    first_phase = state.phase_index
    for phase_index in range(first_phase, len(run.phases)):
        run_phase(run, state, phase_index, progress, resume_from=resume_from if phase_index == first_phase else None,
                  on_step_end=on_step_end)
    progress.close()
    return write_outputs(run, state)


def start_run(config: PostTrainConfig) -> tuple[Accelerator, SpeedSettings, list[str]]:
    """Accelerate for this launch (processes, device, mixed precision), the speed settings and the trackers;
    the config checked against the real world size, before anything heavy."""
    trackers = [t for t in config.report_to if t and t != "none"]
    if "tensorboard" in trackers and not is_tensorboard_available():
        print("warning: report_to tensorboard, but the tensorboard package is not installed "
              "(`pip install tensorboard`); training without it", file=sys.stderr)
        trackers.remove("tensorboard")
    multi_cpu = launched_multi_cpu()
    speed = resolve_speed(config, "cuda" if torch.cuda.is_available() and not multi_cpu else "cpu")
    accelerator = Accelerator(mixed_precision=speed.mixed_precision, log_with=trackers or None,
                              project_dir=str(config.output_dir), step_scheduler_with_optimizer=False,
                              cpu=multi_cpu)
    world = accelerator.num_processes
    if world_size_from_env() != world:
        raise RuntimeError(f"launched as {os.environ['WORLD_SIZE']} processes but Accelerate runs {world}")
    if world == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_ADDR" in os.environ:
        accelerator.print("note: `accelerate launch --cpu --num_processes N` starts ONE process unless mpirun is "
                          "configured (accelerate issue #2741); for N CPU processes use "
                          "`accelerate launch --multi_gpu --num_processes N` (DDP over gloo) or torchrun")
    validate_config(config, world_size=world)  # batch divisibility for the real world size, before anything heavy
    if speed.retain_memory and not retain_freed_memory():
        speed = replace(speed, retain_memory=False)  # malloc is not glibc's here: nothing to switch
    accelerator.print(describe_speed(speed, accelerator.device.type))
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    return accelerator, speed, trackers


def claim_output_dir(config: PostTrainConfig, accelerator: Accelerator) -> None:
    """A fresh run (no `resume`) into a folder that holds another run's checkpoints or summary is refused,
    or, with `overwrite_output_dir`, starts by deleting them."""
    output_dir = Path(config.output_dir)
    if config.resume is not None or not (list_checkpoints(output_dir) or (output_dir / SUMMARY_FILE).exists()):
        return
    if not config.overwrite_output_dir:
        raise ConfigError("output_dir", f"{output_dir} already holds a run (checkpoints or {SUMMARY_FILE}): "
                          "continue it with --resume latest, or pass --overwrite-output-dir true")
    if accelerator.is_main_process:
        shutil.rmtree(output_dir / "checkpoints", ignore_errors=True)
        for name in (SUMMARY_FILE, LOSS_LOG):
            (output_dir / name).unlink(missing_ok=True)
    accelerator.wait_for_everyone()


def check_resumed_settings(config: PostTrainConfig, state: RunState, resume_from: Path | None, log) -> None:
    """A resumed run must have the settings it was started with, except those that cannot change the
    numbers (`training.config.resume_changes`); those changes are recorded with the step they start after."""
    now = json.loads(json.dumps(config.to_dict()))  # as saved in the checkpoint (tuples as lists)
    if resume_from is not None and state.settings is None:
        log(f"note: {resume_from} holds no record of its settings (written by an earlier version); they are not "
            "compared with this run's")
    elif resume_from is not None:
        shaping, free = resume_changes(state.settings, now)
        refuse_changed_resume(shaping, resume_from)
        if free:
            state.setting_changes.append({"step": state.step, "changed": free})
            log("resumed with changed settings that do not change the weights: " + ", ".join(
                f"{k} {old!r} -> {new!r}" for k, (old, new) in free.items()))
    state.settings = now


def resume_point(config: PostTrainConfig, log) -> Path | None:
    """The checkpoint to resume from: with `resume: latest` the newest one that loads (None for a folder
    without checkpoints), or the folder `resume` names, which must load."""
    output_dir = Path(config.output_dir)
    if config.resume == "latest":
        resume_from = latest_usable_checkpoint(output_dir, log)
        if resume_from is None and list_checkpoints(output_dir):
            raise ConfigError("resume", f"no checkpoint in {output_dir}/checkpoints loads (reasons above); start "
                              "over with --overwrite-output-dir true")
        if resume_from is None:
            log(f"--resume latest: no checkpoint in {output_dir}/checkpoints, starting from scratch")
        elif resume_from != latest_checkpoint(output_dir):
            log(f"resuming from the newest checkpoint that loads: {resume_from.name}")
        return resume_from
    if config.resume:
        resume_from = Path(config.resume)
        problem = checkpoint_problem(resume_from)
        if problem:
            raise ConfigError("resume", f"{resume_from} cannot be resumed from: {problem}")
        return resume_from
    return None


def load_splits(config: PostTrainConfig, data: str, accelerator: Accelerator) -> dict:
    """The text splits, cut to `max_train_sentences` / `max_eval_sentences`; unreadable data is a ConfigError."""
    with accelerator.main_process_first():
        try:
            splits = load_text_splits(data, text_column=config.text_column, valid_size=config.valid_size,
                                      test_size=config.test_size, data_config=config.data_config,
                                      cache_dir=str(Path(config.cache_dir) / "hf"), streaming=config.streaming,
                                      stream_limit=(config.max_train_sentences + config.valid_size + config.test_size)
                                      if config.max_train_sentences else None)
        except Exception as error:  # the user's files (empty, binary, torn .gz, ...): the cause names the file and fix
            raise ConfigError("data", f"cannot read {data}: {_root_cause(error)}") from None
    if config.max_train_sentences:
        splits["train"] = splits["train"].select(range(min(config.max_train_sentences, len(splits["train"]))))
    if config.max_eval_sentences:
        for split in ("valid", "test"):
            if split in splits:
                splits[split] = splits[split].select(range(min(config.max_eval_sentences, len(splits[split]))))
    check_target_script(splits["train"], language=config.language, min_share=config.min_script_share, data=data)
    return splits


def prepare_run(config: PostTrainConfig, accelerator: Accelerator, speed: SpeedSettings, trackers: list[str],
                resume_from: Path | None, state: RunState, clock: float) -> Run:
    """Data, tokenizer, model and batches of the run, in this order (the model's random initialisation
    follows the seed), and the loss log cut back to the checkpoint resumed from."""
    log = accelerator.print
    output_dir = Path(config.output_dir)
    data = config.data
    if config.data_fallback and data != "konlpy" and resolve_local(data) is None and not looks_like_hub_id(data):
        log(f"data {data!r} not found; using data_fallback {config.data_fallback!r}")
        data = config.data_fallback
    source = resolve_source(config.source)
    source_fam = source_family(source)
    splits = load_splits(config, data, accelerator)
    tokenizer, tokenizer_ref = get_tokenizer(config, output_dir, splits, source_fam, accelerator, log)
    tok_fam = tokenizer_family(tokenizer)
    if source_fam and tok_fam and source_fam != tok_fam:
        raise ConfigError("tokenizer", f"tokenizer family {tok_fam!r} does not match the source family {source_fam!r}")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ConfigError("tokenizer", "the tokenizer needs a mask and a pad token")
    model = config.method_entry().build(source, tokenizer, embedding_init=config.embedding_init,
                                        itl_init=config.itl_init, adapter_size=config.adapter_size)
    # the target language recorded by the corpus preparation or the tokenizer training, saved in config.json
    model.config.language = recorded_language(resolve_local(data) if data else None,
                                              resolve_local(config.tokenizer) if config.tokenizer else None)
    if config.post_training_dropout is not None:
        set_dropout(model, config.post_training_dropout, config.post_training_dropout)
    use_attention(model, speed.attention)
    use_dropout_mask(model, speed.dropout_mask)
    if not hasattr(model, "conversion_report"):
        model.conversion_report = {}
    # the module that trains: the MLM model, or the MLM model plus the auxiliary WOP head
    train_module = MLMWithWOP(model, config.max_seq_length) if config.wop_probability > 0 else model
    position_offset = model.config.position_offset
    row_length = min(config.max_seq_length, model.config.max_position_embeddings - position_offset)
    tokenizer.model_max_length = model.config.max_position_embeddings - position_offset  # the model's usable positions, saved with it
    cache_key = {"data": describe_data_source(data), "data_config": config.data_config, "streaming": config.streaming,
                 "valid": config.valid_size, "test": config.test_size, "max_train": config.max_train_sentences,
                 "max_eval": config.max_eval_sentences, "text_column": config.text_column}
    with accelerator.main_process_first():
        rows = build_token_rows(splits, tokenizer, max_seq_length=row_length, packing=config.packing,
                                cache_dir=config.cache_dir, cache_key=cache_key, log=log)
    stats = {split: row_stats(ds, len(splits[split])) for split, ds in rows.items()}
    log(f"data: {json.dumps(stats)}")
    if config.output_bias_init == "unigram" and resume_from is None:
        init_output_bias(model, rows["train"], special_ids=tokenizer.all_special_ids)

    masker = Masker(tokenizer, config.mlm_probability, config.mask_replace_prob, config.random_replace_prob,
                    config.whole_word_masking)
    collate_kwargs = dict(masker=masker, pad_id=tokenizer.pad_token_id, position_offset=position_offset,
                          packing=config.packing)
    micro, accumulation = config.batch_layout(accelerator.num_processes)
    schedule = BatchSchedule(len(rows["train"]), config.global_batch_size, config.seed,
                             lengths=None if config.packing else [len(x) for x in rows["train"]["input_ids"]])
    micro_batches = TrainMicroBatches(rows["train"], schedule, rank=accelerator.process_index,
                                      world=accelerator.num_processes, micro=micro, accumulation=accumulation,
                                      collate_kwargs=dict(collate_kwargs, seed=config.seed,
                                                          wop_probability=config.wop_probability,
                                                          wop_fraction=config.wop_fraction,
                                                          pad_to=row_length if speed.compile else None))
    run = Run(config=config, accelerator=accelerator, speed=speed, phases=config.resolved_phases(), micro=micro,
              accumulation=accumulation, output_dir=output_dir, trackers=trackers, resume_from=resume_from, data=data,
              source=source, tokenizer=tokenizer, tokenizer_ref=tokenizer_ref, model=model, train_module=train_module,
              rows=rows, stats=stats, micro_batches=micro_batches,
              capacity=dict(length=row_length, mlm_probability=config.mlm_probability) if speed.masked_capacity else None,
              eval_kwargs=dict(collate_kwargs, seed=config.eval_seed), clock=clock)

    if trackers:
        accelerator.init_trackers("tensorboard", config=flat_hparams(config))
    if accelerator.is_main_process:  # drop entries after the checkpoint we resume from
        kept = []
        if resume_from and run.loss_log.is_file():
            kept = [line for line in run.loss_log.read_text().splitlines()
                    if (step := _logged_step(line)) is not None and step <= state.step]
        run.loss_log.write_text("".join(line + "\n" for line in kept))
    if resume_from:
        log(f"resuming from {resume_from} (step {state.step}, phase {run.phases[state.phase_index].name} "
            f"step {state.phase_step})" if state.phase_index < len(run.phases) else f"resuming from {resume_from}")
    return run


def run_phase(run: Run, state: RunState, phase_index: int, progress, *, resume_from: Path | None = None,
              on_step_end: Callable[[RunState], None] | None = None) -> None:
    """One phase: its parameter groups trainable on the unwrapped model, a new optimiser, everything
    prepared again; steps until the phase's last (or early stop); then evaluation, its record, and the
    prepared objects released. `resume_from`: the checkpoint whose state is restored after preparing."""
    config, accelerator, phase = run.config, run.accelerator, run.phases[phase_index]
    if resume_from is None:
        state.start_phase(phase_index)
    # -- phase boundary: change requires_grad on the unwrapped model, new optimiser, prepare again --
    groups = phase.groups()
    if (config.train_fresh_head_in_phase1 and not run.model.conversion_report.get("source_has_mlm_head", True)
            and "target_embeddings" in groups and "lm_head_transform" not in groups):
        groups.append("lm_head_transform")
        run.log(f"{phase.name}: the source had no MLM head, so the fresh head transform trains too")
    run.model.set_trainable_groups(groups)  # (the WOP head, if any, always trains)
    run.train_module.train()
    optimizer, scheduler = build_optimizer(run.train_module, phase, config, fused=run.speed.fused_adamw)
    wrapped, optimizer, scheduler = accelerator.prepare(run.train_module, optimizer, scheduler)
    # compiled view of the prepared module for the step only (shares its parameters; saving,
    # loading and evaluation use the plain module)
    step_module = compile_for_training(wrapped) if run.speed.compile else wrapped
    trainable = [p for p in run.train_module.parameters() if p.requires_grad]
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
    stopped_early = False
    loader = iter(train_loader(run.micro_batches, state.step, state.step + phase.steps - state.phase_step,
                               num_workers=config.num_workers))
    tick, tick_tokens = time.time(), 0
    while state.phase_step < phase.steps:
        step_started = time.time()
        batches = [next(loader) for _ in range(run.accumulation)]
        result = training_step(step_module, batches, optimizer, scheduler, accelerator, params=trainable,
                               pad_id=run.tokenizer.pad_token_id, max_grad_norm=config.max_grad_norm,
                               use_wop=run.use_wop, wop_weight=config.wop_weight, capacity=run.capacity)
        step_loss = accelerator.reduce(result.loss_sum, reduction="sum").item() / max(1.0, result.global_masked)
        record = {"step": state.step + 1, "phase": phase.name, "loss": step_loss}
        if run.use_wop:
            record["wop_loss"] = accelerator.reduce(result.wop_sum, reduction="sum").item() / max(1.0, result.global_wop)
        state.step += 1
        state.phase_step += 1
        state.tokens_seen += int(result.global_tokens)
        state.train_time_s += time.time() - step_started
        tick_tokens += result.global_tokens
        step = state.step
        if accelerator.is_main_process:
            with open(run.loss_log, "a") as handle:
                handle.write(json.dumps({**record, "lr": result.lr}) + "\n")
        progress.update(1)
        if step % config.logging_steps == 0 or state.phase_step == phase.steps:
            tokens_per_s = tick_tokens / max(1e-9, time.time() - tick)
            progress.set_postfix(phase=phase.name, loss=f"{step_loss:.4f}", lr=f"{result.lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
            accelerator.log({"train/loss": step_loss, "train/lr": result.lr, "train/tokens_per_s": tokens_per_s,
                             "train/phase": phase_index, "train/tokens_seen": state.tokens_seen,
                             **({"train/wop_loss": record["wop_loss"]} if run.use_wop else {})}, step=step)
            tick, tick_tokens = time.time(), 0
        if step % config.eval_steps == 0 and state.phase_step < phase.steps:
            stopped_early = evaluate_during_phase(run, state, phase)
        if step % config.save_steps == 0 and state.phase_step < phase.steps and not stopped_early:
            run.add_wall_time(state)
            save_checkpoint(accelerator, run.output_dir, step, asdict(state), config.save_total_limit)
        if on_step_end is not None:
            on_step_end(state)
        if stopped_early:
            break
    # -- end of phase: record, evaluate, release the prepared objects -------------------------
    metrics = evaluate(run.model, run.rows["valid"], accelerator=accelerator, batch_size=run.micro,
                       collate_kwargs=run.eval_kwargs)
    state.valid_history.append({"step": state.step, "phase": phase.name, "phase_end": True, **metrics})
    accelerator.log({f"valid/{k}": v for k, v in metrics.items()}, step=state.step)
    run.log(f"\nend of {phase.name} at step {state.step}: valid loss {metrics['loss']:.4f} ppl {metrics['perplexity']:.2f}")
    state.phase_records.append(PhaseRecord(
        name=phase.name, steps=state.phase_step, planned_steps=phase.steps,
        trainable_groups=run.model.trainable_groups(), learning_rate=phase.learning_rate,
        warmup_steps=phase.warmup_steps, schedule=phase.schedule, stopped_early=stopped_early,
        end_step=state.step, valid_loss=metrics["loss"],
        trainable_parameters=sum(p.numel() for p in run.model.parameters() if p.requires_grad)))
    state.phase_index = phase_index + 1
    state.phase_step = 0
    run.train_module = accelerator.unwrap_model(wrapped)
    run.model = run.train_module.mlm if run.use_wop else run.train_module
    del wrapped, step_module, optimizer, scheduler
    accelerator.free_memory()


def evaluate_during_phase(run: Run, state: RunState, phase: PhaseConfig) -> bool:
    """Valid metrics in the middle of a phase, logged and kept; True when early stopping ends the phase."""
    metrics = evaluate(run.model, run.rows["valid"], accelerator=run.accelerator, batch_size=run.micro,
                       collate_kwargs=run.eval_kwargs)
    state.valid_history.append({"step": state.step, "phase": phase.name, **metrics})
    run.accelerator.log({f"valid/{k}": v for k, v in metrics.items()}, step=state.step)
    run.log(f"\nstep {state.step} ({phase.name}) valid: loss {metrics['loss']:.4f} ppl {metrics['perplexity']:.2f} "
            f"hits@1 {metrics['hits@1']:.4f} mrr {metrics['mrr']:.4f}")
    if not phase.early_stopping_patience:
        return False
    if state.best_valid_loss is None or metrics["loss"] < state.best_valid_loss:
        state.best_valid_loss, state.bad_evals = metrics["loss"], 0
    else:
        state.bad_evals += 1
    if state.bad_evals >= phase.early_stopping_patience:
        run.log(f"{phase.name}: valid loss has not improved for {state.bad_evals} evaluations; stopping the phase")
        return True
    return False


def evaluate(model, rows, *, accelerator, batch_size: int, collate_kwargs: dict) -> dict:
    """Intrinsic metrics on `rows` with fixed masks; every process takes a share, sums are reduced."""
    was_training = model.training
    model.eval()
    sums = MetricSums()
    with torch.no_grad(), accelerator.autocast():
        for batch in eval_batches(rows, batch_size=batch_size, rank=accelerator.process_index,
                                  world=accelerator.num_processes, collate_kwargs=collate_kwargs):
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            out = model(**batch, masked_only=True)
            sums.add_batch(out.logits, batch["labels"][batch["labels"].ne(-100)])
    total = accelerator.reduce(sums.as_tensor().to(accelerator.device), reduction="sum")
    model.train(was_training)
    return MetricSums.from_tensor(total.cpu()).compute()


def frequency_baseline(rows, log_p, *, accelerator, batch_size: int, collate_kwargs: dict) -> dict:
    """The metrics of `evaluate` for a predictor that ignores the context: every masked token scored by
    its training-split log frequency `log_p` (`unigram_log_probs`), on the same fixed masks. A model that
    has learnt nothing beyond token frequencies scores this; a run's metrics are read against it."""
    sums = MetricSums()
    scores = log_p.float()
    for batch in eval_batches(rows, batch_size=batch_size, rank=accelerator.process_index,
                              world=accelerator.num_processes, collate_kwargs=collate_kwargs):
        labels = batch["labels"][batch["labels"].ne(-100)]
        sums.add_batch(scores.expand(labels.numel(), -1), labels)
    total = accelerator.reduce(sums.as_tensor().to(accelerator.device), reduction="sum")
    return MetricSums.from_tensor(total.cpu()).compute()


def write_outputs(run: Run, state: RunState) -> RunRecord:
    """Final metrics (valid, and test when there is a test split), then the output folder: the model with its
    remote code, the tokenizer and `training_summary.json`; checkpoints dropped unless kept; the push, if asked."""
    config, accelerator, model = run.config, run.accelerator, run.model
    model.eval()
    valid_metrics = evaluate(model, run.rows["valid"], accelerator=accelerator, batch_size=run.micro,
                             collate_kwargs=run.eval_kwargs)
    final_split = "test" if "test" in run.rows and len(run.rows["test"]) else "valid"
    final_metrics = valid_metrics if final_split == "valid" else evaluate(
        model, run.rows["test"], accelerator=accelerator, batch_size=run.micro, collate_kwargs=run.eval_kwargs)
    baseline_metrics = frequency_baseline(
        run.rows[final_split], unigram_log_probs(run.rows["train"], run.tokenizer.all_special_ids,
                                                 model.config.vocab_size, model.config.vocab_size),
        accelerator=accelerator, batch_size=run.micro, collate_kwargs=run.eval_kwargs)
    run.add_wall_time(state)
    info = hardware(accelerator)
    info["speed"] = {"compile": run.speed.compile, "fused_adamw": run.speed.fused_adamw,
                     "static_masked_head": run.speed.masked_capacity, "attention": run.speed.attention,
                     "dropout_mask": run.speed.dropout_mask, "retain_cpu_memory": run.speed.retain_memory}
    if accelerator.num_processes > 1:  # every rank must hold the same weights (the DDP phase-boundary trap would break this)
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(accelerator.device)
        gathered = accelerator.gather(checksum[None]).cpu()
        info["ranks_in_sync"] = bool((gathered == gathered[0]).all())
    data, stats = run.data, run.stats
    record = RunRecord(
        method=config.method,
        source_model=config.source if not config.source.startswith("package:") else f"{config.source} ({run.source})",
        tokenizer=run.tokenizer_ref,
        data=DataRecord(spec=data, train=f"{data}:train", valid=f"{data}:valid", test=f"{data}:test",
                        train_sentences=stats["train"]["sentences"], train_pieces=stats["train"]["pieces"],
                        train_rows=stats["train"]["rows"],
                        train_tokens=stats["train"]["tokens"], valid_sentences=stats["valid"]["sentences"],
                        test_sentences=stats.get("test", {}).get("sentences", 0)),
        phases=state.phase_records,
        total_steps=state.step,
        tokens_seen=state.tokens_seen,
        wall_time_s=round(state.wall_time_s, 2),
        train_time_s=round(state.train_time_s, 2),
        tokens_per_s=round(state.tokens_seen / max(1e-9, state.train_time_s), 1),
        hardware=info,
        batch=BatchRecord(global_batch_size=config.global_batch_size, per_device_batch_size=run.micro,
                          gradient_accumulation_steps=run.accumulation, max_seq_length=config.max_seq_length,
                          packing=config.packing),
        valid_metrics=valid_metrics,
        final_metrics=final_metrics,
        final_metrics_split=final_split,
        frequency_baseline=baseline_metrics,
        valid_history=state.valid_history,
        resumed=run.resume_from is not None,
        setting_changes=state.setting_changes,
        source_has_mlm_head=run.model.conversion_report.get("source_has_mlm_head"),
        config=config.to_dict(),
    )
    if accelerator.is_main_process:
        save_model_folder(model, run.tokenizer, run.output_dir)
        record.write(run.output_dir)
        run.log(f"saved model, tokenizer and {SUMMARY_FILE} to {run.output_dir}")
        run.log(f"trained {state.tokens_seen:,} real tokens in {state.train_time_s:.0f} s of steps: "
                f"{record.tokens_per_s:,.0f} tokens/s on {info.get('gpu') or 'cpu ' + info['cpu_class']} "
                f"({accelerator.mixed_precision if accelerator.mixed_precision != 'no' else 'fp32'})")
        run.log("final ({}): {}".format(final_split, ", ".join(f"{k} {v:.4g}" for k, v in final_metrics.items())))
        run.log(f"frequency-only baseline ({final_split}, same masks, context ignored): hits@1 "
                f"{baseline_metrics['hits@1']:.4g}, perplexity {baseline_metrics['perplexity']:.4g}; this model's "
                f"hits@1 is {final_metrics['hits@1'] / max(baseline_metrics['hits@1'], 1e-12):.2f}x the baseline's")
        if not config.keep_checkpoints:  # optimiser states are not part of the model folder
            shutil.rmtree(run.output_dir / "checkpoints", ignore_errors=True)
        if config.push_to_hub:
            try:  # the folder is saved whatever happens here; a failed upload can be retried by hand
                push_to_hub(run.output_dir, config.push_to_hub, private=config.hub_private, log=run.log,
                            license=config.hub_license, require_license=True)
            except PushError as error:
                run.log(f"push to {config.push_to_hub} failed, nothing uploaded: {error}\n  the model is saved in "
                        f"{run.output_dir}; retry with `python -m cards.push --model-dir {run.output_dir} "
                        f"--repo-id {config.push_to_hub}"
                        + (f" --license {config.hub_license}" if config.hub_license else "") + "`")
    accelerator.wait_for_everyone()
    if run.trackers:
        accelerator.end_training()
    return record


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
        if config.dry_run:
            world = world_size_from_env()
            validate_config(config, world_size=world, check_data=False)
            if int(os.environ.get("RANK", "0")) == 0:
                print(describe_plan(config, world))
                if missing_data(config):
                    print(f"note: data {config.data!r} is not on this machine; training needs it (prepare it with "
                          "`python -m tokenization.prepare_corpus --input ... --out ...`)")
                print("dry run: configuration valid; nothing downloaded, nothing trained")
            return 0
        train(config)
    except UserError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
