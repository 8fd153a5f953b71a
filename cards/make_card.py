"""Write the model card (README.md) of a saved XPT folder, from the folder's own files.

    python -m cards.make_card --model-dir runs/xpt-ko-4m [--repo-id org/xpt-ko-4m] [--results ft/results.json]

Metadata (YAML) the Hub understands: language, license, library_name, pipeline_tag, tags,
base_model, datasets, widget (Korean examples with this tokenizer's mask token) and model-index
(from training_summary.json and results.json). Body: what XPT is, how this checkpoint was made,
usage with `trust_remote_code=True`, results, the stock export, limitations, data licence, citation.
The body is the Jinja template `cards/model_card.md`, rendered by huggingface_hub's
`ModelCard.from_template` with the values of `cards/card_facts.py`.

Every number comes from the folder (config.json, training_summary.json, results.json, the
safetensors headers, the tokenizer); anything missing is left out, never filled in.

The language is `--language`, else the one the corpus preparation recorded (stats.json), else
config.json's `language` (recorded when the model was made, inherited by fine-tuned models), else
Korean; widget examples are `--widget` texts, else hand-written Korean sentences for Korean and
held-out corpus sentences for any other language. The licence is `--license`, else the English
source's known licence (`cards/licenses.py`: SOURCE_LICENSES, or a local source folder's own card);
otherwise the CLI asks for it. Local paths never appear: sources, tokenizers and data are named by
Hub id or described ("local corpus (3 files)").

The options are recorded in `card_options.json` beside the card (`cards.card_options`; never
uploaded), so that `xpt-push` writes the card again with them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenization.errors import UserError, report_error
from training.inputs import looks_like_hub_id
from training.run_record import GENERATED_CARD_MARKER, hand_written_card

from .card_facts import (
    DOWNSTREAM_DIGITS,
    INTRINSIC_METRICS,
    METRIC_DIGITS,
    counted,
    fmt_int,
    is_number,
    layout_facts,
    licence_facts,
    made_facts,
    results_facts,
    task_facts,
    usage_facts,
)
from .card_options import save_card_options
from .data_sources import describe_data, describe_task, hub_split, locate_spec, task_hub
from .folder import CARD_FILE, FolderInfo, check_not_stock, hub_source_id, inspect_folder, load_tokenizer
from .language import DEFAULT_LANGUAGE, language_name, resolve_language
from .licenses import UNSPECIFIED_LICENSE, resolve_license
from .public import public_ref
from .widgets import pair_example, widgets_for

TEMPLATE = Path(__file__).resolve().parent / "model_card.md"


# ----------------------------------------------------------------------------------------------
# Metadata
# ----------------------------------------------------------------------------------------------


def check_base_model(base_model: str | None) -> None:
    """`--base-model` must be a Hub id: the card's `base_model` links to it (a local folder is described instead)."""
    if base_model and not looks_like_hub_id(base_model):
        raise UserError(f"--base-model {base_model!r} is not a Hub model id: give the model's id on the Hub "
                        "(ORG/NAME), or leave --base-model out and the card describes the local model")


def resolve_base_model(info: FolderInfo, override: str | None = None) -> str | None:
    """Hub id of the model this one was made from, or None (never a local path)."""
    if override:
        check_base_model(override)
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


def score_dataset(result: dict, split: str) -> dict:
    """The model-index dataset of a fine-tuning score on `split`: the Hub dataset and its split where the score
    is on that split as published (`data_sources.hub_split`), else a description of the data, with no split."""
    task_name = str(result.get("task"))
    task = describe_task(task_name)
    hub = hub_split(result, split)
    if hub:
        return {"dataset_type": hub[0], "dataset_config": hub[1], "dataset_split": hub[2],
                "dataset_name": task[0] if task else task_name}
    settings = result.get("hyperparameters") or {}
    held_test, held_dev = settings.get("hold_out_test"), settings.get("hold_out_dev")
    if held_dev and split == "dev":
        kind, what = "held-out-dev", f"train, {counted(fmt_int(held_dev), 'example')} held out as dev"
    elif held_dev and split == "test":
        kind, what = "dev-as-test", "dev split, scored as the test split"
    elif held_test and split == "test":
        kind, what = "held-out-test", f"train, {counted(fmt_int(held_test), 'example')} held out as test"
    else:
        kind, what = split, f"{split} split"
    count, limit = (result.get("num_examples") or {}).get(split), settings.get("max_eval_samples")
    if limit is not None and split != "train" and is_number(count) and count >= limit:
        kind, what = f"{kind}-sample", f"{what}, a sample of {fmt_int(count)}"
    return {"dataset_type": f"{task_name}-{kind}", "dataset_name": f"{task_name} {what}"}


def eval_results(info: FolderInfo, data_name: str):
    """The model-index entries: the intrinsic metrics of post-training (not for a fine-tuned model,
    which does not fill masks) on the post-training corpus's own held-out split (not a split of the Hub
    dataset it came from) and, per results.json, the mean over seeds and this checkpoint's own scores."""
    from huggingface_hub import EvalResult

    results = []
    metrics = info.record.final_metrics if info.record else {}
    split = (info.record.final_metrics_split if info.record else None) or "test"
    for key, metric_type, name in INTRINSIC_METRICS:
        if is_number(metrics.get(key)) and not info.is_fine_tuned:  # a fine-tuned model is not scored on masks
            results.append(EvalResult(
                task_type="fill-mask", task_name="Masked language modelling (held-out text)",
                dataset_type="held-out-text", dataset_name=f"{data_name}, {split} split",
                metric_type=metric_type, metric_name=name,
                metric_value=round(float(metrics[key]), METRIC_DIGITS.get(key, 4))))
    # the bi-encoder's score is the cosine of two sentence vectors
    encoder = info.pipeline_tag == "feature-extraction"
    for result in info.results:
        task = describe_task(result.get("task"))
        value = result.get("mean")
        if not is_number(value):
            continue
        task_name = str(result.get("task"))
        task_type = "sentence-similarity" if encoder and result is info.own_results else task[2] if task else \
            "text-classification"
        saved = result.get("saved_model") if result is info.own_results else None
        for split in ("test", "dev"):  # this checkpoint's own scores (its seed, its best dev epoch)
            if saved and is_number(saved.get(split)):
                results.append(EvalResult(
                    task_type=task_type, task_name=task[0] if task else task_name, **score_dataset(result, split),
                    metric_type=str(result.get("metric", "score")),
                    metric_name=f"{result.get('metric', 'score')} (this model: seed {saved.get('seed')})",
                    metric_value=round(float(saved[split]), DOWNSTREAM_DIGITS)))
        results.append(EvalResult(
            task_type=task_type, task_name=task[0] if task else task_name,
            **score_dataset(result, str(result.get("split", "test"))), metric_type=str(result.get("metric", "score")),
            metric_name=f"{result.get('metric', 'score')} (mean of {counted(len(result.get('scores') or []), 'seed')})",
            metric_value=round(float(value), DOWNSTREAM_DIGITS)))
    return results


def build_metadata(info: FolderInfo, tokenizer, *, model_name: str, license: str | None = None,
                   base_model: str | None = None, datasets: list[str] = (), variant: str = "custom",
                   language: str = DEFAULT_LANGUAGE, widget_texts: list[str] | None = None):
    """The card's YAML metadata (`huggingface_hub.ModelCardData`). Without `license` the card says
    `license: other` with `license_name: unspecified`."""
    from huggingface_hub import ModelCardData

    spec = info.data_spec
    hub_datasets, _ = describe_data(locate_spec(spec))
    task_dataset = task_hub(info.own_results or {}) if info.is_fine_tuned else None
    all_datasets = list(dict.fromkeys([*hub_datasets, *([task_dataset[0][0]] if task_dataset else []), *datasets]))
    family = info.config.get("source_architecture") or info.config.get("source_model_type") or info.config.get("model_type")
    tags = ["xpt", "cross-lingual-post-training", language_name(language).lower(), "encoder", info.pipeline_tag]
    if family in ("bert", "roberta", "xlm-roberta", "electra"):
        tags.append(family)
    tags.append("custom_code" if variant == "custom" else "stock-export")
    data_ref = public_ref(locate_spec(spec), "corpus") if spec else None
    held_out = f"{language_name(language)} held-out text"
    results = eval_results(info, data_name=f"{held_out} ({data_ref})" if data_ref else held_out)
    return ModelCardData(
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


# ----------------------------------------------------------------------------------------------
# Card
# ----------------------------------------------------------------------------------------------


def build_card_from(info: FolderInfo, tokenizer, *, repo_id: str | None = None, license: str | None = None,
                    base_model: str | None = None, datasets: list[str] = (), stock_repo_id: str | None = None,
                    custom_repo_id: str | None = None, variant: str | None = None, revision: str | None = None,
                    require_license: bool = False, language: str | None = None, widgets: list[str] | None = None,
                    xpt_config: dict | None = None):
    """The ModelCard of an inspected folder (`inspect_folder`) with its tokenizer; the options are
    those of :func:`build_card`."""
    from huggingface_hub import ModelCard

    check_not_stock(info, "xpt-card")
    check_base_model(base_model)
    variant = variant or ("stock" if info.is_stock else "custom")
    # the option names the English source of a post-trained folder; of a fine-tuned one, the model it was
    # fine-tuned from (its English source is that model's); a stock export's base_model may be its XPT repo
    english_source = None if info.is_fine_tuned else base_model
    custom_repo = custom_repo_id.split("@")[0] if custom_repo_id else None
    if variant == "stock" and custom_repo and not base_model and custom_repo != repo_id and looks_like_hub_id(custom_repo):
        base_model = custom_repo  # not when both live in one repo: a model is not its own base
    license = resolve_license(info, license, required=require_license, base_model=base_model)
    language = resolve_language(info, language)
    lang = language_name(language)
    model_name = (repo_id or info.path.resolve().name).split("/")[-1]
    data = build_metadata(info, tokenizer, model_name=model_name, license=license, base_model=base_model,
                          datasets=list(datasets), variant=variant, language=language, widget_texts=widgets)
    widget_list = data.to_dict().get("widget") or []
    known_data = describe_data(locate_spec(info.data_spec), lang)[1]
    return ModelCard.from_template(
        data, template_path=str(TEMPLATE),
        marker=GENERATED_CARD_MARKER, model_name=model_name, lang=lang, variant=variant, pipeline_tag=info.pipeline_tag,
        counted=counted,
        untrained=info.is_untrained, fine_tuned=info.is_fine_tuned,
        fine_tuned_from=resolve_base_model(info, base_model) if info.is_fine_tuned else None,
        **task_facts(info),
        made=made_facts(info, tokenizer, lang, english_source=english_source),
        usage=usage_facts(info, repo_id or str(info.path), widget_list, revision if repo_id else None,
                          pair=pair_example(info, language, widgets)),
        layout=layout_facts(info, xpt_config),
        results=results_facts(info),
        stock_repo_id=stock_repo_id, has_adapters=bool(info.config.get("adapter_size")),
        custom_ref=custom_repo_id,
        custom_ref_is_hub=bool(custom_repo_id) and looks_like_hub_id(custom_repo_id.split("@")[0]),
        stock_architecture=info.architecture or "BertForMaskedLM",
        weights_license=license, licence=licence_facts(info, known_data),
    )


def build_card(model_dir: str | Path, *, results: list[str | Path] = (), **options):
    """The ModelCard of a folder (not written), with `results` (extra results.json files) next to its own.

    Options: `repo_id` (the Hub repo the card is for; the usage code loads from it, else from the
    folder's path), `revision` (with `repo_id`: pinned in the usage code), `variant` ("custom": XPT
    code, or "stock": the plain BERT/RoBERTa export; detected from config.json when None), `license`
    (the weights' licence; without it the English source's known licence, else LicenseUnknown with
    `require_license`, or a card that says the licence is not stated), `base_model`, `datasets`
    (extra Hub dataset ids), `stock_repo_id` (where the stock export is published), `custom_repo_id`
    (for a stock export: its XPT repo, also its `base_model`), `language` (ISO 639 code), `widgets`
    (widget example texts; the first two are a sentence-pair model's example) and `xpt_config` (for a
    stock export: the config.json of the XPT model it was exported from, for its layers)."""
    info = inspect_folder(model_dir, results)
    return build_card_from(info, load_tokenizer(info.path), **options)


def write_card(model_dir: str | Path, overwrite: bool = False, remember: bool = True, **kwargs) -> Path:
    """Write README.md; a card somebody edited (no GENERATED_CARD_MARKER line) is replaced only with `overwrite`.
    With `remember`, the card's options go to card_options.json beside it (never uploaded), which
    `cards.push` writes the card again with."""
    out = Path(model_dir) / CARD_FILE
    if hand_written_card(model_dir) and not overwrite:
        raise ValueError(f"{out} was written or edited by hand (no generated-card marker); pass --overwrite "
                         "to replace it, or move it away")
    card = build_card(model_dir, **kwargs)
    card.save(out)
    if remember:
        save_card_options(model_dir, kwargs)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xpt-card", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, help="saved XPT (or stock export) folder")
    parser.add_argument("--repo-id", help="Hub repo the card is for (used in the usage code; default: folder path)")
    parser.add_argument("--license", help="licence id of the weights (default: the English source's licence when "
                        "known; otherwise required)")
    parser.add_argument("--base-model", help="Hub id of the English source when config.json records a local path; for "
                        "a fine-tuned folder, of the model it was fine-tuned from")
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
