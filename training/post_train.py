"""XPT post-training with Accelerate: an English BERT/RoBERTa encoder becomes a Korean one.

    accelerate launch -m training.post_train --config configs/demo.yaml --output-dir runs/demo [--max-steps N]
    xpt-post-train --config configs/xpt-ko-400k.yaml --dry-run      # plan only, offline
    xpt-post-train --config configs/demo.yaml --output-dir runs/demo --resume latest

Any config field (`training/config.py`) can be overridden as `--field-name value`.

The run, top to bottom (`run_post_training`), over a `RunState` that every checkpoint saves:
1. `start_run` ... `load_splits` (`training/run_setup.py`) and `prepare_run`: Accelerate, the output
   folder (and the checkpoint to resume from), config, tokenizer (loaded, or trained on the train
   split), text splits -> token rows (tokenised once, packed, cached; `training/mlm_data.py`), the
   method's model (`training/methods.py`) and its training forward (`training/masked_lm.py`).
2. `run_phase`, for each phase (data, `PhaseConfig`): set the trainable parameter groups on the *unwrapped* model,
   build a fresh AdamW over the trainable parameters only (no weight decay on biases and LayerNorm weights) and
   its warmup schedule, and `accelerator.prepare` them. At the phase boundary the prepared objects are released
   (`accelerator.free_memory()`), the model is unwrapped, `requires_grad` changes and everything is prepared
   again. Why: DDP all-reduces only the parameters that required grad when it wrapped the module, so parameters
   unfrozen later would stay unsynchronised and ranks would silently diverge (tests/test_post_train.py runs two
   processes across the boundary against one); FSDP and DeepSpeed need the same (DEVELOPERS.md).
3. Each optimiser step (`training/step.py`, `training_step`) consumes one global batch of `global_batch_size`
   rows, dealt to world_size x gradient_accumulation micro-batches. Each micro-batch loss is the sum of masked
   token losses divided by the number of masked tokens in the whole global batch (all-reduced) times world size,
   so after DDP's gradient averaging the update is exactly the global token-mean gradient, whatever the number of
   processes or accumulation steps.
4. `evaluate` every `eval_steps` and at the end of each phase on valid (fixed seeded masks), early stopping per
   phase on valid loss, final metrics on test; checkpoints every `save_steps` and at the last step (atomic, keep
   last K, `training/checkpointing.py`); `--resume latest` restores model, optimiser, scheduler, RNG states, phase
   and data position (the batches are a function of the global step, the masks of (seed, epoch, row)).
5. `write_outputs`: the model (`save_pretrained`, with its remote code), the tokenizer, `training_summary.json`
   (DEVELOPERS.md), `losses.jsonl` (loss per step) and TensorBoard logs; a Ctrl-C says which checkpoint to resume.

Streaming (`--streaming true`, Hub ids): only the first max_train_sentences + valid + test records are read
and materialised once; tokenised rows are memory-mapped Arrow files either way (4M sentences need not fit in RAM).

Optional auxiliary objective (off by default): word-order prediction (KoreALBERT's WOP), with `--wop-probability P`:
a share P of the rows shuffles up to `wop_fraction` of the tokens of each sentence (never masked tokens, never
across sentences) and a linear head on the last hidden state predicts each shuffled token's original position; its
loss (token mean over the global batch) is added with weight `wop_weight`. The head is not saved with the model.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from modeling_xpt import save_model_folder, set_trainable_groups, trainable_groups
from modeling_xpt.tokenizer_files import recorded_language
from tokenization.errors import ConfigError, UserError, report_error
from tokenization.folders import write_text_atomic
from training.checkpointing import (DiskFull, FolderInUse, folder_lock, out_of_space_advice, read_state,
                                    resume_advice, save_checkpoint)
from training.config import PhaseConfig, PostTrainConfig, describe_batch, flat_hparams, load_config
from training.config_checks import check_output_is_a_folder, data_to_read
from training.inputs import check_families, recorded_ref, resolve_local, resolve_source, source_family
from training.intrinsic import evaluate, frequency_baseline, init_output_bias, unigram_log_probs
from training.masked_lm import MaskedLMTraining, set_dropout, use_speed_paths
from training.mlm_batches import BatchSchedule, Masker, TrainMicroBatches, train_loader
from training.mlm_data import build_token_rows, describe_data_source
from training.publishing import publisher, retry_command
from training.run_record import LOSS_LOG, SUMMARY_FILE, BatchRecord, DataRecord, PhaseRecord, RunRecord, logged_step
from training.run_setup import (check_resumed_settings, claim_output_dir, dry_run, finished_run, get_tokenizer,
                                hardware, load_splits, resume_point, row_statistics, start_run, stop_if_diverged)
from training.step import SpeedSettings, build_optimizer, compile_for_training, training_step


# --- The run and its state ----------------------------------------------------------------------------------


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
    train_time_s: float = 0.0  # optimiser steps with their batches (no tokenising, evaluation, saving)
    phase_records: list[PhaseRecord] = field(default_factory=list)  # one per finished phase
    valid_history: list[dict] = field(default_factory=list)  # every evaluation on valid
    settings: dict | None = None  # the run's PostTrainConfig.to_dict(), checked when it is resumed
    precision: str | None = None  # what mixed_precision resolved to (no | fp16 | bf16) where it last trained
    setting_changes: list[dict] = field(default_factory=list)  # allowed changes on resume (RunRecord)
    num_processes: int | None = None  # the processes that trained it: a checkpoint resumes with as many
    data_fingerprint: dict | str | None = None  # each split's token rows and tokenizer (`rows_fingerprint`)

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
    tokenizer: PreTrainedTokenizerBase
    tokenizer_ref: str
    model: torch.nn.Module  # the XPTForMaskedLM, unwrapped
    train_module: torch.nn.Module  # what trains: MaskedLMTraining over the model (plus the WOP head if on)
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


# --- Training -----------------------------------------------------------------------------------------------


def train(config: PostTrainConfig, on_step_end: Callable[[RunState], None] | None = None) -> RunRecord:
    """One post-training run into `config.output_dir`, which no other run may write to meanwhile.
    `on_step_end(state)` runs after every optimiser step, once its logging, evaluation and checkpoint are done."""
    check_output_is_a_folder(config)  # before the lock makes the folder
    try:
        with folder_lock(config.output_dir, enabled=int(os.environ.get("RANK", "0")) == 0):
            return run_post_training(config, on_step_end)
    except FolderInUse as error:  # the lock, before anything is written: another output folder is the fix
        refusal = ConfigError("output_dir", str(error))
    except DiskFull as error:  # a checkpoint on a full disk: the setting is fine, the space is not
        refusal = UserError(str(error))
    except OSError as error:  # the loss log or the output folder on a full disk
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        refusal = UserError(out_of_space_advice(error, config.output_dir))
    # raised once the error (with the run's frames and open progress bar) is released: the bar ends its line first
    raise refusal


def run_post_training(config: PostTrainConfig, on_step_end: Callable[[RunState], None] | None = None) -> RunRecord:
    clock = time.time()
    accelerator, speed, trackers = start_run(config)
    output_dir = Path(config.output_dir)
    claim_output_dir(config, accelerator)
    finished = finished_run(config, output_dir, accelerator.print)
    if finished is not None:
        return finished
    resume_from = resume_point(config, accelerator.print)
    state = RunState.from_checkpoint(resume_from) if resume_from else RunState()
    check_resumed_settings(config, state, resume_from, accelerator.print, accelerator.num_processes, speed.mixed_precision)
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


def prepare_run(config: PostTrainConfig, accelerator: Accelerator, speed: SpeedSettings, trackers: list[str],
                resume_from: Path | None, state: RunState, clock: float) -> Run:
    """Data, tokenizer, model and batches of the run, in this order (the model's random initialisation
    follows the seed), and the loss log cut back to the checkpoint resumed from."""
    log = accelerator.print
    output_dir = Path(config.output_dir)
    data = data_to_read(config)
    if data != config.data:
        log(f"data {config.data!r} not found; using data_fallback {data!r}")
    source = resolve_source(config.source)
    source_fam = source_family(source)
    splits = load_splits(config, data, accelerator)
    tokenizer, tokenizer_ref = get_tokenizer(config, output_dir, splits, source_fam, accelerator, log, resume_from)
    check_families(source, tokenizer)
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ConfigError("tokenizer", "the tokenizer needs a mask and a pad token")
    model = config.method_entry().build(source, tokenizer, embedding_init=config.embedding_init,
                                        itl_init=config.itl_init, adapter_size=config.adapter_size)
    # the target language recorded by the corpus preparation or tokenizer training, else --language (config.json)
    model.config.language = recorded_language(resolve_local(data) if data else None,
                                              resolve_local(config.tokenizer) if config.tokenizer else None
                                              ) or config.language
    if config.post_training_dropout is not None:
        set_dropout(model, config.post_training_dropout, config.post_training_dropout)
    use_speed_paths(model, speed.attention, speed.dropout_mask)
    model.conversion_report = getattr(model, "conversion_report", {})
    # the module that trains: the MLM loss at the masked positions, plus the auxiliary WOP head if asked for
    train_module = MaskedLMTraining(model, config.max_seq_length if config.wop_probability > 0 else 0)
    position_offset = model.config.position_offset
    tokenizer.model_max_length = model.config.max_position_embeddings - position_offset  # usable positions, saved with it
    row_length = min(config.max_seq_length, tokenizer.model_max_length)
    if row_length < config.max_seq_length:
        log(f"max_seq_length {config.max_seq_length} is more than the model's {row_length} positions: "
            f"rows of {row_length} tokens")
    cache_key = {"data": describe_data_source(data), "data_config": config.data_config, "streaming": config.streaming,
                 "valid": config.valid_size, "test": config.test_size, "max_train_sampled": config.max_train_sentences,
                 "max_eval": config.max_eval_sentences, "text_column": config.text_column}
    with accelerator.main_process_first():
        rows = build_token_rows(splits, tokenizer, max_seq_length=row_length, packing=config.packing,
                                cache_dir=config.cache_dir, cache_key=cache_key, log=log)
    stats = row_statistics(rows, splits, tokenizer, state, resume_from, log)  # a resume refuses other rows
    if config.output_bias_init == "unigram" and resume_from is None:
        init_output_bias(model, rows["train"], special_ids=tokenizer.all_special_ids)

    masker = Masker(tokenizer, config.mlm_probability, config.mask_replace_prob, config.random_replace_prob,
                    config.whole_word_masking)
    collate_kwargs = dict(masker=masker, pad_id=tokenizer.pad_token_id, position_offset=position_offset,
                          packing=config.packing)
    micro, accumulation = config.batch_layout(accelerator.num_processes, accelerator.device.type)
    log("batch: " + describe_batch(config, accelerator.num_processes, accelerator.device.type))
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

    if trackers:  # curves drop the steps after the one this run starts from, as losses.jsonl does below
        purge = {"tensorboard": {"purge_step": state.step + 1}} if "tensorboard" in trackers else {}
        accelerator.init_trackers("tensorboard", config=flat_hparams(config), init_kwargs=purge)
    if accelerator.is_main_process:  # drop entries after the checkpoint we resume from
        kept = []
        if resume_from and run.loss_log.is_file():
            kept = [line for line in run.loss_log.read_text().splitlines()
                    if (step := logged_step(line)) is not None and step <= state.step]
        write_text_atomic(run.loss_log, "".join(line + "\n" for line in kept))
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
    set_trainable_groups(run.model, groups)  # (the WOP head, if any, always trains)
    run.train_module.train()
    optimizer, scheduler = build_optimizer(run.train_module, phase, config, fused=run.speed.fused_adamw)
    wrapped, optimizer, scheduler = accelerator.prepare(run.train_module, optimizer, scheduler)
    # compiled view of the prepared module for the step only (shares its parameters; saving,
    # loading and evaluation use the plain module)
    step_module = compile_for_training(wrapped) if run.speed.compile else wrapped
    trainable = [p for p in run.train_module.parameters() if p.requires_grad]
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
    elif phase_index and state.step and state.step % config.save_steps == 0:
        # the save due at the step that ended the last phase, taken with this phase's fresh optimiser
        run.add_wall_time(state)
        save_checkpoint(accelerator, run.output_dir, state.step, asdict(state), config.save_total_limit)
    stopped_early = bool(phase.early_stopping_patience) and state.bad_evals >= phase.early_stopping_patience  # resumed
    loader = iter(train_loader(run.micro_batches, state.step, state.step + phase.steps - state.phase_step,
                               num_workers=run.speed.loader_workers))
    tick_from, tick_tokens = state.train_time_s, 0  # the logged tokens/s: over step time only, as the summary's
    while state.phase_step < phase.steps and not stopped_early:
        step_started = time.time()
        batches = [next(loader) for _ in range(run.accumulation)]
        result = training_step(step_module, batches, optimizer, scheduler, accelerator, params=trainable,
                               pad_id=run.tokenizer.pad_token_id, max_grad_norm=config.max_grad_norm,
                               use_wop=run.use_wop, wop_weight=config.wop_weight, capacity=run.capacity)
        step_loss = accelerator.reduce(result.loss_sum, reduction="sum").item() / max(1.0, result.global_masked)
        record = {"step": state.step + 1, "phase": phase.name, "loss": step_loss}
        if run.use_wop:
            record["wop_loss"] = accelerator.reduce(result.wop_sum, reduction="sum").item() / max(1.0, result.global_wop)
        state.step, state.phase_step = state.step + 1, state.phase_step + 1
        state.tokens_seen += int(result.global_tokens)
        state.train_time_s += time.time() - step_started
        tick_tokens += result.global_tokens
        step = state.step
        if accelerator.is_main_process:
            with open(run.loss_log, "a") as handle:
                handle.write(json.dumps({**record, "lr": result.lr}) + "\n")
        progress.update(1)
        if step % config.logging_steps == 0 or state.phase_step == phase.steps:
            tokens_per_s = tick_tokens / max(1e-9, state.train_time_s - tick_from)
            progress.set_postfix(phase=phase.name, loss=f"{step_loss:.4f}", lr=f"{result.lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
            accelerator.log({"train/loss": step_loss, "train/lr": result.lr, "train/tokens_per_s": tokens_per_s,
                             "train/phase": phase_index, "train/tokens_seen": state.tokens_seen,
                             **({"train/wop_loss": record["wop_loss"]} if run.use_wop else {})}, step=step)
            tick_from, tick_tokens = state.train_time_s, 0
        if step % config.eval_steps == 0 and state.phase_step < phase.steps:
            stopped_early = evaluate_during_phase(run, state, phase)
        stop_if_diverged(run, state, phase.name, step_loss, progress)  # before anything is saved of NaN weights
        # on the cadence within a phase (a phase's last step: with the next one's optimiser), and at the run's end
        # (in a slot of its own, removed once the outputs are written: `write_outputs`)
        run_end = phase_index == len(run.phases) - 1 and (state.phase_step == phase.steps or stopped_early)
        if (step % config.save_steps == 0 and state.phase_step < phase.steps and not stopped_early) or run_end:
            run.add_wall_time(state)
            save_checkpoint(accelerator, run.output_dir, step, asdict(state), config.save_total_limit,
                            spare_slot=run_end and step % config.save_steps != 0)
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
        trainable_groups=trainable_groups(run.model), learning_rate=phase.learning_rate,
        warmup_steps=phase.warmup_steps, schedule=phase.schedule, stopped_early=stopped_early,
        end_step=state.step, valid_loss=metrics["loss"],
        trainable_parameters=sum(p.numel() for p in run.model.parameters() if p.requires_grad)))
    state.phase_index = phase_index + 1
    state.phase_step = 0
    run.train_module = accelerator.unwrap_model(wrapped)
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


def write_outputs(run: Run, state: RunState) -> RunRecord:
    """Final metrics (valid, and test when there is a test split), then the output folder: the model with its
    remote code, the tokenizer and `training_summary.json`; checkpoints dropped unless kept; the push, if asked."""
    config, accelerator, model = run.config, run.accelerator, run.model
    model.eval()
    valid_metrics = evaluate(model, run.rows["valid"], accelerator=accelerator, batch_size=run.micro,
                             collate_kwargs=run.eval_kwargs)
    stop_if_diverged(run, state, state.phase_records[-1].name, valid_metrics["loss"], what="valid loss")
    final_split = "test" if "test" in run.rows and len(run.rows["test"]) else "valid"
    final_metrics = valid_metrics if final_split == "valid" else evaluate(
        model, run.rows["test"], accelerator=accelerator, batch_size=run.micro, collate_kwargs=run.eval_kwargs)
    baseline_metrics = frequency_baseline(
        run.rows[final_split], unigram_log_probs(run.rows["train"], run.tokenizer.all_special_ids,
                                                 model.config.vocab_size, model.config.vocab_size),
        accelerator=accelerator, batch_size=run.micro, collate_kwargs=run.eval_kwargs)
    run.add_wall_time(state)
    info = hardware(accelerator, run.speed)
    if accelerator.num_processes > 1:  # every rank must hold the same weights (the DDP phase-boundary trap would break this)
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(accelerator.device)
        gathered = accelerator.gather(checksum[None]).cpu()
        info["ranks_in_sync"] = bool((gathered == gathered[0]).all())
    data, stats = recorded_ref(run.data), run.stats  # local paths absolute, as the source's: never a Hub id
    record = RunRecord(
        method=config.method,
        source_model=f"{config.source} ({run.source})" if config.source.startswith("package:") else recorded_ref(config.source),
        tokenizer=recorded_ref(run.tokenizer_ref),
        data=DataRecord(spec=data, train=f"{data}:train", valid=f"{data}:valid", test=f"{data}:test" if "test" in stats else None,
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
                          gradient_accumulation_steps=run.accumulation, packing=config.packing,
                          max_seq_length=min(config.max_seq_length, run.tokenizer.model_max_length)),  # as the rows
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
        base_hits, hits = baseline_metrics["hits@1"], final_metrics["hits@1"]
        run.log(f"frequency-only baseline ({final_split}, same masks, context ignored): hits@1 {base_hits:.4g}, "
                f"perplexity {baseline_metrics['perplexity']:.4g}; this model's hits@1 is "
                + (f"{hits / base_hits:.2f}x the baseline's" if base_hits else f"{hits:.4g} (the baseline's is 0)"))
        if not config.keep_checkpoints:  # optimiser states are not part of the model folder
            shutil.rmtree(run.output_dir / "checkpoints", ignore_errors=True)
        elif state.step % config.save_steps:  # the run's end, off the cadence: the model folder holds those weights
            shutil.rmtree(run.output_dir / "checkpoints" / f"checkpoint-{state.step}", ignore_errors=True)
        if config.push_to_hub:
            hub = publisher()
            try:  # the folder is saved whatever happens here; a failed upload can be retried by hand
                hub.push(run.output_dir, config.push_to_hub, private=config.hub_private, log=run.log,
                         license=config.hub_license, require_license=True)
            except hub.Error as error:
                retry = retry_command(run.output_dir, config.push_to_hub, private=config.hub_private,
                                      license=config.hub_license)
                run.log(f"push to {config.push_to_hub} failed, nothing uploaded: {error}\n  the model is saved in "
                        f"{run.output_dir}; retry with `{retry}`")
    accelerator.wait_for_everyone()
    if run.trackers:
        accelerator.end_training()
    return record


def main(argv: list[str] | None = None) -> int:
    config = None
    try:
        config = load_config(argv)
        if config.dry_run:
            dry_run(config)
        else:
            train(config)
        return 0
    except UserError as error:
        return report_error(error)
    except KeyboardInterrupt:
        pass  # said below, once the run's frames are released and its progress bar has ended its line
    finally:
        # torch's documented shutdown of a launched run: a gloo group left to interpreter exit can abort the
        # saved run (SIGABRT). The command line only: an in-process caller may run post-training again.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        training = config is not None and not config.dry_run
        print("interrupted" + (f": {resume_advice(config.output_dir)}" if training else ""), file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
