"""Publishing a finished folder on the Hub from post-training and fine-tuning.

The card, checks and upload live in cards/, which builds on training/. Training reaches them through
the installed project's entry point (`[project.entry-points."xpt.publishers"]` in pyproject.toml:
`hub = "cards.publish"`), the packaging mechanism for code that a lower layer calls without importing
it; so training/ imports nothing from cards/.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from importlib.metadata import entry_points

from tokenization.errors import UserError

GROUP = "xpt.publishers"


def publisher(name: str = "hub"):
    """The publishing module registered as `name` (`check`, `push`, `Error`; see cards/publish.py)."""
    found = entry_points(group=GROUP, name=name)
    if not found:
        raise UserError(f"publishing needs the project installed with its cards package (no {GROUP!r} entry point "
                        f"named {name!r}): run `pip install -e .` in the checkout, or publish later with `xpt-push`")
    return next(iter(found)).load()


def retry_command(model_dir, repo_id: str, *, private: bool = False, license: str | None = None,
                  base_model: str | None = None, dry_run: bool = False) -> str:
    """The `xpt-push` command that repeats a failed push with every choice the user made: a push that failed
    before the repo existed must not create it public, or with another licence or base model, on retry; a
    failed dry run is retried as a dry run, never as an upload."""
    words = ["xpt-push", "--model-dir", str(model_dir), "--repo-id", repo_id] + (["--private"] if private else [])
    words += ["--dry-run"] if dry_run else []
    for flag, value in (("--license", license), ("--base-model", base_model)):
        words += [flag, value] if value else []
    return subprocess.list2cmdline(words) if os.name == "nt" else shlex.join(words)  # each shell's quoting
