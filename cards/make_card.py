"""Write the model card (README.md) of a saved XPT folder, from the folder's own files.

    python -m cards.make_card --model-dir runs/xpt-ko-4m [--repo-id org/xpt-ko-4m] [--results ft/results.json]

Metadata (YAML) the Hub understands: language, license, library_name, pipeline_tag, tags,
base_model, datasets, widget (Korean examples with this tokenizer's mask token) and model-index
(from training_summary.json and results.json). Body: what XPT is, how this checkpoint was made,
usage with `trust_remote_code=True`, results, the stock export, limitations, data licence, citation.

Every number comes from the folder (config.json, training_summary.json, results.json, the
safetensors headers, the tokenizer); anything missing is left out, never filled in.

The language is `--language`, else the one the corpus preparation recorded (stats.json), else
config.json's `language` (recorded when the model was made, inherited by fine-tuned models), else
Korean; widget examples are `--widget` texts, else hand-written Korean sentences for Korean and
held-out corpus sentences for any other language. The licence is `--license`, else the English
source's known licence (SOURCE_LICENSES, or a local source folder's own card); otherwise the CLI
asks for it. Local paths never appear: sources, tokenizers and data are named by Hub id or
described ("local corpus (3 files)").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenization.errors import report_error
from training.methods import METHODS
from training.run_record import PhaseRecord, RunRecord

from .data_sources import describe_data, describe_task, task_hub_dataset
from .folder import (
    CARD_FILE,
    GENERATED_MARKER,
    FolderInfo,
    hub_source_id,
    inspect_folder,
    load_tokenizer,
    looks_like_hub_id,
    safetensors_parameter_count,
)
from .public import public_ref

# Licences of English sources, by Hub id prefix (from each model's Hub page). A model made from one
# of them carries its licence unless --license says otherwise; any other source must be given one.
SOURCE_LICENSES = (
    (("FacebookAI/roberta-", "roberta-", "FacebookAI/xlm-roberta-", "xlm-roberta-", "distilroberta-",
      "distilbert/distilroberta-"), "mit"),
    (("google-bert/", "bert-base-", "bert-large-", "google/electra-", "sentence-transformers/all-MiniLM-"), "apache-2.0"),
    (("klue/roberta-", "klue/bert-"), "cc-by-sa-4.0"),
)
UNSPECIFIED_LICENSE = "unspecified"
TESTED_TRANSFORMERS = ">=5.17"  # the range this package is tested on (pyproject.toml)


class LicenseUnknown(ValueError):
    """No --license was given and the source model's licence is not known."""


def source_license(source: str | None) -> str | None:
    """The licence of an English source given as a Hub id (known prefixes) or as a local folder whose
    own model card states one."""
    if not source:
        return None
    hub = hub_source_id(source)
    if hub:
        for prefixes, licence in SOURCE_LICENSES:
            if hub.startswith(prefixes):
                return licence
    folder = Path(str(source).split(" (")[-1].rstrip(")")) if "(" in str(source) else Path(str(source))
    card = folder / CARD_FILE
    if card.is_file():
        try:
            from huggingface_hub import ModelCard

            licence = ModelCard.load(card).data.to_dict().get("license")
            # "other" names no licence here (a card this package wrote without one says "other")
            return licence if isinstance(licence, str) and licence != "other" else None
        except Exception:  # an unreadable card states nothing
            return None
    return None


def known_license(explicit: str | None, method: str | None, sources) -> str | None:
    """The licence of the weights: `explicit`, else the first known licence among `sources` (Hub
    ids, ``package:NAME`` or local folders with a model card: the English source, or the model a
    fine-tune started from). A scratch model reuses no source weights: only `explicit` counts."""
    if explicit:
        return explicit
    if method == "scratch":
        return None
    for candidate in sources:
        licence = source_license(candidate)
        if licence:
            return licence
    return None


def license_unknown(method: str | None, source: str | None, fix: str = "pass --license ID") -> LicenseUnknown:
    """The one-line error for weights whose licence is neither given nor known; `fix` names the option."""
    why = ("a scratch model has no source licence" if method == "scratch"
           else f"source {public_ref(source, 'model')!r} has no recorded licence")
    return LicenseUnknown(f"licence of the weights unknown ({why}): {fix} (the source model's licence, compatible "
                          "with the post-training data's terms)")


def resolve_license(info: FolderInfo, explicit: str | None = None, *, required: bool = False,
                    base_model: str | None = None) -> str | None:
    """The licence of the weights: `explicit`, else the known licence of the model a fine-tune
    started from, else the English source's (a scratch model has no source: it needs `explicit`).
    None when unknown, or LicenseUnknown when `required`."""
    method = info.method
    fine_tuned_from = (info.own_results or {}).get("model") if info.is_fine_tuned else None
    licence = known_license(explicit, method, [base_model, fine_tuned_from, info.config.get("source_name_or_path"),
                                               info.source])
    if licence is None and required:
        raise license_unknown(method, info.source)
    return licence

CITATION = """@article{lee2021xpt,
  title   = {Exploring the Data Efficiency of Cross-Lingual Post-Training in Pretrained Language Models},
  author  = {Lee, Chanhee and Yang, Kisu and Whang, Taesun and Park, Chanjun and Matteson, Andrew and Lim, Heuiseok},
  journal = {Applied Sciences},
  volume  = {11},
  number  = {5},
  pages   = {1975},
  year    = {2021},
  doi     = {10.3390/app11051975}
}"""

# Sentences for fill-mask widgets: (sentence, word to mask). Hand-written Korean.
MASK_CANDIDATES = [
    ("대한민국의 수도는 서울이다.", "서울"),
    ("나는 도서관에서 책을 읽었다.", "책"),
    ("이 영화는 정말 재미있었다.", "영화"),
    ("오늘은 날씨가 맑고 따뜻하다.", "날씨"),
    ("우리는 내일 부산으로 여행을 간다.", "여행"),
    ("학생들이 운동장에서 축구를 하고 있다.", "축구"),
    ("봄이 오면 꽃이 피고 새가 운다.", "꽃"),
]
# ISO 639-1 code -> English name, for the card's words (other codes are shown as they are).
LANGUAGE_NAMES = {
    "ko": "Korean", "ja": "Japanese", "zh": "Chinese", "th": "Thai", "ru": "Russian", "uk": "Ukrainian",
    "hi": "Hindi", "ar": "Arabic", "fa": "Persian", "he": "Hebrew", "el": "Greek", "bn": "Bengali", "ta": "Tamil",
    "ka": "Georgian", "hy": "Armenian", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "tr": "Turkish", "vi": "Vietnamese", "id": "Indonesian",
    "sw": "Swahili", "kk": "Kazakh", "mn": "Mongolian", "ur": "Urdu", "mr": "Marathi", "ne": "Nepali",
}
DEFAULT_LANGUAGE = "ko"
# Phrases about the paper's own (Korean) experiments: they stay as they are in any language's card.
PAPER_PHRASES = ("4M Korean Wikipedia sentences", "beats Korean models")

PAIR_EXAMPLE = ("한 남자가 기타를 치고 있다.", "남자가 악기를 연주하고 있다.")  # hand-written Korean
CLASSIFICATION_EXAMPLES = [
    "이 영화는 정말 재미있었다.",
    "배우들의 연기가 어색해서 너무 지루했다.",
    "음식은 맛있었지만 서비스가 느렸다.",
]
# Decimals a metric is reported with (card table and model-index alike).
METRIC_DIGITS = {"perplexity": 2, "mean_rank": 2}
DOWNSTREAM_DIGITS = 2

INTRINSIC_METRICS = [  # key in training_summary metrics -> (model-index type, display name)
    ("perplexity", "perplexity", "Perplexity (masked tokens)"),
    ("loss", "loss", "MLM loss"),
    ("hits@1", "hits@1", "Hits@1"),
    ("hits@3", "hits@3", "Hits@3"),
    ("hits@5", "hits@5", "Hits@5"),
    ("hits@10", "hits@10", "Hits@10"),
    ("mrr", "mrr", "MRR"),
    ("mean_rank", "mean_rank", "Mean rank"),
]


# ----------------------------------------------------------------------------------------------
# Formatting helpers (shared with the tests, so a number is written one way only)
# ----------------------------------------------------------------------------------------------


def fmt_int(value) -> str:
    return f"{int(value):,}"


def fmt_float(value, digits: int = 4) -> str:
    return f"{float(value):.{digits}f}"


def fmt_duration(seconds) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    hours, rest = divmod(seconds, 3600)
    minutes = rest / 60
    return f"{seconds:.0f} s ({int(hours)} h {minutes:.0f} min)" if hours else f"{seconds:.0f} s ({minutes:.1f} min)"


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _blank_if_none(value) -> str:
    return "" if value is None else str(value)


# ----------------------------------------------------------------------------------------------
# Widgets
# ----------------------------------------------------------------------------------------------


def language_name(code: str | None) -> str:
    return LANGUAGE_NAMES.get(code or DEFAULT_LANGUAGE, code or "")


def _mask_candidates(texts: list[str], tokenizer) -> list[tuple[str, str]]:
    """(sentence, word to mask) for given sentences: the longest whitespace word that is one token
    of this tokenizer (else the longest word). A sentence that already holds the mask token is kept as it is."""
    out = []
    for text in texts:
        text = text.strip()
        if tokenizer.mask_token in text:
            out.append((text, ""))
            continue
        words = [w.strip(".,!?;:\"'()«»「」。、") for w in text.split()]
        words = [w for w in words if w]
        if not words:
            continue
        single = [w for w in words if len(tokenizer.tokenize(w)) == 1 and tokenizer.unk_token not in tokenizer.tokenize(w)]
        out.append((text, max(single or words, key=len)))
    return out


def held_out_sentences(spec: str | None, count: int = 20) -> list[str]:
    """The first sentences of a prepared corpus's test split (else valid), for widget examples."""
    if not spec:
        return []
    import json

    for split in ("test", "valid"):
        folder = Path(spec) / split
        if not folder.is_dir():
            continue
        sentences = []
        for shard in sorted(folder.glob("*.jsonl")):
            with open(shard, encoding="utf-8") as handle:
                for line in handle:
                    text = json.loads(line).get("text", "")
                    if 3 <= len(text.split()) <= 30:
                        sentences.append(text)
                    if len(sentences) >= count:
                        return sentences
        if sentences:
            return sentences
    return []


def fill_mask_widgets(tokenizer, count: int = 3, texts: list[str] | None = None) -> list[dict]:
    """Widget sentences with one word replaced by `tokenizer.mask_token`: from `texts` (given by
    the user, or held-out sentences of the corpus), else the hand-written Korean ones. Sentences
    whose masked word is a single token of this tokenizer come first (the model can predict them exactly)."""
    mask = tokenizer.mask_token
    if not mask:
        raise ValueError("the tokenizer has no mask token: a fill-mask widget is impossible")
    candidates = _mask_candidates(texts, tokenizer) if texts else MASK_CANDIDATES
    scored = []
    for index, (sentence, word) in enumerate(candidates):
        if not word:  # the user's own masked sentence
            scored.append((-1, index, sentence, mask))
            continue
        single = len(tokenizer.tokenize(word)) == 1 and tokenizer.unk_token not in tokenizer.tokenize(word)
        scored.append((0 if single else 1, index, sentence.replace(word, mask, 1), word))
    scored.sort()
    return [{"text": text, "example_title": f"{word} ({mask})" if word != mask else f"example {rank + 1}"}
            for rank, (_, _, text, word) in enumerate(scored[:count])]


def classification_widgets(texts: list[str] | None = None) -> list[dict]:
    if texts:
        return [{"text": text, "example_title": f"example {i + 1}"} for i, text in enumerate(texts[:3])]
    return [{"text": text, "example_title": f"예시 {i + 1}"} for i, text in enumerate(CLASSIFICATION_EXAMPLES)]


def widgets_for(info: FolderInfo, tokenizer, language: str = DEFAULT_LANGUAGE, texts: list[str] | None = None) -> list[dict]:
    """Widget examples: `texts` (given by the user), else for a language other than Korean the
    held-out sentences of the post-training corpus, else the hand-written Korean sentences."""
    if not texts and language != DEFAULT_LANGUAGE:
        texts = held_out_sentences(_locate_spec(info.data_spec))
        if not texts:
            raise ValueError(f"no {language_name(language)} widget examples: the post-training corpus has no held-out "
                             "split here; pass --widget TEXT (repeatable)")
    if info.pipeline_tag == "fill-mask":
        return fill_mask_widgets(tokenizer, texts=texts)
    if info.pipeline_tag == "text-classification":
        return classification_widgets(texts)
    return []


def resolve_language(info: FolderInfo, explicit: str | None = None) -> str:
    """The target language: `explicit`, else the one recorded by the corpus preparation
    (stats.json of the post-training data), else the model's config.json (`language`, recorded from
    the corpus or the tokenizer's training_info.json when the model was made; a fine-tuned model
    inherits it), else Korean."""
    if explicit:
        return explicit
    from .public import corpus_stats

    stats = corpus_stats(_locate_spec(info.data_spec)) or {}
    return stats.get("language") or info.config.get("language") or DEFAULT_LANGUAGE


def localise(text: str, language: str) -> str:
    """The card's words for `language` (written for Korean; the paper's own figures stay)."""
    if language == DEFAULT_LANGUAGE:
        return text
    for index, phrase in enumerate(PAPER_PHRASES):
        text = text.replace(phrase, f"\0{index}\0")
    text = text.replace("Korean", language_name(language))
    for index, phrase in enumerate(PAPER_PHRASES):
        text = text.replace(f"\0{index}\0", phrase)
    return text


# ----------------------------------------------------------------------------------------------
# Metadata
# ----------------------------------------------------------------------------------------------


def resolve_base_model(info: FolderInfo, override: str | None = None) -> str | None:
    """Hub id of the model this one was made from, or None (never a local path)."""
    if override:
        return override
    if info.is_fine_tuned and info.own_results:
        # the model it was fine-tuned from (the post-trained encoder), by Hub id; a local folder has none
        # here and is described in the card's body instead
        return hub_source_id(info.own_results.get("model"))
    if info.method == "scratch":
        return None  # nothing of the English model is used
    for candidate in (info.config.get("source_name_or_path"), info.source):
        hub = hub_source_id(candidate)
        if hub:
            return hub
    return None


def _locate_spec(spec: str | None) -> str | None:
    """A relative local data path is tried from the working directory, then from the repository root."""
    if not spec:
        return spec
    if Path(spec).exists() or Path(spec).is_absolute():
        return spec
    root = Path(__file__).resolve().parents[1]
    return str(root / spec) if (root / spec).exists() else spec


def eval_results(info: FolderInfo, data_name: str):
    from huggingface_hub import EvalResult

    results = []
    metrics = info.record.final_metrics if info.record else {}
    split = (info.record.final_metrics_split if info.record else None) or "test"
    spec = info.data_spec
    hub_ids, _ = describe_data(_locate_spec(spec))
    dataset_type = hub_ids[0] if hub_ids else "held-out-text"
    for key, metric_type, name in INTRINSIC_METRICS:
        if _num(metrics.get(key)) and not info.is_fine_tuned:  # a classifier does not fill masks
            results.append(EvalResult(
                task_type="fill-mask", task_name="Masked language modelling (held-out text)",
                dataset_type=dataset_type, dataset_name=data_name, dataset_split=split,
                metric_type=metric_type, metric_name=name,
                metric_value=round(float(metrics[key]), METRIC_DIGITS.get(key, 4))))
    for result in info.results:
        task = describe_task(result.get("task"))
        value = result.get("mean")
        if not _num(value):
            continue
        task_name = str(result.get("task"))
        hub = task_hub_dataset(task_name)
        saved = result.get("saved_model") if result is info.own_results else None
        for split in ("test", "dev"):  # this checkpoint's own scores (its seed, its best dev epoch)
            if saved and _num(saved.get(split)):
                results.append(EvalResult(
                    task_type=task[2] if task else "text-classification", task_name=task[0] if task else task_name,
                    dataset_type=hub[0] if hub else task_name, dataset_config=hub[1] if hub else None,
                    dataset_name=task[0] if task else task_name, dataset_split=split,
                    metric_type=str(result.get("metric", "score")),
                    metric_name=f"{result.get('metric', 'score')} (this model: seed {saved.get('seed')})",
                    metric_value=round(float(saved[split]), DOWNSTREAM_DIGITS)))
        results.append(EvalResult(
            task_type=task[2] if task else "text-classification", task_name=task[0] if task else task_name,
            dataset_type=hub[0] if hub else task_name, dataset_config=hub[1] if hub else None,
            dataset_name=task[0] if task else task_name,
            dataset_split=str(result.get("split", "test")), metric_type=str(result.get("metric", "score")),
            metric_name=f"{result.get('metric', 'score')} (mean of {len(result.get('scores') or [])} seeds)",
            metric_value=round(float(value), DOWNSTREAM_DIGITS)))
    return results


def build_metadata(info: FolderInfo, tokenizer, *, model_name: str, license: str | None = None,
                   base_model: str | None = None, datasets: list[str] = (), variant: str = "custom",
                   language: str = DEFAULT_LANGUAGE, widget_texts: list[str] | None = None):
    from huggingface_hub import ModelCardData

    spec = info.data_spec
    hub_datasets, _ = describe_data(_locate_spec(spec))
    task_dataset = task_hub_dataset((info.own_results or {}).get("task")) if info.is_fine_tuned else None
    all_datasets = list(dict.fromkeys([*hub_datasets, *([task_dataset[0]] if task_dataset else []), *datasets]))
    family = info.config.get("source_architecture") or info.config.get("source_model_type") or info.config.get("model_type")
    tags = ["xpt", "cross-lingual-post-training", language_name(language).lower(), "encoder", info.pipeline_tag]
    if family in ("bert", "roberta", "xlm-roberta", "electra"):
        tags.append(family)
    tags.append("custom_code" if variant == "custom" else "stock-export")
    data_ref = public_ref(_locate_spec(spec), "corpus") if spec else None
    held_out = f"{language_name(language)} held-out text"
    results = eval_results(info, data_name=f"{held_out} ({data_ref})" if data_ref else held_out)
    data = ModelCardData(
        language=language,
        license=license or "other",
        license_name=None if license else UNSPECIFIED_LICENSE,
        library_name="transformers",
        pipeline_tag=info.pipeline_tag,
        tags=tags,
        base_model=resolve_base_model(info, base_model),
        datasets=all_datasets or None,
        model_name=model_name if results else None,
        eval_results=results or None,
        widget=widgets_for(info, tokenizer, language, widget_texts) or None,
    )
    return data


# ----------------------------------------------------------------------------------------------
# Body
# ----------------------------------------------------------------------------------------------


# Parameter groups of XPTForMaskedLM.xpt_parameter_groups(), in words.
GROUP_WORDS = {
    "target_embeddings": "the new Korean embeddings",
    "itl": "the implicit translation layers",
    "reused_encoder": "the reused encoder layers",
    "reused_embeddings": "the reused position embeddings and embedding LayerNorm",
    "lm_head_transform": "the MLM head transform",
    "lm_head_bias": "the MLM output bias",
    "adapters": "the adapters",
    "task_head": "the task head",
}


def _join_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def describe_phases(phases: list[PhaseRecord]) -> str | None:
    """What each phase of the run trained, from the run's own record (training_summary.json
    ``phases[].trainable_groups``); None without a record. A phase that trained every group that
    any phase trained, the reused encoder included, "trained everything"."""
    named = [p for p in phases if p.trainable_groups]
    if not named:
        return None
    every = {g for p in named for g in p.trainable_groups}
    parts = []
    for phase in named:
        groups = list(phase.trainable_groups)
        if set(groups) == every and "reused_encoder" in every:
            what = "everything"
        else:
            what = _join_words([GROUP_WORDS.get(g, f"`{g}`") for g in groups])
            if "reused_encoder" not in groups:
                what += " (the reused English layers frozen)"
        parts.append(f"{phase.name or 'phase'} trained {what}")
    return "; ".join(parts)


def _made_section(info: FolderInfo, tokenizer) -> list[str]:
    c, s = info.config, info.record or RunRecord()
    lines = ["## How this checkpoint was made", ""]
    method = info.method
    if method:
        lines.append(f"- **Method**: `{method}` — {METHODS[method].card if method in METHODS else 'see training_summary.json'}.")
    source = info.source
    if source:
        hub = hub_source_id(source) or hub_source_id(c.get("source_name_or_path"))
        shown = public_ref(source, "model")
        lines.append(f"- **English source model**: `{shown}`" + (f" ([{hub}](https://huggingface.co/{hub}))" if hub and hub != shown else "")
                     + (f", {c.get('source_architecture') or c['source_model_type']} family" if c.get("source_model_type") else "") + ".")
    if c.get("model_type") == "xpt":
        layers = c.get("num_hidden_layers")
        itl = [name for name, key in (("ITL_in", "use_itl_in"), ("ITL_out", "use_itl_out")) if c.get(key)]
        parts = [f"hidden size {c.get('hidden_size')}", f"{layers} reused encoder layers"]
        if itl:
            parts.append(f"implicit translation layers {' and '.join(itl)} ({layers + len(itl)} layers in all)")
        if c.get("adapter_size"):
            parts.append(f"bottleneck adapters of size {c['adapter_size']}")
        parts.append(f"vocabulary {fmt_int(c.get('vocab_size'))}")
        lines.append("- **Architecture**: " + ", ".join(parts) + ".")
    elif info.is_stock:
        lines.append(f"- **Architecture**: plain `{info.architecture}` with {c.get('num_hidden_layers')} layers "
                     "(ITL_in, the reused layers and ITL_out of the XPT model, in that order), hidden size "
                     f"{c.get('hidden_size')}, vocabulary {fmt_int(c.get('vocab_size'))}.")
    if s.source_has_mlm_head is False:
        lines.append("- **MLM head**: the English source has none (a bare encoder), so the head transform was "
                     "initialised fresh and trained from phase 1 on; the encoder layers, position embeddings and "
                     "embedding LayerNorm are the source's.")
    count = safetensors_parameter_count(info.path)
    if count:
        lines.append(f"- **Stored parameters**: {fmt_int(count)} (from the safetensors file).")
    tok_ref = public_ref(s.tokenizer, "tokenizer")
    lines.append(f"- **Tokenizer**: {fmt_int(len(tokenizer))} tokens, mask token `{tokenizer.mask_token}`"
                 + (f", from {tok_ref}" if tok_ref and not looks_like_hub_id(tok_ref) else f", from `{tok_ref}`" if tok_ref else "") + ".")
    data = s.data
    if data:
        parts = []
        for key, label in (("train_sentences", "train sentences"), ("train_tokens", "train tokens"),
                           ("valid_sentences", "valid sentences"), ("test_sentences", "test sentences")):
            if _num(getattr(data, key)):
                parts.append(f"{fmt_int(getattr(data, key))} {label}")
        lines.append(f"- **Post-training data**: {public_ref(_locate_spec(data.spec), 'corpus') or '?'}"
                     + (": " + ", ".join(parts) if parts else "") + ".")
    phases = s.phases
    trained = describe_phases(phases)
    if trained:
        lines.append(f"- **What each phase trained**: {trained}.")
    if phases:
        lines += ["", "| phase | steps | trainable parameter groups | learning rate | warmup | schedule | stopped early | valid loss at end |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for phase in phases:
            steps = fmt_int(phase.steps) if _num(phase.steps) else ""
            if _num(phase.planned_steps) and phase.planned_steps != phase.steps:
                steps += f" of {fmt_int(phase.planned_steps)}"
            lines.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
                phase.name or "", steps, ", ".join(phase.trainable_groups),
                _blank_if_none(phase.learning_rate), _blank_if_none(phase.warmup_steps), phase.schedule or "",
                {True: "yes", False: "no"}.get(phase.stopped_early, ""),
                fmt_float(phase.valid_loss) if _num(phase.valid_loss) else ""))
        lines.append("")
    facts = []
    if _num(s.total_steps):
        facts.append(f"{fmt_int(s.total_steps)} optimiser steps")
    if _num(s.tokens_seen):
        facts.append(f"{fmt_int(s.tokens_seen)} tokens seen")
    batch = s.batch
    if batch and _num(batch.global_batch_size):
        facts.append(f"global batch {fmt_int(batch.global_batch_size)} sequences"
                     + (f" of up to {batch.max_seq_length} tokens" if _num(batch.max_seq_length) else "")
                     + (" (packed)" if batch.packing else ""))
    if _num(s.wall_time_s):
        facts.append(f"wall time {fmt_duration(s.wall_time_s)}")
    if _num(s.train_time_s):
        facts.append(f"of which optimiser steps {fmt_duration(s.train_time_s)}")
    if _num(s.tokens_per_s):
        facts.append(f"{s.tokens_per_s:,.1f} tokens/s")
    if facts:
        lines.append("- **Training**: " + ", ".join(facts) + ".")
    hw = s.hardware or {}
    if hw:
        parts = [f"device `{hw['device']}`" if hw.get("device") else None,
                 f"GPU {hw['gpu']}" if hw.get("gpu") else None,
                 f"{hw['num_processes']} process(es)" if _num(hw.get("num_processes")) else None,
                 f"mixed precision `{hw['mixed_precision']}`" if hw.get("mixed_precision") else None,
                 f"torch {hw['torch']}" if hw.get("torch") else None,
                 f"transformers {hw['transformers']}" if hw.get("transformers") else None]
        lines.append("- **Hardware and software**: " + ", ".join(p for p in parts if p) + ".")
    own = info.own_results
    if own:
        task = describe_task(own.get("task"))
        lines.append(f"- **Fine-tuning**: task `{own.get('task')}`" + (f" ({task[0]})" if task else "")
                     + f", metric `{own.get('metric')}`"
                     + (f", seeds {own['seeds']}" if own.get("seeds") else "")
                     + (f", from `{public_ref(own['model'], 'model')}`" if own.get("model") else "") + ".")
        saved = own.get("saved_model") or {}
        if saved:
            how = {"full": "every weight fine-tuned"}.get(saved.get("kind"), f"`{saved.get('kind')}`")
            if str(saved.get("kind", "")).endswith("-merged"):
                how = f"{saved['kind'].split('-')[0].upper()} adapters trained, then merged into the weights"
            lines.append(f"- **This checkpoint**: seed {saved.get('seed')}, the seed with the best dev "
                         f"{own.get('metric')}, at its best dev epoch ({saved.get('best_epoch')}); {how}.")
        hp, sizes = own.get("hyperparameters") or {}, own.get("num_examples") or {}
        parts = [f"{hp['epochs']} epochs at most" if _num(hp.get("epochs")) else None,
                 f"batch {hp['batch_size']}" if _num(hp.get("batch_size")) else None,
                 f"learning rate {hp['learning_rate']:g}" if _num(hp.get("learning_rate")) else None,
                 f"at most {hp['max_length']} tokens per example" if _num(hp.get("max_length")) else None,
                 ", ".join(f"{fmt_int(n)} {split} examples" for split, n in sizes.items() if _num(n)) or None]
        if any(parts):
            lines.append("- **Fine-tuning settings**: " + ", ".join(p for p in parts if p) + ".")
        post = own.get("post_training") or {}
        if post:
            lines.append("- **Post-training of the encoder**: "
                         + ", ".join(f"{k} `{public_ref(v) if isinstance(v, str) else v}`" for k, v in post.items()
                                     if v is not None) + ".")
    if info.record:
        lines.append("")
        lines.append("The full record is in [`training_summary.json`](training_summary.json) (configuration included).")
    lines.append("")
    return lines


def _results_section(info: FolderInfo) -> list[str]:
    s = info.record or RunRecord()
    lines = []
    final, valid = s.final_metrics, s.valid_metrics
    split = s.final_metrics_split or "test"
    rows = [(name, final.get(key), valid.get(key)) for key, _, name in INTRINSIC_METRICS
            if _num(final.get(key)) or _num(valid.get(key))]
    own = info.own_results if info.is_fine_tuned else None
    if own and own.get("runs"):
        lines += ["## Results", ""] + _seed_table(own)
    if rows:
        lines += ([] if lines else ["## Results", ""]) + [
                  "### Intrinsic (masked tokens of held-out Korean text)"
                  + (", of the encoder before fine-tuning" if info.is_fine_tuned else ""), "",
                  f"Measured at the end of post-training on 15% masked tokens of the {split} split"
                  + (" (the valid split column is shown too)." if valid and split != "valid" else "."), ""]
        header = f"| metric | {split} |" + (" valid |" if valid and split != "valid" else "")
        lines += [header, "| --- | --- |" + (" --- |" if valid and split != "valid" else "")]
        for name, f_value, v_value in rows:
            digits = 2 if name.startswith(("Perplexity", "Mean rank")) else 4
            cell = fmt_float(f_value, digits) if _num(f_value) else ""
            row = f"| {name} | {cell} |"
            if valid and split != "valid":
                row += f" {fmt_float(v_value, digits) if _num(v_value) else ''} |"
            lines.append(row)
        lines.append("")
    downstream = [r for r in info.results if _num(r.get("mean")) and not (own and r is own and own.get("runs"))]
    if downstream:
        if not lines:
            lines += ["## Results", ""]
        lines += ["### Downstream (fine-tuning, several seeds)", "",
                  "| task | metric | split | mean | std | seeds | scores |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in downstream:
            task = describe_task(r.get("task"))
            scores = r.get("scores") or []
            lines.append("| {} | {} | {} | {} | {} | {} | {} |".format(
                task[0] if task else r.get("task"), r.get("metric", ""), r.get("split", ""), fmt_float(r["mean"], 2),
                fmt_float(r["std"], 2) if _num(r.get("std")) else "", len(scores),
                ", ".join(fmt_float(x, 2) for x in scores if _num(x))))
        lines.append("")
    return lines


def _seed_table(own: dict) -> list[str]:
    """Every seed's dev and test score of a fine-tuning run (its best dev epoch), this checkpoint's marked."""
    import statistics

    task = describe_task(own.get("task"))
    saved = (own.get("saved_model") or {}).get("seed")
    runs = own["runs"]
    has_test = any(_num(r.get("test")) for r in runs)
    lines = [f"### Fine-tuning on {task[0] if task else own.get('task')}", "",
             f"`{own.get('metric')}` of each seed at its best dev epoch (the epoch is chosen on dev; "
             + ("the test split is only scored)." if has_test else "the task has no test split here).")
             + (f" This checkpoint is seed {saved}." if saved is not None else ""), "",
             "| seed | best epoch | dev |" + (" test |" if has_test else ""),
             "| --- | --- | --- |" + (" --- |" if has_test else "")]
    for run in runs:
        seed = f"**{run.get('seed')} (this model)**" if run.get("seed") == saved else str(run.get("seed"))
        row = f"| {seed} | {run.get('best_epoch', '')} | {fmt_float(run['dev'], 2) if _num(run.get('dev')) else ''} |"
        if has_test:
            row += f" {fmt_float(run['test'], 2) if _num(run.get('test')) else ''} |"
        lines.append(row)

    def mean_sd(values):
        values = [v for v in values if _num(v)]
        if not values:
            return ""
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{fmt_float(statistics.fmean(values), 2)} ± {fmt_float(sd, 2)}"

    row = f"| mean ± sd ({len(runs)} seeds) | | {mean_sd([r.get('dev') for r in runs])} |"
    if has_test:
        row += f" {mean_sd([r.get('test') for r in runs])} |"
    return lines + [row, ""]


def _usage_section(info: FolderInfo, repo_ref: str, widgets: list[dict], variant: str,
                   revision: str | None = None) -> list[str]:
    rev = f", revision={revision!r}" if revision else ""
    trust = rev + (", trust_remote_code=True" if variant == "custom" else "")
    example = widgets[0]["text"] if widgets else "대한민국의 수도는 서울이다."
    auto = info.auto_class or "AutoModel"
    lines = ["## How to use", ""]
    if variant == "custom":
        lines += ["The model code (`configuration_xpt.py`, `modeling_xpt.py`) is stored in this repository, so "
                  "loading it needs `trust_remote_code=True` (read the two files first if you do not trust this "
                  "repository). Only `torch` and `transformers` are required. The tokenizer itself runs no custom "
                  "code, but transformers 5's `AutoTokenizer` reads `config.json` first and so asks about the custom "
                  f'code as well; `PreTrainedTokenizerFast.from_pretrained("{repo_ref}"{rev})` loads the same tokenizer '
                  "without asking.", ""]
    spec = ((info.own_results or {}).get("task_spec") or {}) if info.is_fine_tuned else {}
    call = repr(example)
    if len(spec.get("text_columns") or []) == 2:  # a sentence-pair task: the pipeline takes both texts
        second = widgets[1]["text"] if len(widgets) > 1 else PAIR_EXAMPLE[1]
        call = repr({"text": example if widgets else PAIR_EXAMPLE[0], "text_pair": second})
    lines += ["```python", "from transformers import AutoTokenizer, " + auto + ", pipeline", "",
              f'tokenizer = AutoTokenizer.from_pretrained("{repo_ref}"{trust})',
              f'model = {auto}.from_pretrained("{repo_ref}"{trust})', "",
              f'pipe = pipeline("{info.pipeline_tag}", model="{repo_ref}"{trust})',
              f"print(pipe({call}))", "```", ""]
    if spec.get("task_type") == "regression":
        lines += [f"The output `score` is the predicted `{spec.get('label_column', 'score')}` itself (a regression "
                  "head: no softmax or sigmoid is applied).", ""]
    elif spec.get("task_type") == "pair":
        lines += ["Pass the two sentences as `text` and `text_pair`, as above: the model was trained on pairs.", ""]
    if info.pipeline_tag == "fill-mask":
        lines += [f"The mask token of this tokenizer is `{info.mask_token}`; put it where a word is missing.", ""]
    if revision:
        lines += [f"`revision={revision!r}` pins the files this card was published with; drop it to follow the "
                  "repository's latest version.", ""]
    lines += [f"Tested with transformers {TESTED_TRANSFORMERS} (and torch >= 2.4). The tokenizer files name "
              "`PreTrainedTokenizerFast`, so transformers 4.x loads them too; folders written this way (remote-code "
              "model and stock export) also loaded on transformers 4.57.6 with the same logits in a separate check.", ""]
    return lines


def _stock_section(info: FolderInfo, variant: str, stock_repo_id: str | None, custom_ref: str | None) -> list[str]:
    lines = ["## Custom code and the stock export", ""]
    if variant == "custom" and info.is_fine_tuned:
        lines += ["The Hub's hosted inference does not run custom code, and the stock export "
                  "(`python -m modeling_xpt.export_stock`) is for the masked-LM encoder only: run this model with "
                  "`trust_remote_code=True` as above.", ""]
        return lines
    if variant == "custom":
        lines.append("The Hub's hosted inference does not run custom code. An XPT model without adapters is exactly a "
                     "stock `BertForMaskedLM`/`RobertaForMaskedLM` with two more layers (ITL_in first, ITL_out last), "
                     "and `python -m modeling_xpt.export_stock DIR OUT` writes that copy (checked to give the same logits).")
        if stock_repo_id:
            lines.append(f"It is published as [`{stock_repo_id}`](https://huggingface.co/{stock_repo_id}): use it "
                         "where custom code cannot run (hosted widgets, Inference Endpoints, TEI, ONNX export).")
        if info.config.get("adapter_size"):
            lines.append("This checkpoint has bottleneck adapters, so it has **no** stock equivalent.")
    else:
        lines.append("This repository holds the **stock export** of an XPT checkpoint"
                     + (f" ([`{custom_ref}`](https://huggingface.co/{custom_ref}))" if custom_ref and looks_like_hub_id(custom_ref.split('@')[0]) else
                        (f" (`{custom_ref}`)" if custom_ref else "")) +
                     ": the same weights as a plain `" + (info.architecture or "BertForMaskedLM") + "` (the implicit "
                     "translation layers become the first and last encoder layers), so it loads without "
                     "`trust_remote_code` and works with hosted inference. Its logits equal the XPT model's; use the "
                     "XPT repository to fine-tune with the XPT parameter groups (phases, frozen reused layers).")
    lines.append("")
    return lines


def _limitations_section(info: FolderInfo, known_data) -> list[str]:
    lines = ["## Limitations and biases", ""]
    data = info.record.data if info.record else None
    if data and _num(data.train_sentences):
        lines.append(f"- Post-trained on {fmt_int(data.train_sentences)} Korean sentences; the XPT paper uses up to "
                     "4M Korean Wikipedia sentences, and quality grows with data. Check the intrinsic and downstream "
                     "results above before relying on it.")
    if known_data:
        lines.append("- The Korean it knows reflects the post-training data: " +
                     "; ".join(f"{desc}" for _, desc, _ in known_data) + ". Text from other domains (legal, "
                     "medical, technical) is less well modelled, and social biases and offensive language in that "
                     "text can be reproduced by the model.")
    else:
        lines.append("- The Korean it knows reflects its post-training data (see above); domains absent from that "
                     "data are modelled less well, and biases in it can be reproduced by the model.")
    if info.method != "scratch":
        lines.append("- The reused layers come from an English model: its own biases can carry over.")
    if not info.is_fine_tuned:
        lines.append("- An encoder: it fills masks and produces representations; it does not generate text. Fine-tune "
                     "it for a downstream task.")
    else:
        lines.append("- Fine-tuned on a single task; its predictions outside that task's domain and label set are not meaningful.")
    lines.append("")
    return lines


def _licence_section(license: str | None, known_data, info: FolderInfo) -> list[str]:
    lines = ["## Licence", "", f"Model weights and code: `{license}`." if license else
             "Model weights and code: **not stated** (the English source's licence is not recorded and none was "
             "given): ask the author before reusing them."]
    if known_data:
        lines += ["", "Post-training data:", "", "| source | content | licence |", "| --- | --- | --- |"]
        lines += [f"| {name} | {desc} | {lic} |" for name, desc, lic in known_data]
    else:
        spec = info.data_spec
        if spec:
            lines += ["", f"Post-training data ({public_ref(_locate_spec(spec), 'corpus')}): licence not recorded here; "
                      "check it at the source before reuse."]
    for result in info.results:
        task = describe_task(result.get("task"))
        if task:
            lines.append(f"\nFine-tuning/evaluation data {task[0]}: {task[1]}.")
    lines.append("")
    return lines


def build_card(model_dir: str | Path, *, repo_id: str | None = None, license: str | None = None,
               base_model: str | None = None, datasets: list[str] = (), results: list[str | Path] = (),
               stock_repo_id: str | None = None, custom_repo_id: str | None = None, variant: str | None = None,
               revision: str | None = None, require_license: bool = False, language: str | None = None,
               widgets: list[str] | None = None):
    """The ModelCard of a folder (not written). `variant`: "custom" (XPT code) or "stock" (plain
    BERT/RoBERTa export); detected from config.json when None. `license`: the weights' licence;
    without it the English source's known licence, else (`require_license`) LicenseUnknown, or a
    card that says the licence is not stated. A stock export names its XPT repo
    (`custom_repo_id`) as `base_model`. `revision` (with `repo_id`) is pinned in the usage code."""
    from huggingface_hub import ModelCard

    info = inspect_folder(model_dir, results)
    tokenizer = load_tokenizer(info.path)
    variant = variant or ("stock" if info.is_stock else "custom")
    if variant == "stock" and custom_repo_id and not base_model:
        base_model = custom_repo_id.split("@")[0]
    license = resolve_license(info, license, required=require_license, base_model=base_model)
    language = resolve_language(info, language)
    model_name = (repo_id or info.path.resolve().name).split("/")[-1]
    data = build_metadata(info, tokenizer, model_name=model_name, license=license, base_model=base_model,
                          datasets=list(datasets), variant=variant, language=language, widget_texts=widgets)
    widgets = data.to_dict().get("widget") or []
    repo_ref = repo_id or str(info.path)
    known_data = describe_data(_locate_spec(info.data_spec))[1]

    kind = {"fill-mask": "a Korean masked-language-model encoder",
            "text-classification": "a Korean text classifier"}.get(info.pipeline_tag, f"a Korean {info.pipeline_tag} model")
    source = info.source
    made = (f"{kind[0].upper() + kind[1:]} made from an English encoder by **cross-lingual post-training (XPT)**"
            + (f" (English source: `{public_ref(source, 'model')}`)" if source else "") + ".")
    own = info.own_results if info.is_fine_tuned else None
    if own:
        task = describe_task(own.get("task"))
        spec = own.get("task_spec") or {}
        kind = {"regression": "a Korean sentence-pair scoring model" if len(spec.get("text_columns") or []) == 2
                else "a Korean text scoring model", "pair": "a Korean sentence-pair classifier"}.get(
            spec.get("task_type"), kind)
        base = resolve_base_model(info, base_model)
        made = (f"{kind[0].upper() + kind[1:]}, fine-tuned on {task[0] if task else '`' + str(own.get('task')) + '`'}"
                + (f" from [`{base}`](https://huggingface.co/{base})" if base else " from a post-trained XPT model "
                   f"(`{public_ref(own.get('model'), 'model')}`)")
                + ": a Korean encoder made from an English encoder by **cross-lingual post-training (XPT)**"
                + (f" (English source: `{public_ref(source, 'model')}`)" if source else "") + ".")
    if info.is_untrained:
        made = ("**An untrained XPT conversion**" + (f" of `{public_ref(source, 'model')}`" if source else "")
                + ": the English encoder's layers with new Korean embeddings and implicit translation layers that "
                "have not been trained (the folder has no `training_summary.json`). Its predictions mean nothing "
                "yet; post-train it (`training/post_train.py`) before use.")
    lines = [GENERATED_MARKER, "", f"# {model_name}", "",
             made + (" This repository is the stock (no custom code) export." if variant == "stock" else ""), "",
             "## What XPT is", "",
             "XPT (Lee et al., 2021) reuses the Transformer layers of a pretrained English encoder for another "
             "language. The English word embeddings are dropped and new Korean embeddings are learned (the output "
             "layer of the masked-LM head is tied to them); the encoder layers, position embeddings, embedding "
             "LayerNorm and, where the source has one, the MLM head transform are kept. Two *Implicit Translation Layers* with the architecture of "
             "an encoder layer are added, one between the embeddings and the first reused layer and one after the "
             "last. Post-training uses masked language modelling in two phases: first the new parts are trained "
             "while the reused layers stay frozen, then everything is trained. The paper reports that this reaches "
             "or beats Korean models trained from scratch on much more text.", ""]
    lines += _made_section(info, tokenizer)
    lines += _usage_section(info, repo_ref, widgets, variant, revision if repo_id else None)
    lines += _results_section(info)
    lines += _stock_section(info, variant, stock_repo_id, custom_repo_id)
    lines += _limitations_section(info, known_data)
    lines += _licence_section(license, known_data, info)
    lines += ["## Citation", "", "Lee, C., Yang, K., Whang, T., Park, C., Matteson, A., & Lim, H. (2021). Exploring the "
              "Data Efficiency of Cross-Lingual Post-Training in Pretrained Language Models. *Applied Sciences*, "
              "11(5), 1975.", "", "```bibtex", CITATION, "```", ""]
    return ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n{{ body }}\n",
                                   body=localise("\n".join(lines), language))


def write_card(model_dir: str | Path, overwrite: bool = False, **kwargs) -> Path:
    """Write README.md; a card somebody edited (no GENERATED_MARKER line) is replaced only with `overwrite`."""
    out = Path(model_dir) / CARD_FILE
    if out.is_file() and GENERATED_MARKER not in out.read_text(encoding="utf-8") and not overwrite:
        raise ValueError(f"{out} was written or edited by hand (no generated-card marker); pass --overwrite "
                         "to replace it, or move it away")
    card = build_card(model_dir, **kwargs)
    card.save(out)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cards.make_card", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, help="saved XPT (or stock export) folder")
    parser.add_argument("--repo-id", help="Hub repo the card is for (used in the usage code; default: folder path)")
    parser.add_argument("--license", help="licence id of the weights (default: the English source's licence when "
                        "known; otherwise required)")
    parser.add_argument("--base-model", help="Hub id of the English source when config.json records a local path")
    parser.add_argument("--dataset", action="append", default=[], help="extra Hub dataset id for `datasets` (repeatable)")
    parser.add_argument("--results", action="append", default=[], help="extra fine-tuning results.json (repeatable)")
    parser.add_argument("--stock-repo-id", help="where the stock export is published (mentioned in the card)")
    parser.add_argument("--custom-repo-id", help="for a stock export: the XPT repo it was exported from")
    parser.add_argument("--revision", help="branch of --repo-id the folder goes to (used in the usage code)")
    parser.add_argument("--language", help="ISO 639 code of the target language (default: the one recorded in the "
                        "post-training corpus's stats.json, else ko)")
    parser.add_argument("--widget", action="append", default=[], help="widget example text (repeatable; default: "
                        "hand-written Korean sentences, or held-out sentences of the corpus for another language)")
    parser.add_argument("--overwrite", action="store_true", help="replace a README.md written or edited by hand")
    args = parser.parse_args(argv)
    try:
        out = write_card(args.model_dir, repo_id=args.repo_id, license=args.license, base_model=args.base_model,
                         datasets=args.dataset, results=args.results, stock_repo_id=args.stock_repo_id,
                         custom_repo_id=args.custom_repo_id, revision=args.revision, require_license=True,
                         language=args.language, widgets=args.widget or None, overwrite=args.overwrite)
    except (FileNotFoundError, ValueError, OSError) as error:
        return report_error(error)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
