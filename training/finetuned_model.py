"""The model a fine-tuning run selected, saved so that it loads with the Auto classes or PEFT.

`training/finetune.py --save-model best` (the default) keeps, of all its seeds, the run with the
best dev score, with the weights of its best dev epoch (those its test score was measured with;
the test split never selects anything), and writes into the output folder:

- ``model/`` (a full fine-tune; with ``--peft lora --merge`` the LoRA weights merged into the base
  by PEFT's ``merge_and_unload``): ``save_pretrained`` weights (safetensors) and config.json (the
  label names in ``id2label``/``label2id``; an XPT model also gets
  ``auto_map`` and its two remote-code files), the tokenizer (``modeling_xpt.save_tokenizer``), the
  run's ``results.json`` (``saved_model`` says which seed and epoch this is) and the base model's
  ``training_summary.json`` when it has one (how the encoder was post-trained; the model card reads
  it). ``AutoModelForSequenceClassification.from_pretrained("OUT/model", trust_remote_code=True)``
  loads an XPT model (a stock model needs no ``trust_remote_code``).
- ``adapter/`` (``--peft lora``): PEFT's ``adapter_config.json`` and ``adapter_model.safetensors``
  (the LoRA matrices and the trained task head), the tokenizer and ``results.json``;
  ``PeftModel.from_pretrained(base, "OUT/adapter")`` or
  ``AutoPeftModelForSequenceClassification.from_pretrained("OUT/adapter", trust_remote_code=True,
  num_labels=N)`` loads it on top of the base model it names (``base_model_name_or_path``).

Each folder is written whole or not at all: it is built in a temporary folder beside its place and
renamed into place when complete (a rename is atomic on POSIX file systems); a run that dies while
saving leaves only a ``.model.tmp-*`` folder, which the next run into the same output folder
removes. A folder saved by an earlier run is replaced only once the new one is complete.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tokenization.folders import write_text_atomic
from training.run_record import RESULTS_FILE, SUMMARY_FILE

MODEL_DIR = "model"
ADAPTER_DIR = "adapter"
SAVE_CHOICES = ("best", "none")


# The temporary and replaced copies `atomic_folder` leaves beside a saved folder while it saves
SAVING_PREFIXES = tuple(f".{name}.{kind}-" for name in (MODEL_DIR, ADAPTER_DIR) for kind in ("tmp", "old"))


def remove_stale(out_dir: str | Path) -> None:
    """Temporary folders left by a run that died while saving (the caller holds the folder's lock)."""
    for stale in Path(out_dir).glob(".*"):
        if stale.name.startswith(SAVING_PREFIXES):
            shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def atomic_folder(final: str | Path):
    """Yield an empty temporary folder beside `final`; when the block ends without an error, it
    replaces `final` (an earlier `final` is moved aside first and removed after). On an error the
    temporary folder is removed and `final` is untouched. Hand-written: neither transformers'
    nor PEFT's `save_pretrained` writes atomically."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the saved folder gets the usual permissions
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def saved_model_record(run: dict[str, Any], peft: str | None, merge: bool) -> dict[str, Any]:
    """What results.json says about the saved model: which seed and epoch, its scores, which folders."""
    folders = {}
    if peft:
        folders["adapter"] = ADAPTER_DIR
    if not peft or merge:
        folders["model"] = MODEL_DIR
    kind = "full" if not peft else f"{peft}-merged" if merge else peft
    return {"seed": run["seed"], "best_epoch": run["best_epoch"], "dev": run["dev"], "test": run["test"],
            "selected_by": "dev", "kind": kind, "folders": folders}


def write_json(path: Path, data: dict, indent: int = 2) -> None:
    """`data` as JSON in `path`, whole or not at all (a crash mid-write leaves the previous file)."""
    write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def _records(folder: Path, results: dict[str, Any], base_model: str) -> None:
    """results.json of the run, and the base model's post-training record when it has one."""
    write_json(folder / RESULTS_FILE, results)
    summary = Path(base_model) / SUMMARY_FILE
    if summary.is_file():
        shutil.copyfile(summary, folder / SUMMARY_FILE)


def save_full_model(model, tokenizer, folder: Path, results: dict[str, Any], base_model: str) -> None:
    from modeling_xpt import save_model_folder

    save_model_folder(model, tokenizer, folder)  # safetensors; XPT: auto_map and the remote-code files too
    _records(folder, results, base_model)


def save_adapter(peft_model, tokenizer, folder: Path, results: dict[str, Any], base_model: str) -> None:
    from modeling_xpt import save_tokenizer

    local = Path(base_model)
    if local.is_dir():  # the base as an absolute path: the adapter then loads from any working directory
        for config in peft_model.peft_config.values():
            config.base_model_name_or_path = str(local.resolve())
    peft_model.save_pretrained(str(folder))
    save_tokenizer(tokenizer, folder)
    write_json(folder / RESULTS_FILE, results)


def save_selected(model, tokenizer, out_dir: str | Path, results: dict[str, Any], *, base_model: str,
                  peft: str | None, merge: bool) -> dict[str, Path]:
    """Write the selected model's folders (see the module docstring); returns {kind: folder}.
    A PEFT model is saved as its adapter first, then (`merge`) merged in place and saved in full."""
    out_dir = Path(out_dir)
    written = {}
    model.eval()
    if peft:
        with atomic_folder(out_dir / ADAPTER_DIR) as tmp:
            save_adapter(model, tokenizer, tmp, results, base_model)
        written["adapter"] = out_dir / ADAPTER_DIR
        if not merge:
            return written
        model = model.merge_and_unload()  # base weights + LoRA deltas, the trained head in place
    with atomic_folder(out_dir / MODEL_DIR) as tmp:
        save_full_model(model, tokenizer, tmp, results, base_model)
    written["model"] = out_dir / MODEL_DIR
    return written


def adapter_usage(adapter_dir: Path, task_type: str, labels: list[str] | None, trust_remote_code: bool,
                  pooling: str | None = None) -> str:
    """The Python line that loads a saved adapter with its base model. An adapter folder holds no config.json,
    so the line gives the label names (`id2label`, from which transformers counts the labels) and the
    sentence head's pooling when it is not the base model's."""
    auto = {"token": "AutoPeftModelForTokenClassification", "qa": "AutoPeftModelForQuestionAnswering"}.get(
        task_type, "AutoPeftModelForSequenceClassification")
    extra = "" if task_type == "qa" else f", id2label={dict(enumerate(labels))!r}" if labels else ", num_labels=1"
    extra += f", classifier_pooling={pooling!r}" if pooling else ""
    trust = ", trust_remote_code=True" if trust_remote_code else ""
    return f'from peft import {auto}; {auto}.from_pretrained("{adapter_dir}"{trust}{extra})'


PIPELINE_TASKS = {"token": "token-classification", "qa": "question-answering"}  # else text-classification


def model_usage(model_dir: Path, task_type: str, bi_encoder: bool) -> str:
    """The Python line that loads a saved fine-tuned model: the pipeline of its task, or, for the STS
    bi-encoder (a sentence encoder, no head), the encoder and how its sentence vectors are made. Folders
    with their own model code (XPT) load with `trust_remote_code=True`."""
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    trust = ", trust_remote_code=True" if config.get("auto_map") else ""
    if bi_encoder:
        return (f'from sentence_transformers import SentenceTransformer; SentenceTransformer("{model_dir}"{trust}), '
                f'or from transformers import AutoModel; AutoModel.from_pretrained("{model_dir}"{trust}): a sentence '
                "vector is the mean of last_hidden_state over the attention mask; similarity is their cosine")
    task = PIPELINE_TASKS.get(task_type, "text-classification")
    return f'from transformers import pipeline; pipeline("{task}", model="{model_dir}"{trust})'
