"""One post-training optimiser step, and the speed settings it runs with.

`training_step` is what `training/post_train.py` runs for every optimiser step and what
`benchmarks/throughput.py` times: forward of each micro-batch, the loss scaled to the global
token mean, backward, gradient clipping, optimiser and scheduler step, zero_grad. It returns the
summed masked-token loss as a device tensor, so a caller that does not log pays no host sync.

`resolve_speed(config, device)` turns the config's "auto" speed fields into concrete choices
(mixed precision, torch.compile, fused AdamW, static masked-head capacity, attention implementation,
dropout mask, retained CPU memory, data-loader workers) per kind of device;
`training.masked_lm.use_speed_paths` applies two of them to a model, `retain_freed_memory` one to the
process; `describe_speed` is the one log line that says what was chosen.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch


# ----------------------------------------------------------------------------------------------
# Speed settings
# ----------------------------------------------------------------------------------------------


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 matmuls (AVX512-BF16 or AMX). Elsewhere (AVX2-only CPUs, and AVX512
    CPUs without the BF16 extension) oneDNN emulates bf16 and a bf16 matmul is about 100x slower than
    fp32, so autocast must stay off.

    False too where torch dispatches below AVX512 on such a CPU (`ATEN_CPU_CAPABILITY=avx2`), so that
    one class decides every automatic setting: with `ONEDNN_MAX_CPU_ISA=AVX2` beside it, a bf16 machine
    then picks and runs what an AVX2-only machine does (how docs/BENCHMARKS.md reproduces that class)."""
    if not torch.backends.cpu.get_cpu_capability().lower().startswith("avx512"):
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    for name in checks:
        probe = getattr(torch.cpu, name, None)
        if probe is not None:
            try:
                if probe():
                    return True
            except Exception:  # noqa: BLE001 - an unknown build: treat as unsupported
                pass
    return False


def auto_mixed_precision(device: str) -> str:
    """bf16 where the hardware runs it natively (CUDA with bf16 support, CPUs with AVX512-BF16/AMX), else no."""
    if device.startswith("cuda"):
        # not emulated bf16 (V100, T4: is_bf16_supported() is True there by default, and slow)
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False) else "no"
    return "bf16" if cpu_has_fast_bf16() else "no"


@dataclass
class SpeedSettings:
    mixed_precision: str  # no | fp16 | bf16
    compile: bool  # torch.compile (inductor) of the training module's forward
    fused_adamw: bool  # torch.optim.AdamW(fused=True)
    masked_capacity: bool  # LM head on a static number of rows (no data-dependent shapes, no host sync)
    attention: str = "sdpa"  # sdpa | eager: the attention implementation the model trains with
    dropout_mask: str = "threshold"  # threshold | torch: how dropout draws its masks on CPU (`ThresholdDropout`)
    retain_memory: bool = False  # `retain_freed_memory`: freed blocks stay in the process for reuse
    loader_workers: int = 0  # data-loader worker processes (0: batches built in the training process)


def _auto_bool(value, default: bool) -> bool:
    if value in ("auto", None):
        return default
    if isinstance(value, str):
        return value.lower() in ("true", "yes", "1", "on")
    return bool(value)


def cpu_class() -> str:
    """The CPU's vector class as torch dispatches to it, plus native bf16: "avx2", "avx512",
    "avx512-bf16", "avx512-bf16-amx", ... (`torch.backends.cpu.get_cpu_capability()` lower-cased).
    Printed with the speed settings and written to training_summary.json, so that every speed
    figure names the class it was measured on."""
    capability = torch.backends.cpu.get_cpu_capability().lower()
    if capability.startswith("avx512") and cpu_has_fast_bf16():
        capability = "avx512-bf16"
        amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
        if amx is not None and amx():
            capability += "-amx"
    return capability


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_speed(config, device: str) -> SpeedSettings:
    """Concrete settings from the config's speed fields ("auto" or an explicit value).

    Defaults, measured per CPU class with benchmarks/throughput.py (MiniLM size, sequence 128,
    batch 16, interleaved rounds; docs/BENCHMARKS.md, "Throughput"):
    - mixed precision: `auto_mixed_precision` (bf16 autocast only where the CPU has native bf16).
    - compile: on CUDA only. On CPU the eager step was faster on every class measured (2-core
      machines, real tokens/s, medians of interleaved rounds): AVX512-BF16 with bf16 autocast (AMD
      EPYC, docs/BENCHMARKS.md), AVX512 in fp32 (Intel Xeon: eager 1,450 against compiled 1,141),
      AVX2 in fp32 (AMD EPYC: eager 1,159 against compiled 824). AMX has not been measured; it takes
      the choice of the closest measured class, AVX512-BF16. Compiling also costs 17-64 s per phase.
    - fused AdamW: on (CPU and CUDA both have the kernel).
    - masked capacity: on whenever compiling (a static LM-head shape avoids recompiles); eager keeps
      the exact-size selection, which costs nothing there.
    - attention: sdpa on CUDA. On CPU eager (`training.masked_lm.threshold_eager_attention`: what SDPA's
      math path computes, fp32 scores and probabilities, with cheaper dropout masks), except in fp32
      without attention dropout (`post_training_dropout: 0`, as the CPU recipes run), where SDPA's
      flash kernel is the faster: with dropout SDPA falls back to its math path and torch's masks
      (attention 2.4x slower than eager, Intel Xeon AVX512 fp32), and with bf16 autocast eager was
      faster on AMD EPYC AVX512-BF16; in fp32 without dropout SDPA ran the whole step 1.08x faster on
      an Intel Xeon with AVX512 and 1.03x with its kernels capped at AVX2, in 0.3-0.5 GiB less memory
      (docs/BENCHMARKS.md). An AVX2-only machine has not been measured; it takes the capped result.
    - dropout mask: threshold (`training.masked_lm.ThresholdDropout`: about half the cost of torch's Bernoulli masks on CPU,
      which took a fifth of the bf16 step); it only changes how CPU masks are drawn.
    - retained CPU memory: on CPU (`retain_freed_memory`); on CUDA the tensors live in torch's caching
      allocator already.
    - data-loader workers: `auto_loader_workers`.
    """
    mixed = config.mixed_precision
    if mixed == "auto":
        mixed = auto_mixed_precision(device)
    cuda = device.startswith("cuda")
    compile_on = _auto_bool(config.compile, cuda)
    fused = _auto_bool(config.fused_adamw, True)
    capacity = _auto_bool(config.static_masked_head, compile_on)
    attention = config.attn_implementation
    if attention == "auto":
        attention = "sdpa" if cuda or (mixed == "no" and config.post_training_dropout == 0) else "eager"
    dropout_mask = "threshold" if config.dropout_mask == "auto" else config.dropout_mask
    retain = _auto_bool(config.retain_cpu_memory, not cuda)
    workers = auto_loader_workers(device) if config.num_workers == "auto" else int(config.num_workers)
    return SpeedSettings(mixed, compile_on, fused, capacity, attention, dropout_mask, retain, workers)


def auto_loader_workers(device: str) -> int:
    """Data-loader worker processes for `num_workers: auto`.

    On a CPU, none: workers run on the cores the training step's threads use. On a 2-core EPYC-bf16,
    `configs/shared-minilm.yaml` (256 x 128 rows) trained 1.4x slower with its 8 GPU workers than with
    the batches built in the training process, and held 2.8 GB more (docs/BENCHMARKS.md, "Loader
    workers on a CPU"); building one 256-row batch takes about 25 ms against a step of about 15 s.
    On a GPU, one per spare core of this process's share of the machine, at most 8: the H200 run of
    that config kept its GPU fed with 8 (16 cores, one process), the only GPU figure measured."""
    if not device.startswith("cuda"):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    processes_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(0, min(8, cores // max(1, processes_here) - 1))


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def retain_freed_memory() -> bool:
    """Keep the memory that tensors free inside the process, for the next step's tensors to reuse.

    glibc's malloc serves each block above its mmap threshold (128 KiB, rising with use to at most
    32 MiB) with a fresh mapping and unmaps it on free, and trims the heap's free top; so a step's
    large activations, logits and gradients come back as new pages that the kernel faults in and
    zeroes one 4 KiB page at a time. At MiniLM size, sequence 128, batch 16, bf16: about 30,000 page
    faults per XPT step, and 460,000 per stock BERT step with its dense 32K-way head
    (docs/BENCHMARKS.md). With large blocks taken from the heap (`M_MMAP_MAX` 0) and trimming off
    (`M_TRIM_THRESHOLD` -1, mallopt(3)), freed blocks stay mapped and are reused: about 11,000 and 0.
    The process keeps its peak footprint, as torch's CUDA caching allocator does on the GPU.
    Process-wide and permanent for the process; it covers the main thread's heap, where CPU training
    allocates (glibc's per-thread arenas still map blocks of 64 MiB and more).

    Written by hand because torch has no CPU caching allocator to switch on, and the remedy PyTorch's
    CPU performance guide names (jemalloc or tcmalloc through LD_PRELOAD) needs a system library and
    must be set before the process starts. Returns False, changing nothing, where the C library is
    not glibc or where another allocator serves `malloc` (such a preloaded jemalloc or tcmalloc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc, process = ctypes.CDLL("libc.so.6"), ctypes.CDLL(None)
    except OSError:
        return False
    process_malloc, libc_malloc = (ctypes.cast(lib.malloc, ctypes.c_void_p).value for lib in (process, libc))
    if process_malloc != libc_malloc:  # the process's malloc is not glibc's: mallopt would change nothing
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, -1))


def describe_speed(settings: SpeedSettings, device: str) -> str:
    where = device
    if device == "cpu":
        where = f"cpu ({cpu_class()}" + (", no native bf16)" if not cpu_has_fast_bf16() else ")")
    return (f"speed settings on {where}: mixed_precision={settings.mixed_precision} "
            f"compile={'inductor' if settings.compile else 'off'} fused_adamw={settings.fused_adamw} "
            f"static_masked_head={settings.masked_capacity} attention={settings.attention} "
            f"dropout_mask={settings.dropout_mask} retain_cpu_memory={settings.retain_memory} "
            f"num_workers={settings.loader_workers} (config fields mixed_precision, compile, fused_adamw, "
            "static_masked_head, attn_implementation, dropout_mask, retain_cpu_memory, num_workers)")


def weight_decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups over the trainable parameters: weight decay on matrices, none on biases
    and LayerNorm weights (every parameter with fewer than 2 dimensions). The one rule for
    post-training and fine-tuning; empty groups are left out."""
    decay, plain = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else plain).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def masked_capacity_for(rows: int, length: int, masked: int, mlm_probability: float) -> int:
    """Static number of LM-head rows for a micro-batch: the most masked tokens `rows` full rows of
    `length` can hold at `mlm_probability`, rounded up to 8; doubled (rarely: whole-word masking)
    until it holds the actual count, so compiled graphs see few distinct shapes."""
    capacity = -(-max(1, rows * max(1, round(mlm_probability * length))) // 8) * 8
    while capacity < masked:
        capacity *= 2
    return capacity


# ----------------------------------------------------------------------------------------------
# The step
# ----------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    loss_sum: torch.Tensor  # summed masked-token cross-entropy over this process's micro-batches (float64, device)
    wop_sum: torch.Tensor | None  # summed word-order-prediction loss, when that objective is on
    global_masked: float  # masked tokens in the global batch (all processes)
    global_tokens: float  # non-padding tokens in the global batch
    global_wop: float
    lr: float  # learning rate used by this step


def batch_counts(batches: list[dict], masked: list[int], pad_id: int, use_wop: bool) -> list[int]:
    """[masked tokens, real tokens, WOP targets] of host batches (no device work), given each
    batch's masked-token count."""
    return [sum(masked), sum(int(b["input_ids"].ne(pad_id).sum()) for b in batches),
            sum(int(b["wop_labels"].ne(-100).sum()) for b in batches) if use_wop else 0]


def training_step(model, batches: list[dict], optimizer, scheduler, accelerator, *, params, pad_id: int,
                  max_grad_norm: float | None, use_wop: bool = False, wop_weight: float = 0.0,
                  capacity: dict | None = None) -> StepResult:
    """One optimiser step over `batches` (this process's micro-batches of one global batch, on the host).

    Each micro-batch loss is its masked-token loss sum divided by the masked tokens of the whole
    global batch, times the world size (DDP averages gradients), so the update is the exact global
    token-mean gradient for any number of processes and accumulation steps. `capacity`:
    {"length": T, "mlm_probability": p} runs the LM head on a static number of rows
    (`masked_capacity_for`) instead of the exact masked count; the loss is the same.
    """
    world = accelerator.num_processes
    accumulation = len(batches)
    masked = [int(b["labels"].ne(-100).sum()) for b in batches]  # host tensors: no device sync
    counts = batch_counts(batches, masked, pad_id, use_wop)
    if world > 1:
        total = accelerator.reduce(torch.tensor(counts, device=accelerator.device, dtype=torch.float64),
                                   reduction="sum").tolist()
    else:
        total = [float(c) for c in counts]
    global_masked, global_tokens, global_wop = total
    loss_sum = torch.zeros((), device=accelerator.device, dtype=torch.float64)
    wop_sum = torch.zeros((), device=accelerator.device, dtype=torch.float64) if use_wop else None
    non_blocking = accelerator.device.type == "cuda"
    for a, host in enumerate(batches):
        n_local = masked[a]
        batch = {k: v.to(accelerator.device, non_blocking=non_blocking) for k, v in host.items() if k != "step"}
        if capacity:
            batch["masked_capacity"] = masked_capacity_for(host["labels"].shape[0], capacity["length"], n_local,
                                                           capacity["mlm_probability"])
        sync = a == accumulation - 1
        with (accelerator.no_sync(model) if not sync and world > 1 else contextlib.nullcontext()):
            out = model(**batch)
            loss = out.loss * (n_local * world / max(1.0, global_masked))
            if use_wop:
                loss = loss + wop_weight * out.wop_loss_sum * (world / max(1.0, global_wop))
                wop_sum += out.wop_loss_sum.detach().double()
            accelerator.backward(loss)
        loss_sum += out.loss.detach().double() * n_local
    if max_grad_norm and max_grad_norm > 0:
        accelerator.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    lr = scheduler.get_last_lr()[0]
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss_sum, wop_sum, global_masked, global_tokens, global_wop, lr)


# ----------------------------------------------------------------------------------------------
# The optimiser and its schedule
# ----------------------------------------------------------------------------------------------


class WarmupSchedule:
    """Linear warmup to 1, then linear decay to 0, cosine decay to 0, or constant (picklable).

    Hand-written rather than transformers' `get_scheduler`: its warmup starts at a learning rate of
    0, so the first step of every phase would train nothing; this one starts at 1/(warmup + 1).
    Post-training and fine-tuning both use it."""

    def __init__(self, warmup: int, total: int, kind: str):
        self.warmup, self.total, self.kind = warmup, total, kind

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        if self.kind == "constant":
            return 1.0
        progress = (step - self.warmup) / max(1, self.total - self.warmup)
        progress = min(1.0, progress)
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return max(0.0, 1.0 - progress)


def build_optimizer(model, phase, config, fused: bool = False):
    """AdamW over the trainable parameters (`training.step.weight_decay_groups`), and the warmup
    schedule. `fused`: the single-kernel AdamW (CPU and CUDA), else torch's default."""
    optimizer = torch.optim.AdamW(weight_decay_groups(model, config.weight_decay), lr=phase.learning_rate,
                                  betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
                                  **({"fused": True} if fused else {}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupSchedule(phase.warmup_steps, phase.steps, phase.schedule))
    return optimizer, scheduler


def compile_for_training(module):
    """torch.compile (inductor, static shapes) of a prepared training module."""
    return torch.compile(module, backend="inductor", dynamic=False)
