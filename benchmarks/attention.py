"""Per-sentence attention of packed rows: SDPA with the dense block mask vs FlexAttention's block mask.

    python benchmarks/attention.py [--device cpu|cuda] [--batch-size 16] [--seq-len 128] [--heads 12]
        [--head-dim 32] [--mean-sentence 30] [--rounds 7] [--steps-per-round 5]

Forward + backward of one attention call (q, k, v of shape B x heads x T x head-dim, fp32 on cpu,
bf16 on cuda) on packed rows of random sentence lengths (mean `--mean-sentence` tokens, rows
filled next-fit like `training/mlm_data.py`, padding at row ends):

  sdpa-dense          `F.scaled_dot_product_attention` with the (B, 1, T, T) boolean mask that
                      `collate` + `expand_attention_mask` give the model today (eager)
  sdpa-dense-compiled the same under torch.compile (inductor)
  flex-blockmask      `flex_attention` under torch.compile with a `create_block_mask` built from
                      the segment ids inside the compiled function (no dense mask materialised);
                      torch 2.13 has no FlexAttention backward on CPU, so there the row says so
  sdpa-no-mask        unmasked SDPA (wrong for packed rows): the floor, what the mask costs

Checks that the outputs agree, then runs the paths interleaved in rounds; prints the median ms per
call and the min-max over rounds.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


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
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps-per-round", type=int, default=5)
    args = p.parse_args(argv)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    b, h, t, d = args.batch_size, args.heads, args.seq_len, args.head_dim
    seg = packed_segments(b, t, args.mean_sentence, 0).to(device)
    dense = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0))[:, None]
    dense = dense | torch.eye(t, dtype=torch.bool, device=device)  # expand_attention_mask: self always allowed
    q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, t, d, device=device, dtype=dtype)

    def sdpa(q, k, v, seg):
        mask = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0))[:, None]
        mask = mask | torch.eye(seg.shape[1], dtype=torch.bool, device=seg.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def flex(q, k, v, seg):
        def same(bi, hi, qi, ki):
            return (seg[bi, qi] == seg[bi, ki]) & (seg[bi, qi] >= 0) | (qi == ki)

        block = create_block_mask(same, b, None, t, t, device=seg.device)
        return flex_attention(q, k, v, block_mask=block)

    def unmasked(q, k, v, seg):
        return F.scaled_dot_product_attention(q, k, v)

    paths = {"sdpa-dense": sdpa, "sdpa-dense-compiled": torch.compile(sdpa), "flex-blockmask": torch.compile(flex),
             "sdpa-no-mask": unmasked}
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
        err = (out - reference).abs().max().item()
        print(f"{name}: first call {first[name]:.1f}s, max |diff| to sdpa-dense {err:.2e}", flush=True)
    times = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, fn in paths.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps_per_round):
                fn(q, k, v, seg).backward(grad)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / args.steps_per_round * 1e3)
    real = int((seg >= 0).sum())
    print(f"# {args.device}, B {b} x heads {h} x T {t} x head-dim {d}, {real / (b * t):.1%} real tokens, "
          f"{args.rounds} rounds x {args.steps_per_round} calls, {torch.get_num_threads()} threads")
    print("| path | ms per forward+backward (median) | min-max | first call s |")
    print("| --- | ---: | --- | ---: |")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f}-{max(ts):.2f} | {first[name]:.1f} |")
    for name, why in unsupported.items():
        print(f"| {name} | not supported: {why} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
