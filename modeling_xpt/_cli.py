"""Shared command-line behaviour: user errors end in one clear line and exit code 2, not a traceback."""
from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


def run(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    try:
        code = main(argv)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)


def overlapping(a, b) -> bool:
    """Whether two paths are the same folder or one lies inside the other."""
    a, b = Path(a).expanduser().resolve(), Path(b).expanduser().resolve()
    return a == b or a in b.parents or b in a.parents


def check_output_folder(out, *, overwrite: bool, reads: Iterable = ()) -> None:
    """Before a command writes `out`: refuse a folder that is, contains or lies inside one of the folders
    or files it `reads`, and a folder that already holds files unless `overwrite` (then it is emptied
    first, so no file of an earlier run stays beside the new ones). Raises ValueError (one line)."""
    target = Path(out).expanduser().resolve()
    for read in reads:
        if read is None or not Path(read).expanduser().exists():
            continue  # Hub ids and the like are not local inputs
        if overlapping(out, read):
            raise ValueError(f"output {out} overlaps the input {read}: the command would write into what it "
                             "reads; choose another output folder")
    if target.is_file():
        raise ValueError(f"output {out} is a file; give a folder")
    if target.is_dir() and any(target.iterdir()):
        if not overwrite:
            raise ValueError(f"output {out} already holds files; choose a new or empty folder, or pass "
                             "--overwrite to replace its contents")
        shutil.rmtree(target)
