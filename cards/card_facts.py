"""What the body of a model card states about a saved folder, as the values that
`model_card.md` renders: numbers formatted here (one way only, for the card and the tests
alike), lists of table rows, flags; a fact the folder does not record is None and the template leaves
its sentence out. The words themselves are in the template.
"""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from training.inputs import looks_like_hub_id
from training.linear_reads import COSINE_READING, floor_bar
from training.methods import METHODS
from training.run_record import RunRecord

from .data_sources import describe_task, locate_spec
from .folder import FolderInfo, hub_source_id, safetensors_parameter_count
from .public import public_ref
from .widgets import PAIR_EXAMPLE, USAGE_EXAMPLE, is_sentence_pair, task_spec

# Metrics of training_summary.json: (key, model-index type, display name), in the card's order.
INTRINSIC_METRICS = [
    ("perplexity", "perplexity", "Perplexity (masked tokens)"),
    ("loss", "loss", "MLM loss"),
    ("hits@1", "hits@1", "Hits@1"),
    ("hits@3", "hits@3", "Hits@3"),
    ("hits@5", "hits@5", "Hits@5"),
    ("hits@10", "hits@10", "Hits@10"),
    ("mrr", "mrr", "MRR"),
    ("mean_rank", "mean_rank", "Mean rank"),
]
# Decimals a metric is reported with (card table and model-index alike); other intrinsic metrics get 4.
METRIC_DIGITS = {"perplexity": 2, "mean_rank": 2}
DOWNSTREAM_DIGITS = 2
TESTED_TRANSFORMERS = ">=5.17"  # the range this package is tested on (pyproject.toml)
COMMIT_ID = re.compile(r"[0-9a-f]{40}")  # a Hub commit id (a revision that pins the files; a branch does not)
# source family -> the stock masked-LM class its XPT model exports to (modeling_xpt.to_stock)
STOCK_CLASSES = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM",
                 "electra": "ElectraForMaskedLM"}


def fmt_int(value) -> str:
    """An integer with thousands separators: 1,234,567."""
    return f"{int(value):,}"


def counted(count, singular: str, plural: str | None = None) -> str:
    """A count with its noun in the right number: "1 epoch", "3 epochs", "1,234 steps". `count` is a number or
    a number already written out ("1,234"); `plural` is for nouns that do not just add an s ("processes")."""
    one = str(count).replace(",", "").strip() in ("1", "1.0")
    return f"{count} {singular if one else plural or singular + 's'}"


def fmt_float(value, digits: int = 4) -> str:
    """A number with a fixed number of decimals."""
    return f"{float(value):.{digits}f}"


def fmt_duration(seconds) -> str:
    """Seconds, with hours and minutes (or minutes) added from two minutes on."""
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds / 60 < 59.95:
        return f"{seconds:.0f} s ({seconds / 60:.1f} min)"
    hours, minutes = divmod(round(seconds / 60), 60)  # whole minutes first: 7,199 s is 2 h 0 min, not 1 h 60 min
    return f"{seconds:.0f} s ({hours} h {minutes} min)"


def is_number(value) -> bool:
    """A finite int or float (not a bool): a value the card may report (a diverged NaN is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _formatted(value, fmt=str) -> str | None:
    return fmt(value) if is_number(value) else None


def _text(value) -> str:
    return "" if value is None else str(value)


def _phases(record: RunRecord) -> tuple[list[dict], list[dict]]:
    """(what each phase trained, the rows of the phase table). The first is empty without
    ``trainable_groups`` in the record: the card then makes no claim. A phase that trained every
    group that any phase trained, the reused encoder included, trained "everything"."""
    named = [p for p in record.phases if p.trainable_groups]
    every = {g for p in named for g in p.trainable_groups}
    trained = [{"name": phase.name, "groups": list(phase.trainable_groups),
                "everything": set(phase.trainable_groups) == every and "reused_encoder" in every,
                "frozen": "reused_encoder" not in phase.trainable_groups} for phase in named]
    rows = [{"name": phase.name or "", "steps": _formatted(phase.steps, fmt_int) or "",
             "planned": fmt_int(phase.planned_steps) if is_number(phase.planned_steps)
             and phase.planned_steps != phase.steps else None,
             "groups": list(phase.trainable_groups), "learning_rate": _text(phase.learning_rate),
             "warmup": _text(phase.warmup_steps), "schedule": phase.schedule or "",
             "stopped_early": phase.stopped_early, "valid_loss": _formatted(phase.valid_loss, fmt_float) or ""}
            for phase in record.phases]
    return trained, rows


def _architecture(info: FolderInfo) -> dict | None:
    config = info.config
    if config.get("model_type") == "xpt":
        layers = config.get("num_hidden_layers")
        itl = [name for name, key in (("ITL_in", "use_itl_in"), ("ITL_out", "use_itl_out")) if config.get(key)]
        return {"xpt": True, "hidden_size": config.get("hidden_size"), "layers": layers, "itl": itl,
                "all_layers": layers + len(itl) if itl else None, "adapter_size": config.get("adapter_size"),
                "vocab": fmt_int(config.get("vocab_size"))}
    if info.is_stock:
        return {"xpt": False, "name": info.architecture, "layers": config.get("num_hidden_layers"),
                "hidden_size": config.get("hidden_size"), "vocab": fmt_int(config.get("vocab_size"))}
    return None


def _training(record: RunRecord) -> dict:
    batch = record.batch
    return {"steps": _formatted(record.total_steps, fmt_int), "tokens_seen": _formatted(record.tokens_seen, fmt_int),
            "batch": fmt_int(batch.global_batch_size) if batch and is_number(batch.global_batch_size) else None,
            "max_seq_length": _formatted(batch.max_seq_length) if batch else None,
            "packed": bool(batch and batch.packing), "wall_time": _formatted(record.wall_time_s, fmt_duration),
            "step_time": _formatted(record.train_time_s, fmt_duration),
            "tokens_per_s": _formatted(record.tokens_per_s, lambda x: f"{x:,.1f}")}


def _hardware(hw: dict) -> dict | None:
    if not hw:
        return None
    return {"device": hw.get("device"), "gpu": hw.get("gpu"), "cpu": hw.get("cpu"), "cpu_class": hw.get("cpu_class"),
            "processes": _formatted(hw.get("num_processes")),
            "precision": hw.get("mixed_precision"), "torch": hw.get("torch"), "transformers": hw.get("transformers")}


def _fine_tuning(own: dict | None) -> dict | None:
    """The fine-tuning run that made this folder (its own results.json)."""
    if not own:
        return None
    task = describe_task(own.get("task"))
    saved = own.get("saved_model") or {}
    kind = saved.get("kind")
    hp, sizes = own.get("hyperparameters") or {}, own.get("num_examples") or {}
    post = own.get("post_training") or {}
    # "lora-merged": adapters of that kind trained, then merged into the weights
    merged = kind.split("-")[0].upper() if str(kind or "").endswith("-merged") else None
    return {
        "task": own.get("task"), "task_name": task[0] if task else None, "metric": own.get("metric"),
        "seeds": own.get("seeds") or None, "model_ref": public_ref(own["model"], "model") if own.get("model") else None,
        "saved": {"seed": saved.get("seed"), "best_epoch": saved.get("best_epoch"), "kind": kind, "merged": merged}
        if saved else None,
        "epochs": _formatted(hp.get("epochs")), "batch": _formatted(hp.get("batch_size")),
        "learning_rate": _formatted(hp.get("learning_rate"), lambda x: f"{x:g}"),
        "max_length": _formatted(hp.get("max_length")),
        "examples": [(fmt_int(n), split) for split, n in sizes.items() if is_number(n)],
        "post_training": [(key, public_ref(value) if isinstance(value, str) else value)
                          for key, value in post.items() if value is not None] if post else None,
    }


def made_facts(info: FolderInfo, tokenizer, language_name: str, english_source: str | None = None) -> dict:
    """How the checkpoint was made: method, source, architecture, tokenizer, data, phases, training,
    hardware and, for a fine-tuned model, its fine-tuning run. `english_source`: the source's Hub id
    where the folder records a local copy of it (`--base-model`)."""
    config, record = info.config, info.record or RunRecord()
    method, source = info.method, english_source or info.source
    method_card = METHODS[method].card if method in METHODS else None
    if method_card and language_name != "Korean":  # the method table (training/methods.py) speaks of Korean
        method_card = method_card.replace("Korean", language_name)
    hub = (hub_source_id(source) or hub_source_id(config.get("source_name_or_path"))) if source else None
    shown = public_ref(source, "model") if source else None
    tokenizer_ref = public_ref(record.tokenizer, "tokenizer")
    data = record.data
    trained, phase_rows = _phases(record)
    count = safetensors_parameter_count(info.path)
    return {
        "method": method, "method_card": method_card, "source_ref": shown,
        "source_link": hub if hub and hub != shown else None,
        "source_family": (config.get("source_architecture") or config["source_model_type"])
        if config.get("source_model_type") else None,
        "architecture": _architecture(info),
        "fresh_mlm_head": record.source_has_mlm_head is False,
        "parameters": fmt_int(count) if count else None,
        "tokenizer": {"size": fmt_int(len(tokenizer)), "mask": tokenizer.mask_token, "ref": tokenizer_ref,
                      "described": bool(tokenizer_ref) and not looks_like_hub_id(tokenizer_ref)},
        "data": {"ref": public_ref(locate_spec(data.spec), "corpus"),
                 **{key: _formatted(getattr(data, key), fmt_int) for key in
                    ("train_sentences", "train_tokens", "valid_sentences", "test_sentences")}} if data else None,
        "trained_phases": trained, "phases": phase_rows, "training": _training(record),
        "hardware": _hardware(record.hardware or {}), "fine_tuning": _fine_tuning(info.own_results),
        "has_record": info.record is not None,
    }


def _mean_sd(values) -> str:
    values = [v for v in values if is_number(v)]
    if not values:
        return ""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt_float(statistics.fmean(values), 2)} ± {fmt_float(sd, 2)}"


def _seed_table(own: dict) -> dict:
    """Every seed's dev and test score of a fine-tuning run (its best dev epoch), this checkpoint's marked."""
    task = describe_task(own.get("task"))
    saved = (own.get("saved_model") or {}).get("seed")
    runs = own["runs"]

    def cell(value):
        return fmt_float(value, 2) if is_number(value) else ""

    rows = [{"seed": run.get("seed"), "this": run.get("seed") == saved, "best_epoch": run.get("best_epoch", ""),
             "dev": cell(run.get("dev")), "test": cell(run.get("test"))} for run in runs]
    return {"task_name": task[0] if task else own.get("task"), "metric": own.get("metric"), "saved_seed": saved,
            "has_test": any(is_number(r.get("test")) for r in runs), "runs": rows,
            "dev_mean_sd": _mean_sd([r.get("dev") for r in runs]),
            "test_mean_sd": _mean_sd([r.get("test") for r in runs]),
            "floors": _seed_table_floors(own)}


def _seed_table_floors(own: dict) -> list[dict]:
    """The seed table's no-model rows: the floor (`floor_readings`), then the other reading where there is one."""
    if not own.get("floor"):
        return []
    readings = floor_readings(own["floor"], own.get("split", "test"))
    return [{"label": "no-model floor, same splits" + (f" ({name})" if len(readings) > 1 else "") if first
             else f"other no-model reading ({name})",
             **{split: fmt_float(scores[split], 2) if is_number(scores.get(split)) else "" for split in ("dev", "test")}}
            for first, (name, scores) in zip((True, False), readings)]


def results_facts(info: FolderInfo) -> dict:
    """The results tables: a fine-tuned model's seeds, the intrinsic metrics of post-training, and
    the downstream scores of every results.json the card is given."""
    record = info.record or RunRecord()
    final, valid = record.final_metrics, record.valid_metrics
    split = record.final_metrics_split or "test"
    with_valid = bool(valid) and split != "valid"
    own = info.own_results if info.is_fine_tuned else None

    def cell(value, key):
        return fmt_float(value, METRIC_DIGITS.get(key, 4)) if is_number(value) else ""

    rows = [{"name": name, "final": cell(final.get(key), key), "valid": cell(valid.get(key), key)}
            for key, _, name in INTRINSIC_METRICS if is_number(final.get(key)) or is_number(valid.get(key))]
    settings = record.config or {}
    share = settings.get("mlm_probability")  # the run's masking, as post-training evaluated it
    masked = (f"{100 * share:g}% of the tokens masked" + (" as whole words" if settings.get("whole_word_masking") else "")
              if is_number(share) else "masked tokens")
    downstream = []
    for result in info.results:
        if not is_number(result.get("mean")) or (own and result is own and own.get("runs")):
            continue
        task = describe_task(result.get("task"))
        scores = result.get("scores") or []
        downstream.append({"task": task[0] if task else result.get("task"), "metric": result.get("metric", ""),
                           "split": result.get("split", ""), "mean": fmt_float(result["mean"], DOWNSTREAM_DIGITS),
                           "std": fmt_float(result["std"], DOWNSTREAM_DIGITS) if is_number(result.get("std")) else "",
                           "seeds": len(scores),
                           "scores": ", ".join(fmt_float(x, DOWNSTREAM_DIGITS) for x in scores if is_number(x)),
                           **_reads(result)})
    return {"seed_table": _seed_table(own) if own and own.get("runs") else None,
            "intrinsic": {"split": split, "with_valid": with_valid, "rows": rows, "masked": masked} if rows else None,
            "downstream": downstream, "floors": _floor_methods(info.results),
            "floor_cosine": any((result.get("floor") or {}).get("zero_shot") for result in info.results)}


def floor_readings(floor: dict, split: str) -> list[tuple[str, dict]]:
    """The no-model readings of a run (`finetune --floor`) as (name, scores by split), the floor first:
    the trained estimator's, and for sentence similarity the cosine of the TF-IDF vectors without
    training. The floor is the one the study's report holds scores against (`floor_bar`): the stronger
    of the two on the split the run reports (`floor["split"]`, else `split`)."""
    name, _, last = str(floor.get("estimator") or "TF-IDF").rpartition(" ")
    trained = (name if "=" in last else str(floor.get("estimator") or "TF-IDF"), floor)
    cosine = floor.get("zero_shot") or {}
    if not cosine:
        return [trained]
    scored = floor.get("split") or split
    score, cosine_score = floor.get(scored), cosine.get(scored)
    if not is_number(cosine_score):
        return [trained, (COSINE_READING, cosine)]
    if not is_number(score):
        return [(COSINE_READING, cosine), trained]
    bar, _ = floor_bar(floor, scored)
    return [trained, (COSINE_READING, cosine)] if bar == score else [(COSINE_READING, cosine), trained]


def _floor_cell(floor: dict, split: str) -> str:
    """The floor on `split`, with the other no-model reading named beside it where the run has both."""
    shown = [(name, fmt_float(scores[split], DOWNSTREAM_DIGITS)) for name, scores in floor_readings(floor, split)
             if is_number(scores.get(split))]
    if len(shown) < 2:
        return shown[0][1] if shown else ""
    (name, value), (other, other_value) = shown
    return f"{value} ({name}; {other}: {other_value})"


def _reads(result: dict) -> dict:
    """The no-model floor and the mean-pooled probe that `finetune --floor --mode both` scored on the
    run's own splits, on the split its fine-tuned scores are reported on ("" where not run)."""
    split = result.get("split", "test")
    floor, probe = result.get("floor") or {}, (result.get("probe") or {}).get("mean") or {}
    return {"floor": _floor_cell(floor, split) if floor else "",
            "probe": fmt_float(probe[split], DOWNSTREAM_DIGITS) if is_number(probe.get(split)) else ""}


def _floor_methods(results: list[dict]) -> list[str]:
    """How the card's floors were computed: their features, then their estimators without the chosen
    regularisation ("TF-IDF ... with logistic regression or ridge")."""
    estimators: dict[str, list[str]] = {}
    for result in results:
        floor = result.get("floor") or {}
        if floor.get("features") and floor.get("estimator"):
            name, _, last = floor["estimator"].rpartition(" ")
            estimators.setdefault(floor["features"], []).append(name if "=" in last else floor["estimator"])
    return [f"{features} with {' or '.join(dict.fromkeys(names))}" for features, names in estimators.items()]


def usage_facts(info: FolderInfo, repo_ref: str, widgets: list[dict], revision: str | None,
                pair: tuple[str, str] = PAIR_EXAMPLE) -> dict:
    """The usage code: where the model loads from (`repo_ref`, pinned to `revision` when given; `pinned`:
    a commit id, not a branch), which Auto class, the pipeline's input (the first widget example, else a
    hand-written Korean sentence; a sentence-pair task and a sentence encoder get the two texts of `pair`)."""
    spec = task_spec(info)
    call = repr(widgets[0]["text"] if widgets else USAGE_EXAMPLE)
    if is_sentence_pair(info):  # the pipeline takes both texts
        call = repr({"text": pair[0], "text_pair": pair[1]})
    return {"repo_ref": repo_ref, "revision": repr(revision) if revision else None,
            "pinned": bool(revision and COMMIT_ID.fullmatch(revision)), "pair": repr(list(pair)),
            "auto_class": info.auto_class or "AutoModel", "call": call, "mask_token": info.mask_token,
            "label_column": spec.get("label_column", "score"), "tested_transformers": TESTED_TRANSFORMERS}


def layout_facts(info: FolderInfo, xpt_config: dict | None = None) -> dict:
    """The layers of the XPT model around its encoder layers: `itl`, the implicit translation layers it has
    (from its config.json: a stock export's card gets its XPT model's as `xpt_config`, else the method's; None
    where neither is known), `reused` (the encoder layers are the English model's: not for Scratch) and the
    stock masked-LM class of its source family (None where unknown)."""
    config = info.config if info.config.get("model_type") == "xpt" else (xpt_config or {})
    method = info.method
    if config.get("model_type") == "xpt":
        itl = [name for name, key in (("ITL_in", "use_itl_in"), ("ITL_out", "use_itl_out")) if config.get(key, True)]
    else:
        itl = (["ITL_in", "ITL_out"] if METHODS[method].itl else []) if method in METHODS else None
    family = config.get("source_architecture") or config.get("source_model_type") or info.config.get("model_type")
    return {"itl": itl, "reused": method != "scratch", "stock_class": STOCK_CLASSES.get(family),
            "stock_classes": list(STOCK_CLASSES.values())}


def package_licence() -> str | None:
    """The licence of the `xpt` package (pyproject.toml's `license`), whose files configuration_xpt.py and
    modeling_xpt.py a custom-code folder carries."""
    from importlib.metadata import PackageNotFoundError, metadata

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'^license\s*=\s*"([^"]+)"', pyproject.read_text(encoding="utf-8"), re.MULTILINE)
        if found:
            return found.group(1)
    try:
        meta = metadata("xpt")
    except PackageNotFoundError:
        return None
    return meta.get("License-Expression") or meta.get("License") or None


def task_facts(info: FolderInfo) -> dict:
    """The fine-tuning task a fine-tuned model was trained on, as far as its card's words depend on it."""
    own = info.own_results if info.is_fine_tuned else None
    spec = task_spec(info)
    base = {"task_type": spec.get("task_type"), "pair_task": is_sentence_pair(info)}
    if not own:
        return {**base, "fine_tuned_on": None}
    task = describe_task(own.get("task"))
    return {**base, "fine_tuned_on": {"task": own.get("task"), "task_name": task[0] if task else None,
                                      "model_ref": public_ref(own.get("model"), "model")}}


def licence_facts(info: FolderInfo, known_data: list[tuple[str, str, str]]) -> dict:
    """The data behind the model and what is known of its licences."""
    spec = info.data_spec
    tasks = [describe_task(result.get("task")) for result in info.results]
    return {"known_data": [{"name": name, "description": description, "licence": licence}
                           for name, description, licence in known_data], "code": package_licence(),
            "data_ref": public_ref(locate_spec(spec), "corpus") if spec and not known_data else None,
            "task_licences": [{"name": task[0], "licence": task[1]} for task in tasks if task]}
