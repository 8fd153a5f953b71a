"""User-facing errors: one clear line naming the input and the fix, exit code 2, no traceback.

The one home of that rule for the project's commands (tokenization, training, cards): each command's
own error type derives from `UserError`, and each `main` reports it with `report_error` (or is a
`command`, which runs it under `run_cli`); the model package has no command of its own. Nothing here imports more than the
standard library, so every module can use it.
"""
from __future__ import annotations

import contextvars
import functools
import sys
from typing import Callable, Sequence


class UserError(ValueError):
    """Bad input the user can fix. The message names the offending input and says how to fix it;
    commands print it on one line (`report_error`) and exit with `exit_code`."""

    exit_code = 2


class ConfigError(UserError):
    """A bad configuration; the message names the field."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        self.message = message
        super().__init__(f"config field `{field_name}`: {message}")


class InputError(UserError):
    """Bad corpus or tokenizer input (missing file, empty corpus, impossible vocabulary size...)."""


def report_error(error: BaseException) -> int:
    """Print ``error: <message>`` on one line to stderr; return the exit code (`exit_code`, else 2)."""
    print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
    return getattr(error, "exit_code", 2)


# What the running command must do when it ends, as (on success, on failure) pairs: `at_command_end`.
_AT_END: contextvars.ContextVar[list | None] = contextvars.ContextVar("xpt_command_end", default=None)


def at_command_end(on_success: Callable[[], None], on_failure: Callable[[], None]) -> bool:
    """Have the running command (`run_cli`) call `on_success` when `main` returns, or `on_failure` when it
    raises or is interrupted (e.g. folders.py's earlier contents of an --overwrite output: deleted, or put
    back). False outside a command: nothing is registered."""
    pending = _AT_END.get()
    if pending is None:
        return False
    pending.append((on_success, on_failure))
    return True


def run_cli(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; a :class:`UserError` is reported in one line (exit 2), Ctrl-C is exit 130.
    What `main` registered with `at_command_end` runs last, in reverse order."""
    pending: list = []
    token = _AT_END.set(pending)
    succeeded = False
    try:
        rc = main(argv)
        succeeded = not rc
    except UserError as e:
        return report_error(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _AT_END.reset(token)
        for on_success, on_failure in reversed(pending):
            (on_success if succeeded else on_failure)()
    return int(rc or 0)


def command(main: Callable[[Sequence[str] | None], int | None]) -> Callable[[Sequence[str] | None], int]:
    """`main` as its installed script and `python -m` both run it: under `run_cli`, so a user error is one
    line and exit 2 either way (console scripts call the entry point directly). `main.__wrapped__` raises."""

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int:
        return run_cli(main, argv)

    return run
