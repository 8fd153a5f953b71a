"""The output folder of a command, checked before anything is written: not one of the command's inputs
(nor inside or around one), and empty unless the user asked to replace its contents. Errors are
`UserError`s: one line, exit 2.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from tokenization.errors import UserError, at_command_end

# One of these makes a local folder a tokenizer's (the commands that load a tokenizer folder check for them)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def overlapping(a, b) -> bool:
    """Whether two paths are the same folder or one lies inside the other."""
    a, b = Path(a).expanduser().resolve(), Path(b).expanduser().resolve()
    return a == b or a in b.parents or b in a.parents


def local_input(read) -> Path | None:
    """The local path behind an input: the path itself, or for a glob pattern (`corpus/*.txt`) the folder
    above its first wildcard; None for what is not on this disk (Hub ids, `hf:` specs)."""
    path = Path(read).expanduser()
    if path.exists():
        return path
    for i, part in enumerate(path.parts):
        if any(c in part for c in "*?["):
            folder = Path(*path.parts[:i]) if i else Path(".")
            return folder if folder.exists() else None
    return None


def other_files(folder, ours: Callable[[Path], bool]) -> str:
    """The entries of `folder` that `ours` does not take for the command's own output, listed for a one-line
    message (`a.txt, data/ and 3 more`, folders with a slash); "" when there are none, or no folder."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return ""
    names = sorted(p.name + "/" * p.is_dir() for p in folder.iterdir() if not ours(p))
    more = f" and {len(names) - 3} more" if len(names) > 4 else ""
    return ", ".join(names[:3] if more else names) + more


def file_in_the_way(out) -> str | None:
    """Why no folder can be made at `out` when it, or the nearest of its parents that exists, is a file; else None."""
    path = Path(out).expanduser().absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            if candidate.is_dir():
                return None
            return "is a file" if candidate == path else f"lies under {candidate}, which is a file"
    return None


def check_output_folder(out, *, overwrite: bool, reads: Iterable = (), flag: str = "output",
                        ours: Callable[[Path], bool] | None = None) -> None:
    """Before a command writes `out` (named `flag` in messages): refuse a folder that is, contains or lies
    inside one of the folders or files it `reads`, and a folder that already holds files unless `overwrite`,
    or unless `ours` takes each of them for the command's own output (written over in place). Then the earlier
    contents are moved aside (`.NAME.replaced` beside it), so that no file of an earlier run stays beside
    the new ones: deleted when the command succeeds, put back when it fails or is interrupted (outside a
    `command`, deleted at once). Raises UserError (one line)."""
    target = Path(out).expanduser().resolve()
    aside = target.with_name(f".{target.name}.replaced")
    if aside.exists():
        raise UserError(f"{aside} holds what {out} held before an --overwrite run that was killed: move it back "
                        f"to {out} or delete it, then run again")
    for read in reads:
        local = None if read is None else local_input(read)
        if local is not None and overlapping(out, local):
            raise UserError(f"{flag} {out} overlaps the input {read}: the command would write into what it "
                             "reads; choose another output folder")
    if blocked := file_in_the_way(out):
        raise UserError(f"{flag} {out} {blocked}; give a folder")
    others = other_files(target, ours or (lambda path: False))
    if others:
        if not overwrite:
            held = f"files that are not this command's output ({others})" if ours else "files"
            raise UserError(f"{flag} {out} already holds {held}; choose a new or empty folder, or pass "
                             "--overwrite to replace its contents")
        cwd = Path.cwd().resolve()
        if target == cwd or target in cwd.parents:  # moved aside, it would take the working folder with it
            raise UserError(f"--overwrite of {out} would move aside the current folder, and the new files with "
                            "it: run the command from another folder")
        target.rename(aside)
        if not at_command_end(on_success=lambda: shutil.rmtree(aside, ignore_errors=True),
                              on_failure=lambda: put_back(aside, target)):
            shutil.rmtree(aside)


def put_back(aside: Path, target: Path) -> None:
    """`target` as it was before the failed command: what the command wrote there is removed."""
    shutil.rmtree(target, ignore_errors=True)
    aside.rename(target)


def write_text_atomic(path: Path, text: str) -> None:
    """`text` in `path`, whole or not at all: written beside it, flushed to disk, then renamed over it (the
    temporary name is the process's own: two writers never share it)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
