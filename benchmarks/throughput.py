"""Post-training step throughput: XPT versus the stock transformers MLM paths (issue 7).

    python benchmarks/throughput.py [--device cuda|cpu] [--size base|minilm|tiny] [--seq-len 128]
        [--batch-size N] [--steps N] [--warmup N] [--paths P ...] [--tokenizer DIR] [--data PATH] [--json OUT]

One run, one sentence stream, one training step (forward + backward + optimizer step, phase 2:
everything trainable, dropout on) per timed iteration, for each path:

  stock-packed           RobertaForMaskedLM (base) / BertForMaskedLM (minilm, tiny: roberta) of the
                         same dimensions; run_mlm-style: tokenised sentences (with <s> ... </s>)
                         concatenated and cut into `batch x seq-len` blocks, attention over the whole
                         block, dense logits + cross-entropy inside the model, SDPA attention.
  stock-packed-compiled  the same under torch.compile.
  stock-padded           one sentence per row, dynamic padding to the longest row (rounded up to
                         --pad-multiple), `--padded-rows` sentences per step (default: --batch-size,
                         what a user's per-device batch of sentences gives; the dense stock model cannot
                         hold the packed paths' real-token budget in padded rows).
  xpt-packed             XPTForMaskedLM, C = layers - 2 reused layers + ITL_in + ITL_out; sentences
                         packed first-fit into `batch` rows of seq-len, a (B, T, T) block-diagonal
                         boolean mask (each sentence attends only to itself, built on the device inside
                         the timed step) and position ids restarting per sentence; labels passed, so the
                         LM head runs only at the masked positions.
  xpt-packed-compiled    the same under torch.compile (see "Compiling the sparse head" below).
  xpt-length-grouped     sentences sorted by length and cut into batches of at most `batch x seq-len`
                         token slots (rows x padded length), batches shuffled; (B, T) padding mask,
                         sparse head.

Common to all paths: the same sentences (read in the same order), the same token budget per step
(`batch x seq-len` slots; real tokens = slots for stock-packed, slightly fewer for the packed and
grouped XPT paths, far fewer for stock-padded), 15% dynamic masking of the real non-special
tokens (80% mask / 10% random / 10% kept, HF DataCollatorForLanguageModeling's rule), AdamW
(lr 1e-4, weight decay 0.01; fused on cuda), bf16 autocast with fp32 weights on cuda (fp32 on cpu),
TF32 matmuls allowed on cuda. Batches are built on the host and copied to the device before the
timing; the block mask of the packed XPT paths is built inside the timed step.

Timing: `--warmup` untimed steps (at least 3 for compiled paths: compilation and the one recompile
with a dynamic masked-token count happen there), then `--steps` timed steps (the same batches for
every path of a kind, so stock-packed and its compiled twin see identical data), each bracketed by
`torch.cuda.synchronize()`. Reported per path: median ms/step, median real tokens/s (real = not
padding; per step real_tokens / step_time), median MFU, peak memory, and the ratio of tokens/s to
stock-packed.

MFU (model FLOPs utilisation), the issue's formula with the LM head counted explicitly:

    FLOPs/step = 6 x (L x (4 H^2 + 2 H I) + H^2) x T_real        encoder linear weights + head transform
               + 6 x H x V x T_head                              vocabulary projection (decoder)
               + 12 x L x H x sum_s len(s)^2                     attention scores and context
    MFU        = FLOPs/step / step time / peak

L = all encoder layers (ITLs included), H hidden, I intermediate, V = len(tokenizer) (not the
padded weight rows), T_real = real tokens of the step, s = the spans that attend to each other
(whole blocks for stock-packed, sentences for every other path; masked-out block entries and
padding are not model FLOPs). Column `MFU` counts the head with the tokens it actually runs on:
T_head = T_real for the dense stock head, T_head = masked tokens for XPT's sparse head. Column
`MFU(dense-head)` counts T_head = T_real for every path, i.e. the issue's reference convention
(stock packed, 110.5 ms at 256 x 128 on an H100 = 25%), which credits XPT with the head FLOPs it
skips. Peak: 989e12 (H100/H200 dense bf16) unless --peak-flops is given; n/a on cpu and on other
GPUs. Embedding lookups, LayerNorm, softmax, optimizer are not counted.

Peak memory: torch.cuda.max_memory_allocated() over the path's steps (weights, optimizer state,
activations, the prebuilt batches); n/a on cpu (the process RSS high-water mark is not per path).

Compiling the sparse head: XPTForMaskedLM.forward selects `hidden_states[labels != -100]`, an op
whose output shape depends on data. With default settings Dynamo breaks the graph there: the
embeddings + encoder compile as one graph, the LM head + loss as a second that is recompiled once
with a dynamic number of masked tokens (automatic dynamic shapes) and then reused. The script
reports graph breaks and the graphs compiled during the timed steps (should be 0) in the notes
column. `--xpt-compile-capture-dynamic` sets `torch._dynamo.config.capture_dynamic_output_shape_ops`
to try one graph instead; with the current model that path ends in an error row, because
`if logits.shape[0]:` after the selection is a branch on the data-dependent count
(GuardOnDataDependentSymNode). On cpu the compiled paths default to the `aot_eager` backend
(Dynamo + AOTAutograd, no code generation) so that the smoke finishes in seconds; `--size tiny`
on cpu runs with one torch thread unless --threads says otherwise.

Last line: `ratio_vs_stock_eager=X ratio_vs_stock_compiled=Y mfu=Z`, X and Y the real tokens/s
of the best XPT path over stock-packed and stock-packed-compiled, Z that path's `MFU` (n/a on cpu).

Data: `--data FILE_OR_DIR` (.txt/.txt.gz, one text per line), else ../shared/data/corpus beside
the repository, else a small built-in set of hand-written Korean sentences (CI smoke only). Lines
are shuffled with --seed and split into sentences (tokenization.korean_text.split_sentences,
when importable). Tokenizer: `--tokenizer DIR`, else one trained on the sampled text with
--vocab-size (tiny default 2000). `--write-sentences OUT.txt.gz` writes a sentence sample for a
device carry folder and exits (see benchmarks/README.md).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import importlib
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "data" / "corpus"
ALL_PATHS = ("stock-packed", "stock-packed-compiled", "stock-padded", "xpt-packed", "xpt-packed-compiled",
             "xpt-length-grouped")
H100_PEAK_BF16 = 989e12
TOKEN_BUDGET = 32768  # default batch x seq-len for base/minilm (the issue's 256 x 128)

SIZES = {
    # family decides the stock class; layers = all encoder layers (XPT: layers - 2 reused + 2 ITLs)
    "base": dict(family="roberta", hidden=768, layers=14, heads=12, intermediate=3072, max_positions=514,
                 type_vocab=1, layer_norm_eps=1e-5),
    "minilm": dict(family="bert", hidden=384, layers=8, heads=12, intermediate=1536, max_positions=512,
                   type_vocab=2, layer_norm_eps=1e-12),
    "tiny": dict(family="roberta", hidden=64, layers=4, heads=4, intermediate=128, max_positions=514,
                 type_vocab=1, layer_norm_eps=1e-5),
}

# Hand-written Korean sentences (not taken from ../shared) for the CI smoke when no corpus is present.
BUILTIN_SENTENCES = [
    "서울은 한국의 수도이다.",
    "오늘 아침에는 비가 조금 내렸다.",
    "이 책은 생각보다 훨씬 재미있었다.",
    "우리는 주말마다 산에 올라가서 도시락을 먹는다.",
    "기차가 예정보다 십 분 늦게 도착했다.",
    "한국어 문장은 보통 동사로 끝난다.",
    "동생은 요즘 피아노를 배우고 있다.",
    "바닷가 마을의 작은 식당에서 생선구이를 먹었는데 정말 맛있었다.",
    "회의는 오후 세 시에 시작합니다.",
    "컴퓨터가 갑자기 꺼져서 작업하던 파일을 잃어버렸다.",
    "가을이 되면 나뭇잎이 붉게 물든다.",
    "그 배우의 연기가 너무 자연스러워서 영화에 푹 빠졌다.",
    "1988년 서울에서 하계 올림픽이 열렸다.",
    "도서관은 평일 오전 아홉 시부터 문을 연다.",
    "친구에게 생일 선물로 손으로 쓴 편지를 주었다.",
    "강아지가 공원에서 신나게 뛰어다녔다.",
    "이번 시험은 지난번보다 어려웠지만 열심히 준비해서 잘 봤다.",
    "별로였어요.",
    "최고의 영화!",
    "지하철 2호선은 출근 시간에 항상 사람이 많다.",
    "할머니께서 만들어 주신 김치찌개가 그립다.",
    "새로운 정책은 다음 달부터 시행될 예정이다.",
    "비행기 표를 미리 예약하면 더 싸게 살 수 있다.",
    "밤하늘에 별이 유난히 많이 보였다.",
]


# ----------------------------------------------------------------------------------------------
# Data: sentences -> token id lists
# ----------------------------------------------------------------------------------------------


def _text_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and (p.name.endswith((".txt", ".txt.gz"))))


def read_lines(path: Path, max_lines_per_file: int | None = None) -> list[str]:
    """Non-empty lines of a file or of the .txt/.txt.gz files of a folder (the first N of each file)."""
    lines = []
    for f in _text_files(path):
        opener = gzip.open if f.name.endswith(".gz") else open
        n = 0
        with opener(f, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    lines.append(line)
                    n += 1
                    if max_lines_per_file and n >= max_lines_per_file:
                        break
    return lines


def _splitter():
    try:
        from tokenization.korean_text import split_sentences
        return split_sentences, "tokenization.korean_text.split_sentences"
    except Exception:  # optional: lines are used as they are
        return (lambda text: [text]), "none (one text per line)"


def resolve_data(data: str | None) -> tuple[str, Path | None]:
    if data:
        path = Path(data)
        if not path.exists():
            raise SystemExit(f"--data {data}: no such file or folder")
        return str(path), path
    if DEFAULT_CORPUS.is_dir() and _text_files(DEFAULT_CORPUS):
        return str(DEFAULT_CORPUS), DEFAULT_CORPUS
    return "built-in hand-written sentences (CI smoke only; not representative)", None


def iter_texts(lines: list[str], seed: int, repeat: bool = False, split: bool = True):
    """`lines` shuffled with `seed` and split into sentences; `repeat` cycles (built-in sentences only)."""
    split_fn = _splitter()[0] if split else (lambda t: [t])
    rng = random.Random(seed)
    while True:
        order = list(lines)
        rng.shuffle(order)
        for line in order:
            for sentence in split_fn(line):
                if sentence.strip():
                    yield sentence
        if not repeat:
            return  # real data is never repeated silently: the caller reports a short stream


def tokenize_stream(texts, tokenizer, seq_len: int, needed_tokens: int, chunk: int = 4096):
    """Token id lists (special tokens added, truncated to seq_len) until `needed_tokens` are read."""
    out, total, buf = [], 0, []

    def flush():
        nonlocal total
        enc = tokenizer(buf, add_special_tokens=True, truncation=True, max_length=seq_len,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        for ids in enc:
            if len(ids) > 2:  # skip texts that tokenise to nothing but the special tokens
                out.append(list(ids))
                total += len(ids)
        buf.clear()

    for text in texts:
        buf.append(text)
        if len(buf) >= chunk:
            flush()
            if total >= needed_tokens:
                break
    if buf and total < needed_tokens:
        flush()
    return out


def load_tokenizer(args, texts_sample: list[str]):
    if args.tokenizer:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(args.tokenizer), f"{args.tokenizer}"
    from tokenization.train_tokenizer import train_tokenizer
    vocab = args.vocab_size or (2000 if args.size == "tiny" else 50000)
    import logging
    logging.getLogger("tokenization.train_tokenizer").setLevel(logging.ERROR)
    # Unigram (the project's default) for real sizes; BPE for the tiny smoke (unigram training is slow)
    model = "bpe" if args.size == "tiny" else "unigram"
    tok = train_tokenizer(texts_sample, vocab, family="roberta", model=model)
    return tok, f"trained here on {len(texts_sample)} sampled texts ({model}, asked {vocab}, got {len(tok)})"


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One step's host tensors and its token accounting.

    kind: "stream" (stock run_mlm blocks, (B, T) all-ones mask), "padded" ((B, T) padding mask) or
    "packed" (segment ids -> (B, T, T) block mask, restarting position ids).
    """

    kind: str
    input_ids: torch.Tensor
    maskable: torch.Tensor  # real, non-special positions (eligible for MLM masking)
    attention_mask: torch.Tensor | None = None  # (B, T) long: stream / padded
    segment_ids: torch.Tensor | None = None  # (B, T) long, 0 = padding: packed
    position_ids: torch.Tensor | None = None  # packed
    real_tokens: int = 0
    attn_sq_sum: int = 0  # sum over attention spans of len^2
    spans: list = field(default_factory=list)  # packed: (row, start, length) of each sentence
    labels: torch.Tensor | None = None
    masked_tokens: int = 0

    @property
    def slots(self) -> int:
        return self.input_ids.numel()


def _maskable(ids: np.ndarray, special_ids) -> np.ndarray:
    return ~np.isin(ids, np.asarray(sorted(special_ids), dtype=ids.dtype))


def stream_batches(sentences, seq_len: int, rows: int, n_batches: int, special_ids, pad_id: int):
    """run_mlm `group_texts`: concatenate all sentences, cut into blocks of seq_len, `rows` per batch."""
    need = n_batches * rows * seq_len
    flat, total = [], 0
    for ids in sentences:
        flat.append(ids)
        total += len(ids)
        if total >= need:
            break
    flat = np.concatenate([np.asarray(f, dtype=np.int64) for f in flat]) if flat else np.zeros(0, np.int64)
    n_full = min(n_batches, len(flat) // (rows * seq_len))
    out = []
    for b in range(n_full):
        ids = flat[b * rows * seq_len:(b + 1) * rows * seq_len].reshape(rows, seq_len)
        out.append(Batch("stream", torch.from_numpy(ids.copy()), torch.from_numpy(_maskable(ids, special_ids)),
                         attention_mask=torch.ones(rows, seq_len, dtype=torch.long),
                         real_tokens=rows * seq_len, attn_sq_sum=rows * seq_len * seq_len))
    return out


def padded_batch(sentences, pad_id: int, special_ids, pad_multiple: int = 1) -> Batch:
    """One sentence per row, right-padded to the longest (rounded up to pad_multiple)."""
    lengths = [len(s) for s in sentences]
    width = max(lengths)
    width = -(-width // pad_multiple) * pad_multiple
    ids = np.full((len(sentences), width), pad_id, dtype=np.int64)
    real = np.zeros((len(sentences), width), dtype=bool)
    for r, s in enumerate(sentences):
        ids[r, :len(s)] = s
        real[r, :len(s)] = True
    return Batch("padded", torch.from_numpy(ids), torch.from_numpy(real & _maskable(ids, special_ids)),
                 attention_mask=torch.from_numpy(real.astype(np.int64)), real_tokens=int(sum(lengths)),
                 attn_sq_sum=int(sum(n * n for n in lengths)))


def padded_batches(sentences, rows: int, n_batches: int, pad_id: int, special_ids, pad_multiple: int = 1):
    out = []
    for b in range(n_batches):
        chunk = sentences[b * rows:(b + 1) * rows]
        if len(chunk) < rows:
            break
        out.append(padded_batch(chunk, pad_id, special_ids, pad_multiple))
    return out


def packed_batch(rows_content, seq_len: int, pad_id: int, position_offset: int, special_ids) -> Batch:
    """Rows of sentences -> ids, restarting position ids, segment ids (1.. per sentence, 0 = pad)."""
    n_rows = len(rows_content)
    ids = np.full((n_rows, seq_len), pad_id, dtype=np.int64)
    pad_position = max(position_offset - 1, 0)  # RoBERTa: padding_idx; BERT: 0
    pos = np.full((n_rows, seq_len), pad_position, dtype=np.int64)
    seg = np.zeros((n_rows, seq_len), dtype=np.int64)
    spans, real, sq = [], 0, 0
    for r, sents in enumerate(rows_content):
        off = 0
        for k, s in enumerate(sents, start=1):
            n = len(s)
            ids[r, off:off + n] = s
            pos[r, off:off + n] = np.arange(n) + position_offset
            seg[r, off:off + n] = k
            spans.append((r, off, n))
            real += n
            sq += n * n
            off += n
    maskable = (seg > 0) & _maskable(ids, special_ids)
    return Batch("packed", torch.from_numpy(ids), torch.from_numpy(maskable), segment_ids=torch.from_numpy(seg),
                 position_ids=torch.from_numpy(pos), real_tokens=real, attn_sq_sum=sq, spans=spans)


def packed_batches(sentences, seq_len: int, rows: int, n_batches: int, pad_id: int, position_offset: int,
                   special_ids, first_fit: bool = True, lookahead: int | None = None):
    """Pack sentences (in stream order) into `rows` rows of seq_len per batch.

    first_fit: each sentence goes to the first row with room (sentences that fit nowhere wait for the
    next batch, at most `lookahead` of them); otherwise next-fit (consecutive sentences, a new row
    when the next one does not fit: the training pipeline's packing).
    """
    lookahead = lookahead if lookahead is not None else 2 * rows
    out, it, pending = [], iter(sentences), []
    exhausted = False
    while len(out) < n_batches and not exhausted:
        content = [[] for _ in range(rows)]
        room = [seq_len] * rows
        deferred, current = [], 0

        def take():
            nonlocal exhausted
            if pending:
                return pending.pop(0)
            try:
                return next(it)
            except StopIteration:
                exhausted = True
                return None

        while True:
            s = take()
            if s is None:
                break
            n = len(s)
            placed = False
            if first_fit:
                for r in range(current, rows):
                    if room[r] >= n:
                        content[r].append(s)
                        room[r] -= n
                        placed = True
                        break
                while current < rows and room[current] < 3:
                    current += 1
            else:
                if room[current] >= n:
                    placed = True
                elif current + 1 < rows:
                    current += 1
                    placed = True
                if placed:
                    content[current].append(s)
                    room[current] -= n
            if not placed:
                deferred.append(s)
                if len(deferred) >= lookahead or not first_fit or current >= rows:
                    break
        pending = deferred + pending
        if exhausted and any(room[r] == seq_len for r in range(rows)):
            break  # data ran out in the middle of this batch
        out.append(packed_batch(content, seq_len, pad_id, position_offset, special_ids))
    return out


def length_grouped_batches(sentences, token_budget: int, n_batches: int, pad_id: int, special_ids,
                           pad_multiple: int = 1, seed: int = 0):
    """Sort by length, cut into batches of at most token_budget slots (rows x padded width), shuffle."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    groups, cur = [], []
    for i in order:
        width = -(-len(sentences[i]) // pad_multiple) * pad_multiple
        if cur and (len(cur) + 1) * width > token_budget:
            groups.append(cur)
            cur = []
        cur.append(sentences[i])
    if cur:
        groups.append(cur)
    random.Random(seed).shuffle(groups)
    return [padded_batch(g, pad_id, special_ids, pad_multiple) for g in groups[:n_batches]]


def apply_mlm_masking(batch: Batch, mask_id: int, vocab_size: int, generator: torch.Generator,
                      probability: float = 0.15) -> Batch:
    """15% of maskable positions get a label; of those 80% -> mask, 10% -> random token, 10% kept."""
    shape = batch.input_ids.shape
    chosen = torch.bernoulli(batch.maskable.float() * probability, generator=generator).bool()
    labels = torch.where(chosen, batch.input_ids, torch.full_like(batch.input_ids, -100))
    ids = batch.input_ids.clone()
    to_mask = torch.bernoulli(torch.full(shape, 0.8), generator=generator).bool() & chosen
    ids[to_mask] = mask_id
    to_random = torch.bernoulli(torch.full(shape, 0.5), generator=generator).bool() & chosen & ~to_mask
    random_ids = torch.randint(vocab_size, shape, generator=generator)
    ids[to_random] = random_ids[to_random]
    batch.input_ids, batch.labels, batch.masked_tokens = ids, labels, int(chosen.sum())
    return batch


def block_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, T, T) boolean: True where query and key belong to the same sentence (padding: nothing)."""
    return (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids > 0)[:, :, None]


def model_inputs(batch: Batch) -> dict:
    """Keyword arguments of the model call (on the batch's device)."""
    inputs = {"input_ids": batch.input_ids, "labels": batch.labels}
    if batch.kind == "packed":
        inputs["attention_mask"] = block_mask(batch.segment_ids)
        inputs["position_ids"] = batch.position_ids
    else:
        inputs["attention_mask"] = batch.attention_mask
    return inputs


def batch_to(batch: Batch, device) -> Batch:
    moved = Batch(**{k: v for k, v in batch.__dict__.items()})
    for name in ("input_ids", "maskable", "attention_mask", "segment_ids", "position_ids", "labels"):
        value = getattr(batch, name)
        if value is not None:
            setattr(moved, name, value.to(device, non_blocking=True))
    return moved


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def special_token_ids(tokenizer) -> dict:
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return {"pad": tokenizer.pad_token_id, "mask": tokenizer.mask_token_id, "start": start, "end": end,
            "all": set(tokenizer.all_special_ids)}


def position_offset_for(size: str, pad_id: int) -> int:
    return pad_id + 1 if SIZES[size]["family"] == "roberta" else 0


def build_stock(size: str, vocab_size: int, ids: dict):
    from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    d = SIZES[size]
    config_cls, model_cls = (RobertaConfig, RobertaForMaskedLM) if d["family"] == "roberta" else (BertConfig, BertForMaskedLM)
    config = config_cls(vocab_size=vocab_size, hidden_size=d["hidden"], num_hidden_layers=d["layers"],
                        num_attention_heads=d["heads"], intermediate_size=d["intermediate"],
                        max_position_embeddings=d["max_positions"], type_vocab_size=d["type_vocab"],
                        layer_norm_eps=d["layer_norm_eps"], pad_token_id=ids["pad"], bos_token_id=ids["start"],
                        eos_token_id=ids["end"], tie_word_embeddings=True)
    try:
        config._attn_implementation = "sdpa"
        return model_cls(config)
    except (AttributeError, TypeError, ValueError):  # older/newer config API: ask through the loader hook
        return model_cls._from_config(config, attn_implementation="sdpa")


def build_xpt(size: str, vocab_size: int, ids: dict):
    from modeling_xpt import XPTConfig, XPTForMaskedLM

    d = SIZES[size]
    config = XPTConfig(vocab_size=vocab_size, hidden_size=d["hidden"], num_hidden_layers=d["layers"] - 2,
                       num_attention_heads=d["heads"], intermediate_size=d["intermediate"],
                       max_position_embeddings=d["max_positions"], type_vocab_size=d["type_vocab"],
                       layer_norm_eps=d["layer_norm_eps"], position_offset=position_offset_for(size, ids["pad"]),
                       use_itl_in=True, use_itl_out=True, source_model_type=d["family"],
                       mask_token_id=ids["mask"], pad_token_id=ids["pad"], bos_token_id=ids["start"],
                       eos_token_id=ids["end"], attn_implementation="sdpa")
    return XPTForMaskedLM(config)


def attn_implementation_of(model) -> str:
    return str(getattr(model.config, "_attn_implementation", None))


def step_flops(size: str, vocab_size: int, real_tokens: int, head_tokens: int, attn_sq_sum: int) -> float:
    d = SIZES[size]
    L, H, I = d["layers"], d["hidden"], d["intermediate"]
    return (6.0 * (L * (4 * H * H + 2 * H * I) + H * H) * real_tokens + 6.0 * H * vocab_size * head_tokens
            + 12.0 * L * H * attn_sq_sum)


def peak_flops_for(device: torch.device, override: float | None) -> float | None:
    if override:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if "H100" in name or "H200" in name:
        return H100_PEAK_BF16
    return None


# ----------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------


@dataclass
class PathResult:
    path: str
    batches: str = ""
    real_tokens_per_step: float = 0.0
    padding_fraction: float = 0.0
    ms_per_step: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    mfu_dense_head: float | None = None
    peak_mem_gib: float | None = None
    ratio: float | None = None
    notes: str = ""
    error: str | None = None
    step_ms: list = field(default_factory=list)
    loss_first: float | None = None
    loss_last: float | None = None


def _dynamo_counters():
    try:
        from torch._dynamo.utils import counters
        return counters
    except Exception:
        return None


def _graph_stats():
    counters = _dynamo_counters()
    if counters is None:
        return 0, 0
    breaks = sum(counters["graph_break"].values()) if "graph_break" in counters else 0
    graphs = counters["stats"].get("unique_graphs", 0) if "stats" in counters else 0
    return int(breaks), int(graphs)


def run_path(name: str, batches: list[Batch], args, device, vocab_size: int, ids: dict) -> PathResult:
    res = PathResult(path=name)
    is_xpt = name.startswith("xpt")
    compiled = name.endswith("compiled")
    cuda = device.type == "cuda"
    # Every path times the same batches (indices lead .. lead + steps - 1); its warmup batches are
    # the ones just before them (compiled paths take at least 3 warmup steps).
    lead = max(args.warmup, 3)
    warmup = max(args.warmup, 3) if compiled else args.warmup
    needed = lead + args.steps
    if len(batches) < needed:
        res.error = f"only {len(batches)} batches for {needed} steps (more data needed)"
        return res
    batches = batches[lead - warmup:needed]
    timed = batches[warmup:]
    res.real_tokens_per_step = statistics.mean(b.real_tokens for b in timed)
    res.padding_fraction = 1.0 - sum(b.real_tokens for b in timed) / sum(b.slots for b in timed)
    shapes = sorted({tuple(b.input_ids.shape) for b in timed})
    res.batches = (f"{shapes[0][0]}x{shapes[0][1]}" if len(shapes) == 1 else
                   f"{len(shapes)} shapes, rows {min(s[0] for s in shapes)}-{max(s[0] for s in shapes)}, "
                   f"len {min(s[1] for s in shapes)}-{max(s[1] for s in shapes)}")

    torch.manual_seed(args.seed)
    model = (build_xpt if is_xpt else build_stock)(args.size, vocab_size, ids).to(device).train()
    notes = [f"attn={attn_implementation_of(model)}"]
    fused = cuda
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fused)
    except (RuntimeError, TypeError):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        fused = False
    notes.append("fused AdamW" if fused else "AdamW")
    forward = model
    if compiled:
        dynamo = importlib.import_module("torch._dynamo")
        dynamo.reset()
        counters = _dynamo_counters()
        if counters is not None:
            counters.clear()
        if is_xpt and args.xpt_compile_capture_dynamic:
            dynamo.config.capture_dynamic_output_shape_ops = True
            notes.append("capture_dynamic_output_shape_ops")
        forward = torch.compile(model, backend=args.compile_backend, mode=args.compile_mode)
    autocast = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if args.dtype == "bf16"
                else contextlib.nullcontext())
    on_device = [batch_to(b, device) for b in batches]
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    def step(batch: Batch) -> torch.Tensor:
        with autocast:
            loss = forward(**model_inputs(batch)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    try:
        for b in on_device[:warmup]:
            loss = step(b)
            if res.loss_first is None:
                res.loss_first = float(loss.detach())
        if cuda:
            torch.cuda.synchronize(device)
        breaks_before, graphs_before = _graph_stats()
        times = []
        for b in on_device[warmup:]:
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            loss = step(b)
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        res.loss_last = float(loss.detach())
        if res.loss_first is None:
            res.loss_first = res.loss_last
        breaks_after, graphs_after = _graph_stats()
        if compiled:
            notes.append(f"graph breaks {breaks_after}, graphs {graphs_after}, "
                         f"compiled while timed {graphs_after - graphs_before}")
    except torch.cuda.OutOfMemoryError as error:  # keep going with the other paths
        res.error = f"CUDA out of memory: {str(error).splitlines()[0][:160]}"
    except Exception as error:  # noqa: BLE001 - one path failing must not lose the others' numbers
        res.error = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        if args.verbose:
            traceback.print_exc()
    if cuda:
        torch.cuda.synchronize(device)
        res.peak_mem_gib = torch.cuda.max_memory_allocated(device) / 2**30
    if res.error is None:
        res.step_ms = [t * 1e3 for t in times]
        res.ms_per_step = statistics.median(res.step_ms)
        res.tokens_per_s = statistics.median(b.real_tokens / t for b, t in zip(timed, times))
        peak = peak_flops_for(device, args.peak_flops)
        if peak:
            head = [b.masked_tokens if is_xpt else b.real_tokens for b in timed]
            res.mfu = statistics.median(step_flops(args.size, vocab_size, b.real_tokens, h, b.attn_sq_sum) / t / peak
                                        for b, h, t in zip(timed, head, times))
            res.mfu_dense_head = statistics.median(
                step_flops(args.size, vocab_size, b.real_tokens, b.real_tokens, b.attn_sq_sum) / t / peak
                for b, t in zip(timed, times))
    res.notes = "; ".join(notes)
    del forward, model, optimizer, on_device
    if compiled:
        dynamo = importlib.import_module("torch._dynamo")
        dynamo.reset()
        if is_xpt and args.xpt_compile_capture_dynamic:
            dynamo.config.capture_dynamic_output_shape_ops = False
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return res


def _fmt(value, spec: str, na: str = "n/a") -> str:
    return na if value is None else format(value, spec)


def format_table(results: list[PathResult]) -> list[str]:
    head = ("| path | batch (rows x len) | real tok/step | padding | ms/step | real tok/s | MFU | MFU(dense-head) "
            "| peak mem GiB | vs stock-packed | notes |")
    lines = [head, "|" + " --- |" * 11]
    for r in results:
        if r.error:
            lines.append(f"| {r.path} | {r.batches or '-'} | - | - | - | - | - | - | {_fmt(r.peak_mem_gib, '.1f')} | - "
                         f"| ERROR {r.error} |")
            continue
        lines.append(
            f"| {r.path} | {r.batches} | {r.real_tokens_per_step:.0f} | {100 * r.padding_fraction:.1f}% "
            f"| {r.ms_per_step:.2f} | {r.tokens_per_s:.0f} | {_fmt(r.mfu and 100 * r.mfu, '.1f')}"
            f"{'%' if r.mfu is not None else ''} | {_fmt(r.mfu_dense_head and 100 * r.mfu_dense_head, '.1f')}"
            f"{'%' if r.mfu_dense_head is not None else ''} | {_fmt(r.peak_mem_gib, '.2f')} "
            f"| {_fmt(r.ratio, '.2f')}{'x' if r.ratio is not None else ''} | {r.notes} |")
    return lines


def summary_line(results: list[PathResult]) -> str:
    by = {r.path: r for r in results if r.error is None and r.tokens_per_s}
    xpt = [r for r in by.values() if r.path.startswith("xpt")]
    best = max(xpt, key=lambda r: r.tokens_per_s) if xpt else None

    def ratio(ref):
        return f"{best.tokens_per_s / by[ref].tokens_per_s:.3f}" if best and ref in by else "n/a"

    mfu = f"{best.mfu:.3f}" if best and best.mfu is not None else "n/a"
    return f"ratio_vs_stock_eager={ratio('stock-packed')} ratio_vs_stock_compiled={ratio('stock-packed-compiled')} mfu={mfu}"


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python benchmarks/throughput.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--size", choices=tuple(SIZES), default="base")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"rows of seq-len per packed step (default {TOKEN_BUDGET} // seq-len; tiny: 4)")
    p.add_argument("--padded-rows", type=int, default=None, help="sentences per stock-padded step (default --batch-size)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per path")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per path (compiled paths: at least 3)")
    p.add_argument("--paths", nargs="+", choices=ALL_PATHS, default=list(ALL_PATHS))
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: train one on the sampled text)")
    p.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a tokenizer trained here")
    p.add_argument("--data", default=None, help=".txt/.txt.gz file or folder (default ../shared/data/corpus)")
    p.add_argument("--packing", choices=("first-fit", "next-fit"), default="first-fit",
                   help="xpt-packed row filling (next-fit = consecutive sentences, as training/mlm_data.py)")
    p.add_argument("--pad-multiple", type=int, default=None, help="pad widths of padded batches (default 8 cuda, 1 cpu)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="default bf16 autocast on cuda, fp32 on cpu")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend (default inductor on cuda; aot_eager on cpu: Dynamo + AOTAutograd "
                        "without code generation, a smoke of the compiled paths that finishes in seconds)")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default: its default)")
    p.add_argument("--xpt-compile-capture-dynamic", action="store_true",
                   help="compile XPT with capture_dynamic_output_shape_ops (try one graph for the sparse head)")
    p.add_argument("--peak-flops", type=float, default=None, help="peak FLOP/s for MFU (default 989e12 on H100/H200)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 for --size tiny on cpu, where threading only adds "
                        "synchronisation, and torch's default otherwise)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write all results here")
    p.add_argument("--write-sentences", default=None,
                   help="write --num-sentences sampled sentences (.txt.gz) for a device carry folder, then exit")
    p.add_argument("--num-sentences", type=int, default=120000)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available here")
    if args.batch_size is None:
        args.batch_size = 4 if args.size == "tiny" else max(1, TOKEN_BUDGET // args.seq_len)
    if args.padded_rows is None:
        args.padded_rows = args.batch_size
    if args.pad_multiple is None:
        args.pad_multiple = 8 if args.device == "cuda" else 1
    if args.compile_backend is None:
        args.compile_backend = "inductor" if args.device == "cuda" else "aot_eager"
    if args.dtype is None:
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if args.dtype == "bf16" and args.device != "cuda":
        p.error("--dtype bf16 is measured with CUDA autocast only; use fp32 on cpu")
    if args.seq_len + position_offset_for(args.size, 1) > SIZES[args.size]["max_positions"]:
        p.error(f"--seq-len {args.seq_len} exceeds the position table of size {args.size}")
    return args


def write_sentences(args) -> int:
    label, path = resolve_data(args.data)
    if path is None:
        raise SystemExit("--write-sentences needs real text: pass --data or provide ../shared/data/corpus")
    out = Path(args.write_sentences)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        for sentence in iter_texts(read_lines(path), args.seed):
            fh.write(sentence.replace("\n", " ") + "\n")
            n += 1
            if n >= args.num_sentences:
                break
    print(f"wrote {n} sentences from {label} (split: {_splitter()[1]}) to {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.write_sentences:
        return write_sentences(args)
    device = torch.device(args.device)
    threads = args.threads or (1 if args.size == "tiny" and device.type == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    t_start = time.perf_counter()
    data_label, data_path = resolve_data(args.data)

    # The same sentence stream feeds every path. Sample text for a tokenizer trained here first.
    # tiny (CI smoke): the first lines of each file are enough; real sizes read everything.
    lines = (read_lines(data_path, 5000 if args.size == "tiny" else None) if data_path is not None
             else list(BUILTIN_SENTENCES))
    texts = iter_texts(lines, args.seed, repeat=data_path is None)
    if args.tokenizer:
        tokenizer, tok_label = load_tokenizer(args, [])
    else:
        sample = []
        for t in texts:
            sample.append(t)
            if len(sample) >= (5000 if args.size == "tiny" else 200000):
                break
        tokenizer, tok_label = load_tokenizer(args, sample)
        texts = iter_texts(lines, args.seed, repeat=data_path is None)  # restart: same sentences, same order
    ids = special_token_ids(tokenizer)
    if ids["mask"] is None or ids["pad"] is None:
        raise SystemExit("the tokenizer needs a mask and a pad token")
    vocab_size = len(tokenizer)
    budget = args.batch_size * args.seq_len
    max_warmup = max(args.warmup, 3)
    n_batches = max_warmup + args.steps
    needed_tokens = int(n_batches * budget * 1.15) + args.padded_rows * args.seq_len
    sentences = tokenize_stream(texts, tokenizer, args.seq_len, needed_tokens)
    lengths = np.asarray([len(s) for s in sentences])
    data_note = "" if lengths.sum() >= needed_tokens else " (SHORT: fewer tokens than needed; some paths may stop)"
    if data_path is None:
        data_note += " (built-in sentences repeated)"

    special = ids["all"]
    offset = position_offset_for(args.size, ids["pad"])
    per_path = {}
    gen_seed = args.seed + 1

    def masked(batches):
        gen = torch.Generator().manual_seed(gen_seed)
        return [apply_mlm_masking(b, ids["mask"], vocab_size, gen) for b in batches]

    wanted = set(args.paths)
    if wanted & {"stock-packed", "stock-packed-compiled"}:
        stream = masked(stream_batches(sentences, args.seq_len, args.batch_size, n_batches, special, ids["pad"]))
        per_path["stock-packed"] = per_path["stock-packed-compiled"] = stream
    if "stock-padded" in wanted:
        per_path["stock-padded"] = masked(padded_batches(sentences, args.padded_rows, n_batches, ids["pad"], special,
                                                         args.pad_multiple))
    if wanted & {"xpt-packed", "xpt-packed-compiled"}:
        packed = masked(packed_batches(sentences, args.seq_len, args.batch_size, n_batches, ids["pad"], offset,
                                       special, first_fit=args.packing == "first-fit"))
        per_path["xpt-packed"] = per_path["xpt-packed-compiled"] = packed
    if "xpt-length-grouped" in wanted:
        # Pool: the sentences the packed paths consume for the same number of steps.
        pool_tokens, pool = n_batches * budget, []
        for s in sentences:
            pool.append(s)
            pool_tokens -= len(s)
            if pool_tokens <= 0:
                break
        per_path["xpt-length-grouped"] = masked(length_grouped_batches(pool, budget, n_batches, ids["pad"], special,
                                                                      args.pad_multiple, seed=args.seed))
    prep_s = time.perf_counter() - t_start

    d = SIZES[args.size]
    import transformers
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
    peak = peak_flops_for(device, args.peak_flops)
    pct = np.percentile(lengths, [50, 90, 99]) if len(lengths) else [0, 0, 0]
    header = [
        f"# throughput: device={dev_name} torch={torch.__version__} transformers={transformers.__version__}",
        f"# size={args.size}: {d['family']} dims, {d['layers']} layers (XPT: {d['layers'] - 2} reused + 2 ITLs), "
        f"hidden {d['hidden']}, heads {d['heads']}, intermediate {d['intermediate']}, vocab {vocab_size}",
        f"# batch: {args.batch_size} x {args.seq_len} = {budget} token slots per packed step; stock-padded "
        f"{args.padded_rows} sentences/step; dtype={args.dtype}; warmup {args.warmup} (compiled >= 3), "
        f"timed steps {args.steps} (the same batches for every path); compile backend={args.compile_backend} mode={args.compile_mode}",
        f"# data: {data_label}{data_note}; sentence split: {_splitter()[1] if data_path else 'n/a'}; "
        f"{len(sentences)} sentences, tokens/sentence mean {lengths.mean():.1f}, p50 {pct[0]:.0f}, p90 {pct[1]:.0f}, "
        f"p99 {pct[2]:.0f}",
        f"# tokenizer: {tok_label}; data prep {prep_s:.1f}s",
        "# MFU = (6 x (L(4H^2+2HI) + H^2) x real_tokens + 6 x H x V x head_tokens + 12 x L x H x sum(span^2)) "
        f"/ step_time / peak; peak={'n/a' if not peak else f'{peak:.3g}'}; MFU: head_tokens = tokens the head "
        "runs on (masked only for XPT), MFU(dense-head): head_tokens = real tokens (issue's convention)",
    ]
    for line in header:
        print(line, flush=True)

    results = []
    for name in ALL_PATHS:
        if name not in wanted:
            continue
        t0 = time.perf_counter()
        res = run_path(name, per_path[name], args, device, vocab_size, ids)
        print(f"# {name}: done in {time.perf_counter() - t0:.1f}s"
              + (f" (ERROR {res.error})" if res.error else f", median {res.ms_per_step:.2f} ms/step"), flush=True)
        results.append(res)
    ref = next((r for r in results if r.path == "stock-packed" and r.error is None), None)
    for r in results:
        if ref and r.error is None:
            r.ratio = r.tokens_per_s / ref.tokens_per_s
    table = format_table(results)
    print()
    for line in table:
        print(line)
    print()
    summary = summary_line(results)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"args": vars(args), "device": dev_name, "torch": torch.__version__,
                   "transformers": transformers.__version__, "vocab_size": vocab_size, "header": header,
                   "sentence_stats": {"count": int(len(lengths)), "mean": float(lengths.mean()),
                                      "p50": float(pct[0]), "p90": float(pct[1]), "p99": float(pct[2])},
                   "results": [r.__dict__ for r in results], "summary": summary, "table": table}
        out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(summary, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
