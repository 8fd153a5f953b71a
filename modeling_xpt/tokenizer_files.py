"""Saving a tokenizer so that transformers 4.x loads the folder too; the language it was made for.

transformers 5 writes ``tokenizer_class: TokenizersBackend`` for a `tokenizers`-backed fast
tokenizer; transformers 4.57 cannot load that class. Every folder this package writes names
``PreTrainedTokenizerFast`` instead (the same files load as the same tokenizer on both), without
the load-time keys transformers 5 copies from the loading call.

The target language is recorded by the corpus preparation (``stats.json``) and the tokenizer
training (``training_info.json`` beside the tokenizer), and from there in ``XPTConfig.language``.
``tokenizer_config.json`` does not carry it: transformers has no language field for tokenizers in
general (only model-specific ones, such as NLLB's ``src_lang``, which change the encoding).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# Keys that describe the machine and call that loaded the tokenizer, not the tokenizer.
LOAD_TIME_KEYS = ("is_local", "local_files_only")
BACKEND_CLASSES = ("TokenizersBackend", "TokenizersBackendFast")
# What a model folder holds besides its weights (`*.safetensors`), as `save_model_folder` and transformers write
# it: the config, XPT's remote code and the tokenizer's files (of any tokenizer class)
CODE_FILES = ("configuration_xpt.py", "modeling_xpt.py")
MODEL_FOLDER_FILES = ("config.json", "generation_config.json", *CODE_FILES, "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt",
                      "sentencepiece.bpe.model", "spiece.model", "tokenizer.model", "chat_template.jinja",
                      "model.safetensors.index.json")


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    """``tokenizer.save_pretrained(out_dir)`` with ``tokenizer_config.json`` naming
    ``PreTrainedTokenizerFast`` where transformers 5 wrote ``TokenizersBackend``, and ``tokenizer.json``
    without the truncation or padding its last call left set. Tokenizers of other classes (e.g. a slow
    or model-specific one) are saved unchanged."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    backend = out / "tokenizer.json"
    if backend.is_file():  # the truncation and padding of the last call (fine-tuning's max_length) are not the tokenizer's
        from tokenizers import Tokenizer

        saved = Tokenizer.from_file(str(backend))
        if saved.truncation or saved.padding:
            saved.no_truncation()
            saved.no_padding()
            saved.save(str(backend), pretty=True)
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


TRAINING_INFO = "training_info.json"  # written by tokenization.train_tokenizer beside the tokenizer
CORPUS_STATS = "stats.json"  # written by tokenization.prepare_corpus in the corpus folder


def recorded_language(*folders) -> str | None:
    """The ISO 639 code recorded in the first of `folders` (a prepared corpus or a trained tokenizer;
    None entries and Hub ids are skipped) that records one, else None."""
    for folder in folders:
        if not folder:
            continue
        for name in (CORPUS_STATS, TRAINING_INFO):
            path = Path(folder) / name
            try:
                language = json.loads(path.read_text(encoding="utf-8")).get("language") if path.is_file() else None
            except (OSError, ValueError, AttributeError):
                language = None
            if isinstance(language, str) and language:
                return language
    return None


# The XPT weights with a row per token, padded to `pad_vocab_to_multiple_of` rows while training.
VOCABULARY_ROWS = ("embeddings.target_embeddings.weight", "lm_head.decoder.weight", "lm_head.bias")


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)  # "(os error 28)": how safetensors' errors word them (Rust's io::Error)


def save_model_folder(model, tokenizer, out_dir: str | Path) -> None:
    """A loadable folder: ``model.save_pretrained`` and `save_tokenizer`, every file with the ordinary
    permissions (read for all, as the umask allows). safetensors writes the weights through a private
    temporary file (mode 0600), which a shared server or a Docker image built from the folder could
    not read.

    An XPT model is saved with one row per token (`pad_vocab_to_multiple_of` 1): the rows that pad E_T, the
    tied decoder and the MLM bias for speed while training are left out, as a stock checkpoint has them and
    as tools that find the word embeddings by `config.vocab_size` (PEFT's prompt tuning) expect. The model
    in memory keeps its rows.

    All or nothing: a write that fails (or is interrupted) removes what it had added to the folder (config.json
    and code without weights would pass for a model), and a full disk is an `OSError` (ENOSPC) naming the weights
    whichever library noticed it: safetensors reports it as its own error, which is no OSError."""
    out = Path(out_dir)
    before = set(out.iterdir()) if out.is_dir() else None
    try:
        _write_model_folder(model, tokenizer, out)
    except BaseException as error:
        added = [out] if before is None else sorted(set(out.iterdir()) - before) if out.is_dir() else []
        for path in added:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not isinstance(error, OSError) and any(f"(os error {code})" in str(error) for code in FULL_DISK):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "model.safetensors")) from error
        raise


def _write_model_folder(model, tokenizer, out: Path) -> None:
    config = model.config
    multiple = getattr(config, "pad_vocab_to_multiple_of", 1)
    if multiple == 1:
        model.save_pretrained(str(out))
    else:
        rows, vocab = config.padded_vocab_size, config.vocab_size
        state = {name: weight[:vocab] if name.endswith(VOCABULARY_ROWS) and weight.shape[0] == rows else weight
                 for name, weight in model.state_dict().items()}
        config.pad_vocab_to_multiple_of = 1
        try:
            model.save_pretrained(str(out), state_dict=state)
        finally:
            config.pad_vocab_to_multiple_of = multiple
    save_tokenizer(tokenizer, out)
    umask = os.umask(0)
    os.umask(umask)
    for path in out.iterdir():
        if path.is_file() and not path.stat().st_mode & 0o044:
            os.chmod(path, 0o666 & ~umask)
