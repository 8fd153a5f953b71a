"""Reading text files and prepared corpus folders: the one reader of raw text, shared by the corpus
preparation, the tokenizer trainer, the report and post-training (``training.mlm_data``).

A *prepared corpus* is the output folder of ``python -m tokenization.prepare_corpus``:
``DIR/{train,valid,test}/part-*.jsonl`` (one ``{"text": sentence}`` per line), ``DIR/stats.json``
and the completion marker ``DIR/_COMPLETE``, written last. A folder holding the run's build folder
``.building/`` or ``stats.json`` but no marker is an interrupted run and is refused.

Plain inputs are also accepted everywhere: ``.txt`` (one text per line), ``.jsonl`` (a ``text``
field per line), each optionally ``.gz``/``.bz2``/``.xz`` compressed, or a folder of such files.
How a folder holds its splits is decided in one place, :func:`folder_splits`, for the tokenizer
commands and post-training alike (``training.mlm_data``): split folders or files by name
(``train/``, ``valid.txt``, ``test.*.jsonl``...), the Hub's layout (``data/train-*``), or else
one corpus, every text file under it.
Lines that are not valid UTF-8 are skipped and counted (never a crash, never silent), with one
summary line per file. A file in which such lines outnumber the readable ones is refused instead:
it is a binary file or text in another encoding, and skipping would quietly drop all of it. So are
a file with NUL bytes in its first lines (a binary file or UTF-16 text; a stray NUL later skips its
line, counted), tar archives and compressions other than
gzip, bzip2 and xz (zip, zstd, 7z...), found by name or by their first bytes: extract the text first.
"""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import sys
import tarfile
import zlib
from pathlib import Path
from typing import IO, Callable, Iterator

from .errors import InputError

COMPLETE_MARKER = "_COMPLETE"
BUILD_DIR = ".building"  # where prepare_corpus writes until it has read all its input
STATS_FILE = "stats.json"
SPLITS = ("train", "valid", "test")
# The names a split goes by in a folder: FOLDER/NAME (a folder or a file) or FOLDER/NAME.* files.
SPLIT_NAMES = {"train": ("train",), "valid": ("valid", "validation", "dev"), "test": ("test",)}
TEXT_SUFFIXES = (".txt", ".jsonl", ".json", ".text", "")
REPOSITORY_FILES = ("LICENSE", "LICENCE", "NOTICE", "COPYING", "AUTHORS", "README", "CITATION", "CHANGELOG")
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# The same compressions under another name, told by their first bytes.
COMPRESSED_MAGIC = ((re.compile(rb"\x1f\x8b"), gzip.open), (re.compile(rb"BZh[1-9]1AY&SY"), bz2.open),
                    (re.compile(rb"\xfd7zXZ\x00"), lzma.open))
# Archives and compressions this reader does not open, by suffix and by first bytes.
ARCHIVE_SUFFIXES = {".zip": "zip", ".zst": "zstd", ".zstd": "zstd", ".7z": "7z", ".rar": "rar", ".lz4": "lz4",
                    ".lz": "lzip", ".lzma": "lzma", ".z": "compress", ".br": "brotli", ".tar": "tar",
                    ".tgz": "tar", ".tbz": "tar", ".tbz2": "tar", ".txz": "tar"}
ARCHIVE_MAGIC = ((re.compile(rb"PK\x03\x04|PK\x05\x06|PK\x07\x08"), "zip"), (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd"),
                 (re.compile(rb"7z\xbc\xaf\x27\x1c"), "7z"), (re.compile(rb"Rar!\x1a\x07"), "rar"),
                 (re.compile(rb"\x04\x22\x4d\x18"), "lz4"), (re.compile(rb"\x1f\x9d"), "compress"))


def archive_kind(path: Path) -> str | None:
    """The archive or compression that ``path``'s name says it is and this reader does not open (``zip``,
    ``tar`` for ``a.tar.gz``...), else None."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if suffixes and suffixes[-1] in ARCHIVE_SUFFIXES:
        return ARCHIVE_SUFFIXES[suffixes[-1]]
    return "tar" if len(suffixes) == 2 and suffixes[0] == ".tar" and suffixes[1] in COMPRESSED else None


_EXTRACT = {"tar": "tar -xf", "zip": "unzip", "7z": "7z x", "rar": "unrar x"}  # else "<kind> -d"


def _refuse_archive(path: Path, kind: str) -> None:
    raise InputError(f"{path}: a {kind} archive or compressed file, which is not read as text; extract or decompress "
                     f"it first (e.g. {_EXTRACT.get(kind, kind + ' -d')}) and give the text files")


def open_binary(path: Path) -> IO[bytes]:
    """``path`` opened for its text's bytes: decompressed by its suffix (``.gz``, ``.bz2``, ``.xz``), or by its first
    bytes when it is one of these under another name. Archives (tar, zip...) and other compressions are refused
    (InputError): their bytes are no text."""
    kind = archive_kind(path)
    if kind:
        _refuse_archive(path, kind)
    opener = COMPRESSED.get(path.suffix.lower())
    if opener is None:
        with open(path, "rb") as f:
            head = f.read(16)
        kind = next((name for magic, name in ARCHIVE_MAGIC if magic.match(head)), None)
        if kind:
            _refuse_archive(path, kind)
        opener = next((found for magic, found in COMPRESSED_MAGIC if magic.match(head)), None)
    try:
        is_tar = tarfile.is_tarfile(path)
    except Exception:  # noqa: BLE001 - not a readable tar archive: read as text, whose errors name the file
        is_tar = False
    if is_tar:
        _refuse_archive(path, "tar")
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
                unreadable = b"\0" in raw
                if unreadable and read + skipped < 3:  # at the start: a binary file or UTF-16, not one stray byte
                    raise InputError(f"{path}:{read + skipped + 1}: holds NUL bytes, so this is a binary file (an "
                                     "archive, a database...) or UTF-16 text, not UTF-8 text; extract the text first, "
                                     "or re-encode UTF-16 (iconv -f utf-16 -t utf-8)")
                try:
                    line = "" if unreadable else raw.decode("utf-8")
                except UnicodeDecodeError:
                    unreadable = True
                if unreadable:  # invalid UTF-8, or a stray NUL later in a text file: the line is skipped and counted
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


_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


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
                if not found and not isinstance(rec, dict):  # a JSON array on one line, a bare string...
                    what = "a JSON array" if isinstance(rec, list) else f"a JSON {_JSON_TYPES.get(type(rec), 'value')}"
                    raise InputError(f"{path}:{n}: {what}, not JSON Lines: write one object per line, with the text "
                                     f"in its {text_field!r} field (or use .txt for plain text, one text per line)")
                if not found and text_field not in rec:  # named otherwise: fail at once
                    raise InputError(f"{path}:{n}: no string field {text_field!r} (its keys: {', '.join(map(str, rec))}); "
                                     f"name the text field with {option}")
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


def unfinished_preparation(folder: Path) -> bool:
    """A prepare_corpus output folder whose run did not finish: its build folder or stats.json, no marker.
    (Split folders alone are not one: they are how users lay out their own splits.)"""
    return ((folder / BUILD_DIR).exists() or (folder / STATS_FILE).exists()) and not corpus_complete(folder)


def is_text_file(path: Path) -> bool:
    """A file of a folder that is read as text: ``.txt``, ``.text``, ``.jsonl``, ``.json`` or no suffix
    (WikiExtractor's ``wiki_00``), plain or compressed; an archive too (``.zip``, ``.tar.gz``...), so that
    reading refuses it rather than leave its text out unsaid. Never stats.json nor a name starting with ``_``
    or ``.`` (the completion marker, hidden files)."""
    if path.name.startswith((".", "_")) or path.name == STATS_FILE:
        return False
    if not path.suffix and path.name.upper().startswith(REPOSITORY_FILES):  # LICENSE, NOTICE: not corpus text
        return False
    return base_suffix(path) in TEXT_SUFFIXES or archive_kind(path) is not None


def data_files(folder: Path, accepts: Callable[[Path], object] = is_text_file) -> list[Path]:
    """The files under ``folder`` and its subfolders that ``accepts`` takes, sorted; none inside hidden folders
    (``.ipynb_checkpoints/``, ``.building/``)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and accepts(p)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _named_split(folder: Path, split: str, accepts: Callable[[Path], object]) -> list[Path]:
    """FOLDER/NAME for the first of the split's names that exists (a folder or a file), else the files
    FOLDER/NAME.* that ``accepts`` takes (train.txt, or every train.a.txt, train.b.txt, ...; a train.log is none)."""
    for name in SPLIT_NAMES[split]:
        if (folder / name).exists():
            return [folder / name]
        found = sorted(f for f in folder.glob(f"{name}.*") if f.is_file() and accepts(f))
        if found:
            return found
    return []


def _hub_layout_splits(folder: Path, files: list[Path]) -> dict[str, list[Path]] | None:
    """{"train", "valid"?, "test"?} -> files, when ``folder``'s data ``files`` are split by name as the Hub lays them
    out (datasets' own patterns: train-*, data/test-*, ...) and every one of them belongs to a split; else None."""
    import datasets

    try:
        found = datasets.data_files.DataFilesDict.from_patterns(datasets.data_files.get_data_patterns(str(folder)),
                                                                 base_path=str(folder))
    except Exception:  # noqa: BLE001 - no pattern matched as datasets expects: read the folder as one corpus
        return None
    by_split = {}
    for split, names in SPLIT_NAMES.items():
        name = next((n for n in names if n in found), None)
        if name is not None:
            by_split[split] = sorted(Path(f) for f in found[name])
    assigned = {f.resolve() for paths in by_split.values() for f in paths}
    if "train" not in by_split or len(by_split) < 2 or assigned != {f.resolve() for f in files}:
        return None
    return by_split


def folder_splits(folder: Path, accepts: Callable[[Path], object] = is_text_file) -> dict[str, list[Path]] | None:
    """How ``folder`` holds its splits, for every command that reads a folder: {"train": paths, "valid": paths,
    "test": paths} (a split it lacks is absent; a path may be a folder, read whole), or None when the folder is
    one corpus. ``accepts``: which files are data (default: text files).

    1. A prepare_corpus run that did not finish (``.building/`` or ``stats.json``, no marker): InputError.
    2. Splits by name: ``FOLDER/train`` (folder or file), else ``FOLDER/train.*`` files; valid also as
       ``validation`` or ``dev`` (a prepared corpus, or the user's own ``train/`` and ``test/`` folders).
    3. The Hub's layout (``data/train-00000-of-00001.txt`` beside ``data/test-...``), found by ``datasets``'
       own patterns, when every data file belongs to a split and train is one of them.
    4. Otherwise held-out files by name without a train file are refused (read as one corpus, their text
       would be trained on), and any other folder is one corpus (None).
    """
    if unfinished_preparation(folder):
        raise InputError(f"{folder}: corpus preparation did not finish (it has {BUILD_DIR}/ or {STATS_FILE} but no "
                         f"{COMPLETE_MARKER} marker); re-run `xpt-prepare-corpus ... --out {folder} "
                         "--overwrite`")
    named = {split: paths for split in SPLITS if (paths := _named_split(folder, split, accepts))}
    if "train" in named:
        return named
    files = data_files(folder, accepts)
    hub = _hub_layout_splits(folder, files) if files else None
    if hub:
        return hub
    if named:
        held_out = ", ".join(f.name for paths in named.values() for f in paths)
        raise InputError(f"{folder} has held-out split files ({held_out}) but no train file: name the training text "
                         "train.txt (or train.*.txt, or a train/ folder), or move the held-out files out of the folder "
                         "to read it as one corpus")
    return None


def corpus_split(path: str | Path, split: str = "train") -> tuple[list[Path], str | None]:
    """The files to read for ``split`` of ``path`` (see :func:`folder_splits`), and the split they are: None when
    no split applies (a file, or a folder that is one corpus: all of it is read)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder (give a prepared corpus folder from "
                         f"`xpt-prepare-corpus` or a .txt/.jsonl[.gz] file)")
    if path.is_file():
        return [path], None
    splits = folder_splits(path)
    if splits is None:
        files, split = data_files(path), None
    elif split not in splits:
        raise InputError(f"{path}: no {split!r} split (it has {', '.join(splits)}); choose one of them with --split")
    else:
        files = [f for p in splits[split] for f in (data_files(p) if p.is_dir() else [p])]
    if not files:
        raise InputError(f"{path}: {'the ' + repr(split) + ' split' if split else 'folder'} holds no text files "
                         "(.txt, .jsonl, .json, also .gz/.bz2/.xz)")
    return files, split


def corpus_files(path: str | Path, split: str = "train") -> list[Path]:
    """Files to read for ``split`` of a corpus folder, or the file itself (:func:`corpus_split`)."""
    return corpus_split(path, split)[0]


def iter_texts(files: list[Path], bad: Utf8Counter | None = None, text_field: str = "text") -> Iterator[str]:
    """Stream the texts of ``files`` in order (never all in memory)."""
    for f in files:
        yield from iter_file_texts(f, bad, text_field)


def iter_corpus(path: str | Path, split: str = "train", bad: Utf8Counter | None = None,
                text_field: str = "text") -> Iterator[str]:
    """Stream the texts of ``split`` of a corpus folder, or of a file (never all in memory); ``text_field``: the
    field holding the text in .jsonl files."""
    yield from iter_texts(corpus_files(path, split), bad, text_field)
