"""Setting up one post-training launch, before its first step: Accelerate and the speed settings, the
output folder (claimed, or refused), the checkpoint to resume from and the settings it was started
with, the text splits and the tokenizer. `training/post_train.py` calls these in order. Also the stop
of a run whose loss went non-finite, with its record (`stop_if_diverged`).
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import torch
import transformers
from accelerate import Accelerator
from accelerate.utils import parse_flag_from_env
from transformers import AutoTokenizer

from modeling_xpt.tokenizer_files import MODEL_FOLDER_FILES
from tokenization.errors import ConfigError
from tokenization.train_tokenizer import train_tokenizer
from training.checkpointing import checkpoint_problem, latest_checkpoint, latest_usable_checkpoint, list_checkpoints
from training.config import PostTrainConfig, describe_plan
from training.config_checks import (check_data_present, data_to_read, listed_changes, refuse_changed_resume,
                                    resolved_paths, resume_changes, validate_config)
from training.inputs import missing_path, reading_from_hub, recorded_ref, resolve_local, uncached
from training.mlm_data import check_target_script, load_text_splits, row_stats, rows_fingerprint
from training.run_record import (CARD_FILE, CARD_OPTIONS_FILE, CURVE_FILE, LOSS_LOG, SUMMARY_FILE, DataRecord,
                                 RunDiverged, RunRecord, hand_written_card)
from training.step import SpeedSettings, cpu_class, cpu_model_name, describe_speed, resolve_speed, retain_freed_memory


def _root_cause(error: BaseException) -> str:
    """The innermost error of a chain (datasets wraps the reader's error), as one line."""
    while error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
        error = error.__cause__ or error.__context__
    text = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def get_tokenizer(config: PostTrainConfig, output_dir: Path, splits, source_fam: str | None, accelerator, log,
                  resume_from: Path | None):
    """The configured tokenizer, the one trained by the run this one resumes from checkpoint `resume_from`,
    or a new one: a fresh run, or a resume that found no checkpoint, never takes an earlier run's tokenizer
    from the folder, whose settings may differ from its own."""
    if config.tokenizer:
        path = resolve_local(config.tokenizer)
        with reading_from_hub("tokenizer", config.tokenizer):  # a Hub id the Hub cannot send: one line naming the field
            tokenizer = AutoTokenizer.from_pretrained(str(path) if path else config.tokenizer)
        if config.tokenizer_vocab_size not in (len(tokenizer), PostTrainConfig.tokenizer_vocab_size):
            log(f"note: tokenizer_vocab_size {config.tokenizer_vocab_size} is not used: the tokenizer "
                f"{config.tokenizer} is used as it is, with {len(tokenizer):,} tokens (leave out tokenizer to train "
                "one of that size on the train split)")
        return tokenizer, config.tokenizer
    trained = output_dir / "tokenizer"
    resumed = resume_from is not None and (trained / "tokenizer_config.json").is_file()
    if accelerator.is_main_process and not resumed:
        n = min(config.tokenizer_train_sentences, len(splits["train"]))
        log(f"training a {source_fam or 'roberta'} tokenizer (vocab {config.tokenizer_vocab_size}) on {n} train sentences")
        texts = splits["train"].select(range(n))["text"]
        tmp = output_dir / ".tmp-tokenizer"
        train_tokenizer(texts, config.tokenizer_vocab_size, family=source_fam or "roberta", out_dir=str(tmp),
                        vocab_flag="--tokenizer-vocab-size")
        shutil.rmtree(trained, ignore_errors=True)
        os.replace(tmp, trained)
    accelerator.wait_for_everyone()
    return AutoTokenizer.from_pretrained(str(trained)), str(trained)


def hardware(accelerator, speed: SpeedSettings) -> dict:
    # What a reader needs to place the figures (the processor or GPU, its class, versions, the speed paths
    # that ran), not this machine's details (host platform string, core count): the summary travels with
    # the published weights.
    device = str(accelerator.device)
    info = {"device": device, "machine": platform.machine(), "num_processes": accelerator.num_processes,
            "mixed_precision": accelerator.mixed_precision, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "speed": {"compile": speed.compile, "fused_adamw": speed.fused_adamw,
                      "static_masked_head": speed.masked_capacity, "attention": speed.attention,
                      "dropout_mask": speed.dropout_mask, "retain_cpu_memory": speed.retain_memory,
                      "num_workers": speed.loader_workers}}
    if torch.cuda.is_available() and device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(accelerator.device)
    else:
        info["cpu"], info["cpu_class"] = cpu_model_name(), cpu_class()
    return info


def launched_multi_cpu() -> bool:
    """True for several processes started by torchrun / `accelerate launch --multi_gpu` on a machine
    without CUDA: Accelerate then needs `cpu=True` to set up DDP over gloo (else every process would
    silently train alone)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def training_device() -> str:
    """"cuda" where post-training runs on GPUs, else "cpu" (no CUDA, a multi-process CPU launch, or
    `accelerate launch --cpu` / `use_cpu: true`, which set ACCELERATE_USE_CPU, on a machine with CUDA)."""
    on_cpu = launched_multi_cpu() or parse_flag_from_env("ACCELERATE_USE_CPU")
    return "cuda" if torch.cuda.is_available() and not on_cpu else "cpu"


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def trackers_to_use(config: PostTrainConfig) -> list[str]:
    """`report_to` as Accelerate takes it: a tracker it does not know, or one asked for whose package is missing,
    is refused in one line; the default tensorboard, when missing, is left out with a warning."""
    import accelerate.utils

    trackers = [t for t in config.report_to if t and t != "none"]
    for name in [t for t in trackers if t != "all"]:  # "all": every tracker installed (Accelerate)
        available = getattr(accelerate.utils, f"is_{name}_available", None)
        if available is None:
            known = ", ".join(t.value for t in accelerate.utils.LoggerType)
            raise ConfigError("report_to", f"{name!r} is not a tracker Accelerate knows ({known}); [] for none")
        if name == "tensorboard" and not available():
            print("warning: report_to tensorboard, but the tensorboard package is not installed "
                  "(`pip install tensorboard`); training without it", file=sys.stderr)
            trackers.remove(name)
        elif not available():
            raise ConfigError("report_to", f"{name} is not installed: `pip install {name}`, or leave it out of report_to")
    return trackers


def dry_run(config: PostTrainConfig) -> None:
    """`--dry-run`: the config checked for this launch without reading data, then (on the first process)
    the plan and the speed settings `auto` picks on this machine; nothing is downloaded or trained. A local
    source, tokenizer or data path that is not there is refused in the run's own words (a run refuses it at
    once: "configuration valid" would be wrong); a Hub id that offline mode cannot fetch is only noted."""
    world = world_size_from_env()
    validate_config(config, world_size=world, check_data=False)
    trackers_to_use(config)
    check_data_present(config)
    source = None if config.source.startswith("package:") else config.source
    for field, value in (("source", source), ("tokenizer", config.tokenizer)):
        if mistyped := missing_path(value):
            raise ConfigError(field, mistyped)
    data = data_to_read(config)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    device = training_device()
    print(describe_plan(config, world, device))
    print(describe_speed(resolve_speed(config, device), device))
    for field, value in (("source", config.source), ("tokenizer", config.tokenizer),
                         ("data", None if data == "konlpy" else data)):
        if unloadable := uncached(field, value, config.datasets_cache_dir(), config.streaming):
            print(f"note: {unloadable.message}; training needs it")
    print("dry run: configuration valid; nothing downloaded, nothing trained")


def start_run(config: PostTrainConfig) -> tuple[Accelerator, SpeedSettings, list[str]]:
    """Accelerate for this launch (processes, device, mixed precision), the speed settings and the trackers;
    the config checked (once, for the launch's world size) before anything heavy."""
    validate_config(config, world_size=world_size_from_env())
    trackers = trackers_to_use(config)
    multi_cpu = launched_multi_cpu()
    speed = resolve_speed(config, training_device())
    accelerator = Accelerator(mixed_precision=speed.mixed_precision, log_with=trackers or None,
                              project_dir=str(config.output_dir), step_scheduler_with_optimizer=False,
                              cpu=multi_cpu)
    world = accelerator.num_processes
    if world_size_from_env() != world:
        raise RuntimeError(f"launched as {os.environ['WORLD_SIZE']} processes but Accelerate runs {world}")
    if world == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true" and "MASTER_ADDR" in os.environ:
        accelerator.print("note: `accelerate launch --cpu --num_processes N` starts ONE process unless mpirun is "
                          "configured (huggingface/accelerate#2741); for N CPU processes use "
                          "`accelerate launch --multi_gpu --num_processes N` (DDP over gloo) or torchrun")
    if speed.retain_memory and not retain_freed_memory():
        speed = replace(speed, retain_memory=False)  # malloc is not glibc's here: nothing to switch
    accelerator.print(describe_speed(speed, accelerator.device.type))
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    return accelerator, speed, trackers


def claim_output_dir(config: PostTrainConfig, accelerator: Accelerator) -> None:
    """The output folder, before anything is read: new or empty, a run's own, or what a run stopped before its
    first checkpoint left (lock, trained tokenizer, loss log, curves, temporary files), taken as it is. A fresh
    run (no `resume`) into another run's checkpoints or summary, and any run into a saved model that is no run's
    (an `xpt-convert` output, say), is refused, or with `overwrite_output_dir` starts by deleting all of that
    run's or model's files (a hand-written card stays). A folder holding other files is refused even then:
    files that are not this project's outputs are never deleted."""
    from tokenization.folders import other_files
    from training.checkpointing import LOCK_FILE

    output_dir = Path(config.output_dir)
    before_checkpoint = (LOCK_FILE, "checkpoints", "tokenizer", "tensorboard", LOSS_LOG)

    run = bool(list_checkpoints(output_dir)) or (output_dir / SUMMARY_FILE).exists()

    def started(path: Path) -> bool:  # written by a run before its first checkpoint (temporary files included)
        name = path.name
        return (name in before_checkpoint or name.startswith(".tmp-")
                or (name.startswith(LOSS_LOG + ".") and name.endswith(".tmp")))  # write_text_atomic's

    def written_by_a_run(path: Path) -> bool:  # or by its end, its card (a hand-written one: a run's) and curve
        name = path.name
        return (started(path) or name in MODEL_FOLDER_FILES
                or (name.startswith("model") and name.endswith(".safetensors"))
                or name in (SUMMARY_FILE, CURVE_FILE, CARD_OPTIONS_FILE)
                or (name == CARD_FILE and (run or not hand_written_card(output_dir))))

    if (run and config.resume is not None) or not (run or other_files(output_dir, started)):
        return
    if run and not config.overwrite_output_dir and (output_dir / SUMMARY_FILE).exists():
        raise ConfigError("output_dir", f"{output_dir} already holds a finished run ({SUMMARY_FILE}): choose "
                          "another output folder, or pass --overwrite-output-dir true to replace it")
    if run and not config.overwrite_output_dir:
        raise ConfigError("output_dir", f"{output_dir} already holds an unfinished run's checkpoints: continue it "
                          "with --resume latest, or pass --overwrite-output-dir true to start over")
    others = other_files(output_dir, written_by_a_run)
    if others:
        raise ConfigError("output_dir", f"{output_dir} holds files that are not a post-training run's ({others}): "
                          "choose another output folder (--overwrite-output-dir deletes only a run's own files)")
    if not config.overwrite_output_dir:
        raise ConfigError("output_dir", f"{output_dir} holds a saved model that is not a post-training run "
                          f"({other_files(output_dir, started)}): choose another output folder, or pass "
                          "--overwrite-output-dir true to replace it")
    accelerator.wait_for_everyone()  # every process has looked at the folder before it changes
    if accelerator.is_main_process:  # all about the run or model replaced here, but the lock held for this run
        for path in output_dir.iterdir():
            if path.name == LOCK_FILE or (path.name == CARD_FILE and hand_written_card(output_dir)):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    accelerator.wait_for_everyone()


def finished_run(config: PostTrainConfig, output_dir: Path, log) -> RunRecord | None:
    """With `--resume latest`, the record of a run already finished in `output_dir`: nothing is left to
    train, but settings that would have shaped it must be the ones it ran with, else this command would
    report a run it never made."""
    if config.resume != "latest" or not (output_dir / SUMMARY_FILE).exists():
        return None
    record = RunRecord.read(output_dir)
    if record.diverged:  # it stopped where its loss went non-finite: resuming would diverge again
        raise RunDiverged.of(output_dir, record.diverged)
    if record.config:
        shaping, _ = resume_changes(record.config, config.to_dict())
        if shaping:
            raise ConfigError("resume", f"{output_dir} holds a run finished with other settings "
                              f"({listed_changes(shaping)}); a "
                              "finished run trains no further: start a new run in another --output-dir, or pass "
                              "--overwrite-output-dir true without --resume to replace it")
    log(f"{output_dir} holds a finished run ({SUMMARY_FILE}); nothing to resume")
    return record


def check_resumed_settings(config: PostTrainConfig, state, resume_from: Path | None, log, world_size: int,
                           precision: str) -> None:
    """A resumed run must have the settings it was started with, except those that cannot change the
    numbers (`training.config_checks.resume_changes`); those changes are recorded with the step they start after,
    as is another `precision` (what `mixed_precision` resolved to) on another machine.
    It must also run as many processes: a checkpoint holds their wrapped model and random states."""
    trained_by = state.num_processes
    if resume_from is not None and trained_by not in (None, world_size):
        raise ConfigError("resume", f"{resume_from} was trained by {trained_by} process(es), this run has {world_size}: "
                          f"resume it with {trained_by} (accelerate launch --num_processes {trained_by}), or start a "
                          "new run in another --output-dir")
    state.num_processes = world_size
    now = json.loads(json.dumps(config.to_dict()))  # as saved in the checkpoint (tuples as lists)
    if resume_from is not None and state.settings is None:
        log(f"note: {resume_from} holds no record of its settings (written by an earlier version); they are not "
            "compared with this run's")
    elif resume_from is not None:
        shaping, free = resume_changes(state.settings, now)
        refuse_changed_resume(shaping, resume_from)
        if free:
            state.setting_changes.append({"step": state.step, "changed": free})
            log("resumed with changed settings that do not change the weights: " + listed_changes(free))
    # `mixed_precision: auto` resolves per machine (bf16 on a CPU with AVX512-BF16, fp32 on one without): refusing
    # would leave no way to resume there (an explicit value differs from the saved `auto`), so it is said and recorded
    if resume_from is not None and state.precision not in (None, precision):
        state.setting_changes.append({"step": state.step, "changed": {"precision": [state.precision, precision]}})
        log(f"note: mixed_precision {config.mixed_precision!r} is {precision!r} on this machine, {state.precision!r} "
            f"where {resume_from} was trained: the remaining steps train in {precision!r}")
    state.settings, state.precision = resolved_paths(now), precision  # folders as absolute paths: from any cwd


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
                                      cache_dir=config.datasets_cache_dir(), streaming=config.streaming,
                                      stream_limit=(config.max_train_sentences + config.valid_size + config.test_size)
                                      if config.max_train_sentences else None)
        except ConfigError:  # a setting that does not fit the data (held-out sizes): that setting is named
            raise
        except Exception as error:  # the user's files (empty, binary, torn .gz, ...): the cause names the file and fix
            raise ConfigError("data", f"cannot read {data}: {_root_cause(error)}") from None
    if "valid" not in splits:
        raise ConfigError("valid_size", f"0 holds out no valid split from {data}, and the phases evaluate and "
                                        "stop early on it: give valid_size > 0 (test_size 0 is fine)")
    if config.max_train_sentences and config.max_train_sentences < len(splits["train"]):
        # a seeded sample, not the first sentences: a prepared corpus keeps its documents' order, topic after topic
        splits["train"] = splits["train"].shuffle(seed=0).select(range(config.max_train_sentences))
    if config.max_eval_sentences:
        for split in ("valid", "test"):
            if split in splits:
                splits[split] = splits[split].select(range(min(config.max_eval_sentences, len(splits[split]))))
    check_target_script(splits["train"], language=config.language, min_share=config.min_script_share, data=data)
    return splits


def row_statistics(rows: dict, splits: dict, tokenizer, state, resume_from: Path | None, log) -> dict:
    """Each split's rows, real tokens and sentences, logged. A resumed run must read the token rows it was
    started with: other text in the corpus, or another tokenizer at the same path, would continue the run
    on other data under the same step count, and other valid or test text would compare early stopping's
    losses and the final metrics across two sets, so each split's fingerprint is compared and recorded."""
    stats = {split: row_stats(ds, len(splits[split])) for split, ds in rows.items()}
    log(f"data: {json.dumps(stats)}")
    fingerprints = {split: rows_fingerprint(ds, stats[split], tokenizer) for split, ds in rows.items()}
    was = state.data_fingerprint
    if resume_from is not None and was is not None:
        was = was if isinstance(was, dict) else {"train": was}  # checkpoints that fingerprinted train only
        if was["train"] != fingerprints["train"]:
            raise ConfigError("resume", f"{resume_from} was trained on other token rows than this run reads "
                              f"({stats['train']['rows']:,} rows now): the data or the tokenizer changed since (or, for "
                              "a checkpoint from before copies of held-out texts were dropped from train or before "
                              "max_train_sentences took a seeded sample instead of the first sentences, how train is "
                              "chosen); resume with the ones it started with, or start a new run in another --output-dir")
        changed = [split for split in was if split != "train" and was[split] != fingerprints.get(split)]
        if changed:
            raise ConfigError("resume", f"{resume_from} was evaluated on other {' and '.join(changed)} rows than this "
                              "run reads: early stopping and the final metrics would compare two sets; resume with "
                              "the held-out text it started with, or start a new run in another --output-dir")
    state.data_fingerprint = fingerprints
    return stats


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def stop_if_diverged(run, state, phase: str, loss: float, progress=None, what: str = "training loss") -> None:
    """Stop the run where `loss` (`what`, at step `state.step`), or the loss of an evaluation on valid after that
    step, is not a finite number: the weights are NaN (or infinite) from there on, so nothing more is checkpointed,
    evaluated or saved of them. `training_summary.json` says `diverged` (the step, the phase, which loss, its
    value) and keeps what the run recorded before (valid evaluations with a finite loss only), with no model and
    no metrics; `RunDiverged` names the step in one line (exit 1)."""
    after = [("valid loss", entry["loss"]) for entry in state.valid_history if entry.get("step") == state.step]
    bad = next(((name, value) for name, value in [(what, loss), *after] if not _finite(value)), None)
    if bad is not None and bad[0] == "valid loss" and all(p.isfinite().all() for p in run.model.parameters()):
        bad = None  # finite weights: an evaluation with no masked token it could score (0/0), not a divergence
    if bad is None:
        return
    if progress is not None:
        progress.close()  # the error line below is a line of its own
    config, accelerator = run.config, run.accelerator
    run.add_wall_time(state)
    diverged = {"step": state.step, "phase": phase, "what": bad[0], "loss": str(bad[1])}
    record = RunRecord(
        method=config.method, tokenizer=recorded_ref(run.tokenizer_ref), data=DataRecord(spec=recorded_ref(run.data)),
        source_model=f"{config.source} ({run.source})" if config.source.startswith("package:") else recorded_ref(config.source),
        phases=[replace(p, valid_loss=p.valid_loss if _finite(p.valid_loss) else None) for p in state.phase_records],
        total_steps=state.step, tokens_seen=state.tokens_seen, wall_time_s=round(state.wall_time_s, 2),
        train_time_s=round(state.train_time_s, 2), hardware=hardware(accelerator, run.speed),
        valid_history=[entry for entry in state.valid_history if _finite(entry.get("loss"))],
        resumed=run.resume_from is not None, setting_changes=state.setting_changes, config=config.to_dict(),
        diverged=diverged)
    if accelerator.is_main_process:
        record.write(run.output_dir)
        if not config.keep_checkpoints:  # as a finished run: its checkpoints cannot be resumed from
            shutil.rmtree(run.output_dir / "checkpoints", ignore_errors=True)
    accelerator.wait_for_everyone()
    raise RunDiverged.of(run.output_dir, diverged)
