#!/usr/bin/env python
"""The data-efficiency study: does XPT need less Korean text than training from scratch?

    xpt-study --preset cpu --out runs/study            # 2-core CPU: 108 minutes measured with bf16, 139 in fp32
    xpt-study --preset cpu --out runs/study --resume   # after an interruption
    xpt-study --preset gpu --out runs/study-gpu        # one GPU: each post-training run 2.2 min on an H200
    xpt-study --spec my-study.yaml --out runs/mine --extra-task paws-x=data/paws-x
    xpt-study --preset cpu --out runs/study --dry-run  # print the plan only

One spec (`configs/study-<preset>.yaml`, or `--spec FILE`; fields in `StudySpec`, `training/study_spec.py`) drives five
stages, each using the package's own tools, each resumable:

1. corpus: `tokenization.prepare_corpus` turns the input text into sentence-level train/valid/test
   splits; the train sentences are shuffled once (`seed`) and the first `max(sizes)` written to
   `OUT/data`; post-training takes every data size N as a seeded sample of that list, the same order for
   every size, so smaller sets nest in larger ones.
2. tokenizer: `tokenization.train_tokenizer` on the first `tokenizer_sentences` of that list (default:
   the largest size's), one vocabulary for every method and size.
3. post-training: `training.post_train.train` for every (size, method): the same source, tokenizer,
   seed (batches and masks), steps and batch size; only the number of distinct training sentences
   changes. Each run is a normal output folder (`OUT/models/<method>-<size>`).
4. fine-tuning and linear reads: `training.finetune --mode both --floor` on every task for every
   model: linear probes of the frozen encoder (`training/linear_reads.py`), then `finetune.seeds`
   seeds (best epoch on dev, scored on test), and on the same splits the no-model floor (TF-IDF).
   The English source as it is is probed the same way (`OUT/finetune/source`). A task without a
   test split gets one held out of its train split (`hold_out_test`, fixed seed).
5. report (`OUT/report`, `training/study_report.py`): `results.md`, `results.json`, a PNG per task and
   the data-efficiency factor (the largest k: XPT at N sentences matches Scratch at k x N).

Resume: every run folder is written under a temporary name and renamed when complete; `--resume`
skips finished runs, continues an interrupted post-training run from its last checkpoint and redoes
an interrupted fine-tuning. Without `--resume`, an existing study folder is refused, and so is a folder
another xpt-study is writing in (its lock, `OUT/.lock`, held until that process ends), and (with `--dry-run`
too) an `--out` that holds other files than a study's. `--resume` with no study in `--out` starts one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import shutil
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tokenization.corpus_io import COMPLETE_MARKER, corpus_complete
from tokenization.errors import UserError, report_error
from tokenization.folders import write_text_atomic
from training.study_spec import (PRESETS, SPEC_FILE, StudyError, StudySpec, check_same_spec, finetune_args,
                                 finetune_parser, load_spec, plan, resolve_relative, saved_spec)

SOURCE_RUN = "source"  # OUT/finetune/<this>: the English source as it is, probed


# --- small file helpers ----------------------------------------------------------------------------
def log(out: Path, message: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    with open(out / "study.log", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def finished(folder: Path) -> bool:
    return folder.is_dir() and (folder / "_DONE").is_file()


def commit(tmp: Path, final: Path, info: dict[str, Any] | None = None) -> None:
    """Mark `tmp` complete and move it to `final` in one rename: a run folder is whole or absent."""
    (tmp / "_DONE").write_text(json.dumps(info or {}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, final)


# --- stage 1: corpus -------------------------------------------------------------------------------
def stage_corpus(spec: StudySpec, out: Path) -> Path:
    """Prepared splits, and OUT/data: the first max(sizes) shuffled train sentences plus valid/test."""
    from tokenization.prepare_corpus import prepare

    data = out / "data"
    if finished(data):
        return data
    corpus = out / "corpus"
    # the fields the prepared sentences depend on: a study restarted with other ones prepares them again
    made_from = {"corpus": spec.corpus, "valid_sentences": spec.valid_sentences, "test_sentences": spec.test_sentences}
    record = corpus / "study_corpus.json"
    if not (corpus_complete(corpus) and record.is_file() and json.loads(record.read_text(encoding="utf-8")) == made_from):
        inputs = [resolve_relative(p) for p in spec.corpus]
        log(out, f"corpus: preparing sentences from {', '.join(spec.corpus)}")
        shutil.rmtree(corpus, ignore_errors=True)
        prepare(inputs, corpus, valid=spec.valid_sentences, test=spec.test_sentences)
        record.write_text(json.dumps(made_from) + "\n", encoding="utf-8")
    tmp = out / ".tmp-data"
    shutil.rmtree(tmp, ignore_errors=True)
    need = max(spec.sizes + [spec.tokenizer_sentences or 0])
    train = _read_split(corpus / "train")
    if len(train) < need:
        (out / SPEC_FILE).unlink()  # nothing was trained with this spec: a rerun in this folder may change it
        what = "the largest size" if need == max(spec.sizes) else "tokenizer_sentences"
        raise StudyError(f"the corpus has {len(train)} train sentences, fewer than {what} {need}: use smaller "
                         "sizes or more text (a rerun with the same --out reuses the prepared sentences)")
    random.Random(spec.seed).shuffle(train)
    for split, texts in (("train", train[:need]), ("valid", _read_split(corpus / "valid")),
                         ("test", _read_split(corpus / "test"))):
        (tmp / split).mkdir(parents=True)
        with open(tmp / split / "part-00000.jsonl", "w", encoding="utf-8") as handle:
            for text in texts:
                handle.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    shutil.copy(corpus / "stats.json", tmp / "stats.json")
    (tmp / COMPLETE_MARKER).write_text("")
    commit(tmp, data, {"train_sentences": need, "shuffle_seed": spec.seed, "corpus_train_sentences": len(train)})
    log(out, f"corpus: {len(train)} train sentences, the first {need} after a shuffle (seed {spec.seed}) kept")
    return data


def _read_split(folder: Path) -> list[str]:
    texts = []
    for part in sorted(folder.glob("*.jsonl")):
        with open(part, encoding="utf-8") as handle:
            texts.extend(json.loads(line)["text"] for line in handle if line.strip())
    return texts


# --- stage 2: tokenizer ----------------------------------------------------------------------------
def stage_tokenizer(spec: StudySpec, out: Path, data: Path) -> Path:
    from tokenization.errors import InputError
    from tokenization.train_tokenizer import train_tokenizer
    from training.inputs import resolve_source, source_family

    folder = out / "tokenizer"
    if finished(folder):
        return folder
    family = source_family(resolve_source(resolve_relative(spec.source))) or "roberta"
    texts = _read_split(data / "train")[:spec.tokenizer_sentences or max(spec.sizes)]
    log(out, f"tokenizer: {spec.tokenizer_model} {spec.tokenizer_vocab_size} ({family} family) on {len(texts)} sentences")
    tmp = out / ".tmp-tokenizer"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        train_tokenizer(texts, spec.tokenizer_vocab_size, family=family, out_dir=str(tmp), model=spec.tokenizer_model,
                        vocab_flag="the spec's tokenizer_vocab_size")
    except InputError as error:
        raise StudyError(f"tokenizer: {error}") from None
    commit(tmp, folder, {"sentences": len(texts), "family": family})
    return folder


# --- stage 3: post-training ------------------------------------------------------------------------
def run_name(method: str, size: int) -> str:
    return f"{method}-{size}"


def method_settings(spec: StudySpec, method: str) -> dict[str, Any]:
    """The spec's post-training settings for `method`, less the initialisations it has nothing to copy for
    (a spec's `embedding_init: fvt` is for the methods that reuse the English model, not for scratch)."""
    from training.methods import METHODS

    entry, settings = METHODS[method], dict(spec.post_training)
    if entry.scratch:
        settings.pop("embedding_init", None)
    if entry.scratch or not entry.itl:
        settings.pop("itl_init", None)
    return settings


def stage_post_train(spec: StudySpec, out: Path, data: Path, tokenizer: Path, method: str, size: int) -> Path:
    from tokenization.errors import ConfigError
    from training.config import config_from_dict
    from training.post_train import train
    from training.run_record import RecordError, RunDiverged, RunRecord

    name = run_name(method, size)
    final = out / "models" / name
    if finished(final):
        try:
            check_converged(name, RunRecord.read(final).final_metrics)  # finished by an earlier version
        except RecordError as error:
            raise StudyError(str(error)) from None
        return final
    tmp = out / "models" / f".tmp-{name}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    resume = (tmp / "checkpoints").is_dir() and any((tmp / "checkpoints").iterdir())
    source = resolve_relative(spec.source)
    raw = {"report_to": [], "cache_dir": str(out / ".cache"), **method_settings(spec, method),
           "method": method, "source": str(Path(source).resolve()) if Path(source).exists() else source,
           "tokenizer": str(tokenizer), "data": str(data), "max_train_sentences": size, "output_dir": str(tmp),
           "resume": "latest" if resume else None, "overwrite_output_dir": True}
    if resume:
        raw.update(recorded_spellings(tmp, raw))
    log(out, f"post-training {name}" + (" (resuming from its last checkpoint)" if resume else ""))
    config = config_from_dict(raw)
    try:
        summary = train(config)
    except ConfigError as error:
        if error.field != "resume":
            raise
        raise resume_refusal(name, tmp, config) from None
    except RunDiverged as error:  # stopped at the step where its loss went non-finite: refused, never committed
        check_converged(f"{name} (step {error.diverged['step']})", {"loss": float(error.diverged["loss"])})
    check_converged(name, summary.final_metrics)
    commit(tmp, final, {"tokens_seen": summary.tokens_seen, "wall_time_s": summary.wall_time_s})
    return final


PATH_SETTINGS = ("source", "tokenizer", "data", "cache_dir")  # the post-training settings that name folders


def recorded_spellings(run: Path, raw: dict[str, Any]) -> dict[str, str]:
    """The folder settings as an interrupted run's newest checkpoint recorded them, where they name the same
    folders as `raw`'s: a study started with --out spelled otherwise (relative, say) resumes as it started."""
    from training.checkpointing import list_checkpoints, read_state

    for _, checkpoint in reversed(list_checkpoints(run)):
        try:
            settings = read_state(checkpoint).get("settings") or {}
        except (OSError, ValueError):
            continue
        recorded = {key: settings.get(key) for key in PATH_SETTINGS}
        return {key: value for key, value in recorded.items() if isinstance(value, str) and value != raw[key]
                and Path(value).exists() and Path(value).resolve() == Path(raw[key]).resolve()}
    return {}


def resume_refusal(name: str, run: Path, config) -> StudyError:
    """Why post-training `name` cannot continue from its checkpoints in `run`, and what to do in a study."""
    from training.checkpointing import latest_usable_checkpoint, read_state
    from training.config_checks import listed_changes, resume_changes

    fix = f"delete {run} to train {name} again from the start, then run the study again with --resume"
    checkpoint = latest_usable_checkpoint(run, log=lambda _: None)
    if checkpoint is None:
        return StudyError(f"post-training {name}: no checkpoint in {run / 'checkpoints'} loads (reasons above): {fix}")
    settings = read_state(checkpoint).get("settings") or {}
    changed, _ = resume_changes(settings, config.to_dict())
    listed = listed_changes(changed) or "data or processes"
    started = Path(settings.get("output_dir") or run)  # relative: to the folder the study was started from
    where = "" if started.is_absolute() or run.parts[-len(started.parts):] != started.parts else \
        f"; or continue it from the folder the study was started in, {Path(*run.parts[:-len(started.parts)])}"
    return StudyError(f"post-training {name}: {checkpoint} was trained with other settings ({listed}): {fix}{where}")


def check_converged(name: str, metrics: dict[str, Any] | None) -> None:
    """Refuse a post-training run whose final loss is not a number: its encoder feeds NaN to every task."""
    loss = (metrics or {}).get("loss")
    if loss is not None and not math.isfinite(float(loss)):
        raise StudyError(f"post-training {name} diverged (final loss {loss}): start the study again in another --out "
                         "with a lower post_training.learning_rate (and phase1_learning_rate) or more warmup_steps")


# --- stage 4: fine-tuning --------------------------------------------------------------------------
def task_folder(spec: StudySpec, out: Path, name: str) -> Path:
    """The task's data folder; with `hold_out_test`, a copy under OUT/tasks whose train split gives up a test split."""
    from training.tasks import TaskDataError, get_task, load_local

    entry = spec.tasks[name]
    source = Path(resolve_relative(entry.data_dir))
    if not source.is_dir():
        raise StudyError(f"task {name}: data folder {entry.data_dir} not found")
    if not entry.hold_out_test:
        return source
    folder = out / "tasks" / name
    made_from = {"held_out_test": entry.hold_out_test, "seed": spec.seed, "from": entry.data_dir}
    if finished(folder):
        held = json.loads((folder / "_DONE").read_text(encoding="utf-8"))
        if held == made_from:
            return folder
        used = sorted(p.parent.parent.name for p in (out / "finetune").glob(f"*/{name}/_DONE"))
        if used:
            raise StudyError(f"task {name}: {folder} was held out with other settings ({held}) and fine-tuned on "
                             f"({', '.join(used)}): start the study in another --out")
        shutil.rmtree(folder)  # held out for a spec refused before anything was trained: hold out again
    try:
        splits = load_local(get_task(name), source)
    except TaskDataError as error:
        raise StudyError(f"task {name}: {error}") from None
    if "test" in splits:
        raise StudyError(f"task {name}: {entry.data_dir} already has a test split; remove hold_out_test")
    train = list(splits["train"])
    if len(train) <= entry.hold_out_test:
        raise StudyError(f"task {name}: {len(train)} train examples, too few to hold out {entry.hold_out_test}")
    random.Random(spec.seed).shuffle(train)
    tmp = out / "tasks" / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    columns = list(train[0])
    for split, rows in (("test", train[:entry.hold_out_test]), ("train", train[entry.hold_out_test:]),
                        ("dev", splits["dev"])):
        with open(tmp / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps({c: row[c] for c in columns}, ensure_ascii=False) + "\n")
    commit(tmp, folder, made_from)
    return folder


def stage_finetune(spec: StudySpec, out: Path, model: Path, name: str, data_dir: Path, size: int | None,
                   run: str | None = None) -> Path:
    """OUT/finetune/<run>/<task>: probes, floor and (with a `size`) fine-tuning of `model` on task `name`."""
    from training import finetune

    final = out / "finetune" / (run or model.name) / name
    if finished(final):
        return final
    tmp = final.parent / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    log(out, f"probing {run or model.name} on {name}" if size is None else
        f"probing and fine-tuning {model.name} on {name} ({len(spec.seeds(size))} seeds)")
    args = finetune_parser().parse_args(finetune_args(spec, name, model, data_dir, tmp, size))
    try:
        finetune.run(args)
    except finetune.TaskDataError as error:
        raise StudyError(f"fine-tuning {model.name} on {name}: {error}") from None
    commit(tmp, final)
    return final


# --- stage 5: report -------------------------------------------------------------------------------
def stage_report(spec: StudySpec, out: Path) -> Path:
    from training.checkpointing import folder_lock
    from training.study_report import collect, markdown, plot

    folder = out / "report"
    folder.mkdir(exist_ok=True)
    # a report of progress may be written beside the running study: one writer at a time, each reading every
    # run the writers before it read
    with folder_lock(folder, wait=True):
        report = collect(spec, out)
        write_text_atomic(folder / "results.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        write_text_atomic(folder / "results.md", markdown(report, spec))
        plot(report, spec, folder)
    return folder


# --- driver ----------------------------------------------------------------------------------------
def check_inputs(spec: StudySpec, out: Path | None = None) -> None:
    """The spec's task folders exist, and its corpus inputs as the corpus stage reads them, unless that stage
    is done in `out` (a resumed study whose sentences are prepared needs no raw text)."""
    from tokenization.errors import InputError
    from tokenization.prepare_corpus import resolve_inputs

    if out is None or not corpus_complete(out / "corpus"):
        try:
            resolve_inputs([resolve_relative(p) for p in spec.corpus])
        except InputError as error:
            raise StudyError(f"corpus: {error} (fix the spec's corpus; nothing was started)") from None
    for name, entry in spec.tasks.items():
        if not Path(resolve_relative(entry.data_dir)).is_dir():
            raise StudyError(f"task {name}: data folder {entry.data_dir} not found (fix the spec's tasks or "
                             "--extra-task; nothing was started)")


@contextmanager
def study_lock(out: Path):
    """Hold OUT's lock while a study or its report writes there: a second one on the same folder is refused."""
    from training.checkpointing import LOCK_FILE, FolderInUse, folder_lock

    with ExitStack() as stack:
        try:
            stack.enter_context(folder_lock(out))
        except FolderInUse:
            holder = (out / LOCK_FILE).read_text(encoding="utf-8").strip() or "another process"
            raise StudyError(f"{out} is in use by another xpt-study ({holder}): wait for it to end, or choose "
                             "another --out") from None
        yield


# What a study folder holds before its spec is saved for good: the log, task copies and prepared sentences of a study
# whose corpus was too small for its spec (`stage_corpus` drops the spec; a rerun in that --out reuses the sentences)
BEFORE_SPEC = ("study.log", "tasks", "corpus")


def check_out(spec: StudySpec, out: Path, resume: bool) -> None:
    """--out, before a study starts there and in its dry run: a study of this spec (continued with --resume), a
    new or empty folder, or what a study left before its spec was saved; a folder holding anything else is
    refused and left as it is."""
    from tokenization.folders import other_files
    from training.checkpointing import LOCK_FILE

    if (out / SPEC_FILE).is_file():
        if not resume:
            raise StudyError(f"{out} already holds a study: continue it with --resume, or choose another --out")
        check_same_spec(out, spec)
        return
    others = other_files(out, lambda path: path.name == LOCK_FILE or (
        path.name in BEFORE_SPEC and (out / "study.log").is_file()))
    if others:
        raise StudyError(f"--out {out} holds files that are not a study's ({others}): choose a new or empty folder "
                         "for --out")


def run_study(spec: StudySpec, out: Path, resume: bool = False) -> Path:
    out = out.resolve()  # every run records absolute paths: a resume may spell --out otherwise
    check_out(spec, out, resume)  # before the lock is taken in it, too
    check_inputs(spec, out)  # before the spec is saved: a corrected path is then no other spec
    with study_lock(out):
        return _run_locked(spec, out, resume)


def _run_locked(spec: StudySpec, out: Path, resume: bool) -> Path:
    saved = out / SPEC_FILE
    check_out(spec, out, resume)  # again under the lock: a study may have started there meanwhile
    if not saved.is_file():
        if resume:
            log(out, f"--resume: no study in {out} ({SPEC_FILE}), starting from scratch")
        saved.write_text(json.dumps(spec.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    started = time.time()
    import datasets

    datasets.disable_progress_bars()  # per-split map/save bars of every run drown the study's own lines
    log(out, "study: " + plan(spec).replace("\n", "; "))
    task_dirs = {name: task_folder(spec, out, name) for name in spec.tasks}  # a task's bad data stops it here
    data = stage_corpus(spec, out)
    tokenizer = stage_tokenizer(spec, out, data)
    from training.inputs import resolve_source

    source = Path(resolve_source(resolve_relative(spec.source)))
    for name, folder in task_dirs.items():
        stage_finetune(spec, out, source, name, folder, None, run=SOURCE_RUN)
    for size in spec.sizes:
        for method in spec.methods:
            model = stage_post_train(spec, out, data, tokenizer, method, size)
            for name, folder in task_dirs.items():
                stage_finetune(spec, out, model, name, folder, size)
    report = stage_report(spec, out)
    log(out, f"study finished in {time.time() - started:.0f} s (this invocation); report in {report}")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--preset", choices=PRESETS, help="built-in spec configs/study-NAME.yaml (default cpu; with "
                       "--resume or --report-only, the spec the study in --out was started with)")
    which.add_argument("--spec", help="a study spec YAML file (fields: see StudySpec in training/study_spec.py)")
    p.add_argument("--out", required=True, help="study folder (runs, fine-tuning results, report/)")
    p.add_argument("--resume", action="store_true", help="continue the study in --out, skipping finished runs")
    p.add_argument("--extra-task", action="append", default=[], metavar="NAME=DIR",
                   help="also fine-tune on a registered task NAME with data in DIR (train/dev[/test] files)")
    p.add_argument("--dry-run", action="store_true", help="validate the spec and print the plan; run nothing")
    p.add_argument("--report-only", action="store_true",
                   help="write OUT/report from the runs finished so far (the rest marked as not finished); train "
                   "nothing. With --out a report folder (OUT/report, holding results.json): its results.md and "
                   "plots drawn again from that results.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        if args.report_only and not (out / SPEC_FILE).is_file() and (out / "results.json").is_file():
            from training.study_report import rewrite

            if args.spec or args.preset or args.extra_task or args.dry_run:
                raise StudyError(f"{out} is a report folder, whose results.json holds its spec: give --out and "
                                 "--report-only alone")
            report = rewrite(out)  # a report folder (OUT/report, docs/study): drawn again
        else:
            if (args.report_only or args.resume and (out / SPEC_FILE).is_file()) and not (
                    args.spec or args.preset or args.extra_task):
                spec = saved_spec(out)
            else:
                spec = load_spec(None if args.spec else args.preset or "cpu", args.spec, args.extra_task)
            if args.dry_run:
                check_out(spec, out, args.resume)
                check_inputs(spec)
                print(plan(spec))
                return 0
            if args.report_only:
                saved_spec(out)  # a study is there
                check_same_spec(out, spec)
                report = stage_report(spec, out)  # beside a running study too: the report has its own lock
            else:
                report = run_study(spec, out, resume=args.resume)
    except UserError as error:
        return report_error(error)
    except KeyboardInterrupt:
        print(f"interrupted: {interrupted_advice(out, args)}", file=sys.stderr)
        return 130
    print((report / "results.md").read_text(encoding="utf-8"))
    return 0


def interrupted_advice(out: Path, args: argparse.Namespace) -> str:
    """What to run after Ctrl-C: the study goes on from its finished runs once its spec is saved in --out."""
    if not args.report_only and not args.dry_run and (out / SPEC_FILE).is_file():
        return f"continue with `xpt-study --out {shlex.quote(args.out)} --resume`"
    return "run the same command again"


if __name__ == "__main__":
    sys.exit(main())
