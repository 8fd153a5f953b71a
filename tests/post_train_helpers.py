"""Helpers for the post-training tests: the argument list of a tiny post-training run (`run_args`), running
it in this process or in a subprocess (optionally killed right after a given step), resetting Accelerate's
state between in-process runs, and reading what a run wrote (losses, checkpoint and source weights, the
reused tensors). The tiny inputs themselves come from the `tiny` fixture in tests/conftest.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import KOREAN_SENTENCES, REPO_ROOT
from training import post_train

PYTHON = sys.executable
WORDS = sorted({w for s in KOREAN_SENTENCES for w in s.split()})
REUSED_GROUPS = ("reused_encoder", "reused_embeddings", "lm_head_transform")
PHASE1 = ("target_embeddings", "itl", "lm_head_bias")


def reset_accelerate():
    """Forgets the Accelerate state an in-process run left behind, so the next run starts afresh."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    PartialState._reset_state()
    GradientState._reset_state()


def run_args(tiny, out_dir, family="bert", **overrides) -> list[str]:
    source, tok = tiny[family]
    fields = dict(source=source, tokenizer=tok, data=tiny["corpus"], cache_dir=tiny["cache"], valid_size=40,
                  test_size=40, max_seq_length=32, global_batch_size=8, train_steps=8, phase1_steps=4,
                  warmup_steps=1, learning_rate=3e-3, eval_steps=3, save_steps=2, save_total_limit=10,
                  logging_steps=1, report_to="none", keep_checkpoints="true", output_dir=out_dir,
                  retain_cpu_memory="false")  # in-process runs: leave the test process's allocator alone
    if "phases" in overrides:  # explicit phases carry the schedule themselves
        for key in ("train_steps", "phase1_steps", "warmup_steps", "learning_rate"):
            del fields[key]
    fields.update(overrides)
    argv = []
    for key, value in fields.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv


def run_inprocess(argv) -> dict:
    assert post_train.main(argv) == 0
    out = Path(argv[argv.index("--output-dir") + 1])
    return json.loads((out / "training_summary.json").read_text())


def run_subprocess(args, launcher=(PYTHON,), check=True, timeout=600, script=REPO_ROOT / "training" / "post_train.py"):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([*launcher, str(script), *map(str, args)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def run_killed_after(step: int, args):
    """Post-training in a subprocess that dies right after optimiser step `step`, as if killed
    (tests/interrupted_post_train.py): exit status 17, no summary, no final save."""
    proc = run_subprocess([step, *args], check=False, script=REPO_ROOT / "tests" / "interrupted_post_train.py")
    assert proc.returncode == 17, proc.stderr[-3000:]
    return proc


def losses(out_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(out_dir) / "losses.jsonl").read_text().splitlines()]


def checkpoint_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)


def source_weights(source_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(source_dir) / "model.safetensors"))


def reused_pairs(names, family):
    """(XPT name, source name) of the reused tensors (encoder, P/S embeddings + LN, MLM transform)."""
    from modeling_xpt import parameter_group_of
    from modeling_xpt.conversion import stock_parameter_name

    return [(n, stock_parameter_name(n, family)) for n in names
            if parameter_group_of(n) in REUSED_GROUPS]
