"""Downstream task registry and data loading for `training/finetune.py`.

A task is a small declarative `TaskSpec`: task type, input columns, label column, label set and
metric, plus where its data lives (local files in `--data-dir`, or a Hugging Face dataset id).

Task types
- ``single``      single-sentence classification  (``text_columns=[text]``)
- ``pair``        sentence-pair classification     (``text_columns=[a, b]``)
- ``regression``  one float per example, e.g. STS  (``text_columns=[a]`` or ``[a, b]``)
- ``token``       token classification / NER       (``tokens_column`` list of words, ``label_column`` list of BIO tags)
                  (``character_tags``: the list holds the text's characters, spaces included, as KLUE-NER)
- ``qa``          extractive QA (SQuAD layout)     (``question_column``, ``context_column``, ``answers_column``
                  holding ``{"text": [...], "answer_start": [...]}``)

Local data: ``DIR/{train,dev,test}.{tsv,csv,json,jsonl}`` (``validation``/``valid`` are accepted
for dev). TSV/CSV need a header row; JSON is a list of records (or ``{"data": [...]}``); JSONL has one
record per line. Token and QA tasks need JSON/JSONL (their columns are lists/dicts).

Hub data: ``hub=(path, config_name)`` loads with `datasets.load_dataset`; ``ClassLabel`` integers are
turned into their names and a few tasks have a converter (KLUE-STS labels, KLUE-RE entity markers).

Users add a task without editing code: ``finetune.py --task-spec '{"name": ..., ...}'`` (JSON text or
a path to a JSON file), or ``--task-type pair --text-columns a,b --label-column y [--labels x,y]``.
"""
from __future__ import annotations

import copy
import csv
import json
import random
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from tokenization.errors import UserError

TASK_TYPES = ("single", "pair", "regression", "token", "qa")
SPLIT_ALIASES = {"train": ("train",), "dev": ("dev", "validation", "valid", "val"), "test": ("test",)}
EXTENSIONS = (".tsv", ".csv", ".jsonl", ".json")


class TaskDataError(UserError):
    """Bad task definition or data; `finetune.py` prints the message on one line and exits 2."""


@dataclass
class TaskSpec:
    name: str
    task_type: str
    text_columns: list[str] = field(default_factory=list)
    label_column: str = "label"
    labels: list[str] | None = None          # classification/NER label set; None: taken from the train split
    label_names: dict[str, str] | None = None  # what labels mean ({"1": "positive"}): the names a saved model shows
    metric: str = "accuracy"                 # main metric (see training/metrics_downstream.py)
    extra_metrics: list[str] = field(default_factory=list)
    label_range: tuple[float, float] | None = None  # regression: allowed [low, high]
    tokens_column: str = "tokens"            # token classification
    character_tags: bool = False             # token task whose tokens are the text's characters, spaces included (KLUE-NER)
    question_column: str = "question"        # QA
    context_column: str = "context"
    answers_column: str = "answers"
    id_column: str | None = None
    hub: tuple[str, str | None] | None = None    # (dataset id, config name) for datasets.load_dataset
    hub_splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "dev": "validation", "test": "test"})
    converter: str | None = None             # name in CONVERTERS, applied to hub records
    description: str = ""

    def __post_init__(self):
        if self.task_type not in TASK_TYPES:
            raise TaskDataError(f"task {self.name!r}: task_type {self.task_type!r} is not one of {TASK_TYPES}")
        if self.task_type in ("single", "pair", "regression"):
            want = {"single": (1,), "pair": (2,), "regression": (1, 2)}[self.task_type]
            if len(self.text_columns) not in want:
                raise TaskDataError(f"task {self.name!r}: a {self.task_type} task needs {' or '.join(map(str, want))} "
                                    f"text column(s), got {self.text_columns}")
        if self.labels is not None:
            if isinstance(self.labels, str):  # "neg,pos", as --labels takes them
                self.labels = [label for label in self.labels.split(",") if label]
            self.labels = [str(label) for label in self.labels]
            if len(set(self.labels)) != len(self.labels):
                raise TaskDataError(f"task {self.name!r}: duplicate labels in {self.labels}")
        names = self.label_names
        if names is not None and (not isinstance(names, dict) or len(set(map(str, names.values()))) != len(names)):
            raise TaskDataError(f"task {self.name!r}: label_names {names!r} must map labels to names, one name each, "
                                'e.g. {"0": "negative", "1": "positive"}')
        self.label_names = None if names is None else {str(label): str(name) for label, name in names.items()}
        if self.label_range is not None:
            self.label_range = (float(self.label_range[0]), float(self.label_range[1]))
        if self.hub is not None:
            self.hub = (self.hub[0], self.hub[1] if len(self.hub) > 1 else None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskSpec":
        data = dict(data)
        if "type" in data and "task_type" not in data:
            data["task_type"] = data.pop("type")
        if "columns" in data and "text_columns" not in data:
            data["text_columns"] = data.pop("columns")
        if isinstance(data.get("text_columns"), str):
            data["text_columns"] = [c for c in data["text_columns"].split(",") if c]
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TaskDataError(f"task spec: unknown field(s) {unknown}; known fields: {sorted(known)}")
        if "name" not in data or "task_type" not in data:
            raise TaskDataError("task spec: 'name' and 'task_type' (or 'type') are required")
        if "metric" not in data:
            data["metric"] = DEFAULT_METRIC[data["task_type"]] if data["task_type"] in DEFAULT_METRIC else "accuracy"
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def shown_labels(self, labels: list[str]) -> list[str]:
        """The names a saved model gives `labels` (id2label: what its pipeline, widget and Space show): `label_names`
        where declared ("1" of NSMC is "positive"), else the labels themselves (also where names would collide)."""
        shown = [(self.label_names or {}).get(label, label) for label in labels]
        return shown if len(set(shown)) == len(shown) else list(labels)


DEFAULT_METRIC = {"single": "accuracy", "pair": "accuracy", "regression": "spearman", "token": "entity_f1", "qa": "qa_f1"}

KLUE_NER_TAGS = ["B-DT", "I-DT", "B-LC", "I-LC", "B-OG", "I-OG", "B-PS", "I-PS", "B-QT", "I-QT", "B-TI", "I-TI", "O"]

REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    REGISTRY[spec.name] = spec
    return spec


# --- tasks of the XPT paper (Lee et al. 2021) -------------------------------------------------------
register(TaskSpec("korsts", "regression", ["sentence1", "sentence2"], "score", metric="spearman",
                  extra_metrics=["pearson"], label_range=(0.0, 5.0),
                  description="KorSTS (kakaobrain/KorNLUDatasets): TSV sentence1 sentence2 score (0-5)"))
register(TaskSpec("paws-x", "pair", ["sentence1", "sentence2"], "label", labels=["0", "1"], metric="accuracy",
                  label_names={"0": "different", "1": "paraphrase"}, hub=("google-research-datasets/paws-x", "ko"),
                  id_column="id", description="PAWS-X Korean paraphrase identification"))
register(TaskSpec("kqp", "pair", ["question1", "question2"], "is_duplicate", labels=["0", "1"], metric="accuracy",
                  label_names={"0": "different", "1": "duplicate"},
                  description="Korean Question Pairs (songys/Question_pair): local files only"))
register(TaskSpec("khs", "single", ["comments"], "hate", labels=["none", "offensive", "hate"], metric="accuracy",
                  extra_metrics=["f1_macro"], hub=("kor_hate", None), hub_splits={"train": "train", "dev": "test"},
                  description="Korean HateSpeech (kocohub/korean-hate-speech), hate label"))
register(TaskSpec("xnli-ko", "pair", ["sentence1", "sentence2"], "gold_label", labels=["entailment", "neutral", "contradiction"],
                  metric="accuracy", description="XNLI Korean natural language inference: TSV sentence1 sentence2 gold_label"))
# --- NSMC (shared data) --------------------------------------------------------------------------------
register(TaskSpec("nsmc", "single", ["document"], "label", labels=["0", "1"], metric="accuracy", id_column="id",
                  label_names={"0": "negative", "1": "positive"}, hub=("e9t/nsmc", None),
                  hub_splits={"train": "train", "test": "test"}, description="Naver Sentiment Movie Corpus: TSV id document label"))
# --- KLUE (Language Chameleon; KLUE-RE in the Korean XPT paper) -------------------------------------
register(TaskSpec("klue-ynat", "single", ["title"], "label",
                  labels=["IT과학", "경제", "사회", "생활문화", "세계", "스포츠", "정치"], metric="f1_macro",
                  extra_metrics=["accuracy"], hub=("klue/klue", "ynat"), description="KLUE topic classification"))
register(TaskSpec("klue-sts", "regression", ["sentence1", "sentence2"], "label", metric="pearson",
                  extra_metrics=["spearman"], label_range=(0.0, 5.0), hub=("klue/klue", "sts"), converter="klue_sts",
                  description="KLUE semantic textual similarity (real-valued label 0-5)"))
register(TaskSpec("klue-nli", "pair", ["premise", "hypothesis"], "label",
                  labels=["entailment", "neutral", "contradiction"], metric="accuracy", hub=("klue/klue", "nli"),
                  description="KLUE natural language inference"))
register(TaskSpec("klue-ner", "token", label_column="ner_tags", tokens_column="tokens", labels=KLUE_NER_TAGS,
                  character_tags=True,
                  metric="entity_f1_macro", extra_metrics=["entity_f1"], hub=("klue/klue", "ner"),
                  description="KLUE named entity recognition (character tokens, BIO; entity-level macro F1, strict IOB2, as KLUE scores it)"))
register(TaskSpec("klue-re", "single", ["sentence"], "label", metric="f1_micro_no_relation",
                  extra_metrics=["accuracy"], hub=("klue/klue", "re"), converter="klue_re",
                  description="KLUE relation extraction; entities marked with typed punctuation markers; "
                              "micro F1 without no_relation"))
register(TaskSpec("klue-mrc", "qa", question_column="question", context_column="context", answers_column="answers",
                  metric="qa_f1", extra_metrics=["qa_exact_match"], hub=("klue/klue", "mrc"),
                  description="KLUE machine reading comprehension (extractive; questions without an answer are dropped)"))


def get_task(name: str, or_else: str = " (or define one with --task-spec / --task-type and --text-columns)") -> TaskSpec:
    if name not in REGISTRY:  # `or_else`: how the caller's command defines a task of its own, if it can
        raise TaskDataError(f"unknown task {name!r}; registered tasks: {', '.join(sorted(REGISTRY))}{or_else}")
    return copy.deepcopy(REGISTRY[name])  # a run fills in open fields (`labels`): never the registry's own


def spec_from_cli(name: str, task_spec: str | None = None, task_type: str | None = None,
                  text_columns: str | None = None, label_column: str | None = None, labels: str | None = None,
                  metric: str | None = None) -> TaskSpec:
    """A registered task, or a new one from `--task-spec` / column flags. The JSON's fields override a
    registered task's (a JSON with a `task_type` defines a new task instead), and the flags override both."""
    data: dict[str, Any] = {}
    if task_spec:
        text = Path(task_spec).read_text(encoding="utf-8") if Path(task_spec).is_file() else task_spec
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise TaskDataError(f"--task-spec is neither a JSON file nor JSON text: {error}") from None
        if not isinstance(data, dict):
            raise TaskDataError("--task-spec must be a JSON object")
        for alias, field_name in (("type", "task_type"), ("columns", "text_columns")):  # from_dict's short names
            if alias in data:
                data.setdefault(field_name, data.pop(alias))
    new = {**data, **{k: v for k, v in dict(task_type=task_type, label_column=label_column, metric=metric).items() if v}}
    if text_columns:
        new["text_columns"] = [c for c in text_columns.split(",") if c]
    if labels:
        new["labels"] = [c for c in labels.split(",") if c]
    if name in REGISTRY and "task_type" not in data:
        if not new:
            return get_task(name)
        registered = REGISTRY[name].to_dict()
        merged = {**registered, **new}
        if "task_type" in new and new["task_type"] != registered["task_type"]:  # its metrics fit the old type
            merged["metric"] = new.get("metric") or DEFAULT_METRIC[new["task_type"]]
            merged["extra_metrics"] = new.get("extra_metrics", [])
        elif merged["metric"] != registered["metric"] and "extra_metrics" not in new:  # the registered one stays
            merged["extra_metrics"] = [m for m in [registered["metric"], *registered["extra_metrics"]]
                                       if m != merged["metric"]]
        return TaskSpec.from_dict(merged)
    if not data and not task_type:
        get_task(name)  # raises with the list of tasks
    return TaskSpec.from_dict({"name": name, **new})


# --- reading -------------------------------------------------------------------------------------------
def _read_table(path: Path) -> list[dict[str, Any]]:
    try:
        return _read_records(path)
    except UnicodeDecodeError as error:
        raise TaskDataError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); convert it, e.g. "
                            f"iconv -f cp949 -t utf-8 {path.name} > utf8-{path.name} (Korean files saved by Excel "
                            "are often CP949)") from None


def _read_records(path: Path) -> list[dict[str, Any]]:
    if path.suffix in (".tsv", ".csv"):
        # Plain tab/comma splitting with no quote handling for TSV: review text contains bare quotes.
        with path.open(encoding="utf-8-sig", newline="") as handle:  # utf-8-sig: a Windows BOM is no part of the header
            if path.suffix == ".tsv":
                reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            else:
                reader = csv.DictReader(handle)
            rows = []
            for row in reader:
                if None in row:  # line_num: the row's last line in the file (a quoted field may span lines)
                    raise TaskDataError(f"{path}:{reader.line_num}: more fields than header columns {reader.fieldnames}")
                rows.append(row)
            return rows
    if path.suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8-sig") as handle:  # a byte order mark, as Windows editors write, is not JSON
            for line_no, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise TaskDataError(f"{path}:{line_no}: invalid JSON ({error})") from None
        return rows
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as error:
        raise TaskDataError(f"{path}: invalid JSON ({error})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise TaskDataError(f"{path}: expected a list of records or {{\"data\": [...]}}")
    return data


def find_split_files(data_dir: Path) -> dict[str, Path]:
    files = {}
    for split, aliases in SPLIT_ALIASES.items():
        for alias in aliases:
            found = [data_dir / f"{alias}{ext}" for ext in EXTENSIONS if (data_dir / f"{alias}{ext}").is_file()]
            if found:
                files[split] = found[0]
                break
    return files


def load_local(spec: TaskSpec, data_dir: str | Path) -> dict[str, list[dict[str, Any]]]:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise TaskDataError(f"--data-dir {data_dir} is not a directory")
    files = find_split_files(data_dir)
    if "train" not in files or "dev" not in files:
        raise TaskDataError(f"{data_dir}: need train and dev files named train/dev (or validation).{{tsv,csv,json,jsonl}}; "
                            f"found {sorted(p.name for p in files.values()) or 'none'}")
    return {split: _read_table(path) for split, path in files.items()}


def _classlabel_to_names(dataset, declared: list[str] | None = None) -> list[dict[str, Any]]:
    """Records of a `datasets.Dataset`, with ClassLabel ints (also inside Sequence/List) turned into names.

    When the task declares a label set that the ClassLabel names do not cover (e.g. labels "0"/"1"
    but names "negative"/"positive"), the integers are kept as strings instead."""
    from datasets import ClassLabel  # local import: only the Hub path needs it

    def namer(label_feature: ClassLabel):
        use_names = declared is None or set(label_feature.names) <= set(declared)
        return lambda v: (label_feature.int2str(v) if use_names else str(v)) if isinstance(v, int) and v >= 0 else v

    converters: dict[str, Callable] = {}
    for column, feature in dataset.features.items():
        inner = getattr(feature, "feature", None)
        if isinstance(feature, ClassLabel):
            converters[column] = namer(feature)
        elif isinstance(inner, ClassLabel):
            converters[column] = lambda values, one=namer(inner): [one(v) for v in values]
    return [{k: converters[k](v) if k in converters else v for k, v in row.items()} for row in dataset]


def _convert_klue_sts(row):
    row = dict(row)
    row["label"] = row["labels"]["real-label"] if isinstance(row.get("labels"), dict) else row["label"]
    return row


def _convert_klue_re(row):
    """Typed entity markers with punctuation (Zhou & Chen 2021, as in the KLUE-RE baseline): no new tokens."""
    row = dict(row)
    sentence, subj, obj = row["sentence"], row["subject_entity"], row["object_entity"]
    marks = [(subj["start_idx"], subj["end_idx"], f"@ * {subj['type']} * ", " @"),
             (obj["start_idx"], obj["end_idx"], f"# ^ {obj['type']} ^ ", " #")]
    for start, end, left, right in sorted(marks, key=lambda m: m[0], reverse=True):
        sentence = sentence[:start] + left + sentence[start:end + 1] + right + sentence[end + 1:]
    row["sentence"] = sentence
    return row


CONVERTERS: dict[str, Callable[[dict], dict]] = {"klue_sts": _convert_klue_sts, "klue_re": _convert_klue_re}


def load_hub(spec: TaskSpec, load_dataset: Callable | None = None) -> dict[str, list[dict[str, Any]]]:
    """`datasets.load_dataset(*spec.hub)` (or the `load_dataset` given), ClassLabels as names, optional converter."""
    if load_dataset is None:
        from datasets import load_dataset

    path, name = spec.hub
    dataset = load_dataset(path, name)
    out = {}
    for split, hub_split in spec.hub_splits.items():
        if hub_split in dataset:
            rows = _classlabel_to_names(dataset[hub_split], spec.labels)
            if spec.converter:
                rows = [CONVERTERS[spec.converter](row) for row in rows]
            if spec.task_type == "qa":  # e.g. KLUE-MRC's unanswerable questions: extractive QA only
                answerable = [r for r in rows if (r.get(spec.answers_column) or {}).get("text")]
                if len(answerable) < len(rows):
                    print(f"{spec.name} {split}: dropped {len(rows) - len(answerable)} questions without an answer",
                          file=sys.stderr)
                rows = answerable
            out[split] = rows
    if spec.labels is None and "train" in dataset:
        from datasets import ClassLabel
        feature = dataset["train"].features.get(spec.label_column)
        if isinstance(feature, ClassLabel):
            spec.labels = list(feature.names)
    return out


def load_task_data(spec: TaskSpec, data_dir: str | Path | None, max_train_samples: int | None = None,
                   max_eval_samples: int | None = None, data_seed: int = 0,
                   hold_out_test: int = 0, hold_out_dev: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Load and validate train/dev(/test) records; subsample with a fixed data seed (shared by all runs).
    A task without a test split gets one: `hold_out_test` train examples (the first after a shuffle with
    `data_seed`, as the study holds one out), or, with `hold_out_dev`, its dev split, while that many train
    examples become dev (for texts that a post-training corpus may hold: NSMC's train reviews are in the
    shared corpus, its dev reviews are not). Both are taken before the train subsample."""
    if data_dir is not None:
        splits = load_local(spec, data_dir)
    elif spec.hub is not None:
        from training.inputs import hub_offline, hub_resolves

        hub = spec.hub[0] + (f" (config {spec.hub[1]})" if spec.hub[1] else "")
        if not hub_offline() and not hub_resolves():  # not after the Hub client's 23 s of retries
            raise TaskDataError(f"task {spec.name!r} reads {hub} from the Hugging Face Hub, which cannot be reached "
                                "here: pass --data-dir with its train/dev/test files (or set HF_HUB_OFFLINE=1 to "
                                "read a copy in the datasets cache)")
        try:
            splits = load_hub(spec)
        except Exception as error:  # network, missing dataset, ...: one clear line
            raise TaskDataError(f"could not load {hub} from the Hugging Face Hub: {type(error).__name__}: "
                                f"{str(error).splitlines()[0] if str(error) else ''} (pass --data-dir for local files)") from None
        if "dev" not in splits and "test" in splits:  # e.g. NSMC on the Hub: hold out 10% of train as dev
            rng = random.Random(data_seed)
            train = splits["train"][:]
            rng.shuffle(train)
            cut = max(1, len(train) // 10)
            splits["dev"], splits["train"] = train[:cut], train[cut:]
    else:
        raise TaskDataError(f"task {spec.name!r} has no Hub dataset; pass --data-dir with train/dev files")
    if spec.task_type in ("single", "pair") and spec.labels is None:  # train's and dev's labels, before any sample
        found = {str(row.get(spec.label_column)) for split in ("train", "dev") for row in splits.get(split, [])}
        spec.labels = sorted(found - {"None"}) or None
    validate(spec, splits)  # as read: an error names the file's split and the row's place in it
    held, into = (hold_out_dev, "dev") if hold_out_dev else (hold_out_test, "test")
    if held:
        if hold_out_test and hold_out_dev:
            raise TaskDataError("--hold-out-test and --hold-out-dev both make a test split: give one of them")
        if "test" in splits:
            raise TaskDataError(f"task {spec.name!r} already has a test split: drop --hold-out-{into}")
        if len(splits["train"]) <= held:
            raise TaskDataError(f"task {spec.name!r}: {len(splits['train'])} train examples, too few to hold out "
                                f"{held} as {into}")
        train = list(splits["train"])
        random.Random(data_seed).shuffle(train)
        if hold_out_dev:
            splits["test"] = splits["dev"]
        splits[into], splits["train"] = train[:held], train[held:]
    for split, limit in (("train", max_train_samples), ("dev", max_eval_samples), ("test", max_eval_samples)):
        if limit is not None and split in splits and len(splits[split]) > limit:
            rows = splits[split][:]
            random.Random(data_seed).shuffle(rows)
            splits[split] = rows[:limit]
    check_not_empty(spec, splits)  # the rows were validated as read; the hold-out or subsample may empty a split
    return splits


# --- validation ----------------------------------------------------------------------------------------
def required_columns(spec: TaskSpec) -> list[str]:
    if spec.task_type == "token":
        return [spec.tokens_column, spec.label_column]
    if spec.task_type == "qa":
        return [spec.question_column, spec.context_column, spec.answers_column]
    return list(spec.text_columns) + [spec.label_column]


def check_not_empty(spec: TaskSpec, splits: dict[str, list[dict[str, Any]]]) -> None:
    for split, rows in splits.items():
        if not rows:
            raise TaskDataError(f"task {spec.name!r}: the {split} split is empty")


def validate(spec: TaskSpec, splits: dict[str, list[dict[str, Any]]]) -> None:
    """Columns present, no empty split, labels in the declared set (or numeric within range). Fills in
    `spec.labels` from the train split when the spec leaves it open."""
    check_not_empty(spec, splits)
    for split, rows in splits.items():
        for i, row in enumerate(rows):
            missing = [c for c in required_columns(spec) if c not in row]
            if missing:
                where = f"split has no column(s) {missing}" if i == 0 else f"row {i} lacks column(s) {missing}"
                raise TaskDataError(f"task {spec.name!r}: {split} {where}; columns are {sorted(row)}")
    if spec.task_type in ("single", "pair"):
        if spec.labels is None:
            spec.labels = sorted({str(r[spec.label_column]) for r in splits["train"]})
        allowed = set(spec.labels)
        for split, rows in splits.items():
            for i, row in enumerate(rows):
                value = row[spec.label_column]
                if value is None or str(value) not in allowed:
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i} has label {value!r}, "
                                        f"not in the declared label set {spec.labels}")
        if len(allowed) < 2:
            raise TaskDataError(f"task {spec.name!r}: need at least 2 labels, got {spec.labels}")
    elif spec.task_type == "regression":
        for split, rows in splits.items():
            for i, row in enumerate(rows):
                try:
                    value = float(row[spec.label_column])
                except (TypeError, ValueError):
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i} has non-numeric label "
                                        f"{row[spec.label_column]!r}") from None
                if spec.label_range and not spec.label_range[0] <= value <= spec.label_range[1]:
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i} has label {value}, "
                                        f"outside the declared range {list(spec.label_range)}")
    elif spec.task_type == "token":
        if spec.labels is None:
            spec.labels = sorted({t for r in splits["train"] for t in r[spec.label_column]})
        allowed = set(spec.labels)
        for split, rows in splits.items():
            for i, row in enumerate(rows):
                tokens, tags = row[spec.tokens_column], row[spec.label_column]
                if not isinstance(tokens, list) or not isinstance(tags, list) or len(tokens) != len(tags):
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i}: {spec.tokens_column!r} and "
                                        f"{spec.label_column!r} must be lists of equal length")
                bad = [t for t in tags if t not in allowed]
                if bad:
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i} has tag {bad[0]!r}, "
                                        f"not in the declared label set {spec.labels}")
    elif spec.task_type == "qa":
        for split, rows in splits.items():
            for i, row in enumerate(rows):
                answers = row[spec.answers_column]
                if (not isinstance(answers, dict) or not answers.get("text")
                        or len(answers["text"]) != len(answers.get("answer_start", []))):
                    raise TaskDataError(f"task {spec.name!r}: {split} row {i}: {spec.answers_column!r} must be "
                                        "{'text': [...], 'answer_start': [...]} with at least one answer")
                context = row[spec.context_column]
                for text, start in zip(answers["text"], answers["answer_start"]):
                    if context[start:start + len(text)] != text:
                        raise TaskDataError(f"task {spec.name!r}: {split} row {i}: answer {text!r} is not at "
                                            f"character {start} of the context")


def describe_registry() -> str:
    return "\n".join(f"{name:10s} {spec.task_type:10s} {spec.metric:22s} {spec.description}"
                     for name, spec in sorted(REGISTRY.items()))


if __name__ == "__main__":  # `python -m training.tasks` lists the registry
    sys.stdout.write(describe_registry() + "\n")
