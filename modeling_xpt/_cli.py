"""Shared command-line behaviour: user errors end in one clear line and exit code 2, not a traceback."""
from __future__ import annotations

import sys
from collections.abc import Callable


def run(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    try:
        code = main(argv)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)
