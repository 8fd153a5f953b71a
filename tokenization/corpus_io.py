"""Reading text files and prepared corpus folders: the one reader of raw text, shared by the corpus
preparation, the tokenizer trainer, the report and post-training (``training.mlm_data``).

A *prepared corpus* is the output folder of ``python -m tokenization.prepare_corpus``:
``DIR/{train,valid,test}/part-*.jsonl`` (one ``{"text": sentence}`` per line), ``DIR/stats.json``
and the completion marker ``DIR/_COMPLETE``, written last. A folder with split folders but no
marker is an interrupted run and is refused.

Plain inputs are also accepted everywhere: ``.txt`` (one text per line), ``.jsonl`` (a ``text``
field per line), each optionally ``.gz``/``.bz2``/``.xz`` compressed, or a folder of such files.
Lines that are not valid UTF-8 are skipped and counted (never a crash, never silent), with one
summary line per file. A file in which such lines outnumber the readable ones is refused instead:
it is a binary file or text in another encoding, and skipping would quietly drop all of it.
"""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import sys
import zlib
from pathlib import Path
from typing import IO, Iterator

from .errors import InputError

COMPLETE_MARKER = "_COMPLETE"
SPLITS = ("train", "valid", "test")
TEXT_SUFFIXES = (".txt", ".jsonl", ".json", ".text", "")
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def open_binary(path: Path) -> IO[bytes]:
    opener = COMPRESSED.get(path.suffix.lower())
    return opener(path, "rb") if opener else open(path, "rb")


def base_suffix(path: Path) -> str:
    """Suffix ignoring a compression suffix: ``a.jsonl.gz`` -> ``.jsonl``."""
    p = path.with_suffix("") if path.suffix.lower() in COMPRESSED else path
    return p.suffix.lower()


class Utf8Counter:
    """Counts lines skipped because they are not valid UTF-8, per file."""

    def __init__(self) -> None:
        self.lines = 0
        self.bytes = 0
        self.per_file: dict[str, int] = {}

    def add(self, path: Path, raw: bytes) -> None:
        self.lines += 1
        self.bytes += len(raw)
        self.per_file[str(path)] = self.per_file.get(str(path), 0) + 1

    def warn(self, stream=None) -> None:
        """One line per file, on a line of its own even while progress bars are drawn (tqdm.write)."""
        from tqdm import tqdm

        for f, n in self.per_file.items():
            tqdm.write(f"warning: {f}: skipped {n} line(s) that are not valid UTF-8 "
                       f"(re-encode the file to UTF-8, e.g. iconv -f cp949 -t utf-8, to keep them)",
                       file=stream or sys.stderr)


def iter_lines(path: Path, bad: Utf8Counter | None = None) -> Iterator[str]:
    """Decoded lines of a (possibly compressed) text file, without the line break.

    A line with invalid UTF-8 bytes is skipped as a whole (decoding around bad bytes would glue
    broken Hangul syllables into the corpus) and counted in ``bad``. A UTF-8 byte-order mark at the
    start is dropped. When the file ends with more
    skipped lines than read ones with text, it is refused (InputError): not UTF-8 text (blank lines
    decode in any encoding and do not count).
    """
    try:
        f = open_binary(path)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found (check the path)") from None
    read = skipped = texts = 0
    with f:
        try:
            for raw in f:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    skipped += 1
                    if bad is not None:
                        bad.add(path, raw)
                    continue
                read += 1
                texts += bool(line.strip())
                # a byte-order mark (files saved by Windows editors) is no part of the first text
                yield (line.removeprefix("\ufeff") if read == 1 else line).rstrip("\r\n")
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as e:  # truncated/corrupt gzip or xz, not gzip at all...
            raise InputError(f"{path}: cannot read ({e}); check that the file is complete and its "
                             f"compression matches its suffix") from None
    if skipped > texts:
        raise InputError(f"{path}: {skipped} of {read + skipped} lines are not valid UTF-8, so this is not UTF-8 "
                         f"text; re-encode it (e.g. iconv -f cp949 -t utf-8) or leave it out")


def iter_file_texts(path: Path, bad: Utf8Counter | None = None, text_field: str = "text",
                    option: str = "--text-field") -> Iterator[str]:
    """Texts of one file: a line per text, or the ``text_field`` of each JSON line for .jsonl (``option``: the
    command's option that names that field, for the error of a file without it)."""
    if base_suffix(path) in (".jsonl", ".json"):
        found, skipped = 0, 0
        for n, line in enumerate(iter_lines(path, bad), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                hint = ("a JSON array or a pretty-printed file, not JSON Lines: write one object per line"
                        if n == 1 and line.lstrip().startswith(("[", "{")) else
                        "use .txt for plain text, one text per line")
                raise InputError(f"{path}:{n}: not a JSON line ({hint})") from None
            text = rec.get(text_field) if isinstance(rec, dict) else None
            if not isinstance(text, str):
                if not found and not (isinstance(rec, dict) and text_field in rec):  # named otherwise: fail at once
                    keys = ", ".join(map(str, rec)) if isinstance(rec, dict) else type(rec).__name__
                    raise InputError(f"{path}:{n}: no string field {text_field!r} (its keys: {keys}); name the "
                                     f"text field with {option}")
                skipped += 1  # a null or missing text among real ones (as Hub datasets have), left out
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape ("\\ud83d", an emoji cut in half): no UTF-8 text
                if bad is not None:
                    bad.add(path, line.encode("utf-8", "replace"))
                continue
            found += 1
            yield text
        if skipped and not found:
            raise InputError(f"{path}: no line has a string field {text_field!r} (name the text field with {option})")
        if skipped:
            print(f"{path}: left out {skipped} JSON line(s) without a string {text_field!r}", file=sys.stderr)
    else:
        yield from iter_lines(path, bad)


def corpus_complete(path: str | Path) -> bool:
    """A prepare_corpus output folder whose run finished: its ``COMPLETE_MARKER`` is written last."""
    return (Path(path) / COMPLETE_MARKER).is_file()


def is_prepared_corpus(path: Path) -> bool:
    """A prepare_corpus output folder, finished or not (split folders, marker or hidden build folder)."""
    return path.is_dir() and (any((path / s).is_dir() for s in (*SPLITS, ".building"))
                              or (path / COMPLETE_MARKER).exists())


def corpus_files(path: str | Path, split: str = "train") -> list[Path]:
    """Files to read for ``split`` of a prepared corpus folder, or the file/folder itself."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder (give a prepared corpus folder from "
                         f"`python -m tokenization.prepare_corpus` or a .txt/.jsonl[.gz] file)")
    if path.is_file():
        return [path]
    if is_prepared_corpus(path):
        if not (path / COMPLETE_MARKER).exists():
            raise InputError(f"{path}: corpus preparation did not finish (no {COMPLETE_MARKER} marker); "
                             f"re-run `python -m tokenization.prepare_corpus ... --out {path}`")
        d = path / split
        files = sorted(p for p in d.glob("*") if p.is_file() and not p.name.startswith((".", "_"))) if d.is_dir() else []
        if not files:
            raise InputError(f"{path}: prepared corpus has no {split!r} split files")
        return files
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))
                   and base_suffix(p) in TEXT_SUFFIXES and p.name != "stats.json")
    if not files:
        raise InputError(f"{path}: folder holds no .txt/.jsonl[.gz] files")
    return files


def iter_corpus(path: str | Path, split: str = "train", bad: Utf8Counter | None = None,
                text_field: str = "text") -> Iterator[str]:
    """Stream the texts of ``split`` of a prepared corpus, or of a plain file/folder (never all in memory);
    ``text_field``: the field holding the text in .jsonl files."""
    for f in corpus_files(path, split):
        yield from iter_file_texts(f, bad, text_field)
