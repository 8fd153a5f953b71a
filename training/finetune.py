#!/usr/bin/env python
"""Fine-tune any encoder checkpoint on a Korean downstream task, over N seeds: `results.json`.

    python training/finetune.py --model DIR --task korsts --data-dir ../shared/data/tasks/korsts \
        --seeds 3 --output-dir runs/ft/korsts [--max-train-samples N] [--epochs N] [--peft lora [--merge]] \
        [--push-to-hub ORG/NAME [--push-dry-run]]

Works with XPT folders (loaded through the Auto classes; their code runs without asking only when it is
this package's own, otherwise pass ``--trust-remote-code``) and stock Hub/local models alike (e.g. ``klue/roberta-base``), so they can be compared on equal terms. An MLM-only
folder is fine: the Auto class adds a fresh task head.

Defaults follow the XPT paper's fine-tuning table (Table A2): batch 32, learning rate 5e-5 (use
``--learning-rate 1e-5`` for its other setting), 10 epochs (15 with ``--epochs 15``), linear decay with
6% warmup. After every epoch the dev split is scored; the epoch with the best dev score is kept
(``--patience K`` stops after K epochs without improvement), and its test score is reported when the
task has a test split, otherwise its dev score (``results.json["split"]`` says which).

Why a plain PyTorch loop rather than `transformers.Trainer`: five task types (classification,
regression, NER, extractive QA) share one ~40-line loop in which per-epoch dev scoring, best-state
selection, QA span post-processing and per-seed determinism are all visible; with Trainer the same
needs a `compute_metrics` per type, a QA post-processing subclass, and callbacks, and its
argument set moves between major versions (this must run on transformers 5.17-5.x). The run is
deterministic for a given seed on CPU (same data order, dropout and head init); GPU kernels may
differ in the last digits.

Outputs in ``--output-dir``: ``results.json`` (schema in DEVELOPERS.md), ``runs/seed_<s>.json`` (one
per run: per-epoch train loss and dev metrics, step losses, best epoch) and a summary table on stdout.
With ``--save-model best`` (the default) also the model of the seed with the best dev score, at its
best dev epoch: ``model/`` (a full fine-tune, or with ``--peft lora --merge`` the merged model), loadable
with ``AutoModelForSequenceClassification.from_pretrained(dir, trust_remote_code=True)``, and with
``--peft lora`` its adapter in ``adapter/`` (see `training/finetuned_model.py`). ``--push-to-hub ORG/NAME``
then publishes ``model/`` through ``cards.push`` (card, validation, fresh-process load check, one upload;
``--push-dry-run`` checks without uploading); the options are checked before any training.
Bad input (missing columns, labels outside the label set, empty split, no head for the task type,
tokenizer/model vocabulary mismatch) exits with status 2 and a one-line message.
"""
from __future__ import annotations

import sys
from pathlib import Path


import argparse
import inspect
import json
import math
import platform
import statistics
import time
from typing import Any

import numpy as np
from tqdm.auto import tqdm

import modeling_xpt
from training import metrics_downstream, sentence_similarity
from training.finetuned_model import SAVE_CHOICES
from training.run_record import RESULTS_FILE, RecordError, RunRecord
from tokenization.errors import UserError, report_error
from training.tasks import TaskDataError, TaskSpec, load_task_data, spec_from_cli

MODES = ("finetune", "probe", "both")
PAPER_DEFAULTS = {"batch_size": 32, "learning_rate": 5e-5, "epochs": 10, "warmup_ratio": 0.06,
                  "weight_decay": 0.01, "max_length": 128}
HEAD_CLASSES = {"single": "AutoModelForSequenceClassification", "pair": "AutoModelForSequenceClassification",
                "regression": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification",
                "qa": "AutoModelForQuestionAnswering"}
LORA_TARGET_NAMES = ("query", "value", "q_proj", "v_proj", "q_lin", "v_lin")
ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert", "longformer")
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# token_type_ids are always requested: some fast tokenizers (e.g. a bare PreTrainedTokenizerFast in
# transformers v5) leave them out by default, and BERT-style models would then see the pair as one segment.


# --- model, tokenizer and their checks -------------------------------------------------------------------
def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def written_by_this_package(model: str) -> bool:
    """A local folder whose remote-code files are byte for byte this package's own: running them runs
    nothing that importing this package would not."""
    folder = Path(model)
    package = Path(modeling_xpt.__file__).parent
    names = ("configuration_xpt.py", "modeling_xpt.py")
    return folder.is_dir() and all((folder / n).is_file() and (folder / n).read_bytes() == (package / n).read_bytes()
                                   for n in names)


def trusts_remote_code(model: str, asked: bool) -> bool:
    """Custom code runs only where the user asked for it (`--trust-remote-code`), or from folders
    written by this package (`written_by_this_package`). Hub ids never run code unasked."""
    return asked or written_by_this_package(model)


def load_tokenizer_and_config(model: str, spec: TaskSpec, trust_remote_code: bool = False):
    """Tokenizer and config of `model`, checked against the task before any weights are loaded."""
    from transformers import AutoConfig, AutoTokenizer

    hint = "" if trust_remote_code else (" (if you trust the code in that model folder or repo, pass "
                                         "--trust-remote-code)")
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception as error:  # missing folder, unknown model_type, bad JSON, custom code not trusted ...
        raise TaskDataError(f"cannot read the model config of {model}: {_one_line(error)}"
                            + (hint if "trust_remote_code" in str(error) else "")) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception as error:
        raise TaskDataError(f"cannot load a tokenizer from {model}: {_one_line(error)}") from None
    check_head(config, spec, model)
    check_vocab(tokenizer, config, model)
    if spec.task_type in ("token", "qa") and not tokenizer.is_fast:
        raise TaskDataError(f"{spec.task_type} tasks need a fast tokenizer (word ids / offsets); {model} has "
                            f"{type(tokenizer).__name__}")
    if tokenizer.pad_token_id is None:
        raise TaskDataError(f"the tokenizer of {model} has no padding token")
    return tokenizer, config


def check_head(config, spec: TaskSpec, model: str) -> None:
    """The Auto class for the task type must be able to build a model from this config."""
    import transformers

    head = HEAD_CLASSES[spec.task_type]
    auto_map = getattr(config, "auto_map", None) or {}
    if head in auto_map:
        return
    mapping = getattr(getattr(transformers, head), "_model_mapping", None)
    if mapping is None or type(config) in mapping:
        return
    raise TaskDataError(f"{model} (model_type={config.model_type!r}) cannot get a {spec.task_type} head: "
                        f"{head} has no class for {type(config).__name__}")


def check_vocab(tokenizer, config, model: str) -> None:
    """Every token id the tokenizer can produce must have an embedding row (XPT: exactly one per token)."""
    vocab_size = getattr(config, "vocab_size", None)
    if vocab_size is None:
        return
    n_tokens = len(tokenizer)
    if n_tokens > vocab_size or (config.model_type == "xpt" and n_tokens != vocab_size):
        raise TaskDataError(f"tokenizer/model vocabulary mismatch in {model}: the tokenizer has {n_tokens} tokens "
                            f"but config.vocab_size is {vocab_size}; use the tokenizer the model was trained with")


def max_input_length(requested: int, tokenizer, config) -> int:
    limit = requested
    if tokenizer.model_max_length and tokenizer.model_max_length < 1_000_000:
        limit = min(limit, tokenizer.model_max_length)
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        offset = getattr(config, "position_offset", None)
        if offset is None:
            offset = (config.pad_token_id or 0) + 1 if config.model_type in ROBERTA_LIKE else 0
        limit = min(limit, positions - offset)
    return limit


def load_model(model: str, spec: TaskSpec, config, labels: list[str] | None, pooling: str | None = None,
               trust_remote_code: bool = False):
    import transformers

    auto_cls = getattr(transformers, HEAD_CLASSES[spec.task_type])
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if pooling:
        if getattr(config, "model_type", None) != "xpt":
            raise TaskDataError(f"--pooling applies to XPT models; {model} is a {config.model_type!r} model "
                                "(leave --pooling out to use its own head)")
        kwargs["classifier_pooling"] = pooling
    if spec.task_type == "regression":  # the one output is named after the score column
        kwargs.update(num_labels=1, problem_type="regression", id2label={0: spec.label_column},
                      label2id={spec.label_column: 0})
    elif spec.task_type in ("single", "pair", "token"):
        kwargs.update(num_labels=len(labels), id2label=dict(enumerate(labels)),
                      label2id={label: i for i, label in enumerate(labels)},
                      problem_type="single_label_classification" if spec.task_type != "token" else None)
    # A folder that already holds a head of another size (e.g. a fine-tuned 3-way classifier) gets a new one.
    architectures = getattr(config, "architectures", None) or []
    head_suffix = HEAD_CLASSES[spec.task_type].removeprefix("AutoModel")
    if any(a.endswith(head_suffix) for a in architectures) and kwargs.get("num_labels") not in (None, config.num_labels):
        kwargs["ignore_mismatched_sizes"] = True
    try:
        loaded, info = auto_cls.from_pretrained(model, output_loading_info=True, **kwargs)
    except (ValueError, OSError, RuntimeError, TypeError) as error:
        raise TaskDataError(f"cannot load {model} with {HEAD_CLASSES[spec.task_type]}: {_one_line(error)}") from None
    # Weights the checkpoint lacks start random: the task head, and e.g. the pooler of a BERT model saved as
    # BertForMaskedLM. apply_lora trains and saves them with the adapter, which otherwise could not be reloaded.
    parameters = dict(loaded.named_parameters())
    loaded.fresh_parameters = sorted(k for k in info.get("missing_keys") or [] if k in parameters)
    return loaded


def apply_lora(model, spec: TaskSpec, rank: int, alpha: int, dropout: float):
    """LoRA on the attention query/value projections; the task head, and any encoder module whose weights
    the checkpoint lacked (`load_model`'s `fresh_parameters`, e.g. a BERT pooler), are trained in full and
    saved with the adapter (modules_to_save)."""
    from peft import LoraConfig, TaskType, get_peft_model
    from torch import nn

    prefix = model.base_model_prefix
    heads = [name for name, module in model.named_children()
             if name != prefix and any(True for _ in module.parameters())]
    heads += sorted({name.rsplit(".", 1)[0] for name in getattr(model, "fresh_parameters", [])
                     if name.startswith(prefix + ".")})
    targets = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                      if isinstance(module, nn.Linear) and name.startswith(prefix + ".")
                      and name.rsplit(".", 1)[-1] in LORA_TARGET_NAMES})
    if not targets:
        raise TaskDataError(f"--peft lora: found no attention projections named {LORA_TARGET_NAMES} in the model")
    task_type = {"token": TaskType.TOKEN_CLS, "qa": TaskType.QUESTION_ANS}.get(spec.task_type, TaskType.SEQ_CLS)
    config = LoraConfig(task_type=task_type, r=rank, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets, modules_to_save=heads)
    return get_peft_model(model, config)


# --- features ----------------------------------------------------------------------------------------------
def encode_sequence_task(spec: TaskSpec, rows, tokenizer, max_length: int, labels: list[str] | None):
    columns = spec.text_columns
    first = [str(row[columns[0]]) for row in rows]
    second = [str(row[columns[1]]) for row in rows] if len(columns) == 2 else None
    encoded = tokenizer(first, second, truncation=True, max_length=max_length, return_token_type_ids=True)
    label_ids = {label: i for i, label in enumerate(labels or [])}
    features = []
    for i, row in enumerate(rows):
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        value = row[spec.label_column]
        feature["labels"] = float(value) if spec.task_type == "regression" else label_ids[str(value)]
        features.append(feature)
    return features


def encode_token_task(spec: TaskSpec, rows, tokenizer, max_length: int, labels: list[str]):
    """Words -> sub-tokens; the first sub-token of each word carries the word's tag, the rest -100."""
    label_ids = {label: i for i, label in enumerate(labels)}
    words = [[str(w) for w in row[spec.tokens_column]] for row in rows]
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length,
                        return_token_type_ids=True)
    features = []
    for i, row in enumerate(rows):
        word_ids = encoded.word_ids(i)
        tags = row[spec.label_column]
        label_row, first_positions, previous = [], {}, None
        for position, word in enumerate(word_ids):
            if word is None or word == previous:
                label_row.append(-100)
            else:
                label_row.append(label_ids[tags[word]])
                first_positions[word] = position
            previous = word
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        feature["labels"] = label_row
        feature["word_positions"] = [first_positions.get(w) for w in range(len(tags))]
        features.append(feature)
    return features


def encode_qa_task(spec: TaskSpec, rows, tokenizer, max_length: int, stride: int):
    """SQuAD-style windows over the context. Each feature has start/end token positions of the first
    answer (0 = the first token when the answer is not inside the window), its example index and the
    character offsets of its context tokens (None elsewhere) for span decoding."""
    questions = [str(row[spec.question_column]).strip() for row in rows]
    contexts = [str(row[spec.context_column]) for row in rows]
    encoded = tokenizer(questions, contexts, truncation="only_second", max_length=max_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    features = []
    for i in range(len(encoded["input_ids"])):
        example = encoded["overflow_to_sample_mapping"][i]
        sequence_ids = encoded.sequence_ids(i)
        offsets = [tuple(o) if sequence_ids[k] == 1 else None for k, o in enumerate(encoded["offset_mapping"][i])]
        answers = rows[example][spec.answers_column]
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        start_token = end_token = 0
        context_tokens = [k for k, o in enumerate(offsets) if o is not None]
        if context_tokens and offsets[context_tokens[0]][0] <= start_char and offsets[context_tokens[-1]][1] >= end_char:
            start_token = next(k for k in context_tokens if offsets[k][1] > start_char)
            end_token = next(k for k in reversed(context_tokens) if offsets[k][0] < end_char)
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        feature.update(start_positions=start_token, end_positions=end_token, example=example, offsets=offsets)
        features.append(feature)
    return features


def build_features(spec: TaskSpec, splits, tokenizer, max_length: int, doc_stride: int, config=None,
                   pair_encoding: str = "cross"):
    out = {}
    for split, rows in splits.items():
        if pair_encoding == "bi":
            out[split] = sentence_similarity.encode_pairs(spec.text_columns, spec.label_column, rows, tokenizer,
                                                          max_length)
        elif spec.task_type == "token":
            out[split] = encode_token_task(spec, rows, tokenizer, max_length, spec.labels)
        elif spec.task_type == "qa":
            out[split] = encode_qa_task(spec, rows, tokenizer, max_length, min(doc_stride, max_length // 4))
        else:
            out[split] = encode_sequence_task(spec, rows, tokenizer, max_length, spec.labels)
    if config is not None and getattr(config, "type_vocab_size", 2) < 2:
        # One segment embedding (RoBERTa, XPT from RoBERTa): a BERT-style tokenizer's segment ids 1 would
        # index past it, and all-zero ids add nothing, so the model gets none.
        for features in out.values():
            for feature in features:
                feature.pop("token_type_ids", None)
    return out


def collate(features, pad_token_id: int, task_type: str) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence of the batch; token labels pad with -100."""
    import torch

    length = max(len(f["input_ids"]) for f in features)
    batch = {}
    for key, pad in (("input_ids", pad_token_id), ("attention_mask", 0), ("token_type_ids", 0)):
        if key in features[0]:
            batch[key] = torch.tensor([f[key] + [pad] * (length - len(f[key])) for f in features], dtype=torch.long)
    if "input_ids_b" in features[0]:  # a bi-encoder pair: the second sentences padded on their own
        batch.update(sentence_similarity.pad_second(features, pad_token_id))
    if task_type == "token":
        batch["labels"] = torch.tensor([f["labels"] + [-100] * (length - len(f["labels"])) for f in features])
    elif task_type == "qa":
        batch["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        batch["end_positions"] = torch.tensor([f["end_positions"] for f in features])
    elif task_type == "regression":
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float)
    else:
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
    return batch


# --- evaluation ----------------------------------------------------------------------------------------------
def autocast(device, mixed_precision: str):
    """bf16 autocast on `device` when `mixed_precision` is "bf16" (weights and the optimiser stay fp32)."""
    import torch

    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16")


def predict(model, features, batch_size: int, pad_token_id: int, task_type: str, device, accepted: set[str],
            mixed_precision: str = "no"):
    import torch

    model.eval()
    outputs = []
    for start in range(0, len(features), batch_size):
        chunk = features[start:start + batch_size]
        batch = collate(chunk, pad_token_id, task_type)
        inputs = {k: v.to(device) for k, v in batch.items() if k in accepted}
        with torch.no_grad(), autocast(device, mixed_precision):
            result = model(**inputs)
        if task_type == "qa":
            for i in range(len(chunk)):
                outputs.append((result.start_logits[i].float().cpu().numpy(), result.end_logits[i].float().cpu().numpy()))
        else:
            logits = result.logits.float().cpu().numpy()
            outputs.extend(logits[i] for i in range(len(chunk)))
    return outputs


def decode_qa(features, outputs, rows, spec: TaskSpec, n_best: int = 20, max_answer_tokens: int = 30) -> list[str]:
    """Best-scoring valid span (start <= end, both in the context, at most `max_answer_tokens`) per example."""
    best: dict[int, tuple[float, str]] = {}
    for feature, (start_logits, end_logits) in zip(features, outputs):
        offsets = feature["offsets"]
        length = len(offsets)
        starts = np.argsort(start_logits[:length])[::-1][:n_best]
        ends = np.argsort(end_logits[:length])[::-1][:n_best]
        context = rows[feature["example"]][spec.context_column]
        for s in starts:
            for e in ends:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_tokens:
                    continue
                score = float(start_logits[s] + end_logits[e])
                if feature["example"] not in best or score > best[feature["example"]][0]:
                    best[feature["example"]] = (score, context[offsets[s][0]:offsets[e][1]])
    return [best.get(i, (0.0, ""))[1] for i in range(len(rows))]


def score(spec: TaskSpec, features, outputs, rows) -> dict[str, float]:
    names = [spec.metric] + [m for m in spec.extra_metrics if m != spec.metric]
    if spec.task_type == "regression":
        predictions = [float(o.reshape(-1)[0]) for o in outputs]
        references = [float(r[spec.label_column]) for r in rows]
    elif spec.task_type in ("single", "pair"):
        predictions = [spec.labels[int(np.argmax(o))] for o in outputs]
        references = [str(r[spec.label_column]) for r in rows]
    elif spec.task_type == "token":
        predictions = []
        for feature, logits in zip(features, outputs):  # words cut off by truncation are predicted "O"
            predictions.append([spec.labels[int(np.argmax(logits[p]))] if p is not None else "O"
                                for p in feature["word_positions"]])
        references = [list(r[spec.label_column]) for r in rows]
    else:
        predictions = decode_qa(features, outputs, rows, spec)
        references = [list(r[spec.answers_column]["text"]) for r in rows]
    return metrics_downstream.compute(names, predictions, references)


def evaluate_split(model, spec, features, rows, args, pad_token_id, device, accepted) -> dict[str, float]:
    outputs = predict(model, features, args.eval_batch_size or 2 * args.batch_size, pad_token_id,
                      spec.task_type, device, accepted, args.mixed_precision)
    return score(spec, features, outputs, rows)


# --- training ------------------------------------------------------------------------------------------------
def set_seed(seed: int) -> None:
    from transformers import set_seed as hf_set_seed

    hf_set_seed(seed)  # python random, numpy, torch (CPU and CUDA)


def accepted_inputs(model) -> set[str]:
    parameters = inspect.signature(model.forward).parameters
    names = set(MODEL_INPUTS) | {"labels", "start_positions", "end_positions"} | set(sentence_similarity.SECOND)
    if any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        # Remote-code and stock encoders take **kwargs; keep token_type_ids only where named.
        return {n for n in names if n in parameters or n != "token_type_ids"}
    return {n for n in names if n in parameters}


def train_one_seed(args, spec: TaskSpec, config, tokenizer, splits, features, seed: int, device,
                   progress: bool = True) -> tuple[dict[str, Any], Any]:
    """Train from `args.model` with `seed`; keep the best-dev epoch's weights; return (run record, model)."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from training.step import auto_mixed_precision, weight_decay_groups

    if args.mixed_precision == "auto":
        args.mixed_precision = auto_mixed_precision(device.type)
    set_seed(seed)
    if args.pair_encoding == "bi":
        from transformers import AutoModel

        model = sentence_similarity.CosineSimilarityRegressor(
            AutoModel.from_pretrained(args.model, trust_remote_code=args.trust_remote_code), spec.label_range or (0.0, 1.0))
    else:
        model = load_model(args.model, spec, config, spec.labels, args.pooling, args.trust_remote_code)
    accepted = accepted_inputs(model)
    if args.peft == "lora":
        model = apply_lora(model, spec, args.lora_r, args.lora_alpha, args.lora_dropout)
    model.to(device)
    pad = tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(features["train"], batch_size=args.batch_size, shuffle=True,
                                         generator=generator, collate_fn=lambda b: collate(b, pad, spec.task_type))
    optimizer = torch.optim.AdamW(weight_decay_groups(model, args.weight_decay), lr=args.learning_rate)
    total_steps = args.epochs * len(loader)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(args.warmup_ratio * total_steps), total_steps)

    best_score, best_epoch, best_state, best_dev, stale = -math.inf, 0, None, {}, 0
    epochs, step_losses = [], []
    started = time.time()
    if args.pair_encoding == "bi":  # it starts at the zero-shot cosine: fine-tuning must beat it on dev to count
        best_dev = evaluate_split(model, spec, features["dev"], splits["dev"], args, pad, device, accepted)
        best_score = best_dev[spec.metric]
        best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        epochs.append({"epoch": 0, "train_loss": None, "dev": best_dev})
    for epoch in range(1, args.epochs + 1):
        model.train()
        losses = []
        bar = tqdm(loader, desc=f"seed {seed} epoch {epoch}/{args.epochs}", leave=False, disable=not progress)
        for batch in bar:
            inputs = {k: v.to(device) for k, v in batch.items() if k in accepted}
            with autocast(device, args.mixed_precision):
                loss = model(**inputs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        step_losses.extend(losses)
        dev = evaluate_split(model, spec, features["dev"], splits["dev"], args, pad, device, accepted)
        epochs.append({"epoch": epoch, "train_loss": float(np.mean(losses)), "dev": dev})
        if progress:
            tqdm.write(f"seed {seed} epoch {epoch}: train loss {np.mean(losses):.4f}, dev {spec.metric} {dev[spec.metric]:.2f}")
        if dev[spec.metric] > best_score:
            best_score, best_epoch, best_dev, stale = dev[spec.metric], epoch, dev, 0
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            stale += 1
            if args.patience and stale >= args.patience:
                break
    model.load_state_dict(best_state)
    test = None
    if "test" in features:
        test = evaluate_split(model, spec, features["test"], splits["test"], args, pad, device, accepted)
    run = {"seed": seed, "dev": best_score, "test": test[spec.metric] if test else None, "best_epoch": best_epoch,
           "dev_metrics": best_dev, "test_metrics": test, "epochs": epochs, "step_losses": step_losses,
           "train_examples": len(features["train"]), "wall_time_s": round(time.time() - started, 2),
           "mixed_precision": args.mixed_precision,
           "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
           "total_parameters": sum(p.numel() for p in model.parameters())}
    return run, model


def post_training_info(model: str, method: str | None, sentences: int | None) -> dict[str, Any] | None:
    """Method and data size from the model folder's post-training record (training_summary.json), or the CLI."""
    info: dict[str, Any] = {}
    try:
        record = RunRecord.read_if_present(model)
    except RecordError as error:
        raise TaskDataError(str(error)) from None
    if record is not None:
        info = {"method": record.method, "train_sentences": record.data.train_sentences if record.data else None,
                "source_model": record.source_model, "total_steps": record.total_steps,
                "tokens_seen": record.tokens_seen}
    if method:
        info["method"] = method
    if sentences is not None:
        info["train_sentences"] = sentences
    return info or None


def summarize(spec: TaskSpec, runs: list[dict[str, Any]], args, post_training, splits) -> dict[str, Any]:
    split = "test" if runs[0]["test"] is not None else "dev"
    scores = [run[split] for run in runs]
    extra = {}
    for name in [spec.metric] + spec.extra_metrics:
        values = [run[f"{split}_metrics"][name] for run in runs]
        extra[name] = {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}
    return {
        **summary_fields(spec, args, post_training, splits),
        "seeds": [run["seed"] for run in runs], "scores": scores,
        "mean": statistics.fmean(scores), "std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
        "std_ddof": 1, "split": split,
        "runs": [{"seed": r["seed"], "dev": r["dev"], "test": r["test"], "best_epoch": r["best_epoch"]} for r in runs],
        "metrics": extra,
        "peft": args.peft,
        "hyperparameters": hyperparameters(args),
    }


def hyperparameters(args) -> dict[str, Any]:
    return {k: getattr(args, k) for k in ("batch_size", "learning_rate", "epochs", "warmup_ratio", "weight_decay",
                                          "max_length", "patience", "max_train_samples", "max_eval_samples",
                                          "hold_out_test", "lora_r",
                                          "lora_alpha", "pooling", "pair_encoding")}


def check_reused_folder(args, seeds: list[int]) -> None:
    """An output folder holding the results of a run with other options is refused (its results.json and
    runs/ would describe two runs at once) unless --overwrite-output-dir; the same options may run again."""
    path = Path(args.output_dir) / RESULTS_FILE
    if not path.is_file():
        return
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    now = {"model": str(args.model), "task": args.task, "mode": args.mode, "seeds": seeds, "peft": args.peft,
           "data_seed": args.data_seed, **hyperparameters(args)}
    was = {"mode": "finetune", **before, **(before.get("hyperparameters") or {})}
    changed = {k: (was.get(k), v) for k, v in now.items() if k in was and was.get(k) != v and
               not (k == "seeds" and now["mode"] == "probe")}
    if changed and not args.overwrite_output_dir:
        listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
        raise TaskDataError(f"--output-dir {args.output_dir} holds the results of a run with other options ({listed}): "
                            "choose another --output-dir, or pass --overwrite-output-dir to replace them")


def summary_fields(spec: TaskSpec, args, post_training, splits) -> dict[str, Any]:
    """What every results.json says, whatever the mode: the task, the model, the data, the machine."""
    import torch
    import transformers

    return {
        "task": spec.name, "metric": spec.metric, "model": str(args.model), "post_training": post_training,
        "num_examples": {name: len(rows) for name, rows in splits.items()},
        "data_seed": args.data_seed, "task_spec": spec.to_dict(),
        "environment": {"device": str(args.device), "torch": torch.__version__, "transformers": transformers.__version__,
                        "python": platform.python_version(), "machine": platform.machine()},
    }


def linear_reads(args, spec: TaskSpec, splits, max_length: int, device) -> dict[str, Any]:
    """The no-model floor (`--floor`) and the probes (`--mode probe|both`) on the splits fine-tuning uses."""
    from training import linear_reads as reads

    wanted = args.floor or args.mode != "finetune"
    if wanted and not reads.applies_to(spec):
        raise TaskDataError(f"--floor and --mode probe read sentence-level tasks (single, pair, regression); "
                            f"{spec.name} is a {spec.task_type} task")
    found: dict[str, Any] = {}
    if args.floor:
        found["floor"] = reads.floor(spec, splits)
    if args.mode != "finetune":
        found["probe"] = reads.probe(args.model, spec, splits, max_length, trust_remote_code=args.trust_remote_code,
                                     device=str(device))
    return found


def reads_table(spec: TaskSpec, reads: dict[str, Any]) -> str:
    """The floor and the probes as lines of a Markdown table: dev, test, and STS's cosine without training."""
    rows = [("no-model floor (TF-IDF)", reads["floor"])] if "floor" in reads else []
    rows += [(f"linear probe, {pooling}-pooled", result) for pooling, result in reads.get("probe", {}).items()]
    lines = [f"{spec.name}: {spec.metric}, linear reads (regularisation chosen on dev)",
             "| read | estimator | dev | test | cosine, no training (dev / test) |", "| --- | --- | ---: | ---: | ---: |"]
    for name, r in rows:
        test = f"{r['test']:.2f}" if r.get("test") is not None else "-"
        cosine = " / ".join(f"{v:.2f}" for v in r["zero_shot"].values()) if r.get("zero_shot") else "-"
        lines.append(f"| {name} | {r['estimator']} | {r['dev']:.2f} | {test} | {cosine} |")
    return "\n".join(lines)


def summary_table(results: dict[str, Any]) -> str:
    split = results["split"]
    lines = [f"{results['task']}: {results['metric']} on {split}, model {results['model']}",
             "| seed | best epoch | dev | test |", "| ---: | ---: | ---: | ---: |"]
    for run in results["runs"]:
        test = f"{run['test']:.2f}" if run["test"] is not None else "-"
        lines.append(f"| {run['seed']} | {run['best_epoch']} | {run['dev']:.2f} | {test} |")
    dev_scores = [run["dev"] for run in results["runs"]]
    dev_std = statistics.stdev(dev_scores) if len(dev_scores) > 1 else 0.0
    test = f"{results['mean']:.2f} ± {results['std']:.2f}" if split == "test" else "-"
    lines.append(f"| mean ± std | | {statistics.fmean(dev_scores):.2f} ± {dev_std:.2f} | {test} |")
    return "\n".join(lines)


def parse_seeds(text: str) -> list[int]:
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    count = int(text)
    if count < 1:
        raise TaskDataError("--seeds must be >= 1 (a count) or a comma-separated list of seeds")
    return list(range(count))


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where there is a default worth showing (not None or False)."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "%(default)" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=_DefaultsFormatter)
    p.add_argument("--model", required=True, help="model folder or Hub id")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the model's own Python code (needed for XPT models from the Hub or written by another "
                        "version of this package; folders this package wrote are trusted without it)")
    p.add_argument("--task", required=True, help="registered task (python training/tasks.py lists them) or a new name")
    p.add_argument("--data-dir", help="folder with train/dev[/test].{tsv,csv,json,jsonl}; omit to use the task's Hub dataset")
    p.add_argument("--output-dir", required=True, help="where results.json and runs/seed_<s>.json are written")
    p.add_argument("--seeds", default="3", help="number of seeds (0..N-1) or a comma-separated list")
    p.add_argument("--task-spec", help="JSON object (or file) defining/overriding the task, see training/tasks.py")
    p.add_argument("--task-type", choices=["single", "pair", "regression", "token", "qa"],
                   help="task type of a new task (with --text-columns and --label-column)")
    p.add_argument("--text-columns", help="comma-separated input columns (1 or 2)")
    p.add_argument("--label-column", help="column holding the label (or score, tags, answers)")
    p.add_argument("--labels", help="comma-separated label set; labels seen in train when omitted")
    p.add_argument("--metric", choices=sorted(metrics_downstream.METRICS),
                   help="metric that selects the best epoch and is reported (the task's own by default)")
    p.add_argument("--max-train-samples", type=int, help="fine-tune on this many train examples (subsampled with --data-seed)")
    p.add_argument("--max-eval-samples", type=int, help="cap dev and test (for quick runs)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the subsampling (shared by all runs)")
    p.add_argument("--hold-out-test", type=int, default=0, metavar="N",
                   help="a task without a test split (NSMC here): hold N train examples out as its test split "
                        "(shuffled with --data-seed; the split the study holds out), before --max-train-samples")
    p.add_argument("--epochs", type=int, default=PAPER_DEFAULTS["epochs"], help="training epochs (the paper: 10 or 15)")
    p.add_argument("--batch-size", type=int, default=PAPER_DEFAULTS["batch_size"], help="training batch size")
    p.add_argument("--eval-batch-size", type=int, help="batch size of dev/test scoring (2 x --batch-size when omitted)")
    p.add_argument("--learning-rate", type=float, default=PAPER_DEFAULTS["learning_rate"],
                   help="peak AdamW learning rate (the paper: 5e-5 or 1e-5)")
    p.add_argument("--warmup-ratio", type=float, default=PAPER_DEFAULTS["warmup_ratio"],
                   help="share of the steps with linear warmup; linear decay to 0 after")
    p.add_argument("--weight-decay", type=float, default=PAPER_DEFAULTS["weight_decay"],
                   help="AdamW weight decay (not on biases and LayerNorm weights)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--max-length", type=int, default=PAPER_DEFAULTS["max_length"],
                   help="tokens per example after truncation (pairs: both sentences together)")
    p.add_argument("--doc-stride", type=int, default=128, help="QA window overlap (capped at max_length/4)")
    p.add_argument("--patience", type=int, default=0, help="stop after this many epochs without dev improvement (0: off)")
    p.add_argument("--pair-encoding", choices=["auto", "cross", "bi"], default="auto",
                   help="sentence-pair regression (STS): cross = both sentences in one sequence with a regression "
                        "head; bi = the cosine of the two mean-pooled sentence vectors, trained with MSE "
                        "(training/sentence_similarity.py; the saved model/ is the encoder); auto: cross")
    p.add_argument("--pooling", choices=["first", "mean"],
                   help="what an XPT sentence head reads: the first token or the mean over tokens "
                        "(default: the model's classifier_pooling, 'first' unless set)")
    p.add_argument("--mode", choices=MODES, default="finetune",
                   help="finetune: fine-tune over --seeds; probe: linear probes of the frozen encoder only "
                        "(mean- and first-token-pooled states, regularisation chosen on dev; no seeds, seconds on "
                        "CPU); both: the probes, then fine-tuning (sentence-level tasks; training/linear_reads.py)")
    p.add_argument("--floor", action="store_true",
                   help="also score the no-model floor on the same splits: TF-IDF of character 1-3-grams with "
                        "logistic regression / ridge (and cosine for STS); an encoder is worth using where it "
                        "scores above it")
    p.add_argument("--peft", choices=["lora"], help="parameter-efficient fine-tuning instead of full fine-tuning")
    p.add_argument("--lora-r", type=int, default=8, help="LoRA rank (with --peft lora)")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA scaling alpha (with --peft lora)")
    p.add_argument("--lora-dropout", type=float, default=0.1, help="dropout on the LoRA path (with --peft lora)")
    p.add_argument("--merge", action="store_true",
                   help="with --peft lora: also save the LoRA weights merged into the base model (OUTPUT/model), "
                        "a full model that loads without PEFT")
    p.add_argument("--save-model", choices=SAVE_CHOICES, default="best",
                   help="best: keep the model of the seed with the best dev score, at its best dev epoch (the one "
                        "its test score is measured with), in OUTPUT/model (--peft lora: the adapter in "
                        "OUTPUT/adapter, and with --merge the merged model in OUTPUT/model); none: scores only")
    p.add_argument("--push-to-hub", metavar="ORG/NAME",
                   help="after the run, publish OUTPUT/model through cards.push: model card, validation, a load "
                        "check in a fresh process, one upload (XPT sequence-task models; needs `hf auth login`)")
    p.add_argument("--push-dry-run", action="store_true",
                   help="with --push-to-hub: write the card, validate and load-check what would be uploaded; "
                        "upload nothing")
    p.add_argument("--hub-private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument("--license", help="licence id of the published weights (default: the known licence of --model "
                        "or of its English source; otherwise --push-to-hub asks for it)")
    p.add_argument("--base-model", metavar="ORG/NAME",
                   help="Hub id of --model, named as the card's base_model (default: --model when it is a Hub id; "
                        "a local folder is described, never named)")
    p.add_argument("--post-training-method", help="label for results.json post_training.method (default: from training_summary.json)")
    p.add_argument("--post-training-sentences", type=int, help="post-training data size, if not in training_summary.json")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ...; auto: cuda when available")
    p.add_argument("--mixed-precision", choices=["auto", "no", "bf16"], default="auto",
                   help="bf16 autocast of forward and backward (weights and AdamW stay fp32); auto: bf16 on CUDA "
                        "with bf16 and on CPUs with native bf16 (AVX512-BF16 or AMX), where it is faster, else no")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--overwrite-output-dir", action="store_true",
                   help="replace the results of an earlier run with other options in --output-dir")
    return p


def run(args) -> dict[str, Any]:
    """Fine-tune into `args.output_dir`, which no other run may write to meanwhile."""
    from training.checkpointing import FolderInUse, folder_lock

    try:
        with folder_lock(args.output_dir):
            return fine_tune(args)
    except FolderInUse as error:  # raised only by the lock, before anything is read or written
        raise TaskDataError(str(error)) from None


class PushFailed(RuntimeError):
    """The run finished and saved its model, but publishing it failed; the message says how to retry."""


def resolve_pair_encoding(args, spec: TaskSpec) -> None:
    """`--pair-encoding auto` -> cross; bi only where it means something (sentence-pair regression)."""
    if args.pair_encoding == "auto":
        args.pair_encoding = "cross"
    if args.pair_encoding != "bi":
        return
    if spec.task_type != "regression" or len(spec.text_columns) != 2:
        raise TaskDataError(f"--pair-encoding bi fine-tunes sentence-pair regression (STS) tasks; {spec.name} is a "
                            f"{spec.task_type} task with {len(spec.text_columns)} text column(s)")
    for flag, value in (("--peft", args.peft), ("--pooling", args.pooling), ("--push-to-hub", args.push_to_hub)):
        if value:
            raise TaskDataError(f"{flag} does not go with --pair-encoding bi (mean pooling, full fine-tuning; the "
                                "saved model/ is a sentence encoder, not a classification model)")


def check_save_options(args) -> None:
    """The saving and publishing options against each other, before anything is loaded."""
    if args.mode == "probe":
        for flag, value in (("--push-to-hub", args.push_to_hub), ("--peft", args.peft), ("--merge", args.merge)):
            if value:
                raise TaskDataError(f"{flag} goes with fine-tuning; --mode probe trains no model (use --mode both)")
        args.save_model = "none"  # a probe is a scikit-learn estimator over frozen states: nothing to save
    if args.merge and args.peft != "lora":
        raise TaskDataError("--merge merges LoRA weights into the base model: use it with --peft lora")
    if args.merge and args.save_model == "none":
        raise TaskDataError("--merge saves a merged model: drop --save-model none")
    if not args.push_to_hub:
        for flag, value in (("--push-dry-run", args.push_dry_run), ("--hub-private", args.hub_private),
                            ("--license", args.license), ("--base-model", args.base_model)):
            if value:
                raise TaskDataError(f"{flag} goes with --push-to-hub ORG/NAME (to publish the saved model later, "
                                    f"pass it to `python -m cards.push`)")
        return
    from cards.push import PushError, check_repo_id, find_token, hub_offline

    if args.save_model == "none":
        raise TaskDataError("--push-to-hub publishes the saved model: drop --save-model none")
    if args.peft and not args.merge:
        raise TaskDataError(f"--push-to-hub with --peft {args.peft} publishes the merged model: add --merge "
                            "(the adapter alone is saved in OUTPUT/adapter)")
    try:
        check_repo_id(args.push_to_hub)
    except PushError as error:
        raise TaskDataError(f"--push-to-hub: {error}") from None
    if not args.push_dry_run:
        if hub_offline():
            raise TaskDataError("--push-to-hub: offline mode (HF_HUB_OFFLINE is set) cannot reach the Hub; unset it "
                                "or add --push-dry-run")
        if not find_token():
            raise TaskDataError("--push-to-hub: no Hugging Face token; run `hf auth login` (or set HF_TOKEN), or add "
                                "--push-dry-run")


def check_publishable(args, spec: TaskSpec, config, post_training: dict[str, Any] | None) -> None:
    """What saving and publishing need from the model and task, checked before any training."""
    if args.save_model != "none" and Path(args.model).exists():
        source, target = Path(args.model).resolve(), (Path(args.output_dir) / "model").resolve()
        if source == target or target in source.parents:  # saving would replace the folder being read
            raise TaskDataError(f"--output-dir {args.output_dir}: the model is saved in its model/ folder, which is "
                                f"or holds --model {args.model}; choose another output folder")
    if not args.push_to_hub:
        return
    if getattr(config, "model_type", None) != "xpt":
        raise TaskDataError(f"--push-to-hub publishes XPT models (their card, remote code and checks); {args.model} "
                            f"is a {config.model_type!r} model: its fine-tuned copy is saved in OUTPUT/model")
    if spec.task_type not in ("single", "pair", "regression"):
        raise TaskDataError(f"--push-to-hub publishes text-classification models (single, pair and regression "
                            f"tasks); a {spec.task_type} task's model is saved in OUTPUT/model, not published")
    from cards.make_card import known_license, license_unknown

    method = (post_training or {}).get("method")
    english = getattr(config, "source_name_or_path", None) or (post_training or {}).get("source_model")
    if known_license(args.license, method, [args.base_model, args.model, english,
                                            (post_training or {}).get("source_model")]) is None:
        raise TaskDataError(f"--push-to-hub: {license_unknown(method, english)}")


def publish(args, model_dir: Path) -> None:
    """`cards.push` on the saved model: card, validation, fresh-process load check, upload (or dry run)."""
    from cards.push import PushError, push_to_hub

    card = {k: v for k, v in dict(license=args.license, base_model=args.base_model).items() if v}
    try:
        push_to_hub(model_dir, args.push_to_hub, private=args.hub_private, dry_run=args.push_dry_run,
                    require_license=True, **card)
    except PushError as error:
        raise PushFailed(f"push to {args.push_to_hub} failed: {error}. The model is saved in {model_dir}; after "
                         f"fixing that, run `python -m cards.push --model-dir {model_dir} --repo-id "
                         f"{args.push_to_hub}`") from None


def fine_tune(args) -> dict[str, Any]:
    import torch

    from training.finetuned_model import MODEL_DIR, adapter_usage, remove_stale, save_selected, saved_model_record

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.max_length < 8:
        raise TaskDataError("--max-length must be at least 8")
    check_save_options(args)
    spec = spec_from_cli(args.task, args.task_spec, args.task_type, args.text_columns, args.label_column,
                         args.labels, args.metric)
    resolve_pair_encoding(args, spec)
    allowed = metrics_downstream.METRICS_FOR_TYPE[spec.task_type]
    for name in [spec.metric] + spec.extra_metrics:
        if name not in allowed:
            raise TaskDataError(f"metric {name!r} does not fit a {spec.task_type} task; use one of {list(allowed)}")
    seeds = parse_seeds(args.seeds)
    check_reused_folder(args, seeds)
    splits = load_task_data(spec, args.data_dir, args.max_train_samples, args.max_eval_samples, args.data_seed,
                            args.hold_out_test)
    args.trust_remote_code = trusts_remote_code(args.model, args.trust_remote_code)
    tokenizer, config = load_tokenizer_and_config(args.model, spec, args.trust_remote_code)
    post_training = post_training_info(args.model, args.post_training_method, args.post_training_sentences)
    check_publishable(args, spec, config, post_training)
    max_length = max_input_length(args.max_length, tokenizer, config)
    device = torch.device(args.device)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reads = linear_reads(args, spec, splits, max_length, device)
    if args.mode == "probe":
        results = {**summary_fields(spec, args, post_training, splits), "mode": "probe", **reads,
                   "split": reads["probe"]["mean"]["split"]}
        (out_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(reads_table(spec, reads))
        print(f"wrote {out_dir / RESULTS_FILE}")
        return results
    features = build_features(spec, splits, tokenizer, max_length, args.doc_stride, config, args.pair_encoding)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    remove_stale(out_dir)
    runs, kept = [], None  # kept: (run record, model) of the best dev score so far
    import transformers

    verbosity = transformers.logging.get_verbosity()
    try:
        for seed in tqdm(seeds, desc=f"{spec.name} seeds", disable=args.no_progress):
            run_record, model = train_one_seed(args, spec, config, tokenizer, splits, features, seed, device,
                                               progress=not args.no_progress)
            if args.save_model == "best" and (kept is None or run_record["dev"] > kept[0]["dev"]):
                kept = (run_record, model.to("cpu"))  # one model at a time on the device
            del model
            # The weight-loading report is the same for every seed: show it once.
            transformers.logging.set_verbosity_error()
            (out_dir / "runs" / f"seed_{seed}.json").write_text(
                json.dumps(run_record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            runs.append(run_record)
    finally:
        transformers.logging.set_verbosity(verbosity)
    results = {**summarize(spec, runs, args, post_training, splits), "mode": args.mode, **reads}
    written = {}
    if kept is not None:
        results["saved_model"] = saved_model_record(kept[0], args.peft, args.merge)
        written = save_selected(kept[1], tokenizer, out_dir, results, base_model=args.model, peft=args.peft,
                                merge=args.merge)
        del kept
    (out_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for stale in (out_dir / "runs").glob("seed_*.json"):  # seeds of an earlier run that this one did not train
        if stale.stem.removeprefix("seed_") not in {str(s) for s in seeds}:
            stale.unlink()
    print(summary_table(results))
    if reads:
        print(reads_table(spec, reads))
    print(f"wrote {out_dir / 'results.json'}")
    if written:
        saved = results["saved_model"]
        print(f"saved the model of seed {saved['seed']} (best dev {spec.metric} {saved['dev']:.2f}, epoch "
              f"{saved['best_epoch']}): " + ", ".join(str(path) for path in written.values()))
        if "adapter" in written:
            print("  load the adapter: " + adapter_usage(written["adapter"], spec.task_type,
                                                         len(spec.labels or [None]), args.trust_remote_code))
    elif args.save_model == "none" and any((out_dir / name).exists() for name in (MODEL_DIR, "adapter")):
        print(f"note: {out_dir} holds a model saved by an earlier run (its own results.json describes it)")
    if args.push_to_hub:
        publish(args, out_dir / MODEL_DIR)
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except UserError as error:
        return report_error(error)
    except PushFailed as error:
        report_error(error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
