"""Folders the package writes are ordinary folders: every file readable by others, as the umask allows."""
from __future__ import annotations

import os
import stat

import pytest

from tests.post_train_helpers import run_args, run_inprocess

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


def test_every_saved_file_has_the_ordinary_mode(tiny, tmp_path):
    """safetensors writes the weights with mode 0600; the saved folder must not keep it."""
    previous = os.umask(0o022)
    try:
        out = tmp_path / "run"
        run_inprocess(run_args(tiny, out, train_steps=2, phase1_steps=1, keep_checkpoints="false"))
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    finally:
        os.umask(previous)
    assert "model.safetensors" in modes and "tokenizer.json" in modes
    assert {name: mode for name, mode in modes.items() if mode != 0o644} == {}
