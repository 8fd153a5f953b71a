"""What may leave this machine: Hub ids and plain descriptions, never local paths or user names.

The uploaded copies of ``config.json`` and ``training_summary.json`` and the generated card go
through :func:`public_ref` / :func:`public_summary` / :func:`public_config` (and
``tokenizer_config.json`` through :func:`portable_tokenizer_config`); :func:`find_local_paths` is the
last check on every staged text file before an upload.
"""
from __future__ import annotations

import getpass
import json
import os
import re
from pathlib import Path

from training.inputs import looks_like_hub_id

from .folder import PACKAGE_HUB_IDS, hub_source_id

# Absolute paths under the usual roots of user, temporary and mounted data (POSIX and Windows),
# not preceded by a URL or word character (so "https://huggingface.co/org/x" is not one).
_ABSOLUTE = re.compile(r"(?<![\w:/.~-])(?:/(?:home|Users|tmp|root|work|mnt|data|var|private|opt|srv|scratch|media|"
                       r"run|content|workspace|usr|nfs|gpfs|lustre)(?!\w)(?:/[^\s\"'`),;\]]*)?|~/[^\s\"'`),;\]]*|"
                       r"[A-Za-z]:\\[^\s\"'`),;\]]*)")


def hf_dataset_id(spec: str | None) -> str | None:
    """``hf:ID:CONFIG[:SPLIT]`` (the corpus preparation's input syntax) -> ``ID``."""
    if isinstance(spec, str) and spec.startswith("hf:"):
        dataset = spec[3:].split(":")[0]
        return dataset if looks_like_hub_id(dataset) else None
    return None


def corpus_stats(spec: str | None) -> dict | None:
    """``stats.json`` of a prepared corpus folder (tokenization.prepare_corpus), if `spec` is one."""
    if not spec or not isinstance(spec, str):
        return None
    path = Path(spec) / "stats.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def corpus_hub_datasets(spec: str | None) -> list[str]:
    """Hub dataset ids the data came from: the spec itself (``hf:ID:...`` or a Hub id), or the
    ``inputs`` recorded in the prepared corpus's ``stats.json``."""
    direct = hf_dataset_id(spec)
    if direct:
        return [direct]
    stats = corpus_stats(spec) or {}
    ids = [hf_dataset_id((item or {}).get("input")) for item in stats.get("inputs") or [] if isinstance(item, dict)]
    return list(dict.fromkeys(i for i in ids if i))


def _count_files(path: Path) -> int:
    if path.is_file():
        return 1
    try:
        return sum(1 for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    except OSError:
        return 0


def public_ref(value, kind: str = "path") -> str | None:
    """A reference fit for upload: a Hub id stays (``package:NAME`` becomes its known Hub id,
    ``hf:ID:CONFIG`` stays as it is), anything local becomes a plain description of `kind`
    ("local corpus (3 files)", "local tokenizer")."""
    if value is None or not isinstance(value, str):
        return value
    if not value:
        return value
    hub = hub_source_id(value)
    if hub:
        return hub
    for package, package_hub in PACKAGE_HUB_IDS.items():  # a known model shipped in a Python package
        if kind == "model" and re.search(rf"[/\\]{package}(?:[/\\]|$)", value):
            return package_hub
    if hf_dataset_id(value):
        return value
    if kind == "corpus":
        datasets = corpus_hub_datasets(value)
        if datasets:
            return ", ".join(datasets)
        if value == "konlpy":
            return value
        path = Path(value)
        if path.exists():
            files = _count_files(path)
            return f"local corpus ({files} file{'s' if files != 1 else ''})"
        return "local corpus"
    if kind == "tokenizer":
        return "local tokenizer (its files are in this repository)"
    if kind == "model":
        return "local model"
    return scrub_text(value) if find_local_paths(value) else value


def scrub_text(text: str) -> str:
    """Replace every local path (and the user's home) in free text by ``<local path>``."""
    home = str(Path.home())
    if home and home not in ("/", ""):
        text = text.replace(home, "<local path>")
    return _ABSOLUTE.sub("<local path>", text)


def _local(value: str) -> bool:
    if find_local_paths(value):
        return True
    if looks_like_hub_id(value) or "/" not in value and "\\" not in value:
        return False
    return value.startswith((".", "/", "~")) or os.path.exists(value)


# Keys of training_summary.json / its "config" whose values are references of a known kind.
_KINDS = {"source_model": "model", "source": "model", "tokenizer": "tokenizer", "data": "corpus", "spec": "corpus",
          "train": "corpus", "valid": "corpus", "test": "corpus", "output_dir": "path", "cache_dir": "path",
          "resume_from_checkpoint": "path", "logging_dir": "path", "model": "model"}


def _walk(value, key: str | None = None):
    if isinstance(value, dict):
        return {k: _walk(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, key) for v in value]
    if not isinstance(value, str):
        return value
    kind = _KINDS.get(key or "", "path")
    if kind == "corpus" and key in ("train", "valid", "test") and ":" in value and not value.startswith("hf:"):
        base, split = value.rsplit(":", 1)  # "<corpus>:train"
        return f"{public_ref(base, 'corpus')}:{split}" if _local(base) else value
    if kind == "model" and value.startswith("package:"):
        return hub_source_id(value) or value.split(" (")[0]
    if _local(value):
        if kind == "path" and key in ("output_dir", "cache_dir", "logging_dir", "resume_from_checkpoint"):
            return "local folder"
        return public_ref(value, kind) if kind != "path" else scrub_text(value) if find_local_paths(value) else "local path"
    return value


def public_summary(summary: dict) -> dict:
    """training_summary.json as uploaded: every local path replaced (see :func:`public_ref`), the
    Hub datasets the corpus came from recorded in ``data.datasets``."""
    out = _walk(summary)
    data = summary.get("data") if isinstance(summary.get("data"), dict) else None
    if data is not None:
        datasets = corpus_hub_datasets(data.get("spec"))
        if datasets:
            out["data"]["datasets"] = datasets
    return out


def public_config(config: dict) -> dict:
    """config.json as uploaded: ``source_name_or_path`` (and any other string) without local paths."""
    out = dict(config)
    for key in ("source_name_or_path", "_name_or_path", "name_or_path"):
        if isinstance(out.get(key), str) and out[key] and _local(out[key]):
            out[key] = public_ref(out[key], "model") if key == "source_name_or_path" else ""
    return _walk(out)


def portable_tokenizer_config(config: dict) -> dict:
    """tokenizer_config.json as uploaded: ``PreTrainedTokenizerFast`` where transformers 5 wrote
    ``TokenizersBackend`` (transformers 4.x loads it), without load-time keys."""
    from modeling_xpt.tokenizer_files import BACKEND_CLASSES, LOAD_TIME_KEYS, TOKENIZER_CLASS

    if config.get("tokenizer_class") not in BACKEND_CLASSES:
        return config
    return {**{k: v for k, v in config.items() if k not in LOAD_TIME_KEYS}, "tokenizer_class": TOKENIZER_CLASS}


def find_local_paths(text: str) -> list[str]:
    """Local paths and the user's home or name as a path part, found in `text` (empty: clean)."""
    found = [m.group(0) for m in _ABSOLUTE.finditer(text)]
    home = str(Path.home())
    if home not in ("/", "") and home in text:
        found.append(home)
    try:
        user = getpass.getuser()
    except Exception:  # no user name to look for
        user = ""
    if user and len(user) > 2 and re.search(rf"[/\\]{re.escape(user)}[/\\]", text):
        found.append(f"/{user}/")
    return list(dict.fromkeys(found))
