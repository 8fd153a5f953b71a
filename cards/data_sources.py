"""What the model card may say about known training/evaluation data: domain and licence.

Only sources whose licence is documented (../shared/data/README.md, the dataset pages) are listed.
Anything else is reported as "not recorded" in the card; nothing is guessed.
"""
from __future__ import annotations

from pathlib import Path

from training.inputs import looks_like_hub_id

from .public import corpus_hub_datasets, corpus_stats

# file name (as found in a local data folder) -> (description / domain, licence)
KNOWN_FILES = {
    "ko_reviews.txt.gz": ("Naver Sentiment Movie Corpus raw reviews (github e9t/nsmc): colloquial movie reviews, "
                          "at most 140 characters", "CC0 1.0"),
    "ko_comments.txt.gz": ("Korean HateSpeech Dataset unlabeled comments (github kocohub/korean-hate-speech): online "
                           "news comments and titles, colloquial; gathered for hate-speech research, so it may contain offensive and hateful language",
                           "CC BY-SA 4.0"),
    "ko_formal.txt.gz": ("formal paragraphs collected by github yiunsr/boddari: Korean Wikinews articles, UNESCO "
                         "reports, public-domain fairy tales, book reviews",
                         "Wikinews CC BY 2.5, UNESCO CC BY-SA 3.0 IGO, others CC BY / public domain as listed by that "
                         "project"),
}
# Hub dataset id -> (description / domain, licence); "{language}" is the target language's English name.
KNOWN_HUB = {
    "wikimedia/wikipedia": ("Wikipedia articles (encyclopedic, formal written {language})", "CC BY-SA 4.0 and GFDL"),
}
# Fine-tuning task name (results.json "task") -> (description, licence, Hub task type, pretty metric name)
KNOWN_TASKS = {
    "korsts": ("KorSTS semantic textual similarity (github kakaobrain/KorNLUDatasets)", "CC BY-SA 4.0",
               "text-classification", "Spearman x 100"),
    "nsmc": ("NSMC movie-review sentiment (github e9t/nsmc)", "CC0 1.0", "text-classification", "accuracy"),
}
# The Hub dataset a fine-tuning task's scores are cited with is the one its task spec loads
# (`training.tasks`: `hub` and `hub_splits`). KorSTS alone is read from local files (the TSVs of
# kakaobrain/KorNLUDatasets), so its spec names no Hub dataset; the card cites the Hub dataset built from
# those same files: (Hub dataset id, config) and which of its splits each split of fine-tuning is.
CITED_ONLY = {"korsts": (("kakaobrain/kor_nlu", "sts"), {"train": "train", "dev": "validation", "test": "test"})}


def locate_spec(spec: str | None) -> str | None:
    """A post-training data spec as a path that exists here: a relative local path is tried from the
    working directory, then from the repository root; anything else is returned as it is."""
    if not spec:
        return spec
    if Path(spec).exists() or Path(spec).is_absolute():
        return spec
    root = Path(__file__).resolve().parents[1]
    return str(root / spec) if (root / spec).exists() else spec


def _hub_entry(hub: str, language: str) -> tuple[str, str, str]:
    description, licence = KNOWN_HUB[hub]
    return hub, description.format(language=language), licence


def describe_data(spec: str | None, language: str = "Korean") -> tuple[list[str], list[tuple[str, str, str]]]:
    """(Hub dataset ids, [(name, description, licence)]) for a post-training data spec; `language`
    (an English name) is the language of the text a Hub dataset was read in."""
    if not spec:
        return [], []
    spec = str(spec)
    if spec == "konlpy":
        return [], [("konlpy", "the small Korean corpora bundled in the PyPI package konlpy (kolaw, kobill)",
                     "not recorded here: see the konlpy package's documentation")]
    path = Path(spec)
    hub_ids = corpus_hub_datasets(spec)
    if path.exists():
        files = sorted(p.name for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file())
        stats = corpus_stats(spec) or {}
        # a prepared corpus names its own inputs in stats.json
        files += [Path(str(i.get("input", ""))).name for i in stats.get("inputs") or [] if isinstance(i, dict)]
        known = [(name, *KNOWN_FILES[name]) for name in dict.fromkeys(files) if name in KNOWN_FILES]
        known += [_hub_entry(hub, language) for hub in hub_ids if hub in KNOWN_HUB]
        return hub_ids, known
    if hub_ids:
        return hub_ids, [_hub_entry(hub, language) for hub in hub_ids if hub in KNOWN_HUB]
    if looks_like_hub_id(spec):
        if spec in KNOWN_HUB:
            return [spec], [_hub_entry(spec, language)]
        return [spec], []
    return [], []


def describe_task(task: str | None) -> tuple[str, str, str, str] | None:
    return KNOWN_TASKS.get(str(task).lower()) if task else None


def task_hub(result: dict) -> tuple[tuple[str, str | None], dict[str, str]] | None:
    """((Hub dataset id, config), {fine-tuning split: the Hub dataset's split}) of the task a results.json
    scores, where it has a Hub dataset: the task spec it recorded, else the registered task of its name."""
    from training.tasks import REGISTRY

    name = str(result.get("task")).lower()
    spec = result.get("task_spec") or (REGISTRY[name].to_dict() if name in REGISTRY else {})
    if spec.get("hub"):
        return (spec["hub"][0], (list(spec["hub"]) + [None])[1]), dict(spec.get("hub_splits") or {})
    return CITED_ONLY.get(name)


def hub_split(result: dict, split: str) -> tuple[str, str | None, str] | None:
    """(Hub dataset id, config, the Hub dataset's split) that a results.json's `split` score was measured on,
    when it is that dataset's own split as published: None for a split held out of train (`--hold-out-test`,
    `--hold-out-dev`, or a dev split that the Hub dataset lacks), a sample of a split (`--max-eval-samples`)
    or a task without a Hub dataset."""
    hub, splits = task_hub(result) or (None, {})
    if not hub or split not in splits:
        return None
    settings = result.get("hyperparameters") or {}
    if settings.get("hold_out_test") and split == "test" or settings.get("hold_out_dev") and split in ("dev", "test"):
        return None
    limit, count = settings.get("max_eval_samples"), (result.get("num_examples") or {}).get(split)
    if limit is not None and split != "train" and (not isinstance(count, int) or count >= limit):
        return None
    return hub[0], hub[1], splits[split]
