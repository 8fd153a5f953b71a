"""Per-sentence attention of packed rows: SDPA with the dense block mask vs FlexAttention's block mask.

    python benchmarks/attention.py [--device cpu|cuda] [--batch-size 16] [--seq-len 128] [--heads 12]
        [--head-dim 32] [--mean-sentence 30] [--dropout 0.0] [--rounds 7] [--steps-per-round 5]

Forward + backward of one attention call (q, k, v of shape B x heads x T x head-dim; `--dtype`,
default fp32 on cpu and bf16 on cuda) on packed rows of random sentence lengths (mean `--mean-sentence` tokens, rows
filled next-fit like `training/mlm_data.py`, padding at row ends):

  sdpa-dense          `F.scaled_dot_product_attention` with the (B, 1, T, T) boolean mask that
                      `collate` + `expand_attention_mask` give the model today (eager)
  sdpa-dense-compiled the same under torch.compile (inductor)
  flex-blockmask      `flex_attention` under torch.compile with a `create_block_mask` built from
                      the segment ids inside the compiled function (no dense mask materialised);
                      torch 2.13 has no FlexAttention backward on CPU, so there the row says so
  sdpa-no-mask        unmasked SDPA (wrong for packed rows): the floor, what the mask costs
  xpt-explicit        post-training's `threshold_eager_attention` (fp32 scores and probabilities, the
                      mask as an in-place bias) with `ThresholdDropout`'s masks on CPU
  xpt-explicit-torch-masks  the same with torch's dropout

`--dropout p` applies attention dropout in every path that has it (SDPA's `dropout_p`, the explicit
paths' dropout modules); FlexAttention has none and is left out then. Without dropout the outputs are
checked against sdpa-dense. The paths then run interleaved in rounds whose order rotates; prints
the median ms per call and the min-max over rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from types import SimpleNamespace


import torch
import torch.nn.functional as F


try:
    from benchmarks.throughput import rotated
except ImportError:  # run as `python benchmarks/attention.py`: this folder is the first import path
    from throughput import rotated
from training.masked_lm import ThresholdDropout, threshold_eager_attention


def packed_segments(batch: int, length: int, mean: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    seg = torch.full((batch, length), -1, dtype=torch.long)
    for row in range(batch):
        pos, s = 0, 0
        while True:
            n = int(torch.clamp(torch.poisson(torch.tensor(float(mean)), generator=g), 3, length).item())
            if pos + n > length:
                break
            seg[row, pos:pos + n] = s
            pos, s = pos + n, s + 1
    return seg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--mean-sentence", type=int, default=30)
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout in every path that has it")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None,
                   help="of q, k, v (default: bf16 on cuda, fp32 on cpu; bf16 is what a bf16-autocast step feeds it)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps-per-round", type=int, default=5)
    args = p.parse_args(argv)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    b, h, t, d = args.batch_size, args.heads, args.seq_len, args.head_dim
    seg = packed_segments(b, t, args.mean_sentence, 0).to(device)
    dense = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0))[:, None]
    dense = dense | torch.eye(t, dtype=torch.bool, device=device)  # expand_attention_mask: self always allowed
    q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, t, d, device=device, dtype=dtype)

    def sdpa(q, k, v, seg):
        mask = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0))[:, None]
        mask = mask | torch.eye(seg.shape[1], dtype=torch.bool, device=seg.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=args.dropout)

    def flex(q, k, v, seg):
        def same(bi, hi, qi, ki):
            return (seg[bi, qi] == seg[bi, ki]) & (seg[bi, qi] >= 0) | (qi == ki)

        block = create_block_mask(same, b, None, t, t, device=seg.device)
        return flex_attention(q, k, v, block_mask=block)

    def unmasked(q, k, v, seg):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=args.dropout)

    threshold = SimpleNamespace(dropout=ThresholdDropout(args.dropout).train())
    torch_masks = SimpleNamespace(dropout=torch.nn.Dropout(args.dropout).train())

    def explicit(module):  # its output is (batch, length, heads, d_head), as AttentionInterface functions return
        return lambda q, k, v, seg: threshold_eager_attention(module, q, k, v, dense, dropout=args.dropout)[0].transpose(1, 2)

    paths = {"sdpa-dense": sdpa, "sdpa-dense-compiled": torch.compile(sdpa), "flex-blockmask": torch.compile(flex),
             "sdpa-no-mask": unmasked, "xpt-explicit": explicit(threshold),
             "xpt-explicit-torch-masks": explicit(torch_masks)}
    if args.dropout > 0:
        del paths["flex-blockmask"]
        print("flex-blockmask: left out (FlexAttention has no dropout)", flush=True)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    first, unsupported = {}, {}
    for name, fn in list(paths.items()):
        t0 = time.perf_counter()
        try:
            out = fn(q, k, v, seg)
            out.backward(grad)
        except NotImplementedError as error:
            unsupported[name] = str(error).splitlines()[0]
            del paths[name]
            print(f"{name}: not supported here: {unsupported[name]}", flush=True)
            continue
        first[name] = time.perf_counter() - t0
        err = f"{(out - reference).abs().max().item():.2e}" if args.dropout == 0 else "n/a (dropout)"
        print(f"{name}: first call {first[name]:.1f}s, max |diff| to sdpa-dense {err}", flush=True)
    times = {name: [] for name in paths}
    for r in range(args.rounds):
        for name, fn in rotated(list(paths.items()), r):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps_per_round):
                fn(q, k, v, seg).backward(grad)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / args.steps_per_round * 1e3)
    real = int((seg >= 0).sum())
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"# {args.device}, B {b} x heads {h} x T {t} x head-dim {d}, {real / (b * t):.1%} real tokens, dropout "
          f"{args.dropout}, {str(dtype).removeprefix('torch.')}, {args.rounds} rounds x {args.steps_per_round} calls, {torch.get_num_threads()} threads, "
          f"load average {load[0]:.2f}")
    print("| path | ms per forward+backward (median) | min-max | first call s |")
    print("| --- | ---: | --- | ---: |")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f}-{max(ts):.2f} | {first[name]:.1f} |")
    for name, why in unsupported.items():
        print(f"| {name} | not supported: {why} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
