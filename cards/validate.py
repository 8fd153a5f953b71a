"""Offline checks that a folder is publishable on the Hub (used by `cards.push` before anything else).

Custom-code folders (`--format custom`): safetensors weights and no pickle checkpoint, config.json
with an `auto_map` whose entries point at the two remote-code files, both files present, a
tokenizer that loads and matches the config, a README.md whose metadata parses with
huggingface_hub's ModelCard loader (model-index included) and carries the required fields, and
widget examples that use this tokenizer's mask token. Stock folders (`--format stock`): the same
without custom code (and none may be present).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from modeling_xpt.tokenizer_files import CODE_FILES

from .folder import (
    ARCHITECTURE_TASKS,
    CARD_FILE,
    PICKLE_SUFFIXES,
    STOCK_MODEL_TYPES,
    has_tokenizer_files,
    tokenizer_facts,
    upload_files,
)
from .licenses import license_id_problem

LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}$")  # ISO 639-1 (two letters) or 639-3 (three letters)
KNOWN_MASK_TOKENS = ("<mask>", "[MASK]", "<MASK>", "[mask]", "<extra_id_0>")
PIPELINE_TAGS = ("fill-mask", "text-classification", "token-classification", "question-answering", "feature-extraction")


@dataclass
class Report:
    path: Path
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    tokenizer: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def format(self) -> str:
        lines = [f"{'OK' if self.ok else 'NOT PUBLISHABLE'}: {self.path}"]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _check_weights(path: Path, report: Report) -> None:
    pickles = sorted(p.name for p in path.iterdir() if p.is_file() and p.name.endswith(PICKLE_SUFFIXES))
    if pickles:
        report.errors.append(f"pickle checkpoint(s) {', '.join(pickles)}: publish safetensors only (pickle files can "
                             "run arbitrary code when loaded); re-save with save_pretrained (safe_serialization) and "
                             "delete them")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        report.errors.append("no *.safetensors weights (model.safetensors) in the folder")
        return
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            report.errors.append(f"safetensors index names missing shard(s): {', '.join(missing)}")
    from safetensors import safe_open

    for file in weights:
        try:
            with safe_open(str(file), framework="pt") as handle:
                if not list(handle.keys()):
                    report.errors.append(f"{file.name} holds no tensors")
        except Exception as error:
            report.errors.append(f"{file.name} is not a readable safetensors file: {error}")


def _check_config(path: Path, report: Report, fmt: str) -> dict:
    file = path / "config.json"
    if not file.is_file():
        report.errors.append("config.json is missing")
        return {}
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        report.errors.append(f"config.json does not parse: {error}")
        return {}
    archs = config.get("architectures") or []
    if not archs:
        report.errors.append("config.json has no `architectures`: the Hub cannot tell which head to load")
    elif archs[0] not in ARCHITECTURE_TASKS:
        report.warnings.append(f"architecture {archs[0]} is not one this project publishes")
    code_present = [name for name in CODE_FILES if (path / name).is_file()]
    if fmt == "custom":
        if config.get("model_type") != "xpt":
            report.errors.append(f"config.json model_type is {config.get('model_type')!r}, not 'xpt' "
                                 "(use --format stock for a stock export)")
        auto_map = config.get("auto_map")
        if not isinstance(auto_map, dict) or not auto_map:
            report.errors.append("config.json has no `auto_map`: AutoModel*.from_pretrained(..., trust_remote_code=True) "
                                 "cannot find the model code")
        else:
            needed = ["AutoConfig"]
            if archs and archs[0] in ARCHITECTURE_TASKS:
                needed.append(ARCHITECTURE_TASKS[archs[0]][1])
            for key in needed:
                if key not in auto_map:
                    report.errors.append(f"config.json auto_map has no {key}")
            for key, ref in auto_map.items():
                ref = ref[0] if isinstance(ref, (list, tuple)) else ref
                if not isinstance(ref, str) or "." not in ref:
                    report.errors.append(f"auto_map {key} = {ref!r} is not 'module.Class'")
                    continue
                module = ref.split("--")[-1].rsplit(".", 1)[0] + ".py"
                if not (path / module).is_file():
                    report.errors.append(f"auto_map {key} points at {module}, which is missing")
        for name in CODE_FILES:
            if name not in code_present:
                report.errors.append(f"custom-code file {name} is missing (save_pretrained copies it; copy it from modeling_xpt/)")
    else:
        if config.get("model_type") not in STOCK_MODEL_TYPES:
            report.errors.append(f"stock format needs model_type {', '.join(STOCK_MODEL_TYPES)}, found {config.get('model_type')!r}")
        if config.get("auto_map"):
            report.errors.append("a stock export must not carry auto_map (it would ask users for trust_remote_code)")
        if code_present:
            report.errors.append(f"a stock export must not carry custom code ({', '.join(code_present)})")
    return config


def _check_tokenizer(path: Path, report: Report, config: dict) -> dict:
    if not has_tokenizer_files(path):
        report.errors.append("no tokenizer (tokenizer.json or vocabulary files) in the folder")
        return {}
    if not (path / "tokenizer_config.json").is_file():
        report.errors.append("tokenizer_config.json is missing")
    facts = tokenizer_facts(path)
    if "error" in facts:
        report.errors.append(f"the tokenizer does not load: {facts['error']}")
        return {}
    vocab = config.get("vocab_size")
    if isinstance(vocab, int) and vocab != facts["vocab_size"]:
        report.errors.append(f"config vocab_size {vocab} != len(tokenizer) {facts['vocab_size']}")
    if config.get("mask_token_id") is not None and facts.get("mask_token_id") is not None \
            and config["mask_token_id"] != facts["mask_token_id"]:
        report.errors.append(f"config mask_token_id {config['mask_token_id']} != tokenizer's {facts['mask_token_id']}")
    return facts


def _check_card(path: Path, report: Report, config: dict, facts: dict, fmt: str) -> dict:
    file = path / CARD_FILE
    if not file.is_file():
        report.errors.append("README.md (model card) is missing: run `python -m cards.make_card --model-dir DIR`")
        return {}
    from huggingface_hub import ModelCard

    try:
        card = ModelCard.load(file, ignore_metadata_errors=False)
    except Exception as error:
        report.errors.append(f"model card metadata does not parse: {error}")
        return {}
    meta = card.data.to_dict()
    if not meta:
        report.errors.append("model card has no YAML metadata block")
        return {}
    archs = config.get("architectures") or []
    expected_tag = ARCHITECTURE_TASKS.get(archs[0], (None,))[0] if archs else None
    for key, want in (("library_name", "transformers"), ("language", None), ("license", None), ("pipeline_tag", None)):
        if not meta.get(key):
            report.errors.append(f"card metadata lacks `{key}`")
        elif want and meta[key] != want:
            report.errors.append(f"card metadata {key} is {meta[key]!r}, expected {want!r}")
    if isinstance(meta.get("license"), str) and license_id_problem(meta["license"]):
        report.errors.append(f"card {license_id_problem(meta['license'])} (pass --license with that id)")
    language = meta.get("language")
    for code in ([language] if isinstance(language, str) else language or []):
        if not isinstance(code, str) or not LANGUAGE_CODE.match(code):
            report.errors.append(f"card language {code!r} is not an ISO 639-1/639-3 code (such as 'ko', 'ja', 'tha'): "
                                 "fix `language:` or pass --language CODE")
    tag = meta.get("pipeline_tag")
    if tag and tag not in PIPELINE_TAGS:
        report.errors.append(f"pipeline_tag {tag!r} is not a task this model can serve")
    if tag and expected_tag and tag != expected_tag:
        report.errors.append(f"pipeline_tag {tag!r} does not match the architecture {archs[0]} ({expected_tag})")
    tags = meta.get("tags") or []
    if fmt == "custom" and "custom_code" not in tags:
        report.warnings.append("card tags lack custom_code")
    widgets = meta.get("widget") or []
    if not isinstance(widgets, list) or any(not isinstance(w, dict) or not isinstance(w.get("text"), str) for w in widgets):
        report.errors.append("card `widget` must be a list of {text: ...} entries")
        widgets = []
    if tag == "fill-mask":
        mask = facts.get("mask_token")
        if not widgets:
            report.errors.append("fill-mask card has no widget examples")
        for number, widget in enumerate(widgets, 1):
            text = widget["text"]
            if not mask:
                break
            if mask not in text:
                others = [m for m in KNOWN_MASK_TOKENS if m in text and m != mask]
                report.errors.append(f"widget example {number} ({text!r}) " +
                                     (f"uses {others[0]!r} but the tokenizer's mask token is {mask!r}" if others else
                                      f"has no mask token {mask!r}"))
            elif text.count(mask) != 1:
                report.errors.append(f"widget example {number} has {text.count(mask)} mask tokens; use exactly one")
    if meta.get("model-index") and not card.data.eval_results:
        report.errors.append("model-index present but yields no evaluation results")
    return meta


def validate_folder(model_dir: str | Path, fmt: str = "custom") -> Report:
    """All offline checks; `report.ok` says whether the folder may be uploaded."""
    if fmt not in ("custom", "stock"):
        raise ValueError(f"format {fmt!r}: choose custom or stock")
    path = Path(model_dir)
    report = Report(path=path)
    if not path.is_dir():
        report.errors.append(f"{path} is not a folder")
        return report
    report.files, report.skipped = upload_files(path)
    _check_weights(path, report)
    config = _check_config(path, report, fmt)
    report.tokenizer = _check_tokenizer(path, report, config)
    report.metadata = _check_card(path, report, config, report.tokenizer, fmt)
    return report
