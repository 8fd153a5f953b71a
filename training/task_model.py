"""The encoder with a task head for fine-tuning: which model code may run, the tokenizer and config
checked against the task before any weights load, the longest input the model takes, the model with its
head (`load_model`), and LoRA on it (`apply_lora`).
"""
from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any

from training.inputs import (damaged_weights, hub_unreachable, is_connection_error, looks_like_hub_id, missing_path,
                             not_a_model_folder, uncached)
from training.tasks import TaskDataError, TaskSpec

HEAD_CLASSES = {"single": "AutoModelForSequenceClassification", "pair": "AutoModelForSequenceClassification",
                "regression": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification",
                "qa": "AutoModelForQuestionAnswering"}
LORA_TARGET_NAMES = ("query", "value", "q_proj", "v_proj", "q_lin", "v_lin")
ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert", "longformer")


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _cannot_load(model: str, error: BaseException, what: str, hint: str = "") -> TaskDataError:
    """A load of `model` that failed: for a Hub id the Hub could not send (offline, no connection), that and what
    to give instead (`training.inputs.hub_unreachable`); else `what`, the loader's first line and `hint`."""
    if looks_like_hub_id(model) and is_connection_error(error):
        return TaskDataError(f"--model {hub_unreachable('model', model).message}")
    return TaskDataError(f"{what}: {_one_line(error)}{hint}")


def written_by_this_package(model: str) -> bool:
    """A local folder whose remote-code files are byte for byte this package's own: running them runs
    nothing that importing this package would not."""
    folder = Path(model)
    # located, not imported: importing modeling_xpt registers the XPT classes, and loading would then
    # bypass the folder's own code instead of asking for --trust-remote-code
    package = Path(importlib.util.find_spec("modeling_xpt").origin).parent
    names = ("configuration_xpt.py", "modeling_xpt.py")
    return folder.is_dir() and all((folder / n).is_file() and (folder / n).read_bytes() == (package / n).read_bytes()
                                   for n in names)


def trusts_remote_code(model: str, asked: bool) -> bool:
    """Custom code runs only where the user asked for it (`--trust-remote-code`), or from folders
    written by this package (`written_by_this_package`). Hub ids never run code unasked."""
    return asked or written_by_this_package(model)


def load_tokenizer_and_config(model: str, spec: TaskSpec, trust_remote_code: bool = False):
    """Tokenizer and config of `model`, checked against the task before any weights are loaded. A mistyped
    folder (`training.inputs.missing_path`), and a Hub id that can be neither downloaded nor read from the
    cache (`training.inputs.uncached`), are refused before the Hub is asked for it."""
    from transformers import AutoConfig, AutoTokenizer

    if mistyped := missing_path(model):
        raise TaskDataError(f"--model {mistyped}")
    if unloadable := uncached("model", model):
        raise TaskDataError(f"--model {unloadable.message}")
    if Path(model).is_dir() and (wrong := not_a_model_folder(Path(model))):
        raise TaskDataError(f"--model {wrong}")
    if Path(model).is_dir() and (damaged := damaged_weights(Path(model))):
        raise TaskDataError(f"--model {damaged}: copy or download the model again, or give another one")
    folder = Path(model)
    other_version = folder.is_dir() and all((folder / n).is_file() for n in ("configuration_xpt.py", "modeling_xpt.py"))
    hint = "" if trust_remote_code else (
        " (its configuration_xpt.py and modeling_xpt.py are not this installed package's: written by another "
        "version of it, or edited; read them, and if you trust them pass --trust-remote-code)" if other_version else
        " (if you trust the code in that model folder or repo, pass --trust-remote-code)")
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception as error:  # missing folder, unknown model_type, bad JSON, custom code not trusted ...
        raise _cannot_load(model, error, f"cannot read the model config of {model}",
                           hint if "trust_remote_code" in str(error) else "") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception as error:
        raise _cannot_load(model, error, f"cannot load a tokenizer from {model}") from None
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


def check_pooling(model: str, config, pooling: str | None) -> None:
    """--pooling chooses the pooling of XPT's task heads; other models have their own."""
    if pooling and getattr(config, "model_type", None) != "xpt":
        raise TaskDataError(f"--pooling applies to XPT models; {model} is a {config.model_type!r} model "
                            "(leave --pooling out to use its own head)")


def load_model(model: str, spec: TaskSpec, config, labels: list[str] | None, pooling: str | None = None,
               trust_remote_code: bool = False):
    import transformers

    auto_cls = getattr(transformers, HEAD_CLASSES[spec.task_type])
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if pooling:
        check_pooling(model, config, pooling)
        kwargs["classifier_pooling"] = pooling
    if spec.task_type == "regression":  # the one output is named after the score column
        kwargs.update(num_labels=1, problem_type="regression", id2label={0: spec.label_column},
                      label2id={spec.label_column: 0})
    elif spec.task_type in ("single", "pair", "token"):
        shown = spec.shown_labels(labels)
        kwargs.update(num_labels=len(labels), id2label=dict(enumerate(shown)),
                      label2id={name: i for i, name in enumerate(shown)},
                      problem_type="single_label_classification" if spec.task_type != "token" else None)
    # A folder that already holds a head of another size (e.g. a fine-tuned 3-way classifier) gets a new one.
    architectures = getattr(config, "architectures", None) or []
    head_suffix = HEAD_CLASSES[spec.task_type].removeprefix("AutoModel")
    if any(a.endswith(head_suffix) for a in architectures) and kwargs.get("num_labels") not in (None, config.num_labels):
        kwargs["ignore_mismatched_sizes"] = True
    try:
        loaded, info = auto_cls.from_pretrained(model, output_loading_info=True, **kwargs)
    except (ValueError, OSError, RuntimeError, TypeError) as error:
        raise _cannot_load(model, error, f"cannot load {model} with {HEAD_CLASSES[spec.task_type]}") from None
    if "ignore_mismatched_sizes" not in kwargs and labels and any(a.endswith(head_suffix) for a in architectures):
        meaning = dict(zip(spec.shown_labels(labels), labels))  # a saved head's names, read back as labels
        saved = [str(config.id2label[i]) for i in range(config.num_labels)]
        reorder_head(loaded, [meaning.get(name, name) for name in saved], labels)
    # Weights the checkpoint lacks start random: the task head, and e.g. the pooler of a BERT model saved as
    # BertForMaskedLM. apply_lora trains and saves them with the adapter, which otherwise could not be reloaded.
    parameters = dict(loaded.named_parameters())
    loaded.fresh_parameters = sorted(k for k in info.get("missing_keys") or [] if k in parameters)
    return loaded


def post_training_dropout(model: str) -> float | None:
    """The dropout an XPT folder's post-training ran with (`post_training_dropout` in its training_summary.json), or
    None where it is not recorded (no record, or the source's own dropout)."""
    from training.run_record import RecordError, RunRecord

    try:
        record = RunRecord.read_if_present(model)
    except RecordError:
        return None  # fine-tuning reads the record again and says what is wrong with it
    return (record.config or {}).get("post_training_dropout") if record is not None else None


def start_at_label_mean(model, labels: list[float]) -> None:
    """A new regression head (one output) starts at the mean training label instead of 0: from 0 its first
    steps all push the encoder one way, towards the mean (on KorSTS, 0-5, the cross-encoder then learned little).
    A head the checkpoint already held is left as trained."""
    import torch

    found = output_layer(model, 1)
    if found and found[1].bias is not None and f"{found[0]}.bias" in getattr(model, "fresh_parameters", []) and labels:
        with torch.no_grad():
            found[1].bias.fill_(float(sum(labels) / len(labels)))


def output_layer(model, outputs: int):
    """(name, module) of the task head's last linear layer with `outputs` outputs, outside the encoder; or None."""
    from torch import nn

    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and m.out_features == outputs
              and not name.startswith(model.base_model_prefix + ".")]
    return layers[-1] if layers else None


def reorder_head(model, saved: list[str], labels: list[str]) -> None:
    """A folder's trained head whose labels are these in another order (e.g. a KLUE-NLI model on data whose
    label set was read as sorted names): its output rows are permuted to `labels`' order, so each keeps
    predicting its own label instead of starting with the classes swapped."""
    import torch

    if saved == labels or sorted(saved) != sorted(labels):
        return
    order = [saved.index(label) for label in labels]
    if found := output_layer(model, len(labels)):
        layer = found[1]
        with torch.no_grad():
            layer.weight.copy_(layer.weight[order])
            if layer.bias is not None:
                layer.bias.copy_(layer.bias[order])


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
    with warnings.catch_warnings():
        # PEFT reads transformers' deprecated `is_gradient_checkpointing`; the FutureWarning names
        # neither this package nor anything the user can change, so it is silenced here only.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)
