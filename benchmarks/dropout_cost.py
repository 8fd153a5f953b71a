"""What dropout costs the post-training step on this machine: the `xpt` path of `throughput.py`
(same model builder, batches, optimiser and step) with dropout as in the source (masks drawn by
`ThresholdDropout`'s threshold, and by torch's `bernoulli_`), without attention dropout, and without any
dropout, run in interleaved rounds whose order rotates; and with `ThresholdDropout`'s earlier boolean mask.

    python benchmarks/dropout_cost.py --size minilm --seq-len 128 --batch-size 16 \
        --tokenizer runs/tok32k-bench --rounds 5 --steps-per-round 2

First, the masks alone: forward and backward of dropout (p = 0.1) on the step's hidden-state shape
(bf16, as under autocast) and attention-probability shape (fp32), torch's `F.dropout` against
`ThresholdDropout` (its mask in the input's dtype, and the earlier boolean mask), interleaved. Prints
milliseconds and real tokens/s per variant (median and min-max over rounds) and the load average.
"""
from __future__ import annotations

import argparse
import atexit
import copy
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


import torch

try:
    from benchmarks import throughput as tp
except ImportError:  # run as `python benchmarks/dropout_cost.py`: this folder is the first import path
    import throughput as tp

VARIANTS = {  # name: (attention dropout, hidden dropout, mask, attention); None keeps the source's value / the default
    "as-source": (None, None, "threshold", None),
    "as-source-boolean-masks": (None, None, "boolean", None),
    "as-source-torch-masks": (None, None, "torch", None),
    "as-source-sdpa": (None, None, "threshold", "sdpa"),
    "no-attention-dropout": (0.0, None, "threshold", None),
    "no-dropout": (0.0, 0.0, "threshold", None),
    "no-dropout-sdpa": (0.0, 0.0, "threshold", "sdpa"),
}


def boolean_mask_dropout():
    """`ThresholdDropout` with its earlier mask: the same draws and threshold, kept as a boolean tensor (which
    torch's CPU kernels copy to the other operand's dtype before multiplying, forward and backward)."""
    from training.masked_lm import ThresholdDropout

    class BooleanMaskDropout(ThresholdDropout):
        def keep_mask(self, like):
            numbers, threshold = self.draw(like)
            return numbers >= threshold - 32768, 65536 / (65536 - threshold)

    return BooleanMaskDropout


def with_boolean_masks(model):
    """`model` with every dropout drawing the earlier boolean mask (same p); `use_speed_paths` leaves
    these modules as they are, and the eager attention draws its masks through them."""
    from training.masked_lm import ThresholdDropout

    cls = boolean_mask_dropout()
    for module in model.modules():
        if type(module) in (torch.nn.Dropout, ThresholdDropout):
            module.__class__ = cls
    return model


def mask_costs(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], rounds: int, reps: int = 5) -> dict:
    """Milliseconds of dropout forward + backward per shape and mask kind: {(shape name, kind): [ms per round]}."""
    from training.masked_lm import ThresholdDropout

    kinds = {"torch": torch.nn.Dropout(0.1).train(), "boolean": boolean_mask_dropout()(0.1).train(),
             "threshold": ThresholdDropout(0.1).train()}
    times = {(name, kind): [] for name in shapes for kind in kinds}
    for r in range(rounds):
        for name, (shape, dtype) in shapes.items():
            x = torch.randn(shape, dtype=dtype, requires_grad=True)
            for kind in tp.rotated(list(kinds), r):
                start = time.perf_counter()
                for _ in range(reps):
                    kinds[kind](x).backward(torch.ones_like(x))
                times[(name, kind)].append((time.perf_counter() - start) / reps * 1e3)
    return times


def without_dropout(model, attention: float | None, hidden: float | None):
    """A copy of `model` with post-training's dropout override (`masked_lm.set_dropout`)."""
    from training.masked_lm import set_dropout

    model = copy.deepcopy(model)
    set_dropout(model, hidden, attention)
    return model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="minilm")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps-per-round", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--num-texts", type=int, default=20000, help="texts to read (and to train a tokenizer on)")
    a = p.parse_args(argv)
    from accelerate import Accelerator

    from training.config import PostTrainConfig
    from training.inputs import source_family
    from training.methods import METHODS
    from training.step import resolve_speed, retain_freed_memory

    args = tp.parse_args(["--device", "cpu", "--size", a.size, "--seq-len", str(a.seq_len), "--batch-size",
                          str(a.batch_size), "--threads", str(a.threads), "--num-texts", str(a.num_texts)]
                         + (["--tokenizer", a.tokenizer] if a.tokenizer else []))
    torch.set_num_threads(a.threads)
    best = resolve_speed(PostTrainConfig(mixed_precision="auto", compile="auto"), "cpu")
    # every variant is XPT's step, in one process with post_train.py's allocator setting
    retained = best.retain_memory and retain_freed_memory()
    accelerator = Accelerator(mixed_precision=best.mixed_precision, cpu=True)
    workdir = Path(tempfile.mkdtemp(prefix="xpt-dropout-"))
    atexit.register(shutil.rmtree, workdir, True)  # the source, tokenizer and rows built for this run
    texts, _ = tp.read_texts(args.data, args.num_texts)
    source = tp.source_for(a.size, workdir)
    tokenizer, _ = tp.load_tokenizer(args, texts, source_family(source) or "bert", workdir)
    torch.manual_seed(0)
    model = METHODS["xpt"].build(source, tokenizer)
    path = tp.path_table(best)["xpt"]
    runners = {}
    load = [os.getloadavg()[0]]
    cfg = model.config
    heads, rows = cfg.num_attention_heads, (a.batch_size, a.seq_len)
    hidden = torch.bfloat16 if best.mixed_precision == "bf16" else torch.float32  # as the step runs its states
    masks = mask_costs({f"hidden states {rows + (cfg.hidden_size,)} {str(hidden).removeprefix('torch.')}":
                            (rows + (cfg.hidden_size,), hidden),
                        f"attention probabilities {(a.batch_size, heads, a.seq_len, a.seq_len)} fp32":
                            ((a.batch_size, heads, a.seq_len, a.seq_len), torch.float32)}, a.rounds)
    print("| dropout p = 0.1, forward + backward | mask | ms (median) | min-max |")
    print("| --- | --- | ---: | --- |")
    for (name, kind), v in masks.items():
        print(f"| {name} | {kind} | {statistics.median(v):.2f} | {min(v):.2f}-{max(v):.2f} |")
    for name, (attention, hidden, mask, implementation) in VARIANTS.items():
        speed = replace(path.speed, dropout_mask="threshold" if mask == "boolean" else mask,
                        attention=implementation or path.speed.attention)
        variant = without_dropout(model, attention, hidden)
        if mask == "boolean":
            variant = with_boolean_masks(variant)
        runner = tp.build_runner(replace(path, speed=speed), variant, tokenizer, texts, args, workdir, accelerator, 8)
        runner.run(accelerator, 2, tokenizer.pad_token_id, len(tokenizer))  # warm-up
        runners[name] = runner
    for r in range(a.rounds):
        for runner in tp.rotated(list(runners.values()), r):
            runner.run(accelerator, a.steps_per_round, tokenizer.pad_token_id, len(tokenizer), peak=1.0)
    load.append(os.getloadavg()[0])
    print(f"settings: {best.mixed_precision}, eager, {a.threads} threads, {'retained' if retained else 'default'} "
          f"malloc; load average {load[0]:.2f} -> {load[1]:.2f}")
    print("| dropout | real tokens/s (median) | min-max |")
    print("| --- | ---: | --- |")
    for name, runner in runners.items():
        v = runner.tokens_per_s
        print(f"| {name} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
