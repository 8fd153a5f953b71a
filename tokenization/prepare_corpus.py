"""Prepare a sentence-level corpus (Korean by default) with train/valid/test splits (the paper's data format).

    python -m tokenization.prepare_corpus --input PATH [--input PATH ...] --out DIR [--valid N] [--test N]

``PATH`` is one of

* ``hf:ID:CONFIG[:SPLIT]``: a Hugging Face dataset, streamed with ``datasets`` (split ``train``
  unless given, text column ``text``, see ``--text-field``), e.g.
  ``hf:wikimedia/wikipedia:20231101.ko`` (Korean Wikipedia, ~600K articles);
* a WikiExtractor output folder (or file): ``<doc id=.. title=..>`` blocks, first line the title;
* a ``.txt`` file (one document per line), a ``.jsonl`` file (one document per line in the
  ``text`` field), each optionally ``.gz``/``.bz2``/``.xz``; a folder of such files (subfolders too;
  other files left out and counted, archives refused); a glob. Local inputs need no network.

Pipeline, streamed document by document: paragraph cleaning (markup remnants, NFC, empty lines;
:mod:`tokenization.korean_text`) -> sentence splitting (rule-based, measured against kss; see
that module) -> sentence filters (``--min-chars``, ``--max-chars``, at least one character of the ``--language``'s
script: Hangul for the default ``ko``; ``--script`` chooses another or none)
-> exact de-duplication -> deterministic split -> JSON-lines shards.

De-duplication is exact on the sentence text through a 64-bit BLAKE2b digest: a sorted numpy
``uint64`` array plus a small pending set, i.e. **8 bytes per unique sentence** (about 50 MB for
6M sentences) plus at most ~6 MB for the pending batch, instead of the ~80 bytes per entry of a
Python set of ints. Two different sentences share a digest with probability about
``n^2 / 2^65`` (~1e-6 for 6M sentences): negligible.

Split: each unique sentence gets a second keyed 64-bit hash (``--seed``). With counts
(``--valid 100000 --test 88000``, the paper's setting) the sentences with the smallest keys go to
valid, the next ones to test, all others to train; a bounded heap keeps only those ``valid+test``
candidates in memory. With fractions (``--valid 0.02``) a sentence goes to valid when its key
falls below the fraction. Either way the split depends only on the sentence text and the seed,
not on input order or machine. With fractions a sentence keeps its split when the corpus grows;
with counts, new sentences with smaller keys push some earlier valid/test sentences into train.

Output (``datasets.load_dataset("json", data_dir=DIR)`` or ``load_dataset(DIR)`` loads it; the
splits are ``train``, ``validation`` (folder ``valid``) and ``test``)::

    DIR/train/part-00000.jsonl ...   {"text": "한 문장."} per line
    DIR/valid/part-00000.jsonl
    DIR/test/part-00000.jsonl
    DIR/stats.json                   documents, sentences, words, characters, bytes, drops by reason
    DIR/_COMPLETE                    written last

Everything is written under ``DIR/.building/``, moved into place after the whole input has been
processed, then come ``stats.json``, the removal of ``.building/`` and ``_COMPLETE``. A re-run (with
``--overwrite``, unless the folder holds only an interrupted run's ``.building/``) first removes all that.
Readers in this project refuse ``.building/`` or ``stats.json`` without ``_COMPLETE``, so an
interrupted run never leaves shards that look complete.
"""
from __future__ import annotations

import argparse
import glob
import heapq
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from .corpus_io import (BUILD_DIR, COMPLETE_MARKER, SPLITS, STATS_FILE, Utf8Counter, data_files, is_text_file,
                        iter_file_texts, iter_lines)
from .dedup import DigestSet, sentence_hashes
from .errors import InputError, command
from .folders import check_output_folder, write_text_atomic
from .korean_text import LANGUAGE_SCRIPTS, SCRIPTS, clean_paragraph, script_filter, split_sentences


# ------------------------------------------------------------------------------------ inputs

@dataclass
class Doc:
    text: str
    skip_first_line: bool = False  # WikiExtractor: the first line of a <doc> is its title


def _looks_like_wikiextractor(path: Path) -> bool:
    try:
        for line in iter_lines(path):
            if line.strip():
                return line.lstrip().startswith("<doc ")
    except (InputError, OSError):
        return False
    return False


def _iter_wikiextractor(path: Path, bad: Utf8Counter) -> Iterator[Doc]:
    buf: list[str] | None = None
    for line in iter_lines(path, bad):
        s = line.strip()
        if s.startswith("<doc ") and s.endswith(">"):
            buf = []
        elif s == "</doc>":
            if buf is not None:
                yield Doc("\n".join(buf), skip_first_line=True)
            buf = None
        elif buf is not None:
            buf.append(line)
    if buf:  # truncated file: keep what was read
        yield Doc("\n".join(buf), skip_first_line=True)


def _iter_file(path: Path, bad: Utf8Counter, text_field: str) -> Iterator[Doc]:
    if _looks_like_wikiextractor(path):
        yield from _iter_wikiextractor(path, bad)
    else:
        for text in iter_file_texts(path, bad, text_field):
            yield Doc(text)


def _parse_hf(spec: str) -> tuple[str, str, str]:
    """``hf:ID:CONFIG[:SPLIT]`` -> (id, config, split)."""
    parts = spec[3:].split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise InputError(f"{spec}: expected hf:DATASET_ID:CONFIG[:SPLIT], e.g. hf:wikimedia/wikipedia:20231101.ko")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "train"


def _check_hf(spec: str) -> None:
    """An ``hf:`` input, refused before any output is touched: malformed, or a Hub id (streaming needs the Hub) in
    offline mode or where the Hub's name does not resolve (`hub_access`)."""
    from tokenization.hub_access import hub_offline, hub_resolves

    ds_id = _parse_hf(spec)[0]
    if not Path(ds_id).exists() and (hub_offline() or not hub_resolves()):  # a local folder streams offline
        why = "offline mode is on (HF_HUB_OFFLINE)" if hub_offline() else "the Hugging Face Hub cannot be reached here"
        raise InputError(f"{spec}: a Hub dataset is streamed, and {why}; pass local files or folders instead")


def _iter_hf(spec: str, text_field: str) -> Iterator[Doc]:
    ds_id, config, split = _parse_hf(spec)
    try:
        import datasets
        ds = datasets.load_dataset(ds_id, config, split=split, streaming=True)
    except Exception as e:  # network, unknown id/config...
        raise InputError(f"{spec}: cannot stream the dataset ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                         f"check the id/config and the network, or pass local files") from None
    first = True
    for row in ds:
        if first:
            if text_field not in row:
                raise InputError(f"{spec}: no column {text_field!r} (columns: {', '.join(row)}); use --text-field")
            first = False
        text = row[text_field]
        if isinstance(text, str):
            yield Doc(text)


def resolve_inputs(specs: Sequence[str]) -> list[tuple[str, list[Path] | None]]:
    """Expand each ``--input`` into files (or ``None`` for an ``hf:`` stream). Errors name the input."""
    out: list[tuple[str, list[Path] | None]] = []
    for spec in specs:
        if spec.startswith("hf:"):
            _check_hf(spec)
            out.append((spec, None))
            continue
        p = Path(spec)
        if p.is_file():
            out.append((spec, [p]))
        elif p.is_dir():
            candidates = data_files(p, lambda f: f.name[0] not in "._" and f.name != STATS_FILE)  # not the layout's
            files = [f for f in candidates if is_text_file(f)]  # text files only: no README.md, .parquet...
            if not files:
                raise InputError(f"{spec}: folder holds no text files (give .txt/.jsonl[.gz] files or a WikiExtractor "
                                 "output folder)")
            if left := len(candidates) - len(files):
                print(f"{spec}: {left} file(s) left out, not text (.txt, .jsonl, .json, .text or none)", file=sys.stderr)
            out.append((spec, files))
        elif any(c in spec for c in "*?["):
            files = sorted(Path(f) for f in glob.glob(spec, recursive=True) if Path(f).is_file())
            if not files:
                raise InputError(f"{spec}: the glob matches no files (check the pattern; quote it in the shell)")
            out.append((spec, files))
        else:
            raise InputError(f"{spec}: no such file or folder (check the path, or use hf:ID:CONFIG for a Hub dataset)")
    return out


# --------------------------------------------------------------------------- dedup and split

def parse_split_size(value: str, name: str) -> float | int:
    try:
        x = float(value)
    except ValueError:
        raise InputError(f"--{name} {value!r}: give a sentence count (100000) or a fraction (0.02)") from None
    if not math.isfinite(x):
        raise InputError(f"--{name} {value}: give a finite sentence count (100000) or fraction (0.02)")
    if x < 0:
        raise InputError(f"--{name} {value}: must be >= 0")
    if 0 < x < 1:
        return x
    if x != int(x):
        raise InputError(f"--{name} {value}: a count must be an integer, a fraction below 1")
    return int(x)


class ShardWriter:
    def __init__(self, folder: Path, shard_size: int):
        self.folder = folder
        self.shard_size = shard_size
        self.f = None
        self.shards = 0
        self.in_shard = 0
        self.sentences = self.words = self.characters = self.bytes = 0

    def write(self, s: str) -> None:
        if self.f is None or self.in_shard >= self.shard_size:
            self._open()
        self.f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
        self.in_shard += 1
        self.sentences += 1
        self.words += len(s.split())
        self.characters += len(s)
        self.bytes += len(s.encode("utf-8"))

    def _finish_shard(self) -> None:
        """Flush the shard to disk before the next one: the COMPLETE marker, fsynced last, then never
        outlives the sentences after a power loss."""
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()

    def _open(self) -> None:
        if self.f is not None:
            self._finish_shard()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.f = open(self.folder / f"part-{self.shards:05d}.jsonl", "w", encoding="utf-8")
        self.shards += 1
        self.in_shard = 0

    def close(self) -> dict:
        if self.f is not None:  # an empty split gets no folder: `datasets` refuses empty splits
            self._finish_shard()
        return dict(sentences=self.sentences, words=self.words, characters=self.characters,
                    bytes=self.bytes, shards=self.shards)


# -------------------------------------------------------------------------------- the run

@dataclass
class Stats:
    documents: int = 0
    paragraphs: int = 0
    sentences_split: int = 0
    lines_dropped: dict = field(default_factory=lambda: dict(empty=0, heading=0, markup=0, title=0, invalid_utf8=0))
    sentences_dropped: dict = field(default_factory=lambda: dict(too_short=0, too_long=0, wrong_script=0, duplicate=0))


def prepare(inputs: Sequence[str], out: str | Path, valid: float | int = 0.02, test: float | int = 0.02,
            seed: int = 0, min_chars: int = 10, max_chars: int = 2000, require_hangul: bool = True,
            shard_size: int = 500_000, text_field: str = "text", max_docs: int = 0,
            progress: bool = True, language: str | None = "ko", script: str | None = "auto") -> dict:
    """Run the whole pipeline; returns the stats written to ``out/stats.json``.

    `language`: ISO 639 code of the target language, recorded in stats.json (``none``: not
    recorded). `script`: the filter keeping sentences with at least one character of a script
    (``auto``: the language's, see ``korean_text.LANGUAGE_SCRIPTS``; ``none``: no filter).
    ``require_hangul=False`` is the older spelling of ``script="none"``."""
    if not require_hangul:
        script = "none"
    language = None if language in (None, "", "none") else language
    try:
        script_name, script_re = script_filter(language or "none", script)
    except ValueError as error:
        raise InputError(f"--language {language or 'none'} --script {script}: {error}") from error
    if isinstance(valid, float) != isinstance(test, float) and valid and test:
        raise InputError("--valid and --test must both be counts or both fractions")
    if shard_size < 1:
        raise InputError(f"--shard-size {shard_size}: give the number of sentences per file, 1 or more "
                         "(default 500000)")
    frac_mode = isinstance(valid, float) or isinstance(test, float)
    if frac_mode and valid + test >= 1:
        raise InputError(f"--valid {valid} + --test {test} >= 1 leaves nothing for train")
    resolved = resolve_inputs(inputs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # A re-run: the old result is no longer certified; clear it and any half-written build. The build folder
    # comes first, so that the folder reads as unfinished (corpus_io.unfinished_preparation) from here on.
    build = out / BUILD_DIR
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    for name in (COMPLETE_MARKER, STATS_FILE):
        (out / name).unlink(missing_ok=True)
    for name in SPLITS:
        shutil.rmtree(out / name, ignore_errors=True)
    writers = {s: ShardWriter(build / s, shard_size) for s in SPLITS}
    st, bad, seen = Stats(), Utf8Counter(), DigestSet()
    heap: list[tuple[int, str]] = []  # count mode: max-heap (negated key) of valid+test candidates
    n_hold = 0 if frac_mode else int(valid) + int(test)
    thr_valid = int(float(valid) * 2**64) if frac_mode else 0
    thr_test = int((float(valid) + float(test)) * 2**64) if frac_mode else 0
    per_input: list[dict] = []

    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    bar = tqdm(unit=" docs", unit_scale=True, dynamic_ncols=True, disable=not progress or tqdm is None,
               mininterval=1.0, file=sys.stderr, desc="preparing")
    t0 = time.perf_counter()
    last = t0
    kept_unique = 0

    def docs() -> Iterator[tuple[str, Doc]]:
        for spec, files in resolved:
            if files is None:
                for d in _iter_hf(spec, text_field):
                    yield spec, d
            else:
                for f in files:
                    for d in _iter_file(f, bad, text_field):
                        yield spec, d

    counts_by_input: dict[str, list[int]] = {spec: [0, 0] for spec, _ in resolved}
    try:
        for spec, doc in docs():
            if max_docs and st.documents >= max_docs:
                break
            st.documents += 1
            counts_by_input[spec][0] += 1
            lines = doc.text.split("\n")
            if doc.skip_first_line and lines:
                lines = lines[1:]
                st.lines_dropped["title"] += 1
            for line in lines:
                st.paragraphs += 1
                para, reason = clean_paragraph(line)
                if reason:
                    st.lines_dropped[reason] += 1
                    continue
                for s in split_sentences(para):
                    st.sentences_split += 1
                    if len(s) < min_chars:
                        st.sentences_dropped["too_short"] += 1
                        continue
                    if len(s) > max_chars:
                        st.sentences_dropped["too_long"] += 1
                        continue
                    if script_re is not None and not script_re.search(s):
                        st.sentences_dropped["wrong_script"] += 1
                        continue
                    digest, key = sentence_hashes(s, seed)
                    if not seen.add(digest):
                        st.sentences_dropped["duplicate"] += 1
                        continue
                    kept_unique += 1
                    counts_by_input[spec][1] += 1
                    if frac_mode:
                        writers["valid" if key < thr_valid else "test" if key < thr_test else "train"].write(s)
                    elif n_hold == 0:
                        writers["train"].write(s)
                    elif len(heap) < n_hold:
                        heapq.heappush(heap, (-key, s))
                    elif key < -heap[0][0]:
                        _, evicted = heapq.heapreplace(heap, (-key, s))
                        writers["train"].write(evicted)
                    else:
                        writers["train"].write(s)
            if progress and bar is not None:
                bar.update(1)
                now = time.perf_counter()
                if now - last > 1.0:
                    last = now
                    bar.set_postfix_str(f"{kept_unique / (now - t0):,.0f} sentences/s, {kept_unique:,} kept", refresh=False)
    except BaseException:
        for w in writers.values():  # interrupted: the shards stay in the hidden build folder
            if w.f is not None:
                w.f.close()
        raise
    finally:
        if bar is not None:
            bar.close()
    st.lines_dropped["invalid_utf8"] = bad.lines
    bad.warn()

    # count mode: smallest keys -> valid, next -> test
    held = sorted(((-k, s) for k, s in heap))
    for i, (_, s) in enumerate(held):
        writers["valid" if i < int(valid) else "test"].write(s)
    split_stats = {s: w.close() for s, w in writers.items()}
    elapsed = time.perf_counter() - t0

    if kept_unique == 0:
        shutil.rmtree(build, ignore_errors=True)
        drops = ", ".join(f"{k} {v:,}" for k, v in {**st.lines_dropped, **st.sentences_dropped}.items() if v)
        raise InputError(f"{', '.join(inputs)}: no sentence left after cleaning ({st.documents:,} documents read; "
                         f"dropped: {drops or 'nothing to read'}); check the input format, or lower --min-chars "
                         f"/ choose another --language or --script none")
    if split_stats["train"]["sentences"] == 0:
        shutil.rmtree(build, ignore_errors=True)
        raise InputError(f"{', '.join(inputs)}: only {kept_unique:,} unique sentences, all taken by --valid {valid} "
                         f"--test {test}; lower them (or use fractions such as 0.02)")
    for name in SPLITS:  # move into place only now
        if (build / name).is_dir():
            os.replace(build / name, out / name)

    for spec, _ in resolved:
        per_input.append(dict(input=spec, documents=counts_by_input[spec][0], sentences_kept=counts_by_input[spec][1]))
    total = {k: sum(split_stats[s][k] for s in SPLITS) for k in ("sentences", "words", "characters", "bytes")}
    stats = dict(
        inputs=per_input,
        language=language,
        documents=st.documents, paragraphs=st.paragraphs, sentences_after_split=st.sentences_split,
        **total,
        splits=split_stats,
        lines_dropped=st.lines_dropped, sentences_dropped=st.sentences_dropped,
        invalid_utf8=dict(lines=bad.lines, bytes=bad.bytes, files=bad.per_file),
        settings=dict(valid=valid, test=test, seed=seed, min_chars=min_chars, max_chars=max_chars,
                      language=language, script=script_name, shard_size=shard_size, text_field=text_field,
                      max_docs=max_docs, sentence_splitter="tokenization.korean_text (rule-based)"),
        dedup_index_bytes=seen.nbytes + 8 * len(seen.pending),
        seconds=round(elapsed, 2),
        documents_per_second=round(st.documents / elapsed, 1) if elapsed else None,
        sentences_per_second=round(kept_unique / elapsed, 1) if elapsed else None,
    )
    write_text_atomic(out / STATS_FILE, json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
    shutil.rmtree(build)  # stats.json marks the folder unfinished until the marker
    write_text_atomic(out / COMPLETE_MARKER, json.dumps({"sentences": total["sentences"], "time": time.time()}) + "\n")
    return stats


@command
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="xpt-prepare-corpus",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", action="append", required=True,
                   help="file, glob, WikiExtractor folder or hf:ID:CONFIG[:SPLIT]; repeatable")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--valid", default="0.02", help="valid sentences: count (paper: 100000) or fraction (default 0.02)")
    p.add_argument("--test", default="0.02", help="test sentences: count (paper: 88000) or fraction (default 0.02)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split hash (default 0)")
    p.add_argument("--min-chars", type=int, default=10, help="drop sentences shorter than this (default 10)")
    p.add_argument("--max-chars", type=int, default=2000, help="drop sentences longer than this (default 2000)")
    p.add_argument("--language", default="ko",
                   help="ISO 639 code of the target language, recorded in stats.json for the model card (default ko; "
                        "none: not recorded, no script filter)")
    p.add_argument("--script", default="auto", choices=("auto", "none", *SCRIPTS),
                   help="keep only sentences with a character of this script (default auto: the language's, "
                        f"known for {', '.join(sorted(LANGUAGE_SCRIPTS))}; none: no filter)")
    p.add_argument("--keep-non-hangul", action="store_true", help="same as --script none")
    p.add_argument("--shard-size", type=int, default=500_000, help="sentences per shard (default 500000)")
    p.add_argument("--text-field", default="text", help="text field of .jsonl inputs and hf: datasets (default text)")
    p.add_argument("--max-docs", type=int, default=0, help="stop after N documents (0 = all)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of an existing --out folder")
    a = p.parse_args(argv)
    valid, test = parse_split_size(a.valid, "valid"), parse_split_size(a.test, "test")
    out = Path(a.out)
    interrupted = out.is_dir() and [f.name for f in out.iterdir()] == [BUILD_DIR]  # all an interrupted run left
    try:
        check_output_folder(a.out, overwrite=a.overwrite or interrupted,
                            reads=[i for i in a.input if not i.startswith("hf:")])
    except ValueError as error:
        raise InputError(str(error)) from None
    stats = prepare(a.input, a.out, valid=valid, test=test, seed=a.seed, min_chars=a.min_chars, max_chars=a.max_chars,
                    require_hangul=not a.keep_non_hangul, language=a.language, script=a.script,
                    shard_size=a.shard_size, text_field=a.text_field, max_docs=a.max_docs, progress=not a.no_progress)
    sp = stats["splits"]
    print(f"{stats['documents']:,} documents -> {stats['sentences']:,} sentences "
          f"(train {sp['train']['sentences']:,} / valid {sp['valid']['sentences']:,} / test {sp['test']['sentences']:,}) "
          f"in {stats['seconds']:.1f}s -> {a.out}")
    dropped = {**stats["lines_dropped"], **stats["sentences_dropped"]}
    if any(dropped.values()):
        print("dropped: " + ", ".join(f"{reason.replace('_', ' ')} {n:,}" for reason, n in dropped.items() if n))
    if empty := [f"--{s} {asked}" for s, asked in (("valid", valid), ("test", test)) if asked and not sp[s]["sentences"]]:
        print(f"note: {' and '.join(empty)} drew no sentence from so few; post-training holds its own out of train")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
