"""What dropout costs the post-training step on this machine: the `xpt` path of `throughput.py`
(same model builder, batches, optimiser and step) with dropout as in the source, without attention
dropout, and without any dropout, run in interleaved rounds.

    python benchmarks/dropout_cost.py --size minilm --seq-len 128 --batch-size 16 \
        --tokenizer runs/tok32k-bench --rounds 5 --steps-per-round 2

Prints real tokens/s per variant (median and min-max over rounds) and the load average.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from benchmarks import throughput as tp  # noqa: E402

VARIANTS = {  # name: (attention dropout, hidden dropout); None keeps the source's value
    "as-source": (None, None),
    "no-attention-dropout": (0.0, None),
    "no-dropout": (0.0, 0.0),
}


def without_dropout(model, attention: float | None, hidden: float | None):
    """A copy of `model` with post-training's dropout override (`post_train.set_dropout`)."""
    from training.post_train import set_dropout

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

    from training.config import PostTrainConfig, source_family
    from training.methods import METHODS
    from training.step import resolve_speed

    args = tp.parse_args(["--device", "cpu", "--size", a.size, "--seq-len", str(a.seq_len), "--batch-size",
                          str(a.batch_size), "--threads", str(a.threads), "--num-texts", str(a.num_texts)]
                         + (["--tokenizer", a.tokenizer] if a.tokenizer else []))
    torch.set_num_threads(a.threads)
    best = resolve_speed(PostTrainConfig(mixed_precision="auto", compile="auto"), "cpu")
    accelerator = Accelerator(mixed_precision=best.mixed_precision, cpu=True)
    workdir = Path(tempfile.mkdtemp(prefix="xpt-dropout-"))
    texts, _ = tp.read_texts(args.data, args.num_texts)
    source = tp.source_for(a.size, workdir)
    tokenizer, _ = tp.load_tokenizer(args, texts, source_family(source) or "bert", workdir)
    torch.manual_seed(0)
    model = METHODS["xpt"].build(source, tokenizer)
    path = tp.path_table(best)["xpt"]
    runners = {}
    for name, (attention, hidden) in VARIANTS.items():
        runner = tp.build_runner(path, without_dropout(model, attention, hidden), tokenizer, texts, args, workdir,
                                 accelerator, 8)
        runner.run(accelerator, 2, tokenizer.pad_token_id, len(tokenizer))  # warm-up
        runners[name] = runner
    load = [os.getloadavg()[0]]
    for _ in range(a.rounds):
        for runner in runners.values():
            runner.run(accelerator, a.steps_per_round, tokenizer.pad_token_id, len(tokenizer), peak=1.0)
    load.append(os.getloadavg()[0])
    print(f"settings: {best.mixed_precision}, eager, {a.threads} threads; load average {load[0]:.2f} -> {load[1]:.2f}")
    print("| dropout | real tokens/s (median) | min-max |")
    print("| --- | ---: | --- |")
    for name, runner in runners.items():
        v = runner.tokens_per_s
        print(f"| {name} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
