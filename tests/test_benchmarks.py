"""benchmarks/throughput.py: the command runs end to end on CPU, and what it times is the real step.

Correctness only (tiny sizes, eager paths, seconds): the speed figures live in docs/BENCHMARKS.md.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import throughput as tp
from tests.conftest import REPO_ROOT

ROW = re.compile(r"^\| (?P<path>[a-z-]+) \| (?P<settings>[^|]+) \| (?P<tps>\d+) \| (?P<lo>\d+)-(?P<hi>\d+) "
                 r"\| (?P<mfu>[\d.]+)% \| (?P<first>[\d.]+) \| (?P<breaks>\d+) \| (?P<recompiled>\d+) "
                 r"\| (?P<faults>\d+) \| (?P<kernel>[\d.]+) \| (?P<memory>[\d.]+) \| (?P<ratio>[\d.]+)x \|$")


def test_cli_tiny_cpu_smoke(tmp_path):
    """The whole command on a tiny model (eager, so it takes seconds): a row per path, the medians
    inside their min-max, the last line computed from the rows."""
    out = tmp_path / "result.json"
    cmd = [sys.executable, "benchmarks/throughput.py", "--device", "cpu", "--size", "tiny", "--rounds", "2",
           "--steps-per-round", "1", "--warmup", "1", "--num-texts", "400", "--compile", "false",
           "--paths", "stock-eager", "stock-best", "stock-padded", "xpt", "xpt-eager", "xpt-sdpa", "--json", str(out),
           "--profile", "1"]
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list((tmp_path / "tmp").glob("xpt-throughput-*"))  # its working folder is removed at exit
    lines = proc.stdout.strip().splitlines()
    rows = {m["path"]: m for m in map(ROW.match, lines) if m}
    assert sorted(rows) == ["stock-best", "stock-eager", "stock-padded", "xpt", "xpt-eager", "xpt-sdpa"], proc.stdout
    assert "one text per padded row" in rows["stock-padded"]["settings"]
    # the attention each path ran with, as the table states it: stock SDPA, XPT's explicit path on CPU
    assert all("sdpa attention" in rows[p]["settings"] for p in ("stock-eager", "stock-best", "xpt-sdpa"))
    assert "eager attention" in rows["xpt"]["settings"] and "best-fit rows" in rows["xpt"]["settings"]
    # each path in its own process, with its own allocator setting: stock as users run it, XPT as post_train.py
    # does; the processes report whether `retain_freed_memory` took effect there
    retained = {r["path"]: r["retained_memory"] for r in json.loads(out.read_text())["results"]}
    assert retained == {"stock-eager": False, "stock-best": False, "stock-padded": False, "xpt": True, "xpt-eager": True,
                        "xpt-sdpa": True}
    assert all("default malloc" in rows[p]["settings"] for p in ("stock-eager", "stock-best"))
    assert all("retained malloc" in rows[p]["settings"] for p in ("xpt", "xpt-eager", "xpt-sdpa"))
    for row in rows.values():
        assert int(row["lo"]) <= int(row["tps"]) <= int(row["hi"]), row.group(0)
        assert row["recompiled"] == "0" and float(row["memory"]) > 0
    # the table rounds MFU to 0.1%, which a tiny model on a busy machine can fall below: check the JSON
    mfu = {r["path"]: statistics.median(r["mfu"]) for r in json.loads(out.read_text())["results"]}
    assert sorted(mfu) == sorted(rows) and all(0 < m < 1 for m in mfu.values()), mfu
    assert float(rows["stock-eager"]["ratio"]) == 1.0
    profiled = re.findall(r"^# profile of ([a-z-]+), 1 steps$", proc.stdout, flags=re.M)
    assert profiled == ["stock-eager", "stock-best", "stock-padded", "xpt", "xpt-eager", "xpt-sdpa"]
    assert "aten::mm" in proc.stdout
    assert "measured matmul peak" in proc.stdout and "load average" in proc.stdout
    last = re.fullmatch(r"ratio_vs_stock_eager=([\d.]+) ratio_vs_stock_best=([\d.]+) mfu=([\d.]+) device=cpu "
                        r"cpu_class=[a-z0-9-]+", lines[-1])
    assert last, lines[-1]
    assert float(last[1]) == pytest.approx(int(rows["xpt"]["tps"]) / int(rows["stock-eager"]["tps"]), rel=0.02)
    assert float(last[2]) == pytest.approx(int(rows["xpt"]["tps"]) / int(rows["stock-best"]["tps"]), rel=0.02)
    assert float(last[3]) == pytest.approx(mfu["xpt"], abs=0.0006)


def test_cli_reports_a_failing_path_and_exits_nonzero(tmp_path):
    """A tokenizer without a mask token fails in each path's process, where the model is built: the
    failure comes back through its pipe as an ERROR row naming the exception, and the command exits 1."""
    from tests.model_factories import KOREAN_WORDS, word_tokenizer

    word_tokenizer("bert", KOREAN_WORDS).save_pretrained(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    config.pop("mask_token", None)
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(config))
    cmd = [sys.executable, "benchmarks/throughput.py", "--device", "cpu", "--size", "tiny", "--rounds", "1",
           "--steps-per-round", "1", "--warmup", "1", "--num-texts", "400", "--compile", "false", "--tokenizer",
           str(tmp_path / "tok"), "--paths", "stock-eager", "xpt"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = dict(re.findall(r"^\| ([a-z-]+) \| [^|]+ \| ERROR (\w+Error)", proc.stdout, flags=re.M))
    assert sorted(errors) == ["stock-eager", "xpt"], proc.stdout
    from training.step import cpu_class

    assert proc.stdout.strip().splitlines()[-1] == \
        f"ratio_vs_stock_eager=n/a ratio_vs_stock_best=n/a mfu=n/a device=cpu cpu_class={cpu_class()}"


def _args(**kw):
    return tp.parse_args(["--device", "cpu", "--size", "tiny", "--batch-size", "4", "--seq-len", "32",
                          *[x for k, v in kw.items() for x in (f"--{k.replace('_', '-')}", str(v))]])


def test_batches_are_the_training_batches(tmp_path):
    """XPT batches come from training/mlm_data.py and training/mlm_batches.py (best-fit packing,
    exact-count masking, block mask, restarting positions); stock batches are run_mlm blocks with no
    padding."""
    from training.mlm_batches import Masker
    from training.methods import METHODS

    args = _args()
    texts, _ = tp.read_texts(None, 400)
    source = tp.source_for("tiny", tmp_path)
    tokenizer, _ = tp.load_tokenizer(tp.parse_args(["--size", "tiny", "--device", "cpu", "--vocab-size", "2000",
                                                    "--seq-len", "32"]), texts, "bert", tmp_path)
    model = METHODS["xpt"].build(source, tokenizer)
    batches = tp.xpt_batches(texts, tokenizer, model, args, tmp_path, 3, pad_to=32)
    masker = Masker(tokenizer)
    for b in batches:
        assert b["input_ids"].shape == (4, 32)  # pad_to: one shape for the compiled step
        mask = b["attention_mask"]
        assert mask.dtype == torch.bool and mask.shape == (4, 32, 32)
        real = b["input_ids"].ne(tokenizer.pad_token_id)
        assert b["_attn_sq"] == int(mask.sum())
        # exact-count masking: round(15%) of the non-special tokens of each sentence's row
        specials = torch.isin(b["input_ids"], torch.tensor(masker.special)) & real
        n_masked = b["labels"].ne(-100).sum(-1)
        assert (n_masked > 0).all() and int(n_masked.sum()) <= int((real & ~specials).sum())
    stock = tp.stock_batches(texts, tokenizer, args, 3)
    for b in stock:
        assert b["input_ids"].shape == (4, 32) and bool(b["attention_mask"].all())
        assert b["_attn_sq"] == 4 * 32 * 32
    # run_mlm --line_by_line: one text per row, padded to the longest of the batch, pads never masked
    padded = tp.stock_batches(texts, tokenizer, _args(seq_len=512, batch_size=8), 3, padded=True)
    for b in padded:
        mask = b["attention_mask"].bool()
        lengths = mask.sum(-1)
        assert b["input_ids"].shape == (8, int(lengths.max())) and not bool(mask.all())
        assert bool(b["input_ids"][~mask].eq(tokenizer.pad_token_id).all())
        assert bool(b["labels"][~mask].eq(-100).all()) and bool(b["labels"][mask].ne(-100).any())
        assert b["_attn_sq"] == int((lengths ** 2).sum())
        ends = b["input_ids"].gather(1, (lengths - 1)[:, None]).squeeze(1)  # each row ends with its [SEP]
        assert bool(ends.eq(tokenizer.sep_token_id).all())


def test_mfu_formula():
    from types import SimpleNamespace

    cfg = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=2, use_itl_in=True, use_itl_out=True)
    # 4 layers: 6*4*(64+64)*T + 6*(16+4V)*T_head + 12*4*4*sum len^2
    assert tp.step_flops(cfg, 10, real=3, head=2, attn_sq=9) == 6 * 4 * 128 * 3 + 6 * 56 * 2 + 12 * 4 * 4 * 9
    stock = SimpleNamespace(hidden_size=4, intermediate_size=8, num_hidden_layers=4)
    assert tp.step_flops(stock, 10, 3, 2, 9) == tp.step_flops(cfg, 10, 3, 2, 9)


def test_rounds_rotate_the_order_of_paths():
    from benchmarks.throughput import rotated

    orders = [rotated(["a", "b", "c"], r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(sorted(o) == ["a", "b", "c"] for o in orders) and rotated([], 3) == []


@pytest.mark.parametrize("dropout", ["0.0", "0.1"])
def test_attention_cli_tiny_cpu_smoke(dropout):
    """benchmarks/attention.py on tiny shapes: a row per path; without dropout the model's explicit path
    agrees with SDPA, with dropout FlexAttention (no dropout) is left out."""
    cmd = [sys.executable, "benchmarks/attention.py", "--device", "cpu", "--batch-size", "2", "--seq-len", "32",
           "--heads", "2", "--rounds", "2", "--steps-per-round", "1", "--dropout", dropout]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = dict(re.findall(r"^\| ([a-z-]+) \| ([\d.]+) \| [\d.]+-[\d.]+ \|", proc.stdout, flags=re.M))
    assert {"sdpa-dense", "xpt-explicit", "xpt-explicit-torch-masks"} <= set(rows), proc.stdout
    if dropout == "0.0":
        diff = re.search(r"^xpt-explicit: .* max \|diff\| to sdpa-dense ([\d.e+-]+)$", proc.stdout, flags=re.M)
        assert diff and float(diff.group(1)) < 1e-4, proc.stdout
    else:
        assert "flex-blockmask: left out" in proc.stdout and "flex-blockmask" not in rows


def test_matmul_peak_is_positive():
    assert tp.matmul_peak(torch.device("cpu"), torch.float32, [(64, 64, 64)], reps=2) > 0


def test_dropout_cost_cli_tiny_cpu_smoke():
    """benchmarks/dropout_cost.py end to end on the tiny model: one row per dropout variant."""
    cmd = [sys.executable, "benchmarks/dropout_cost.py", "--size", "tiny", "--seq-len", "32", "--batch-size", "4",
           "--rounds", "2", "--steps-per-round", "1", "--num-texts", "400"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = re.findall(r"^\| ([a-z-]+) \| (\d+) \| (\d+)-(\d+) \|$", proc.stdout, flags=re.M)
    assert [r[0] for r in rows] == ["as-source", "as-source-boolean-masks", "as-source-torch-masks", "as-source-sdpa",
                                    "no-attention-dropout", "no-dropout", "no-dropout-sdpa"], proc.stdout
    masks = re.findall(r"^\| [^|]+ \| (torch|boolean|threshold) \| [\d.]+ \|", proc.stdout, flags=re.M)
    assert sorted(masks) == sorted(["torch", "boolean", "threshold"] * 2), proc.stdout
    assert all(int(lo) <= int(tps) <= int(hi) for _, tps, lo, hi in rows)
    masks = re.findall(r"^\| (hidden states|attention probabilities) [^|]+ \| (torch|threshold) \| ([\d.]+) \| "
                       r"([\d.]+)-([\d.]+) \|$", proc.stdout, flags=re.M)
    assert sorted((m[0], m[1]) for m in masks) == [("attention probabilities", "threshold"),
                                                   ("attention probabilities", "torch"),
                                                   ("hidden states", "threshold"), ("hidden states", "torch")]
    assert all(float(lo) <= float(ms) <= float(hi) for *_, ms, lo, hi in masks)


def test_dropout_variants_change_only_dropout():
    """In training mode the source's dropout makes two forwards differ; with none they are equal, and
    the weights are the same."""
    from benchmarks.dropout_cost import without_dropout
    from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer
    from training.methods import METHODS

    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    model = METHODS["xpt"].build(tiny_source("bert", tokenizer, dropout=0.1), tokenizer).train()
    ids = torch.randint(5, len(tokenizer), (2, 12))
    plain = without_dropout(model, 0.0, 0.0).train()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), plain.parameters()))
    assert not torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)
    assert torch.equal(plain(input_ids=ids).logits, plain(input_ids=ids).logits)


def test_boolean_mask_dropout_draws_the_masks_of_threshold_dropout():
    """dropout_cost.py's earlier-mask variant differs from `ThresholdDropout` only in the mask's dtype."""
    from benchmarks.dropout_cost import boolean_mask_dropout
    from training.masked_lm import ThresholdDropout

    x = torch.randn(64, 48, dtype=torch.bfloat16, requires_grad=True)
    outs = []
    for cls in (ThresholdDropout, boolean_mask_dropout()):
        torch.manual_seed(5)
        out = cls(0.1).train()(x)
        out.float().sum().backward()
        outs.append((out.detach(), x.grad.clone()))
        x.grad = None
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert 0 < int((outs[0][0] == 0).sum()) < x.numel()


def test_next_fit_baseline_packs_consecutive_sentences_until_one_does_not_fit():
    import datasets

    lengths = [5, 9, 3, 16, 2, 7, 7, 1]
    single = datasets.Dataset.from_dict({"input_ids": [[n] * n for n in lengths],
                                         "word_start": [[1] * n for n in lengths],
                                         "seg_lengths": [[n] for n in lengths]})
    rows = tp.next_fit_rows(single, 16)
    assert rows["seg_lengths"] == [[5, 9], [3], [16], [2, 7, 7], [1]]
    assert [sum(s) for s in rows["seg_lengths"]] == [len(r) for r in rows["input_ids"]]
    assert [t for r in rows["input_ids"] for t in r] == [n for n in lengths for _ in range(n)]


def test_the_xpt_row_is_what_post_training_picks_on_this_machine():
    """One function decides both: the benchmark's `xpt` path carries `resolve_speed`'s automatic settings."""
    from training.config import PostTrainConfig
    from training.step import resolve_speed

    best, table = tp.path_settings(tp.parse_args(["--device", "cpu"]))
    assert best == resolve_speed(PostTrainConfig(), "cpu") and table["xpt"].speed == best
    assert not best.compile  # eager on every CPU class measured
    without_dropout, table = tp.path_settings(tp.parse_args(["--device", "cpu", "--dropout", "0"]))
    assert without_dropout == resolve_speed(PostTrainConfig(post_training_dropout=0.0), "cpu")
    assert table["xpt"].speed == without_dropout  # the recipes' `post_training_dropout: 0`, as post_train.py runs it


@pytest.mark.parametrize("dropout", [None, 0.0])
def test_dropout_option_sets_every_path_as_post_training_does(tmp_path, dropout):
    """`--dropout 0` times the CPU recipes' `post_training_dropout: 0` on the stock and the XPT path
    alike; without it every dropout keeps the source's probability (0.1)."""
    from accelerate import Accelerator

    from training.methods import METHODS

    args = _args(**({} if dropout is None else {"dropout": dropout}))
    texts, _ = tp.read_texts(None, 400)
    source = tp.source_for("tiny", tmp_path)
    tokenizer, _ = tp.load_tokenizer(tp.parse_args(["--size", "tiny", "--device", "cpu", "--vocab-size", "2000",
                                                    "--seq-len", "32"]), texts, "bert", tmp_path)
    model = METHODS["xpt"].build(source, tokenizer)
    best, table = tp.path_settings(args)
    accelerator = Accelerator(mixed_precision=best.mixed_precision, cpu=True)
    for name in ("stock-eager", "xpt"):
        runner = tp.build_runner(table[name], model, tokenizer, texts, args, tmp_path, accelerator, 2)
        probabilities = {m.p for m in runner.flops_model.modules() if isinstance(m, torch.nn.Dropout)}
        assert probabilities == ({0.1} if dropout is None else {0.0}), (name, probabilities)
        runner.run(accelerator, 1, tokenizer.pad_token_id, len(tokenizer))  # and the step runs with them
    assert {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}  # the paths' own copies
    with pytest.raises(SystemExit):
        tp.parse_args(["--device", "cpu", "--dropout", "1"])


def test_the_tiny_vocabulary_is_sized_to_the_texts(shared_data, tmp_path):
    """With defaults on the shared corpus (thousands of distinct characters) the tiny benchmark's
    tokenizer trains; an explicit size below the characters is refused before anything is built."""
    args = tp.parse_args(["--device", "cpu", "--size", "tiny"])
    texts, _ = tp.read_texts(str(shared_data / "corpus"), args.num_texts)  # the default 20,000 texts
    chars = len(set("".join(texts)))
    assert chars + 16 > 2000  # the former fixed tiny size could not hold them
    tokenizer, described = tp.load_tokenizer(args, texts, "bert", tmp_path)
    assert len(tokenizer) >= chars and "trained here" in described
    small = tp.parse_args(["--device", "cpu", "--size", "tiny", "--vocab-size", "500"])
    with pytest.raises(SystemExit, match=rf"--vocab-size {chars + 16}"):
        tp.load_tokenizer(small, texts, "bert", tmp_path / "small")


def _collate_cli(tmp_path, baseline_tree):
    from tests.model_factories import word_tokenizer
    from tests.post_train_helpers import KOREAN_SENTENCES, WORDS

    word_tokenizer("bert", WORDS).save_pretrained(str(tmp_path / "tok"))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(KOREAN_SENTENCES * 20) + "\n", encoding="utf-8")
    cmd = [sys.executable, "benchmarks/collate.py", "--tokenizer", str(tmp_path / "tok"), "--data", str(texts),
           "--num-texts", "400", "--seq-len", "32", "--batch-size", "8", "--rounds", "3", "--step-ms", "5",
           "--baseline-tree", str(baseline_tree)]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_collate_cli_compares_two_trees_on_the_same_batches(tmp_path):
    """benchmarks/collate.py against this same checkout: the outputs match, one timed row per tree."""
    proc = _collate_cli(tmp_path, REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "outputs identical across trees" in proc.stdout
    rows = re.findall(r"^\| (this tree|baseline) \| ([\d.]+) \| ([\d.]+)-([\d.]+) \| ([\d.]+) \| (\d+) \|$",
                      proc.stdout, flags=re.M)
    assert [r[0] for r in rows] == ["this tree", "baseline"], proc.stdout
    for _, median, lo, hi, per_s, workers in rows:
        assert float(lo) <= float(median) <= float(hi)
        assert 1e3 / (float(median) + 0.05) <= float(per_s) <= 1e3 / (float(median) - 0.05)  # median printed to 0.1 ms
        assert int(workers) >= 1


def test_collate_cli_refuses_a_tree_that_collates_differently(tmp_path):
    """A baseline whose positions are off by one is caught, named and fails the command."""
    source = (REPO_ROOT / "training" / "mlm_batches.py").read_text(encoding="utf-8")
    changed = source.replace("+ position_offset\n", "+ position_offset + 1\n")
    assert changed != source
    (tmp_path / "other" / "training").mkdir(parents=True)
    (tmp_path / "other" / "training" / "mlm_batches.py").write_text(changed, encoding="utf-8")
    proc = _collate_cli(tmp_path, tmp_path / "other")
    assert proc.returncode != 0
    assert "baseline collates 'position_ids' differently" in proc.stdout + proc.stderr


def _path_processes(parent: int) -> list[int]:
    """Processes started by `parent` to serve a path (multiprocessing's spawn, not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc (Linux)")
def test_a_path_process_ends_when_the_benchmark_is_killed():
    """Killed from outside mid-warm-up, the benchmark leaves no path process behind (on a GPU each
    would hold its memory)."""
    import signal

    cmd = [sys.executable, "benchmarks/throughput.py", "--device", "cpu", "--size", "tiny", "--rounds", "1",
           "--steps-per-round", "1", "--warmup", "1000000", "--num-texts", "400", "--compile", "false",
           "--paths", "xpt-eager"]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = []
    try:
        deadline = time.monotonic() + 120
        while not (children := _path_processes(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, "no path process started"
            time.sleep(0.2)
        time.sleep(2)  # inside its build or warm-up, which never ends by itself
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 20
        while any(Path(f"/proc/{c}").exists() and "Z" not in _state(c) for c in children):
            assert time.monotonic() < deadline, f"path processes {children} outlived the benchmark"
            time.sleep(0.2)
    finally:
        for pid in children + ([proc.pid] if proc.poll() is None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # already gone
                pass


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_row_longer_than_the_models_positions_is_refused_before_any_work():
    proc = subprocess.run([sys.executable, "benchmarks/throughput.py", "--device", "cpu", "--size", "tiny", "--seq-len",
                           "512", "--paths", "stock-eager", "xpt"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "--seq-len 512 is longer than the 128 positions of --size tiny" in proc.stderr
    assert "built" not in proc.stdout  # no path was started


def test_methods_side_by_side_reports_a_failed_fine_tuning_and_exits_non_zero(tmp_path):
    """The script's per-run lines carry each command's own exit status, and the script fails when any run did
    (an interpreter stand-in: post-training succeeds, KorSTS fine-tuning fails with status 3)."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\ncase "$*" in *finetune.py*korsts*) exit 3;; esac\nexit 0\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "methods_side_by_side.sh"), str(tmp_path / "r"), "10"],
                          cwd=REPO_ROOT, env={**os.environ, "PY": str(fake), "RUNS": "xpt scratch"},
                          capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sum("fine-tuned" in line and "on korsts: exit 3" in line for line in lines) == 2
    assert sum("on nsmc: exit 0" in line for line in lines) == 2 and "some runs failed" in lines[-1]


def test_a_path_that_failed_in_some_round_gives_no_ratio():
    table = tp.path_table(tp.resolve_speed(tp.PostTrainConfig(), "cpu"))
    done = tp.PathRun(table["stock-eager"], None, None, tokens_per_s=[100.0, 120.0, 110.0])
    cut = tp.PathRun(table["xpt"], None, None, tokens_per_s=[300.0, 320.0], error="RuntimeError: killed in round 3")
    assert tp.completed_medians([done, cut]) == {"stock-eager": 110.0}
