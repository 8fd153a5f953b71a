"""XPT post-training with Accelerate: an English BERT/RoBERTa encoder becomes a Korean one.

    accelerate launch training/post_train.py --config configs/demo.yaml --output-dir runs/demo [--max-steps N]
    python training/post_train.py --config configs/xpt-ko-400k.yaml --dry-run      # plan only, offline
    python training/post_train.py --config configs/demo.yaml --output-dir runs/demo --resume latest

Any config field (`training/config.py`) can be overridden as `--field-name value`.

The loop, top to bottom (`train`):
1. Config, tokenizer (loaded, or trained on the train split), text splits -> token rows
   (tokenised once, packed, cached; `training/mlm_data.py`), model via `modeling_xpt.from_source`.
2. For each phase (data, `PhaseConfig`): set the trainable parameter groups on the *unwrapped*
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
3. Each optimiser step consumes one global batch of `global_batch_size` rows, dealt to
   world_size x gradient_accumulation micro-batches. Each micro-batch loss is the sum of masked
   token losses divided by the number of masked tokens in the whole global batch (all-reduced)
   times world size, so after DDP's gradient averaging the update is exactly the global
   token-mean gradient, whatever the number of processes or accumulation steps.
4. Evaluation every `eval_steps` and at the end of each phase on valid (fixed seeded masks), early
   stopping per phase on valid loss, final metrics on test; checkpoints every `save_steps`
   (atomic, keep last K, `training/checkpointing.py`); `--resume latest` restores model,
   optimiser, scheduler, RNG states, phase and data position (the data position is a function of
   the global step and masks of (seed, epoch, row), so nothing else is needed).
5. The output folder: `save_pretrained` model with its remote code, the tokenizer,
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

import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from training.config import (  # noqa: E402
    ConfigError,
    PostTrainConfig,
    describe_plan,
    flat_hparams,
    load_config,
    looks_like_hub_id,
    missing_data,
    resolve_local,
    resolve_source,
    source_family,
    validate_config,
)

SUMMARY_FILE = "training_summary.json"
LOSS_LOG = "losses.jsonl"


# ----------------------------------------------------------------------------------------------
# Pieces
# ----------------------------------------------------------------------------------------------


class WarmupSchedule:
    """Linear warmup to 1, then linear decay to 0, cosine decay to 0, or constant (picklable)."""

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


def no_decay(name: str) -> bool:
    return name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name


def build_optimizer(model, phase, config: PostTrainConfig, fused: bool = False):
    """AdamW over the trainable parameters (no weight decay on biases and LayerNorm weights), and the
    warmup schedule. `fused`: the single-kernel AdamW (CPU and CUDA), else torch's default."""
    import torch

    decay, plain = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (plain if no_decay(name) else decay).append(param)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=phase.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
                                  **({"fused": True} if fused else {}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupSchedule(phase.warmup_steps, phase.steps, phase.schedule))
    return optimizer, scheduler


class WOPObjective:
    """Namespace for the auxiliary word-order-prediction module (built lazily: torch is imported late)."""

    @staticmethod
    def build(mlm, num_positions: int):
        import torch
        import torch.nn.functional as F

        class MLMWithWOP(torch.nn.Module):
            """MLM model plus KoreALBERT's word-order prediction head: from the last hidden state of every
            shuffled token, predict its original in-sentence position (`wop_labels`). The head is
            auxiliary: it is checkpointed with the run but not part of the saved model."""

            def __init__(self):
                super().__init__()
                self.mlm = mlm
                self.wop_head = torch.nn.Linear(mlm.config.hidden_size, num_positions)

            def forward(self, wop_labels=None, **batch):
                out = self.mlm(**batch, output_hidden_states=wop_labels is not None)
                # set as an item, not an attribute: accelerate's fp32 output conversion (bf16 autocast)
                # rebuilds the output from its items
                out["wop_loss_sum"] = torch.zeros((), device=batch["input_ids"].device)
                if wop_labels is not None:
                    chosen = wop_labels.ne(-100)
                    logits = self.wop_head(out.hidden_states[-1][chosen]).float()
                    # an empty selection still runs the head, so DDP sees its (zero) gradient
                    out["wop_loss_sum"] = F.cross_entropy(logits, wop_labels[chosen], reduction="sum") \
                        if logits.shape[0] else logits.sum()
                    out.hidden_states = None
                return out

        return MLMWithWOP()


def detect_tokenizer_family(tokenizer) -> str | None:
    if tokenizer.mask_token == "[MASK]" or tokenizer.cls_token == "[CLS]":
        return "bert"
    if tokenizer.mask_token == "<mask>" or tokenizer.bos_token == "<s>":
        return "roberta"
    return None


def build_model(config: PostTrainConfig, source: str, tokenizer):
    from modeling_xpt import from_source

    method = config.method
    kwargs = dict(init=config.embedding_init, itl_init=config.itl_init)
    if method in ("xpt", "xpt-sp"):
        return from_source(source, tokenizer, **kwargs)
    if method == "xpt-no-itl":
        return from_source(source, tokenizer, use_itl_in=False, use_itl_out=False, **kwargs)
    if method == "scratch":
        return from_source(source, tokenizer, scratch=True)
    if method == "adapters":
        return from_source(source, tokenizer, use_itl_in=False, use_itl_out=False,
                                          adapter_size=config.adapter_size, init=config.embedding_init)
    raise ConfigError("method", f"unknown method {method!r}")


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


def unigram_log_probs(train_rows, special_ids, vocab_size: int, size: int):
    """log p(v): the add-one-smoothed frequency of token v in the training rows, as a float64 tensor of
    `size` entries (>= vocab_size: padded embedding rows); special tokens, never MLM labels, and the
    padding rows get the smallest value."""
    import numpy as np
    import torch

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
    import torch

    bias = model.lm_head.bias
    with torch.no_grad():
        bias.copy_(unigram_log_probs(train_rows, special_ids, model.config.vocab_size, bias.numel()).to(bias.dtype))


def get_tokenizer(config: PostTrainConfig, output_dir: Path, splits, source_fam: str | None, accelerator, log):
    """The configured tokenizer, the one trained by an earlier (resumed) run, or a new one."""
    from transformers import AutoTokenizer

    if config.tokenizer:
        path = resolve_local(config.tokenizer)
        return AutoTokenizer.from_pretrained(str(path) if path else config.tokenizer), config.tokenizer
    trained = output_dir / "tokenizer"
    if accelerator.is_main_process and not (trained / "tokenizer_config.json").is_file():
        from tokenization.train_tokenizer import train_tokenizer

        n = min(config.tokenizer_train_sentences, len(splits["train"]))
        log(f"training a {source_fam or 'roberta'} tokenizer (vocab {config.tokenizer_vocab_size}) on {n} train sentences")
        texts = splits["train"].select(range(n))["text"]
        tmp = output_dir / ".tmp-tokenizer"
        train_tokenizer(texts, config.tokenizer_vocab_size, family=source_fam or "roberta", out_dir=str(tmp))
        os.replace(tmp, trained)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(str(trained)), str(trained)


def evaluate(model, rows, *, accelerator, batch_size: int, collate_kwargs: dict) -> dict:
    """Intrinsic metrics on `rows` with fixed masks; every process takes a share, sums are reduced."""
    import torch

    from training.intrinsic import MetricSums
    from training.mlm_data import eval_batches

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
    from training.intrinsic import MetricSums
    from training.mlm_data import eval_batches

    sums = MetricSums()
    scores = log_p.float()
    for batch in eval_batches(rows, batch_size=batch_size, rank=accelerator.process_index,
                              world=accelerator.num_processes, collate_kwargs=collate_kwargs):
        labels = batch["labels"][batch["labels"].ne(-100)]
        sums.add_batch(scores.expand(labels.numel(), -1), labels)
    total = accelerator.reduce(sums.as_tensor().to(accelerator.device), reduction="sum")
    return MetricSums.from_tensor(total.cpu()).compute()


def hardware(accelerator) -> dict:
    import platform

    import torch
    import transformers

    # What a reader needs to place the figures (kind of device, versions), not this machine's details
    # (host platform string, core count): the summary travels with the published weights.
    device = str(accelerator.device)
    info = {"device": device, "machine": platform.machine(), "num_processes": accelerator.num_processes,
            "mixed_precision": accelerator.mixed_precision, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}
    if torch.cuda.is_available() and device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(accelerator.device)
    return info


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


def train(config: PostTrainConfig) -> dict:
    """One post-training run into `config.output_dir`, which no other run may write to meanwhile."""
    from training.checkpointing import DiskFull, FolderInUse, folder_lock

    try:
        with folder_lock(config.output_dir, enabled=int(os.environ.get("RANK", "0")) == 0):
            return run_post_training(config)
    except (FolderInUse, DiskFull) as error:  # the lock, before anything is written; a checkpoint on a full disk
        message = str(error)
    # raised once the error (and with it the run's frames and open progress bar) is released, so that the
    # bar ends its line before the message is printed
    raise ConfigError("output_dir", message)


def run_post_training(config: PostTrainConfig) -> dict:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    from training.checkpointing import (
        checkpoint_problem,
        latest_checkpoint,
        latest_usable_checkpoint,
        list_checkpoints,
        read_state,
        save_checkpoint,
    )
    from training.mlm_data import (
        BatchSchedule,
        Masker,
        TrainMicroBatches,
        build_token_rows,
        check_target_script,
        describe_data_source,
        load_text_splits,
        row_stats,
        train_loader,
    )

    started = time.time()
    output_dir = Path(config.output_dir)
    trackers = [t for t in config.report_to if t and t != "none"]
    if "tensorboard" in trackers:
        from accelerate.utils import is_tensorboard_available

        if not is_tensorboard_available():
            print("warning: report_to tensorboard, but the tensorboard package is not installed "
                  "(`pip install tensorboard`); training without it", file=sys.stderr)
            trackers.remove("tensorboard")
    from training.step import describe_speed, resolve_speed, training_step

    multi_cpu = launched_multi_cpu()
    speed = resolve_speed(config, "cuda" if torch.cuda.is_available() and not multi_cpu else "cpu",
                          planned_steps=sum(p.steps for p in config.resolved_phases()))
    accelerator = Accelerator(mixed_precision=speed.mixed_precision, log_with=trackers or None,
                              project_dir=str(output_dir), step_scheduler_with_optimizer=False,
                              cpu=multi_cpu)
    world = accelerator.num_processes
    if int(os.environ.get("WORLD_SIZE", "1")) != world:
        raise RuntimeError(f"launched as {os.environ['WORLD_SIZE']} processes but Accelerate runs {world}")
    if world == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_ADDR" in os.environ:
        accelerator.print("note: `accelerate launch --cpu --num_processes N` starts ONE process unless mpirun is "
                          "configured (accelerate issue #2741); for N CPU processes use "
                          "`accelerate launch --multi_gpu --num_processes N` (DDP over gloo) or torchrun")
    validate_config(config, world_size=world)  # batch divisibility for the real world size, before anything heavy
    micro, accumulation = config.batch_layout(world)
    phases = config.resolved_phases()
    log = accelerator.print
    log(describe_speed(speed, accelerator.device.type))
    output_dir.mkdir(parents=True, exist_ok=True)

    previous = list_checkpoints(output_dir)
    if config.resume is None and (previous or (output_dir / SUMMARY_FILE).exists()):
        if not config.overwrite_output_dir:
            raise ConfigError("output_dir", f"{output_dir} already holds a run (checkpoints or {SUMMARY_FILE}): "
                              "continue it with --resume latest, or pass --overwrite-output-dir true")
        if accelerator.is_main_process:
            import shutil

            shutil.rmtree(output_dir / "checkpoints", ignore_errors=True)
            for name in (SUMMARY_FILE, LOSS_LOG):
                (output_dir / name).unlink(missing_ok=True)
        accelerator.wait_for_everyone()
    if config.resume == "latest" and (output_dir / SUMMARY_FILE).exists():
        log(f"{output_dir} holds a finished run ({SUMMARY_FILE}); nothing to resume")
        return json.loads((output_dir / SUMMARY_FILE).read_text())
    resume_from = None
    if config.resume == "latest":
        resume_from = latest_usable_checkpoint(output_dir, log)
        if resume_from is None and list_checkpoints(output_dir):
            raise ConfigError("resume", f"no checkpoint in {output_dir}/checkpoints loads (reasons above); start "
                              "over with --overwrite-output-dir true")
        if resume_from is None:
            log(f"--resume latest: no checkpoint in {output_dir}/checkpoints, starting from scratch")
        elif resume_from != latest_checkpoint(output_dir):
            log(f"resuming from the newest checkpoint that loads: {resume_from.name}")
    elif config.resume:
        resume_from = Path(config.resume)
        problem = checkpoint_problem(resume_from)
        if problem:
            raise ConfigError("resume", f"{resume_from} cannot be resumed from: {problem}")
    state = read_state(resume_from) if resume_from else {
        "step": 0, "phase_index": 0, "phase_step": 0, "best_valid_loss": None, "bad_evals": 0,
        "tokens_seen": 0, "wall_time_s": 0.0, "train_time_s": 0.0, "phase_records": [], "valid_history": []}
    set_seed(config.seed)

    # ---- data, tokenizer, model ---------------------------------------------------------------
    data = config.data
    if config.data_fallback and data != "konlpy" and resolve_local(data) is None and not looks_like_hub_id(data):
        log(f"data {data!r} not found; using data_fallback {config.data_fallback!r}")
        data = config.data_fallback
    source = resolve_source(config.source)
    source_fam = source_family(source)
    cache_hf = str(Path(config.cache_dir) / "hf")
    with accelerator.main_process_first():
        try:
            splits = load_text_splits(data, text_column=config.text_column, valid_size=config.valid_size,
                                      test_size=config.test_size, data_config=config.data_config, cache_dir=cache_hf,
                                      streaming=config.streaming,
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
    tokenizer, tokenizer_ref = get_tokenizer(config, output_dir, splits, source_fam, accelerator, log)
    tok_fam = detect_tokenizer_family(tokenizer)
    if source_fam and tok_fam and source_fam != tok_fam:
        raise ConfigError("tokenizer", f"tokenizer family {tok_fam!r} does not match the source family {source_fam!r}")
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ConfigError("tokenizer", "the tokenizer needs a mask and a pad token")
    model = build_model(config, source, tokenizer)
    from modeling_xpt.tokenizer_files import recorded_language

    # the target language recorded by the corpus preparation or the tokenizer training, saved in config.json
    model.config.language = recorded_language(resolve_local(data) if data else None,
                                              resolve_local(config.tokenizer) if config.tokenizer else None)
    if not hasattr(model, "conversion_report"):
        model.conversion_report = {}
    use_wop = config.wop_probability > 0
    # the module that trains: the MLM model, or the MLM model plus the auxiliary WOP head
    train_module = WOPObjective.build(model, config.max_seq_length) if use_wop else model
    position_offset = model.config.position_offset
    tokenizer.model_max_length = model.config.max_position_embeddings - position_offset  # the model's usable positions, saved with it
    cache_key = {"data": describe_data_source(data), "data_config": config.data_config, "streaming": config.streaming,
                 "valid": config.valid_size,
                 "test": config.test_size, "max_train": config.max_train_sentences,
                 "max_eval": config.max_eval_sentences, "text_column": config.text_column}
    with accelerator.main_process_first():
        rows = build_token_rows(splits, tokenizer, max_seq_length=min(config.max_seq_length, model.config.max_position_embeddings - position_offset),
                                packing=config.packing, cache_dir=config.cache_dir, cache_key=cache_key, log=log)
    stats = {split: row_stats(ds) for split, ds in rows.items()}
    log(f"data: {json.dumps(stats)}")
    if config.output_bias_init == "unigram" and resume_from is None:
        init_output_bias(model, rows["train"], special_ids=tokenizer.all_special_ids)

    masker = Masker(tokenizer, config.mlm_probability, config.mask_replace_prob, config.random_replace_prob,
                    config.whole_word_masking)
    collate_kwargs = dict(masker=masker, pad_id=tokenizer.pad_token_id, position_offset=position_offset,
                          packing=config.packing)
    row_length = min(config.max_seq_length, model.config.max_position_embeddings - position_offset)
    schedule = BatchSchedule(len(rows["train"]), config.global_batch_size, config.seed,
                             lengths=None if config.packing else [len(x) for x in rows["train"]["input_ids"]])
    micro_batches = TrainMicroBatches(rows["train"], schedule, rank=accelerator.process_index, world=world,
                                      micro=micro, accumulation=accumulation,
                                      collate_kwargs=dict(collate_kwargs, seed=config.seed,
                                                          wop_probability=config.wop_probability,
                                                          wop_fraction=config.wop_fraction,
                                                          pad_to=row_length if speed.compile else None))
    capacity = dict(length=row_length, mlm_probability=config.mlm_probability) if speed.masked_capacity else None
    eval_kwargs = dict(collate_kwargs, seed=config.eval_seed)

    if trackers:
        accelerator.init_trackers("tensorboard", config=flat_hparams(config))
    loss_log = output_dir / LOSS_LOG
    if accelerator.is_main_process:  # drop entries after the checkpoint we resume from
        kept = []
        if resume_from and loss_log.is_file():
            kept = [line for line in loss_log.read_text().splitlines()
                    if (step := _logged_step(line)) is not None and step <= state["step"]]
        loss_log.write_text("".join(line + "\n" for line in kept))
    if resume_from:
        log(f"resuming from {resume_from} (step {state['step']}, phase {phases[state['phase_index']].name} "
            f"step {state['phase_step']})" if state["phase_index"] < len(phases) else f"resuming from {resume_from}")

    total_steps = sum(p.steps for p in phases)
    progress = tqdm(total=total_steps, initial=state["step"], disable=not accelerator.is_local_main_process,
                    dynamic_ncols=True, desc="post-train")
    resuming = resume_from is not None
    for phase_index in range(state["phase_index"], len(phases)):
        phase = phases[phase_index]
        if not resuming or state["phase_index"] != phase_index:
            state.update(phase_index=phase_index, phase_step=0, best_valid_loss=None, bad_evals=0)
        # -- phase boundary: change requires_grad on the unwrapped model, new optimiser, prepare again --
        groups = phase.groups()
        if (config.train_fresh_head_in_phase1 and not model.conversion_report.get("source_has_mlm_head", True)
                and "target_embeddings" in groups and "lm_head_transform" not in groups):
            groups.append("lm_head_transform")
            log(f"{phase.name}: the source had no MLM head, so the fresh head transform trains too")
        model.set_trainable_groups(groups)  # (the WOP head, if any, always trains)
        train_module.train()
        optimizer, scheduler = build_optimizer(train_module, phase, config, fused=speed.fused_adamw)
        wrapped, optimizer, scheduler = accelerator.prepare(train_module, optimizer, scheduler)
        # compiled view of the prepared module for the step only (shares its parameters; saving,
        # loading and evaluation use the plain module)
        step_module = compile_for_training(wrapped) if speed.compile else wrapped
        trainable = [p for p in train_module.parameters() if p.requires_grad]
        if resuming:
            accelerator.load_state(str(resume_from))
            resuming = False
        stopped_early = False
        loader = iter(train_loader(micro_batches, state["step"], state["step"] + phase.steps - state["phase_step"],
                                   num_workers=config.num_workers))
        tick, tick_tokens = time.time(), 0
        while state["phase_step"] < phase.steps:
            step_started = time.time()
            batches = [next(loader) for _ in range(accumulation)]
            result = training_step(step_module, batches, optimizer, scheduler, accelerator, params=trainable,
                                   pad_id=tokenizer.pad_token_id, max_grad_norm=config.max_grad_norm,
                                   use_wop=use_wop, wop_weight=config.wop_weight, capacity=capacity)
            global_masked, global_tokens, global_wop, lr = (result.global_masked, result.global_tokens,
                                                            result.global_wop, result.lr)
            loss_sum, wop_sum = result.loss_sum, result.wop_sum
            step_loss = accelerator.reduce(loss_sum, reduction="sum").item() / max(1.0, global_masked)
            record = {"step": state["step"] + 1, "phase": phase.name, "loss": step_loss}
            if use_wop:
                record["wop_loss"] = accelerator.reduce(wop_sum, reduction="sum").item() / max(1.0, global_wop)
            state["step"] += 1
            state["phase_step"] += 1
            state["tokens_seen"] += int(global_tokens)
            state["train_time_s"] = state.get("train_time_s", 0.0) + time.time() - step_started
            tick_tokens += global_tokens
            step = state["step"]
            if accelerator.is_main_process:
                with open(loss_log, "a") as handle:
                    handle.write(json.dumps({**record, "lr": lr}) + "\n")
            progress.update(1)
            if step % config.logging_steps == 0 or state["phase_step"] == phase.steps:
                elapsed = max(1e-9, time.time() - tick)
                tokens_per_s = tick_tokens / elapsed
                progress.set_postfix(phase=phase.name, loss=f"{step_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
                accelerator.log({"train/loss": step_loss, "train/lr": lr, "train/tokens_per_s": tokens_per_s,
                                 "train/phase": phase_index, "train/tokens_seen": state["tokens_seen"],
                                 **({"train/wop_loss": record["wop_loss"]} if use_wop else {})}, step=step)
                tick, tick_tokens = time.time(), 0
            if step % config.eval_steps == 0 and state["phase_step"] < phase.steps:
                metrics = evaluate(model, rows["valid"], accelerator=accelerator, batch_size=micro,
                                   collate_kwargs=eval_kwargs)
                state["valid_history"].append({"step": step, "phase": phase.name, **metrics})
                accelerator.log({f"valid/{k}": v for k, v in metrics.items()}, step=step)
                log(f"\nstep {step} ({phase.name}) valid: loss {metrics['loss']:.4f} ppl {metrics['perplexity']:.2f} "
                    f"hits@1 {metrics['hits@1']:.4f} mrr {metrics['mrr']:.4f}")
                if phase.early_stopping_patience:
                    best = state["best_valid_loss"]
                    if best is None or metrics["loss"] < best:
                        state["best_valid_loss"], state["bad_evals"] = metrics["loss"], 0
                    else:
                        state["bad_evals"] += 1
                    if state["bad_evals"] >= phase.early_stopping_patience:
                        log(f"{phase.name}: valid loss has not improved for {state['bad_evals']} evaluations; stopping the phase")
                        stopped_early = True
            if step % config.save_steps == 0 and state["phase_step"] < phase.steps and not stopped_early:
                state["wall_time_s"] += time.time() - started
                started = time.time()
                save_checkpoint(accelerator, output_dir, step, state, config.save_total_limit)
            if config.stop_after_steps is not None and step >= config.stop_after_steps:
                accelerator.wait_for_everyone()
                progress.close()
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(17)  # as if killed: no summary, no final save
            if stopped_early:
                break
        # -- end of phase: record, evaluate, release the prepared objects -------------------------
        metrics = evaluate(model, rows["valid"], accelerator=accelerator, batch_size=micro, collate_kwargs=eval_kwargs)
        state["valid_history"].append({"step": state["step"], "phase": phase.name, "phase_end": True, **metrics})
        accelerator.log({f"valid/{k}": v for k, v in metrics.items()}, step=state["step"])
        log(f"\nend of {phase.name} at step {state['step']}: valid loss {metrics['loss']:.4f} ppl {metrics['perplexity']:.2f}")
        state["phase_records"].append({
            "name": phase.name, "steps": state["phase_step"], "planned_steps": phase.steps,
            "trainable_groups": model.trainable_groups(), "learning_rate": phase.learning_rate,
            "warmup_steps": phase.warmup_steps, "schedule": phase.schedule, "stopped_early": stopped_early,
            "end_step": state["step"], "valid_loss": metrics["loss"],
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)})
        state["phase_index"] = phase_index + 1
        state["phase_step"] = 0
        train_module = accelerator.unwrap_model(wrapped)
        model = train_module.mlm if use_wop else train_module
        del wrapped, step_module, optimizer, scheduler
        accelerator.free_memory()
    progress.close()

    # ---- final evaluation and output folder ---------------------------------------------------
    model.eval()
    valid_metrics = evaluate(model, rows["valid"], accelerator=accelerator, batch_size=micro, collate_kwargs=eval_kwargs)
    final_split = "test" if "test" in rows and len(rows["test"]) else "valid"
    final_metrics = valid_metrics if final_split == "valid" else evaluate(
        model, rows["test"], accelerator=accelerator, batch_size=micro, collate_kwargs=eval_kwargs)
    baseline_metrics = frequency_baseline(
        rows[final_split], unigram_log_probs(rows["train"], tokenizer.all_special_ids, model.config.vocab_size,
                                             model.config.vocab_size),
        accelerator=accelerator, batch_size=micro, collate_kwargs=eval_kwargs)
    state["wall_time_s"] += time.time() - started
    info = hardware(accelerator)
    info["speed"] = {"compile": speed.compile, "fused_adamw": speed.fused_adamw,
                     "static_masked_head": speed.masked_capacity}
    if world > 1:  # every rank must hold the same weights (the DDP phase-boundary trap would break this)
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(accelerator.device)
        gathered = accelerator.gather(checksum[None]).cpu()
        info["ranks_in_sync"] = bool((gathered == gathered[0]).all())
    summary = {
        "method": config.method,
        "source_model": config.source if not config.source.startswith("package:") else f"{config.source} ({source})",
        "tokenizer": tokenizer_ref,
        "data": {"spec": data, "train": f"{data}:train", "valid": f"{data}:valid", "test": f"{data}:test",
                 "train_sentences": stats["train"]["sentences"], "train_rows": stats["train"]["rows"],
                 "train_tokens": stats["train"]["tokens"], "valid_sentences": stats["valid"]["sentences"],
                 "test_sentences": stats.get("test", {}).get("sentences", 0)},
        "phases": state["phase_records"],
        "total_steps": state["step"],
        "tokens_seen": state["tokens_seen"],
        "wall_time_s": round(state["wall_time_s"], 2),
        "train_time_s": round(state["train_time_s"], 2),  # optimiser steps only (no data prep, eval, saving)
        "tokens_per_s": round(state["tokens_seen"] / max(1e-9, state["train_time_s"]), 1),
        "hardware": info,
        "batch": {"global_batch_size": config.global_batch_size, "per_device_batch_size": micro,
                  "gradient_accumulation_steps": accumulation, "max_seq_length": config.max_seq_length,
                  "packing": config.packing},
        "valid_metrics": valid_metrics,
        "final_metrics": final_metrics,
        "final_metrics_split": final_split,
        "frequency_baseline": baseline_metrics,  # same split and masks, context ignored
        "valid_history": state["valid_history"],
        "resumed": resume_from is not None,
        "config": config.to_dict(),
    }
    if accelerator.is_main_process:
        from modeling_xpt import save_tokenizer

        model.save_pretrained(str(output_dir))
        save_tokenizer(tokenizer, output_dir)  # names PreTrainedTokenizerFast, which transformers 4.x loads too
        (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False), encoding="utf-8")
        log(f"saved model, tokenizer and {SUMMARY_FILE} to {output_dir}")
        log("final ({}): {}".format(final_split, ", ".join(f"{k} {v:.4g}" for k, v in final_metrics.items())))
        log(f"frequency-only baseline ({final_split}, same masks, context ignored): hits@1 "
            f"{baseline_metrics['hits@1']:.4g}, perplexity {baseline_metrics['perplexity']:.4g}; this model's hits@1 is "
            f"{final_metrics['hits@1'] / max(baseline_metrics['hits@1'], 1e-12):.2f}x the baseline's")
        if not config.keep_checkpoints:  # optimiser states are not part of the model folder
            import shutil

            shutil.rmtree(output_dir / "checkpoints", ignore_errors=True)
        if config.push_to_hub:
            from cards.push import PushError, push_to_hub

            try:  # the folder is saved whatever happens here; a failed upload can be retried by hand
                push_to_hub(output_dir, config.push_to_hub, private=config.hub_private, log=log,
                            license=config.hub_license, require_license=True)
                summary["pushed_to"] = config.push_to_hub
            except PushError as error:
                log(f"push to {config.push_to_hub} failed, nothing uploaded: {error}\n  the model is saved in "
                    f"{output_dir}; retry with `python -m cards.push --model-dir {output_dir} --repo-id {config.push_to_hub}"
                    + (f" --license {config.hub_license}" if config.hub_license else "") + "`")
                summary["push_error"] = str(error)
    accelerator.wait_for_everyone()
    if trackers:
        accelerator.end_training()
    return summary


def compile_for_training(module):
    """torch.compile (inductor, static shapes) of a prepared training module."""
    import torch

    return torch.compile(module, backend="inductor", dynamic=False)


def launched_multi_cpu() -> bool:
    """True for several processes started by torchrun / `accelerate launch --multi_gpu` on a machine
    without CUDA: Accelerate then needs `cpu=True` to set up DDP over gloo (else every process would
    silently train alone)."""
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


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
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
