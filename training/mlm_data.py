"""MLM data for post-training: text splits -> token rows (tokenised once, packed, cached).

Pipeline
1. `load_text_splits`: train/valid/test `datasets.Dataset`s with a "text" column from a prepared
   splits folder (`python -m tokenization.prepare_corpus`), text/jsonl/parquet files or a folder
   of them (valid/test held out after a fixed shuffle), a Hub dataset id, or "konlpy" (the small
   Korean corpora shipped inside the PyPI package konlpy; read as plain files, no Java).
   .txt and .jsonl files (also .gz/.bz2/.xz) are read by the corpus preparation's reader
   (`tokenization.corpus_io`): a line that is not UTF-8 is skipped and counted, not fatal.
2. `build_token_rows`: tokenise every sentence once (`datasets.map`), wrap it as `[CLS] ... [SEP]`
   (`<s> ... </s>`), cut sentences longer than a row, and pack sentences into rows of at most
   `max_seq_length` tokens (`pack_rows`, best-fit decreasing within each batch of 10,000 sentences;
   `seg_lengths` records the sentences of a row; attention is block-diagonal and positions restart
   per sentence, so packing does not change what a sentence sees). Without packing every sentence
   is a row and batches are length-grouped. The result is saved under
   `cache_dir/<hash of data, tokenizer and lengths>/` and reloaded on later runs.

The rows become masked training and evaluation batches in `training/mlm_batches.py`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np

from tokenization.corpus_io import (COMPRESSED, SPLIT_NAMES, Utf8Counter, base_suffix, data_files, folder_splits,
                                    iter_file_texts)
from tokenization.errors import ConfigError, InputError

CACHE_VERSION = 3  # 2: text files read by tokenization.corpus_io (lines split at "\n" only); 3: best-fit packing
# Read line by line by tokenization.corpus_io (which also opens .gz/.bz2/.xz); the structured formats
# go to the datasets builder of the same name.
LINE_SUFFIXES = (".txt", ".jsonl")
BUILDERS = {".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


# ----------------------------------------------------------------------------------------------
# 1. Text splits
# ----------------------------------------------------------------------------------------------


def konlpy_corpus_files() -> list[Path]:
    """Text files of the corpora bundled in the konlpy wheel (kolaw, kobill), found without importing
    konlpy (its import pulls in JPype; reading the files needs no Java)."""
    spec = importlib.util.find_spec("konlpy")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("data 'konlpy' needs the PyPI package konlpy (`pip install konlpy`); "
                                "only its bundled corpus files are read, Java is not needed")
    root = Path(list(spec.submodule_search_locations)[0]) / "data" / "corpus"
    files = sorted(p for p in root.rglob("*.txt") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no corpus files under {root}")
    return files


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = data_files(path, accepts=_builder)  # none in hidden folders (.ipynb_checkpoints/)
    if not files:
        raise InputError(f"{path}: no data files in this folder (.txt or .jsonl, also .gz/.bz2/.xz, or .json, "
                         ".parquet, .arrow, .csv)")
    return files


def _builder(path: Path) -> str | None:
    """"lines" (read by tokenization.corpus_io), a datasets builder name, or None (not a data file)."""
    suffix = base_suffix(path)
    if suffix in LINE_SUFFIXES or (suffix == "" and path.suffix.lower() in COMPRESSED):
        return "lines"
    return BUILDERS.get(suffix)


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _load_files(files: list[Path], text_column: str, cache_dir: str | None):
    import datasets

    builders = {_builder(f) or "lines" for f in files}  # a file named as data is text, as the tokenizer commands read it
    if len(builders) != 1:
        raise ValueError(f"data files of mixed formats {sorted(map(str, builders))}: {files[:5]}")
    builder = builders.pop()
    if builder == "lines":
        # Not datasets' "text"/"json" builders: they stop at the first line that is not UTF-8, where the
        # corpus reader skips and counts it as the corpus preparation does. from_generator keeps datasets'
        # cache (keyed by the generator's arguments, so by the files' sizes and times) and Arrow storage.
        files_key = [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]
        return datasets.Dataset.from_generator(read_texts, features=datasets.Features({"text": datasets.Value("string")}),
                                               gen_kwargs=dict(files=files_key, text_column=text_column),
                                               cache_dir=cache_dir)
    ds = datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", cache_dir=cache_dir)
    return _text_only(ds, text_column)


def read_texts(files: list, text_column: str):
    """{"text": ...} for every non-blank text of `files` ([path, size, mtime] each; size and time only key the
    cache), read by `tokenization.corpus_io.iter_file_texts`. Lines that are not UTF-8 are skipped and
    summarised per file on stderr when the files are read (a later run that reuses the cached dataset
    does not read them again). Files with no text at all are an InputError."""
    bad = Utf8Counter()
    found = False
    for path, _size, _mtime in files:
        for text in iter_file_texts(Path(path), bad, text_column, option="--text-column"):
            if text.strip():
                found = True
                yield {"text": text}
    bad.warn()
    if not found:
        names = ", ".join(str(path) for path, _, _ in files[:3]) + (", ..." if len(files) > 3 else "")
        raise InputError(f"{names}: no text to train on (empty or blank)")


SCRIPT_SAMPLE = 1000


def check_target_script(texts, *, language: str, min_share: float, data: str) -> None:
    """Refuse training text in which fewer than `min_share` of up to SCRIPT_SAMPLE randomly sampled texts
    (a fixed sample) hold a character of `language`'s script: a corpus in the wrong language would
    otherwise train to the end and exit 0. Raises ConfigError (field `data`)."""
    from tokenization.korean_text import script_filter
    from tokenization.errors import ConfigError

    script, pattern = script_filter(language)
    if pattern is None or min_share <= 0 or len(texts) == 0:  # language "none": no script to look for
        return
    rows = np.random.default_rng(0).choice(len(texts), size=min(len(texts), SCRIPT_SAMPLE), replace=False)
    sample = texts.select(np.sort(rows))["text"]
    share = sum(1 for text in sample if pattern.search(text)) / len(sample)
    if share < min_share:
        raise ConfigError("data", f"only {share:.0%} of {len(sample)} sampled training texts of {data} contain {script} "
                          f"characters, the script of language {language} (min_script_share {min_share:g}): check "
                          "--data, or set --language to the language of the text, or --min-script-share 0 to "
                          "train on it anyway")


def _text_only(ds, text_column: str):
    if text_column not in ds.column_names:
        raise ValueError(f"text_column {text_column!r} not in the data columns {ds.column_names}")
    if text_column != "text":
        ds = ds.rename_column(text_column, "text")
    ds = ds.select_columns(["text"])
    return ds.filter(lambda batch: [bool(t and t.strip()) for t in batch["text"]], batched=True)


def _load_split_dir(path: Path, text_column: str, cache_dir: str | None):
    import datasets

    if _is_saved_dataset(path):
        return _text_only(datasets.load_from_disk(str(path)), text_column)
    return _load_files(_data_files(path), text_column, cache_dir)


def describe_data_source(data: str) -> dict:
    """What the data spec points at, with file sizes and mtimes (part of the cache key)."""
    if data == "konlpy":
        files = konlpy_corpus_files()
    else:
        from training.inputs import resolve_local

        local = resolve_local(data)
        if local is None:
            return {"hub": data}
        files = [p for p in sorted(local.rglob("*") if local.is_dir() else [local]) if p.is_file()]
    return {"files": [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files]}


def _stream_texts(data: str, data_config: str | None, text_column: str, limit: int | None, source: dict | None = None):
    """The texts of `data`'s train split, streamed (`source`, unused here, keys datasets' cache: local files
    rewritten under the same name are read again)."""
    import datasets

    from training.inputs import resolve_local

    local = resolve_local(data)
    stream = datasets.load_dataset(str(local) if local else data, data_config, split="train", streaming=True)
    if limit:
        stream = stream.take(limit)
    for example in stream:
        text = example[text_column]
        if text and text.strip():
            yield {"text": text}


def load_text_splits(data: str, *, text_column: str = "text", valid_size: int = 2000, test_size: int = 2000,
                     data_config: str | None = None, cache_dir: str | None = None, split_seed: int = 0,
                     streaming: bool = False, stream_limit: int | None = None):
    """{"train", "valid", "test"} -> Dataset with a "text" column ("test" may be missing for Hub data without it).

    `streaming` (Hub ids or local folders): read only the first `stream_limit` records of the Hub train split instead of
    downloading it all (valid/test are then held out of them); they are materialised once in `cache_dir`."""
    import datasets

    from training.inputs import reading_from_hub, resolve_local

    splits = {}
    if data == "konlpy":
        corpus = _load_files(konlpy_corpus_files(), "text", cache_dir)
    elif streaming:
        corpus = datasets.Dataset.from_generator(  # cached by its arguments: the files' sizes and times among them
            _stream_texts, gen_kwargs=dict(data=data, data_config=data_config, text_column=text_column,
                                           limit=stream_limit, source=describe_data_source(data)), cache_dir=cache_dir)
    else:
        local = resolve_local(data)
        saved_dict = local is not None and _is_saved_dataset(local) and (local / "dataset_dict.json").is_file()
        if local is None or saved_dict:  # a Hub dataset id, or a DatasetDict saved with save_to_disk
            if local is None:  # a Hub that cannot be reached is one line naming `data`, not datasets' traceback
                with reading_from_hub("data", data):
                    loaded = datasets.load_dataset(data, data_config, cache_dir=cache_dir)
            else:
                loaded = datasets.load_from_disk(str(local))
            for split, names in SPLIT_NAMES.items():
                for name in names:
                    if name in loaded:
                        splits[split] = _text_only(loaded[name], text_column)
                        break
            corpus = splits.pop("train")
        else:
            # split folders or files (DIR/train, train.txt, the Hub's data/train-*), decided as the tokenizer
            # commands decide them; None: one corpus, valid/test held out of it below
            found = folder_splits(local, accepts=_builder) if local.is_dir() else None
            if found is not None:
                for split, paths in found.items():
                    splits[split] = (_load_split_dir(paths[0], text_column, cache_dir) if len(paths) == 1
                                     else _load_files(paths, text_column, cache_dir))
            else:
                splits["train"] = _load_files(_data_files(local), text_column, cache_dir)
            corpus = splits.pop("train")
    for split in [s for s in ("valid", "test") if s in splits and len(splits[s]) == 0]:
        del splits[split]  # an empty prepared split: hold out from train instead
    sizes = {"test": test_size, "valid": valid_size}
    missing = [s for s in ("valid", "test") if s not in splits and sizes[s] > 0]  # a size of 0: no such split
    if missing:  # hold out from the corpus after a fixed shuffle (sources are often concatenated by kind)
        need = sum(sizes[s] for s in missing)
        if len(corpus) <= need:
            raise ConfigError(" + ".join(f"{s}_size" for s in missing), f"{' + '.join(str(sizes[s]) for s in missing)} "
                              f"held-out sentences need more than {need} in the data, to leave some to train on; "
                              f"{data!r} has {len(corpus)}: give smaller sizes, or more text")
        corpus = corpus.shuffle(seed=split_seed)
        start = 0
        for split in ("test", "valid"):
            if split in missing:
                splits[split] = corpus.select(range(start, start + sizes[split]))
                start += sizes[split]
        corpus = corpus.select(range(start, len(corpus)))
        # a text repeated in the corpus (reviews, comments) must not sit in train and in a held-out split
        held = {t for s in missing for t in splits[s]["text"]}
        corpus = corpus.filter(lambda texts: [t not in held for t in texts], input_columns="text", batched=True,
                               desc="drop held-out texts from train")
    splits["train"] = corpus
    return splits


# ----------------------------------------------------------------------------------------------
# 2. Tokenised, packed rows (cached)
# ----------------------------------------------------------------------------------------------


def tokenizer_fingerprint(tokenizer) -> str:
    """What decides the token ids: the backend's model, normalizer and templates, without its truncation and
    padding state (loaded from tokenizer.json, cleared by the first call: it changed between runs)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        text = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    else:  # a copy without that state, serialised as before (so that a tokenizer without it keeps its key)
        from tokenizers import Tokenizer

        copy = Tokenizer.from_str(backend.to_str())
        copy.no_truncation()
        copy.no_padding()
        text = copy.to_str()
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def special_ids(tokenizer) -> tuple[int, int]:
    """(start, end) ids that wrap a sentence: [CLS]/[SEP] or <s>/</s>."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or end is None:
        raise ValueError("the tokenizer needs cls/sep (or bos/eos) tokens to wrap sentences")
    return start, end


def _tokenize_batch(batch, tokenizer, max_len: int, start: int, end: int):
    # verbose=False: whole sentences/paragraphs are tokenised here and cut into rows of max_len
    # below, so transformers' "longer than the specified maximum sequence length" warning is false.
    enc = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
    out_ids, out_starts = [], []
    body = max_len - 2
    for i, ids in enumerate(enc["input_ids"]):
        if not ids:
            continue
        word_ids = enc.word_ids(i) if enc.encodings is not None else [None] * len(ids)
        starts = [int(j == 0 or w is None or w != word_ids[j - 1]) for j, w in enumerate(word_ids)]
        for k in range(0, len(ids), body):  # long sentences/paragraphs: consecutive chunks
            chunk_starts = starts[k:k + body]
            chunk_starts[0] = 1
            out_ids.append([start] + ids[k:k + body] + [end])
            out_starts.append([1] + chunk_starts + [1])
    return {"input_ids": out_ids, "word_start": out_starts}


def pack_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Sentences (by their lengths, each at most `capacity`) -> rows: lists of sentence indices whose
    lengths sum to at most `capacity`. Best-fit decreasing: longest sentence first, each into the row
    with the least room that still fits it, else a new row (ties keep corpus order).

    Hand-written (no library in the dependencies packs bins), and with rows indexed by their free room,
    so that a sentence costs at most `capacity` lookups. On 20,000 Korean texts (reviews, comments, formal
    paragraphs; 32K tokenizer, rows of 128) rows come out 99.9% full, against 80% when
    consecutive sentences fill a row until the next one does not fit: a step of the same shape trains on
    a quarter more real tokens (docs/BENCHMARKS.md, "Decisions")."""
    too_long = next((i for i, n in enumerate(lengths) if n > capacity), None)
    if too_long is not None:
        raise ValueError(f"sentence {too_long} has {lengths[too_long]} tokens, more than a row's {capacity}: "
                         "cut it first (build_token_rows does)")
    rows: list[list[int]] = []
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]  # by_room[r]: rows with r free slots
    for i in sorted(range(len(lengths)), key=lambda j: -lengths[j]):
        need = lengths[i]
        room = next((r for r in range(need, capacity + 1) if by_room[r]), None)
        if room is None:
            row, room = len(rows), capacity
            rows.append([])
        else:
            row = by_room[room].pop()
        rows[row].append(i)
        by_room[room - need].append(row)
    return rows


def _pack_batch(batch, max_len: int, packing: bool):
    ids, starts = batch["input_ids"], batch["word_start"]
    rows = pack_rows([len(x) for x in ids], max_len) if packing else [[i] for i in range(len(ids))]
    return {"input_ids": [[t for i in row for t in ids[i]] for row in rows],
            "word_start": [[t for i in row for t in starts[i]] for row in rows],
            "seg_lengths": [[len(ids[i]) for i in row] for row in rows]}


def _process_alive(pid: str) -> bool:
    """A process of this id runs on this machine (signal 0 checks without sending anything)."""
    try:
        os.kill(int(pid), 0)
    except ValueError:
        return True  # not a name this module wrote: left alone
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_token_rows(splits: dict, tokenizer, *, max_seq_length: int, packing: bool, cache_dir: str,
                     cache_key: dict, num_proc: int | None = None, log=print):
    """Tokenise and pack each split once; reload from `cache_dir` when the same key was built before."""
    import datasets

    if "hub" in cache_key.get("data", {}):  # a Hub dataset changes under its id: datasets' fingerprints follow it
        cache_key = {**cache_key, "fingerprints": {name: getattr(ds, "_fingerprint", None) for name, ds in splits.items()}}
    key = hashlib.sha256(json.dumps({**cache_key, "tokenizer": tokenizer_fingerprint(tokenizer),
                                     "max_seq_length": max_seq_length, "packing": packing,
                                     "version": CACHE_VERSION}, sort_keys=True).encode()).hexdigest()[:20]
    root = Path(cache_dir) / key
    host = socket.gethostname().replace("-", "_")  # a cache folder may be shared by machines: only this one's
    for stale in Path(cache_dir).glob(f".tmp-{key}-{host}-*"):  # left by a build that crashed (its process is gone)
        if not _process_alive(stale.name.rsplit("-", 1)[-1]):
            shutil.rmtree(stale, ignore_errors=True)
    if (root / "DONE").is_file():
        log(f"token rows: cached in {root}")
        return {split: datasets.load_from_disk(str(root / split)) for split in json.loads((root / "DONE").read_text())}
    start, end = special_ids(tokenizer)
    rows = {}
    for split, ds in splits.items():
        tokenised = ds.map(_tokenize_batch, batched=True, batch_size=1000, remove_columns=ds.column_names,
                           fn_kwargs=dict(tokenizer=tokenizer, max_len=max_seq_length, start=start, end=end),
                           num_proc=num_proc, desc=f"tokenise {split}", load_from_cache_file=False)
        rows[split] = tokenised.map(_pack_batch, batched=True, batch_size=10000, remove_columns=tokenised.column_names,
                                    fn_kwargs=dict(max_len=max_seq_length, packing=packing),
                                    desc=f"pack {split}", load_from_cache_file=False)
    tmp = Path(cache_dir) / f".tmp-{key}-{host}-{os.getpid()}"
    for split, ds in rows.items():
        ds.save_to_disk(str(tmp / split))
    (tmp / "DONE").write_text(json.dumps(sorted(rows)))
    try:
        os.replace(tmp, root)  # atomic: a crash while building never leaves a half cache under the key
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"token rows: built and cached in {root}")
    return {split: datasets.load_from_disk(str(root / split)) for split in rows}


def rows_fingerprint(ds, stats: dict, tokenizer) -> str:
    """What identifies a run's train rows without reading them all again: the tokenizer, the row and token
    counts (`row_stats`) and the ids of about 1,000 rows spread over the set."""
    sample = [list(map(int, ids)) for ids in ds.select(range(0, len(ds), max(1, len(ds) // 1000)))["input_ids"]]
    text = json.dumps([tokenizer_fingerprint(tokenizer), stats["rows"], stats["tokens"], sample])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def row_stats(ds, texts: int) -> dict:
    """Rows, real tokens, the `texts` (sentences) they came from, and the pieces those make (a text
    longer than a row is cut into several)."""
    lengths = [len(x) for x in ds["input_ids"]]
    pieces = sum(len(s) for s in ds["seg_lengths"])
    return {"rows": len(lengths), "sentences": texts, "pieces": pieces, "tokens": int(sum(lengths))}
