"""User-facing errors: one clear line naming the input and the fix, exit code 2, no traceback."""
from __future__ import annotations

import sys
from typing import Callable, Sequence


class InputError(ValueError):
    """Bad input the user can fix (missing file, empty corpus, impossible vocabulary size...).

    The message names the offending input and says how to fix it.
    """


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; an :class:`InputError` becomes ``error: <message>`` on stderr and exit 2."""
    try:
        rc = main(argv)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)
