"""Saving a tokenizer so that transformers 4.x loads the folder too.

transformers 5 writes ``tokenizer_class: TokenizersBackend`` for a `tokenizers`-backed fast
tokenizer; transformers 4.57 cannot load that class. Every folder this package writes names
``PreTrainedTokenizerFast`` instead (the same files load as the same tokenizer on both), without
the load-time keys transformers 5 copies from the loading call.
"""
from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# Keys that describe the machine and call that loaded the tokenizer, not the tokenizer.
LOAD_TIME_KEYS = ("is_local", "local_files_only")
BACKEND_CLASSES = ("TokenizersBackend", "TokenizersBackendFast")


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    """``tokenizer.save_pretrained(out_dir)`` with ``tokenizer_config.json`` naming
    ``PreTrainedTokenizerFast`` where transformers 5 wrote ``TokenizersBackend``. Tokenizers of
    other classes (e.g. a slow or model-specific one) are saved unchanged."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    path = out / "tokenizer_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") not in BACKEND_CLASSES:
        return
    config["tokenizer_class"] = TOKENIZER_CLASS
    for key in LOAD_TIME_KEYS:
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
