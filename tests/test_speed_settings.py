"""Speed settings of the training step (training/step.py): how `resolve_speed` resolves mixed precision,
compile, fused AdamW, the static masked head, attention, dropout masks, retained CPU memory and the
data-loader workers from the config and the device; retaining freed memory under glibc malloc and not
under another allocator, and that it is applied and recorded; the masked head's capacity; and that every setting gives the same
update as the default training step.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import KOREAN_SENTENCES, REPO_ROOT
from tests.post_train_helpers import run_args, run_inprocess
from tokenization.errors import ConfigError
from training import run_setup
from training.config import config_from_dict
from training.config_checks import validate_config
from training.mlm_batches import Masker, collate
from training.step import build_optimizer

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


def test_a_cpu_launch_on_a_machine_with_cuda_gets_the_cpu_settings(monkeypatch):
    """`accelerate launch --cpu` (ACCELERATE_USE_CPU) on a GPU machine trains on the CPU: its speed settings
    are the CPU's (no bf16 autocast where the CPU has no native bf16, no compile), and so is its device."""
    from training import step

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert run_setup.training_device() == "cuda"
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    assert run_setup.training_device() == "cpu"
    from training.config import PostTrainConfig

    speed = step.resolve_speed(PostTrainConfig(), run_setup.training_device())
    assert (speed.mixed_precision, speed.compile) == ("no", False)


def test_auto_precision_on_cuda_is_bf16_only_where_the_gpu_runs_it_natively(monkeypatch):
    from training import step

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    native = {"flag": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation or native["flag"])
    assert step.auto_mixed_precision("cuda") == "no"  # emulated only (a V100, a T4)
    native["flag"] = True
    assert step.auto_mixed_precision("cuda") == "bf16"


def test_speed_settings_auto_and_explicit(monkeypatch):
    from training import step
    from training.config import PostTrainConfig

    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: False)
    fp32 = step.resolve_speed(PostTrainConfig(), "cpu")  # AVX2 / AVX512 without bf16: eager fp32
    assert (fp32.mixed_precision, fp32.compile, fp32.fused_adamw, fp32.masked_capacity) == ("no", False, True, False)
    assert "no native bf16" in step.describe_speed(fp32, "cpu")
    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: True)
    long_bf16 = step.resolve_speed(PostTrainConfig(), "cpu")
    assert (long_bf16.mixed_precision, long_bf16.compile, long_bf16.masked_capacity) == ("bf16", False, False)
    asked = step.resolve_speed(PostTrainConfig(mixed_precision="no", compile=True), "cpu")
    assert asked.compile and asked.masked_capacity  # an explicit compile still gets the static head
    cuda = step.resolve_speed(PostTrainConfig(mixed_precision="no"), "cuda")
    assert cuda.compile and cuda.masked_capacity
    off = step.resolve_speed(PostTrainConfig(mixed_precision="no", compile=False, fused_adamw=False,
                                             static_masked_head=False), "cuda")
    assert (off.mixed_precision, off.compile, off.fused_adamw, off.masked_capacity) == ("no", False, False, False)
    assert "compile=off" in step.describe_speed(off, "cuda")
    assert f"cpu ({step.cpu_class()})" in step.describe_speed(long_bf16, "cpu")
    assert (long_bf16.attention, off.attention) == ("eager", "sdpa")  # auto: the explicit path on CPU, SDPA on CUDA
    # on CPU, SDPA's flash kernel where nothing is dropped and nothing autocast: fp32 with post_training_dropout 0
    no_dropout = dict(post_training_dropout=0.0)
    assert step.resolve_speed(PostTrainConfig(mixed_precision="no", **no_dropout), "cpu").attention == "sdpa"
    assert step.resolve_speed(PostTrainConfig(mixed_precision="no"), "cpu").attention == "eager"  # the source's 0.1
    assert step.resolve_speed(PostTrainConfig(mixed_precision="no", post_training_dropout=0.1), "cpu").attention == "eager"
    assert step.resolve_speed(PostTrainConfig(**no_dropout), "cpu").attention == "eager"  # bf16 autocast here
    assert step.resolve_speed(PostTrainConfig(mixed_precision="no", attn_implementation="eager", **no_dropout),
                              "cpu").attention == "eager"  # an explicit choice stands
    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: False)
    assert step.resolve_speed(PostTrainConfig(**no_dropout), "cpu").attention == "sdpa"  # auto resolves to fp32 here
    monkeypatch.setattr(step, "cpu_has_fast_bf16", lambda: True)
    sdpa = step.resolve_speed(PostTrainConfig(attn_implementation="sdpa"), "cpu")
    assert sdpa.attention == "sdpa" and "attention=sdpa" in step.describe_speed(sdpa, "cpu")
    with pytest.raises(ConfigError, match="`compile`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "compile": "sometimes"}), check_data=False)
    with pytest.raises(ConfigError, match="`attn_implementation`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "attn_implementation": "flash"}), check_data=False)
    assert long_bf16.dropout_mask == off.dropout_mask == "threshold"  # auto
    torch_mask = step.resolve_speed(PostTrainConfig(dropout_mask="torch"), "cpu")
    assert torch_mask.dropout_mask == "torch" and "dropout_mask=torch" in step.describe_speed(torch_mask, "cpu")
    with pytest.raises(ConfigError, match="`dropout_mask`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "dropout_mask": "fast"}), check_data=False)
    assert (long_bf16.retain_memory, off.retain_memory) == (True, False)  # auto: CPU only
    kept_off = step.resolve_speed(PostTrainConfig(retain_cpu_memory=False), "cpu")
    assert not kept_off.retain_memory and "retain_cpu_memory=False" in step.describe_speed(kept_off, "cpu")
    with pytest.raises(ConfigError, match="`retain_cpu_memory`"):
        validate_config(config_from_dict({"source": "x", "data": "y", "retain_cpu_memory": "always"}), check_data=False)


def test_loader_workers_auto_per_device_and_explicit(monkeypatch):
    """auto: none on a CPU (workers would share the training threads' cores); on a GPU one per spare core
    of the process's share, at most 8; an explicit number is kept on either."""
    from training import step
    from training.config import PostTrainConfig

    monkeypatch.setattr(step.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    cpu = step.resolve_speed(PostTrainConfig(), "cpu")
    assert cpu.loader_workers == 0 and "num_workers=0" in step.describe_speed(cpu, "cpu")
    assert step.resolve_speed(PostTrainConfig(), "cuda").loader_workers == 8  # 16 cores, one process
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert step.resolve_speed(PostTrainConfig(), "cuda").loader_workers == 3  # 4 cores each, one for the step
    monkeypatch.setattr(step.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert step.resolve_speed(PostTrainConfig(), "cuda").loader_workers == 0
    for device in ("cpu", "cuda"):
        assert step.resolve_speed(PostTrainConfig(num_workers=2), device).loader_workers == 2
    for bad in (-1, "many", 1.5):
        with pytest.raises(ConfigError, match="`num_workers`"):
            validate_config(config_from_dict({"source": "x", "data": "y", "num_workers": bad}), check_data=False)


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability().lower() not in ("avx2", "avx512")
                    or "ATEN_CPU_CAPABILITY" in os.environ,
                    reason="needs an x86 CPU that torch dispatches to with AVX2 or AVX512 kernels, uncapped")
def test_capping_torch_at_avx2_gives_the_avx2_class_and_its_settings():
    # ATEN_CPU_CAPABILITY is read when torch loads, so each class is asked in its own process
    probe = ("import torch; from training.config import PostTrainConfig; from training.step import cpu_class, resolve_speed;"
             "s = resolve_speed(PostTrainConfig(), 'cpu'); print(cpu_class(), s.mixed_precision, s.compile)")
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    capped = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env={**env, "ATEN_CPU_CAPABILITY": "avx2"},
                            capture_output=True, text=True, check=True).stdout.split()
    assert capped == ["avx2", "no", "False"]  # fp32 eager, whatever bf16 support the CPU itself has
    native = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, check=True).stdout.split()
    assert native[0].startswith(torch.backends.cpu.get_cpu_capability().lower())
    assert native[1] == ("bf16" if native[0].startswith("avx512-bf16") else "no") and native[2] == "False"


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_retain_freed_memory_changes_nothing_where_another_allocator_serves_malloc(monkeypatch):
    """A preloaded jemalloc or tcmalloc serves `malloc` instead of glibc: glibc's mallopt is then not
    called and the function says it took no effect (fake libraries: the test process keeps its allocator)."""
    import ctypes

    from training import step

    calls = []

    class Library:
        def __init__(self, malloc_address):
            self.malloc = ctypes.c_void_p(malloc_address)

        def mallopt(self, *option):
            calls.append(option)
            return 1

    libraries = {"libc.so.6": Library(4096), None: Library(8192)}  # the process's malloc: another library's
    monkeypatch.setattr(step.ctypes, "CDLL", lambda name: libraries[name])
    assert step.retain_freed_memory() is False and calls == []
    libraries[None] = libraries["libc.so.6"]  # the process's malloc is glibc's
    assert step.retain_freed_memory() is True and len(calls) == 2


FAULTS_PER_ALLOCATION = """
import resource, sys, torch
from training.step import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # warm-up: the heap takes a few allocations to settle
    torch.zeros(16 * 2 ** 20).add_(1)
before = faults()
for _ in range(10):  # 64 MiB each time, above glibc's largest mmap threshold
    torch.zeros(16 * 2 ** 20).add_(1)
print((faults() - before) / 10)
"""


def transparent_huge_pages_always() -> bool:
    try:
        return "[always]" in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
@pytest.mark.skipif(transparent_huge_pages_always(), reason="counts 4 KiB page faults; transparent huge pages are "
                                                            "on for every mapping here")
def test_retained_memory_reuses_pages_instead_of_faulting_them_in():
    """A 64 MiB tensor allocated and freed again and again: with glibc's defaults every allocation is a
    fresh mapping whose 16,384 pages fault in; after `retain_freed_memory` the freed block is reused."""
    per_allocation = {}
    for mode in ("default", "retain"):
        out = subprocess.run([sys.executable, "-c", FAULTS_PER_ALLOCATION, mode], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True)
        per_allocation[mode] = float(out.stdout.split()[-1])
    assert per_allocation["default"] > 10_000, per_allocation
    assert per_allocation["retain"] < 500, per_allocation


@pytest.mark.parametrize("took_effect", [True, False])
def test_retain_cpu_memory_is_applied_and_recorded(tiny, tmp_path, monkeypatch, took_effect):
    """retain_cpu_memory: true calls `retain_freed_memory` before training; where it changes nothing
    (not glibc) the log line and training_summary.json say False."""
    calls = []
    monkeypatch.setattr(run_setup, "retain_freed_memory", lambda: calls.append(1) or took_effect)
    summary = run_inprocess(run_args(tiny, tmp_path / "run", retain_cpu_memory="true", train_steps=2,
                                     phase1_steps=1, save_steps=10, eval_steps=10))
    assert calls == [1]
    assert summary["hardware"]["speed"]["retain_cpu_memory"] is took_effect


def test_masked_capacity_holds_every_count():
    from training.step import masked_capacity_for

    assert masked_capacity_for(16, 128, 200, 0.15) == 304  # 16 rows x round(0.15 x 128), a multiple of 8
    assert masked_capacity_for(3, 10, 0, 0.15) == 8  # 3 x 2 = 6, rounded up to 8
    assert masked_capacity_for(16, 128, 1000, 0.15) >= 1000  # whole-word masking can exceed the estimate
    assert masked_capacity_for(2, 8, 0, 0.15) == 8


@pytest.mark.parametrize("settings", [dict(fused=True, capacity=None, attention="sdpa"),
                                      dict(fused=False, capacity={"length": 32, "mlm_probability": 0.15},
                                           attention="sdpa"),
                                      dict(fused=False, capacity=None, attention="eager")])
def test_training_step_settings_give_the_same_update(tiny, settings):
    """Fused AdamW, the static-capacity head and eager attention change speed, not the update: one step
    from the same weights on the same (packed, block-masked) batch gives the same weights as the
    default step (foreach AdamW, exact head, SDPA)."""
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from training.config import PhaseConfig, PostTrainConfig
    from training.masked_lm import MaskedLMTraining, use_speed_paths
    from training.step import training_step

    source, tok_dir = tiny["bert"]
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    config = PostTrainConfig(method="xpt")
    rows = [{"input_ids": [tok.cls_token_id] + [tok.convert_tokens_to_ids(w) for w in s.split()] + [tok.sep_token_id],
             "word_start": [1] * (len(s.split()) + 2), "seg_lengths": [len(s.split()) + 2]} for s in KOREAN_SENTENCES[:4]]
    batch = collate(rows, list(range(4)), masker=Masker(tok), seed=0, epoch=0, pad_id=tok.pad_token_id,
                    position_offset=0, packing=True, pad_to=32)
    accelerator = Accelerator(cpu=True)
    results = []
    for fused, capacity, attention in ((False, None, "sdpa"), tuple(settings.values())):
        torch.manual_seed(0)
        model = config.method_entry().build(str(source), tok).eval()  # no dropout: a deterministic step
        use_speed_paths(model, attention, "threshold")
        optimizer, scheduler = build_optimizer(model, PhaseConfig("p", "all", 10, 1e-3, 0, "constant"),
                                                          config, fused=fused)
        result = training_step(MaskedLMTraining(model), [dict(batch)], optimizer, scheduler, accelerator,
                                params=list(model.parameters()), pad_id=tok.pad_token_id, max_grad_norm=1.0,
                                capacity=capacity)
        results.append((result.loss_sum.item(), {k: v.detach().clone() for k, v in model.state_dict().items()}))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    for name, value in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], value, atol=1e-6, rtol=1e-5)
