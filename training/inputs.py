"""What a run reads, recognised before anything loads: Hub ids or local paths, the English source
("package:NAME", folder or Hub id) and its family, the target tokenizer and its family, and JSON files
that must parse. Post-training's config, the convert command, fine-tuning and the cards use these
checks; errors are `ConfigError`s naming the field.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tokenization.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]


def shipped_config(name: str) -> Path | None:
    """A config the project ships (`demo.yaml`, `study-cpu.yaml`, ...): the checkout's configs/ folder, or, in
    an installed copy, the same files installed as `training/configs` (pyproject.toml); None if there is none."""
    checkout = [REPO_ROOT / "configs"] if (REPO_ROOT / "pyproject.toml").is_file() else []  # not site-packages/configs
    for folder in (*checkout, Path(__file__).resolve().parent / "configs"):
        if (folder / name).is_file():
            return folder / name
    return None


def looks_like_hub_id(value: str | None) -> bool:
    """``name`` or ``org/name`` valid as the Hub validates repo ids (`huggingface_hub.utils.validate_repo_id`:
    characters, ``--``/``..``, length) and not a path: not written as one (``./``, ``/``, ``~``, a file
    suffix) and not existing here. The one such check in the project (post-training's config, the
    cards and the Space use it)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not value or not isinstance(value, str) or value.count("/") > 1:
        return False
    if value.startswith((".", "/", "~")) or "\\" in value or value.endswith((".json", ".txt", ".gz")):
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return not os.path.exists(value)


def resolve_source(source: str) -> str:
    """A local folder for "package:NAME" sources (a package exposing get_model_path()); else unchanged."""
    if source.startswith("package:"):
        import importlib

        name = source.removeprefix("package:")
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise ConfigError("source", f"package {name!r} is not installed ({error}); `pip install {name.replace('_', '-')}`") from error
        return str(module.get_model_path())
    return source


def resolve_local(path: str) -> Path | None:
    """An existing local path, tried as given (relative to the working directory) and relative to the repo root."""
    for candidate in (Path(path).expanduser(), REPO_ROOT / path):
        if candidate.exists():
            return candidate
    return None


def recorded_ref(value: str) -> str:
    """How a run records a model it read: a local path as an absolute path, so that a card or report made
    from another working folder never reads `runs/xpt-ko` as the Hub repo of that name; else as given."""
    local = resolve_local(value) if value and not value.startswith("package:") else None
    return str(local.resolve()) if local is not None else value


def check_json_files(folder: Path, role: str, fix: str) -> None:
    """Every JSON file transformers reads from a local model or tokenizer folder must parse: a file cut
    short or damaged is named in one line with `fix`, before anything is written."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                raise ConfigError(role, f"{path} does not parse ({type(error).__name__}: "
                                  f"{str(error).splitlines()[0][:120]}): the file is damaged or cut short; {fix}") from None


def check_source_and_tokenizer(source: str, tokenizer: str | None) -> str:
    """The English source (Hub id, folder or "package:NAME") and the target tokenizer, checked before
    anything loads: missing local paths, folders without a checkpoint or tokenizer, and families that do
    not match fail here (Hub ids pass: not checked offline). Returns the source as a loadable reference.
    Shared by post-training and `xpt-convert` (training/convert.py)."""
    given, source = source, resolve_source(source)
    if resolve_local(source) is None and not looks_like_hub_id(source):
        raise ConfigError("source", f"{given!r} is neither an existing folder nor a Hub model id")
    local = resolve_local(source)
    if local is not None and not (local / "config.json").is_file():
        raise ConfigError("source", f"{local} has no config.json: not a transformers checkpoint")
    if tokenizer is not None:
        if resolve_local(tokenizer) is None and not looks_like_hub_id(tokenizer):
            raise ConfigError("tokenizer", f"{tokenizer!r} is neither an existing folder nor a Hub tokenizer id")
        local_tok = resolve_local(tokenizer)
        if local_tok is not None and local_tok.is_dir() and not any(
                (local_tok / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
            raise ConfigError("tokenizer", f"{local_tok} holds no tokenizer files (tokenizer.json / tokenizer_config.json)")
    if tokenizer is not None:
        check_families(source, tokenizer, given)
    return str(local) if local is not None else source


def check_families(source: str, tokenizer, given: str | None = None) -> None:
    """The tokenizer's family (a folder, or a loaded tokenizer) must be the source's (special tokens and
    template); either one unknown (a Hub id, not looked up offline) passes."""
    families = {"source": source_family(source), "tokenizer": tokenizer_family(tokenizer)}
    if families["source"] and families["tokenizer"] and families["source"] != families["tokenizer"]:
        raise ConfigError("tokenizer", f"tokenizer family {families['tokenizer']!r} does not match the source family "
                          f"{families['source']!r} ({given or source}); train the tokenizer with --family "
                          f"{families['source']}")


def source_family(source: str) -> str | None:
    """model_type of a local source checkpoint (None for Hub ids: not looked up offline)."""
    local = resolve_local(source)
    if local is None or not (local / "config.json").is_file():
        return None
    return json.loads((local / "config.json").read_text()).get("model_type")


def _json_object(path: Path) -> dict:
    """The JSON object in `path`; {} when it holds something else or no valid JSON (the loader reports that)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def tokenizer_family(tokenizer) -> str | None:
    """'bert' ([CLS]/[MASK]) or 'roberta' (<s>/<mask>) from the special tokens of a loaded tokenizer, or of a
    local tokenizer folder read without loading it (its tokenizer_config.json / special_tokens_map.json, else
    the special tokens of tokenizer.json); None when neither or not local."""
    if not isinstance(tokenizer, (str, Path)):
        specials = set(tokenizer.all_special_tokens)
    else:
        local = resolve_local(str(tokenizer))
        if local is None or not local.is_dir():
            return None
        specials = set()
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            if (local / name).is_file():
                for key, value in _json_object(local / name).items():
                    if key.endswith("_token"):
                        specials.add(value.get("content") if isinstance(value, dict) else value)
        if not specials and (local / "tokenizer.json").is_file():
            added = _json_object(local / "tokenizer.json").get("added_tokens") or []
            specials = {token.get("content") for token in added if isinstance(token, dict) and token.get("special")}
    if specials & {"[MASK]", "[CLS]"}:
        return "bert"
    if specials & {"<mask>", "<s>"}:
        return "roberta"
    return None
