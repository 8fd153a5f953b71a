"""How fast post-training's loader builds a batch: `training.mlm_batches.collate` (masking, padding,
block mask, positions) on packed rows of real text, as each DataLoader worker of `post_train.py`
runs it. On a GPU the step is short (MiniLM, 256 rows x 128 tokens: about 21 ms on an H200), so the
workers (`num_workers`) must each deliver a batch in under `num_workers` x that.

    python benchmarks/collate.py --tokenizer runs/tok32k-bench --batch-size 256 --rounds 15 \
        [--baseline-tree ../other-checkout] [--step-ms 21]

With `--baseline-tree`, the same batches are also collated by that checkout's
`training/mlm_batches.py`, interleaved with this one (the order alternates every round), and the two
outputs must be identical, tensor for tensor. Prints per tree the median milliseconds per batch
(min-max over rounds), batches/s per worker and, with `--step-ms`, the workers that keep up with a
step of that length. Run it single-threaded (`OMP_NUM_THREADS=1`), as a loader worker runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

try:
    from benchmarks import throughput as tp
except ImportError:  # run as `python benchmarks/collate.py`: this folder is the first import path
    import throughput as tp


def load_batches_module(tree: Path, name: str):
    """`training/mlm_batches.py` of a checkout, loaded under its own name (so two trees sit side by side)."""
    spec = importlib.util.spec_from_file_location(name, tree / "training" / "mlm_batches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="a trained tokenizer folder (e.g. runs/tok32k-bench)")
    p.add_argument("--data", default=None, help="file or folder of .txt/.txt.gz texts (default ../shared/data/corpus)")
    p.add_argument("--num-texts", type=int, default=20000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--position-offset", type=int, default=0, help="0 for BERT sources, 2 for RoBERTa")
    p.add_argument("--baseline-tree", type=Path, default=None, help="another checkout to compare against")
    p.add_argument("--step-ms", type=float, default=None, help="a training step's length, to size num_workers")
    args = p.parse_args()

    import datasets
    from transformers import AutoTokenizer

    from training.mlm_data import build_token_rows
    from training.step import cpu_class, cpu_model_name

    texts, source = tp.read_texts(args.data, args.num_texts)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    with tempfile.TemporaryDirectory() as cache:
        rows = build_token_rows({"train": datasets.Dataset.from_dict({"text": texts})}, tokenizer,
                                max_seq_length=args.seq_len, packing=True, cache_dir=cache,
                                cache_key={"bench": len(texts)}, log=lambda *_: None)["train"]
    trees = {"this tree": tp.REPO_ROOT}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree.resolve()
    modules = {name: load_batches_module(tree, f"mlm_batches_{i}") for i, (name, tree) in enumerate(trees.items())}
    maskers = {name: module.Masker(tokenizer) for name, module in modules.items()}
    times = {name: [] for name in modules}
    rng = np.random.default_rng(0)
    order = list(modules)
    for r in range(args.rounds):
        index = [int(i) for i in rng.choice(len(rows), args.batch_size, replace=False)]
        batch = rows[index]
        items = [dict(zip(batch.keys(), values)) for values in zip(*batch.values())]
        outputs = {}
        for name in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            outputs[name] = modules[name].collate(items, index, masker=maskers[name], seed=0, epoch=r,
                                                  pad_id=tokenizer.pad_token_id, position_offset=args.position_offset,
                                                  packing=True)
            times[name].append(time.perf_counter() - t0)
        first = outputs[order[0]]
        for name in order[1:]:
            for key, value in first.items():
                if not torch.equal(value, outputs[name][key]):
                    raise SystemExit(f"{name} collates {key!r} differently from this tree (round {r})")
    print(f"# collate: {args.batch_size} packed rows x {args.seq_len} tokens, {args.rounds} rounds, data {source} "
          f"({len(rows):,} rows), torch threads {torch.get_num_threads()}, CPU {cpu_model_name()} (class {cpu_class()}), "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
          + ("; outputs identical across trees" if len(order) > 1 else ""))
    print("| tree | ms per batch (median) | min-max | batches/s per worker |"
          + (f" workers for a {args.step_ms:g} ms step |" if args.step_ms else ""))
    print("| --- | ---: | --- | ---: |" + (" ---: |" if args.step_ms else ""))
    for name, ts in times.items():
        median = statistics.median(ts) * 1e3
        row = f"| {name} | {median:.1f} | {min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f} | {1e3 / median:.1f} |"
        print(row + (f" {math.ceil(median / args.step_ms)} |" if args.step_ms else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
