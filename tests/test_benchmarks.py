"""benchmarks/throughput.py: CPU smoke of the whole command, and the batch builders it measures with.

The batch builders are checked with real computation on a tiny XPT model: a packed row with a
block-diagonal mask and restarting positions gives every sentence the same logits as running it
alone, and the real-token accounting (the tokens/s numerator) never counts padding.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from benchmarks import throughput as tp
from tests.conftest import REPO_ROOT

IDS = {"pad": 1, "mask": 4, "start": 0, "end": 2, "all": {0, 1, 2, 3, 4}}
VOCAB = 97


def random_sentences(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [[IDS["start"]] + torch.randint(5, VOCAB, (n - 2,), generator=g).tolist() + [IDS["end"]] for n in lengths]


ROW = re.compile(r"^\| (?P<path>[a-z-]+) \| (?P<batch>[^|]+) \| (?P<real>\d+) \| (?P<pad>[\d.]+)% \| (?P<ms>[\d.]+) "
                 r"\| (?P<tps>\d+) \| (?P<mfu>[^|]+) \| (?P<mfud>[^|]+) \| (?P<mem>[^|]+) \| (?P<ratio>[\d.]+)x \|")


def test_cli_tiny_cpu_smoke():
    cmd = [sys.executable, "benchmarks/throughput.py", "--device", "cpu", "--size", "tiny", "--steps", "2", "--warmup", "1"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    rows = {m["path"]: m for m in map(ROW.match, lines) if m}
    assert sorted(rows) == sorted(tp.ALL_PATHS), proc.stdout
    for path, row in rows.items():
        assert float(row["ms"]) > 0 and int(row["tps"]) > 0, row.group(0)
        assert row["mfu"].strip() == "n/a" and row["mem"].strip() == "n/a"  # cpu: no peak, no cuda memory
    assert float(rows["stock-packed"]["ratio"]) == 1.0
    assert float(rows["stock-packed"]["pad"]) == 0.0  # run_mlm blocks are all real tokens
    assert float(rows["stock-padded"]["pad"]) > 0.0
    assert "compiled while timed 0" in proc.stdout  # recompiles happen in warmup only
    last = re.fullmatch(r"ratio_vs_stock_eager=([\d.]+) ratio_vs_stock_compiled=([\d.]+) mfu=n/a", lines[-1])
    assert last, lines[-1]
    best = max(int(rows[p]["tps"]) for p in rows if p.startswith("xpt"))
    assert float(last[1]) == pytest.approx(best / int(rows["stock-packed"]["tps"]), rel=0.01)
    assert float(last[2]) == pytest.approx(best / int(rows["stock-packed-compiled"]["tps"]), rel=0.01)


@pytest.fixture(params=["roberta", "bert"])
def tiny_size(request, monkeypatch):
    """A tiny size of each family (BERT: positions from 0, token types; RoBERTa: from pad + 1)."""
    if request.param == "bert":
        monkeypatch.setitem(tp.SIZES, "tiny-bert", dict(tp.SIZES["tiny"], family="bert", type_vocab=2,
                                                        max_positions=64, layer_norm_eps=1e-12))
        return "tiny-bert"
    return "tiny"


def test_packed_block_mask_gives_per_sentence_logits(tiny_size):
    torch.manual_seed(0)
    model = tp.build_xpt(tiny_size, VOCAB, IDS).eval()
    lengths = [5, 17, 3, 9, 30, 12, 7, 21, 4, 11, 8, 16]
    sentences = random_sentences(lengths)
    offset = tp.position_offset_for(tiny_size, IDS["pad"])
    batches = tp.packed_batches(sentences, 32, 3, 2, IDS["pad"], offset, IDS["all"])
    assert batches
    placed = 0
    with torch.no_grad():
        for batch in batches:
            assert sum(n for _, _, n in batch.spans) == batch.real_tokens == int((batch.segment_ids > 0).sum())
            assert batch.real_tokens < batch.slots  # this data leaves padding at the ends of rows
            logits = model(**{**tp.model_inputs(batch), "labels": None}).logits
            for row, start, n in batch.spans:
                ids = batch.input_ids[row, start:start + n]
                alone = model(ids[None]).logits[0]
                torch.testing.assert_close(logits[row, start:start + n], alone, atol=2e-5, rtol=1e-4)
                placed += 1
    assert placed == len({(b, s) for b, batch in enumerate(batches) for s in batch.spans})
    # a mask without the blocks (whole rows attend) does change the logits: the check above has teeth
    batch = batches[0]
    with torch.no_grad():
        full = model(batch.input_ids, position_ids=batch.position_ids).logits
        blocked = model(**{**tp.model_inputs(batch), "labels": None}).logits
    row, start, n = batch.spans[0]
    assert not torch.allclose(full[row, start:start + n], blocked[row, start:start + n], atol=1e-4)


def test_packing_keeps_every_sentence_once():
    sentences = random_sentences([5, 17, 3, 9, 30, 12, 7, 21, 4, 11, 8, 16] * 5, seed=1)
    for first_fit in (True, False):
        batches = tp.packed_batches(sentences, 32, 4, 100, IDS["pad"], 2, IDS["all"], first_fit=first_fit)
        seen = [tuple(b.input_ids[r, s:s + n].tolist()) for b in batches for r, s, n in b.spans]
        assert len(seen) == len(set(seen))  # nothing placed twice
        assert set(seen) <= {tuple(s) for s in sentences}
        for b in batches:  # positions restart per sentence at the RoBERTa offset
            for r, s, n in b.spans:
                assert b.position_ids[r, s:s + n].tolist() == list(range(2, 2 + n))
    ff = tp.packed_batches(sentences, 32, 4, 100, IDS["pad"], 2, IDS["all"], first_fit=True)
    nf = tp.packed_batches(sentences, 32, 4, 100, IDS["pad"], 2, IDS["all"], first_fit=False)
    fill = lambda bs: sum(b.real_tokens for b in bs) / sum(b.slots for b in bs)  # noqa: E731
    assert fill(ff) >= fill(nf)


def test_real_token_counting_excludes_padding():
    lengths = [4, 9, 3, 15, 7, 6, 11, 5]
    sentences = random_sentences(lengths, seed=2)
    gen = torch.Generator().manual_seed(0)

    padded = tp.padded_batch(sentences, IDS["pad"], IDS["all"], pad_multiple=8)
    assert padded.input_ids.shape == (8, 16)
    assert padded.real_tokens == sum(lengths) == int(padded.attention_mask.sum())
    assert padded.slots - padded.real_tokens == int((padded.input_ids == IDS["pad"]).sum())
    assert padded.attn_sq_sum == sum(n * n for n in lengths)
    tp.apply_mlm_masking(padded, IDS["mask"], VOCAB, gen, probability=0.9)
    labelled = padded.labels != -100
    assert padded.masked_tokens == int(labelled.sum()) > 0
    assert not labelled[padded.attention_mask == 0].any()  # never a label on padding
    assert not labelled[:, 0].any()  # nor on <s>

    stream = tp.stream_batches(sentences, 8, 2, 3, IDS["all"], IDS["pad"])
    assert len(stream) == 3
    assert all(b.real_tokens == b.slots == 16 and b.attn_sq_sum == 2 * 64 for b in stream)

    grouped = tp.length_grouped_batches(sentences, 32, 100, IDS["pad"], IDS["all"], pad_multiple=1)
    assert sum(b.real_tokens for b in grouped) == sum(lengths)
    assert all(b.slots <= 32 or b.input_ids.shape[0] == 1 for b in grouped)
    assert all(b.real_tokens == int(b.attention_mask.sum()) for b in grouped)


def test_masking_rate_and_specials():
    sentences = random_sentences([40] * 64, seed=3)
    batch = tp.packed_batches(sentences, 80, 32, 1, IDS["pad"], 2, IDS["all"])[0]
    original = batch.input_ids.clone()
    tp.apply_mlm_masking(batch, IDS["mask"], VOCAB, torch.Generator().manual_seed(0))
    chosen = batch.labels != -100
    rate = chosen.sum().item() / batch.maskable.sum().item()
    assert 0.12 < rate < 0.18
    assert torch.equal(batch.labels[chosen], original[chosen])
    assert not chosen[~batch.maskable].any()
    to_mask = (batch.input_ids == IDS["mask"]) & chosen
    assert 0.7 < to_mask.sum().item() / chosen.sum().item() < 0.9


def test_mfu_formula_matches_issue_reference():
    # issue 7: stock RobertaForMaskedLM 14 x 768, vocab 50000, 256 x 128, 110.5 ms/step -> 25% MFU on an H100
    tokens = 256 * 128
    flops = tp.step_flops("base", 50000, tokens, tokens, 256 * 128 * 128)
    assert flops / 0.1105 / tp.H100_PEAK_BF16 == pytest.approx(0.25, abs=0.005)
    assert flops / 0.0801 / tp.H100_PEAK_BF16 == pytest.approx(0.35, abs=0.005)
    sparse = tp.step_flops("base", 50000, tokens, int(0.15 * tokens), 256 * 128 * 128)
    assert sparse < flops


def test_summary_line_without_stock_paths():
    r = tp.PathResult(path="xpt-packed", tokens_per_s=100.0, ms_per_step=1.0)
    assert tp.summary_line([r]) == "ratio_vs_stock_eager=n/a ratio_vs_stock_compiled=n/a mfu=n/a"
    s = tp.PathResult(path="stock-packed", tokens_per_s=50.0, ms_per_step=1.0)
    r.mfu = 0.4
    assert tp.summary_line([s, r]) == "ratio_vs_stock_eager=2.000 ratio_vs_stock_compiled=n/a mfu=0.400"
