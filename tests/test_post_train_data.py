"""Post-training data (training/mlm_data.py, training/mlm_batches.py): reading text folders, prepared
splits, saved datasets and streams; empty, mis-encoded, truncated, binary and wrong-script input refused
or skipped with one line naming it; best-fit packing of whole sentences into rows; masking (80/10/10,
whole words) as a function of seed, epoch and row; packed collation with block attention masks and
restarting positions; the step-indexed batch schedule; word-order shuffling.
"""
from __future__ import annotations

import os
import random
import re

import numpy as np
import pytest

from tests.model_factories import word_tokenizer
from tests.post_train_helpers import WORDS, reset_accelerate, run_args, run_inprocess
from tokenization.errors import ConfigError
from training import post_train
from training.mlm_batches import BatchSchedule, Masker, collate, row_rng
from training.mlm_data import build_token_rows, load_text_splits, pack_rows

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # reset Accelerate's per-process state after each test


# ----------------------------------------------------------------------------------------------
# Reading the text
# ----------------------------------------------------------------------------------------------


def test_prepared_splits_folder_is_used_as_is(tmp_path):
    for split, n in (("train", 30), ("valid", 5), ("test", 4)):
        (tmp_path / split).mkdir()
        (tmp_path / split / "shard-0.txt").write_text("\n".join(f"{split} 문장 {i}" for i in range(n)) + "\n")
    splits = load_text_splits(str(tmp_path), cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 30, "valid": 5, "test": 4}
    assert splits["valid"][0]["text"].startswith("valid")


def test_prepared_split_files_are_read_whole(tmp_path):
    for name, n in (("train.a.txt", 20), ("train.b.txt", 30), ("valid.txt", 5), ("test.txt", 4)):
        (tmp_path / name).write_text("\n".join(f"{name} 문장 {i}" for i in range(n)) + "\n")
    splits = load_text_splits(str(tmp_path), cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 50, "valid": 5, "test": 4}  # both train files


def test_a_text_repeated_in_the_corpus_is_never_in_train_and_held_out(tmp_path):
    """Held out of raw text, valid and test take texts after a shuffle; every other copy of those texts is
    dropped from train (repeated reviews made held-out perplexity a score on training text)."""
    texts = [f"리뷰 {i % 40}번 정말 좋다" for i in range(200)] + [f"한 번뿐인 문장 {i}" for i in range(100)]
    (tmp_path / "raw.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    splits = load_text_splits(str(tmp_path / "raw.txt"), valid_size=20, test_size=20, cache_dir=str(tmp_path / ".hf"))
    held = list(splits["valid"]["text"]) + list(splits["test"]["text"])
    train = list(splits["train"]["text"])
    assert len(held) == 40 and not set(held) & set(train)
    assert sorted(train) == sorted(t for t in texts if t not in set(held))  # only copies of held-out texts left out


def test_a_local_folder_in_the_hubs_layout_keeps_its_test_split(tmp_path):
    """data/train-00000-of-00001.txt beside data/test-...: its test texts stay out of train (as
    `datasets.load_dataset(folder)` reads it); files in hidden folders are no corpus text."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train-00000-of-00001.txt").write_text("\n".join(f"학습 문장 {i}" for i in range(50)) + "\n")
    (tmp_path / "data" / "test-00000-of-00001.txt").write_text("\n".join(f"시험 문장 {i}" for i in range(20)) + "\n")
    splits = load_text_splits(str(tmp_path), valid_size=5, cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"test": 20, "valid": 5, "train": 45}
    assert all(t.startswith("학습") for t in splits["train"]["text"]) and splits["test"][0]["text"].startswith("시험")
    mixed = tmp_path / "mixed"  # a file that belongs to no split: the folder is one corpus, nothing left out
    mixed.mkdir()
    for name, n in (("blog.txt", 50), ("news-train.txt", 10), ("wiki-test.txt", 8)):
        (mixed / name).write_text("\n".join(f"{name} 문장 {i}" for i in range(n)) + "\n")
    assert sum(len(v) for v in load_text_splits(str(mixed), valid_size=2, test_size=2,
                                                cache_dir=str(tmp_path / ".hf3")).values()) == 68
    no_train = tmp_path / "no-train"  # dev and test files but no train file: refused, not trained on
    no_train.mkdir()
    for name, n in (("corpus.txt", 40), ("dev.txt", 5), ("test.txt", 5)):
        (no_train / name).write_text("\n".join(f"{name} {i}" for i in range(n)) + "\n")
    with pytest.raises(ValueError, match=r"held-out split files \(dev.txt, test.txt\) but no train file.*train.txt"):
        load_text_splits(str(no_train), valid_size=2, test_size=2, cache_dir=str(tmp_path / ".hf4"))
    named = tmp_path / "named"  # train_part1.txt beside test.txt: the Hub's patterns split it; stray files are no text
    named.mkdir()
    for name, n in (("train_part1.txt", 40), ("test.txt", 5)):
        (named / name).write_text("\n".join(f"{name} {i}" for i in range(n)) + "\n")
    assert {k: len(v) for k, v in load_text_splits(str(named), valid_size=2,
                                                   cache_dir=str(tmp_path / ".hf5")).items()} == {"test": 5, "valid": 2, "train": 38}
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "corpus.txt").write_text("\n".join(f"문장 {i}" for i in range(40)) + "\n")
    (stray / "test.log").write_text("not text to train on\n")
    (stray / "train.log").write_text("nor this\n")
    assert sum(len(v) for v in load_text_splits(str(stray), valid_size=2, test_size=2,
                                                cache_dir=str(tmp_path / ".hf6")).values()) == 40
    (stray / "valid.log").write_text("a log named like a split\n")  # does not hide a real held-out file
    (stray / "dev.txt").write_text("\n".join(f"개발 {i}" for i in range(5)) + "\n")
    with pytest.raises(ValueError, match=r"held-out split files \(dev.txt\)"):
        load_text_splits(str(stray), valid_size=2, test_size=2, cache_dir=str(tmp_path / ".hf7"))
    plain = tmp_path / "plain"
    (plain / ".ipynb_checkpoints").mkdir(parents=True)
    (plain / "a.txt").write_text("\n".join(f"문장 {i}" for i in range(30)) + "\n")
    (plain / ".ipynb_checkpoints" / "a-checkpoint.txt").write_text("\n".join(f"문장 {i}" for i in range(30)) + "\n")
    assert sum(len(v) for v in load_text_splits(str(plain), valid_size=2, test_size=2,
                                                cache_dir=str(tmp_path / ".hf2")).values()) == 30


def test_the_tokenizer_commands_read_the_splits_post_training_reads(tmp_path):
    """One rule (tokenization.corpus_io.folder_splits) for both: each split has the same texts, a folder without
    splits is one corpus to both, and held-out files without a train file are refused by both."""
    from tokenization.corpus_io import iter_corpus

    layouts = {
        "folders": {"train/a.txt": 30, "train/more/b.txt": 5, "dev/c.txt": 6, "test/d.txt": 4},
        "files": {"train.a.txt": 20, "train.b.txt": 10, "validation.txt": 5, "test.txt": 4},
        "hub": {"data/train-00000-of-00001.txt": 30, "data/validation-00000-of-00001.txt": 6,
                "data/test-00000-of-00001.txt": 4},
        "one corpus": {"part1/a.txt": 20, "part2/b.txt": 20},
    }
    for layout, files in layouts.items():
        root = tmp_path / layout.replace(" ", "-")
        for name, n in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("\n".join(f"{name} 문장 {i}" for i in range(n)) + "\n")
        splits = load_text_splits(str(root), valid_size=3, test_size=3, cache_dir=str(tmp_path / ".hf" / layout))
        for split in ("train", "valid", "test"):
            texts = sorted(iter_corpus(root, split))
            if layout == "one corpus":  # the tokenizer reads all of it; post-training holds valid/test out of it
                assert texts == sorted(t for part in splits.values() for t in part["text"])
            else:
                assert texts == sorted(splits[split]["text"]), (layout, split)
    held = tmp_path / "held"
    held.mkdir()
    for name in ("corpus.txt", "test.txt"):
        (held / name).write_text("\n".join(f"{name} {i}" for i in range(20)) + "\n")
    for read in (lambda: list(iter_corpus(held, "train")), lambda: load_text_splits(str(held), cache_dir=str(tmp_path / ".hf0"))):
        with pytest.raises(ValueError, match=r"held-out split files \(test.txt\) but no train file"):
            read()


def test_saved_dataset_dict_keeps_its_splits(tmp_path):
    import datasets

    data = {split: datasets.Dataset.from_dict({"text": [f"{split} 문장 {i}" for i in range(n)], "id": list(range(n))})
            for split, n in (("train", 12), ("validation", 3), ("test", 2))}
    datasets.DatasetDict(data).save_to_disk(str(tmp_path / "saved"))
    splits = load_text_splits(str(tmp_path / "saved"), cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 12, "valid": 3, "test": 2}
    assert splits["test"].column_names == ["text"] and splits["valid"][0]["text"].startswith("validation")


def test_streaming_reads_only_what_is_needed(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("\n".join(f"문장 {i}" for i in range(1000)) + "\n")
    splits = load_text_splits(str(tmp_path / "data"), valid_size=5, test_size=5, streaming=True, stream_limit=50,
                              cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 40, "valid": 5, "test": 5}
    seen = {t for split in splits.values() for t in split["text"]}
    assert seen == {f"문장 {i}" for i in range(50)}
    (tmp_path / "data" / "a.txt").write_text("\n".join(f"새 문장 {i}" for i in range(1000)) + "\n")  # rewritten
    again = load_text_splits(str(tmp_path / "data"), valid_size=5, test_size=5, streaming=True, stream_limit=50,
                             cache_dir=str(tmp_path / ".hf"))
    assert {t for split in again.values() for t in split["text"]} == {f"새 문장 {i}" for i in range(50)}


@pytest.mark.parametrize("name", ["kofile", "kofile.dat", "kofile.dat.gz"])
def test_a_file_named_as_data_is_read_as_text_whatever_its_suffix(tmp_path, name):
    """As the corpus and tokenizer commands read it: one text per line (a folder's files still need a known suffix)."""
    import gzip

    from tokenization.corpus_io import Utf8Counter, iter_file_texts

    texts = [f"한국어 문장 {i}번" for i in range(30)]
    blob = ("\n".join(texts) + "\n").encode("utf-8")
    (tmp_path / name).write_bytes(gzip.compress(blob) if name.endswith(".gz") else blob)
    splits = load_text_splits(str(tmp_path / name), valid_size=3, test_size=2, cache_dir=str(tmp_path / ".hf"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 25, "valid": 3, "test": 2}
    assert sorted(t for split in splits.values() for t in split["text"]) == sorted(texts)
    assert sorted(iter_file_texts(tmp_path / name, Utf8Counter(), "text")) == sorted(texts)


@pytest.mark.parametrize("case", ["empty file", "cp949 file", "truncated gzip", "empty folder", "binary file"])
def test_unreadable_data_is_one_line_naming_the_input(tiny, tmp_path, capsys, case):
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    text = "\n".join(" ".join(random.Random(i).sample(WORDS, 5)) for i in range(300)) + "\n"
    culprit = data / "a.txt"
    if case == "empty file":
        culprit.write_text("")
    elif case == "cp949 file":  # Korean in another encoding: nearly every line is invalid UTF-8
        culprit.write_bytes(text.encode("cp949"))
    elif case == "truncated gzip":
        blob = gzip.compress(text.encode("utf-8"))
        culprit = data / "a.txt.gz"
        culprit.write_bytes(blob[: len(blob) // 2])
    elif case == "binary file":
        culprit.write_bytes(bytes(range(256)) * 50)
    else:
        culprit = data
    assert post_train.main(run_args(tiny, tmp_path / "out", data=data)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # besides progress bars
    assert len(errors) == 1 and "`data`" in errors[0] and str(culprit) in errors[0], err
    assert "Traceback" not in err and not (tmp_path / "out" / "checkpoints").exists()


def test_a_line_that_is_not_utf8_is_skipped_and_counted_alike_by_post_training_and_prepare_corpus(tiny, tmp_path,
                                                                                                  capsys):
    from tokenization.prepare_corpus import prepare

    lines = [" ".join(random.Random(i).sample(WORDS, 5)) for i in range(300)]
    raw = tmp_path / "raw" / "a.txt"
    raw.parent.mkdir()
    raw.write_bytes(("\n".join(lines[:150]) + "\n").encode("utf-8") + "caf\xe9 cr\xe8me\n".encode("latin-1")
                    + ("\n".join(lines[150:]) + "\n").encode("utf-8"))
    summary = run_inprocess(run_args(tiny, tmp_path / "out", data=raw.parent))
    data = summary["data"]
    assert data["train_sentences"] + data["valid_sentences"] + data["test_sentences"] == 300
    said_by_training = [line for line in capsys.readouterr().err.splitlines() if "not valid UTF-8" in line]
    stats = prepare([str(raw)], tmp_path / "corpus", valid=0.1, test=0.1, progress=False)
    said_by_prepare = [line for line in capsys.readouterr().err.splitlines() if "not valid UTF-8" in line]
    assert stats["invalid_utf8"]["lines"] == 1 and stats["invalid_utf8"]["files"] == {str(raw): 1}
    assert said_by_training == said_by_prepare == [f"warning: {raw}: skipped 1 line(s) that are not valid UTF-8 "
                                                   "(re-encode the file to UTF-8, e.g. iconv -f cp949 -t utf-8, "
                                                   "to keep them)"]


def test_text_without_the_target_script_is_refused_unless_the_check_is_off(tiny, tmp_path, capsys):
    english = "the cat sat on a mat while two dogs ran through the park".split()
    data = tmp_path / "english"
    data.mkdir()
    (data / "en.txt").write_text("\n".join(" ".join(random.Random(i).sample(english, 6)) for i in range(300)) + "\n")
    assert post_train.main(run_args(tiny, tmp_path / "out", data=data)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "`data`" in errors[0] and "Traceback" not in err, err
    assert re.search(r"only 0% of \d+ sampled training texts", errors[0]) and "hangul" in errors[0], errors[0]
    assert "--language" in errors[0] and "--min-script-share 0" in errors[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written
    reset_accelerate()
    summary = run_inprocess(run_args(tiny, tmp_path / "out", data=data, min_script_share=0, train_steps=2,
                                     phase1_steps=1))
    assert summary["total_steps"] == 2 and summary["config"]["min_script_share"] == 0
    import datasets

    from training.mlm_data import check_target_script

    english_only = datasets.Dataset.from_dict({"text": ["the cat sat on a mat"]})
    check_target_script(english_only, language="none", min_share=0.5, data="x")  # no language: nothing to check
    with pytest.raises(ConfigError, match="`data`"):
        check_target_script(english_only, language="ko", min_share=0.5, data="x")


def test_held_out_sizes_larger_than_the_corpus_name_the_sizes_not_the_data(tiny, tmp_path, capsys):
    from tests.post_train_helpers import run_args
    from training import post_train

    assert post_train.main(run_args(tiny, tmp_path / "o", valid_size=300, test_size=300) + ["--dry-run"]) == 0
    assert post_train.main(run_args(tiny, tmp_path / "o", valid_size=300, test_size=300)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: config field `valid_size + test_size`: 300 + 300"), errors
    assert "give smaller sizes" in errors[0]


def test_test_size_zero_trains_without_a_test_split_and_valid_size_zero_is_refused(tiny, tmp_path, capsys):
    """test_size 0: no test split, final metrics on valid; valid_size 0: refused before any tokenising, naming
    the option (an empty held-out split was cached, then failed to reload with an IndexError)."""
    summary = run_inprocess(run_args(tiny, tmp_path / "no-test", test_size=0, train_steps=2, phase1_steps=1,
                                     cache_dir=tmp_path / "cache"))
    assert summary["final_metrics_split"] == "valid" and (summary["data"].get("test"), summary["data"]["test_sentences"]) == (None, 0)
    assert post_train.main(run_args(tiny, tmp_path / "no-valid", valid_size=0, cache_dir=tmp_path / "cache")) == 2
    assert "`valid_size`: 0 holds out no valid split" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Packing sentences into rows
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths, capacity, rows", [
    ([100, 28, 90, 38, 64, 64], 128, [[0, 1], [2, 3], [4, 5]]),  # three full rows, longest first
    ([128, 5, 128], 128, [[0], [2], [1]]),  # a full-length sentence is a row of its own
    ([7, 7, 7, 7], 14, [[0, 1], [2, 3]]),  # ties keep corpus order
    ([60, 45, 45, 8], 100, [[0], [1, 2, 3]]),  # best fit: 8 goes to the row with 10 free, not the one with 40
    ([], 16, []),
])
def test_pack_rows_best_fit_decreasing(lengths, capacity, rows):
    assert pack_rows(lengths, capacity) == rows


def test_pack_rows_refuses_a_sentence_longer_than_a_row():
    with pytest.raises(ValueError, match="sentence 1 has 20 tokens, more than a row's 16"):
        pack_rows([3, 20], 16)


def test_pack_rows_fills_rows_far_better_than_next_fit():
    rng = random.Random(0)
    lengths = [min(128, max(3, int(rng.lognormvariate(3.1, 0.8)))) for _ in range(3000)]
    rows = pack_rows(lengths, 128)
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))  # every sentence once
    assert all(sum(lengths[i] for i in row) <= 128 for row in rows)
    next_fit, used = 0, 128
    for n in lengths:  # consecutive sentences until the next one does not fit
        next_fit, used = (next_fit + 1, n) if used + n > 128 else (next_fit, used + n)
    fill = sum(lengths) / (128 * len(rows))
    assert fill > 0.99 and len(rows) < 0.9 * next_fit, (fill, len(rows), next_fit)


def test_a_hub_dataset_updated_under_the_same_id_is_tokenised_again(tmp_path):
    import datasets

    tok = word_tokenizer("bert", WORDS)
    kwargs = dict(max_seq_length=32, packing=True, cache_dir=str(tmp_path), cache_key={"data": {"hub": "org/ko"}},
                  log=lambda *_: None)
    before = datasets.Dataset.from_dict({"text": [" ".join(WORDS[:5])] * 10})
    after = datasets.Dataset.from_dict({"text": [" ".join(WORDS[5:12])] * 10})  # new upload, same id
    assert before._fingerprint != after._fingerprint
    first = build_token_rows({"train": before}, tok, **kwargs)["train"]
    second = build_token_rows({"train": after}, tok, **kwargs)["train"]
    assert sum(map(len, second["input_ids"])) > sum(map(len, first["input_ids"]))  # the new text, not the cache
    again = build_token_rows({"train": after}, tok, **kwargs)["train"]
    assert again["input_ids"] == second["input_ids"] and len(list(tmp_path.glob("*/DONE"))) == 2


def test_packed_rows_hold_every_sentence_whole(tmp_path):
    import datasets

    tok = word_tokenizer("bert", WORDS)
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))) for _ in range(200)]
    split = {"train": datasets.Dataset.from_dict({"text": texts})}
    kwargs = dict(max_seq_length=32, cache_dir=str(tmp_path), cache_key={"t": 1}, log=lambda *_: None)
    packed = build_token_rows(split, tok, packing=True, **kwargs)["train"]
    single = build_token_rows(split, tok, packing=False, **kwargs)["train"]
    pieces = []
    for ids, starts, segs in zip(packed["input_ids"], packed["word_start"], packed["seg_lengths"]):
        assert sum(segs) == len(ids) == len(starts) <= 32
        bounds = np.cumsum([0] + segs)
        pieces += [(tuple(ids[a:b]), tuple(starts[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    assert sorted(pieces) == sorted(zip(map(tuple, single["input_ids"]), map(tuple, single["word_start"])))
    assert len(packed) < len(single) / 2
    # a build that crashed left its temporary folder; the next build of the same rows removes it
    import socket

    host = socket.gethostname().replace("-", "_")
    keys = [p.name for p in tmp_path.iterdir() if (p / "DONE").is_file()]
    live = [f".tmp-{key}-{host}-{os.getpid()}" for key in keys] + [f".tmp-{key}-other_host-2147483646" for key in keys]
    for key in keys:
        (tmp_path / f".tmp-{key}-{host}-2147483646").mkdir()
    for name in live:  # this process's own, and one of another machine that shares the cache folder
        (tmp_path / name).mkdir()
    build_token_rows(split, tok, packing=True, **kwargs)
    build_token_rows(split, tok, packing=False, **kwargs)
    assert sorted(p.name for p in tmp_path.glob(".tmp-*")) == sorted(live)


# ----------------------------------------------------------------------------------------------
# Masking, collation, schedule, word order
# ----------------------------------------------------------------------------------------------


def test_masking_is_a_function_of_seed_epoch_row_and_follows_80_10_10():
    tok = word_tokenizer("bert", WORDS)
    masker = Masker(tok)
    ids = np.array([tok.cls_token_id] + [5 + (i % 20) for i in range(4000)] + [tok.sep_token_id])
    starts = np.ones_like(ids)
    a = masker.mask_row(ids, starts, row_rng(1, 0, 7))
    b = masker.mask_row(ids, starts, row_rng(1, 0, 7))
    c = masker.mask_row(ids, starts, row_rng(1, 1, 7))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[1], c[1])
    out, labels = a
    selected = labels != -100
    assert selected.sum() == round(0.15 * 4000)
    assert labels[0] == -100 and labels[-1] == -100  # specials never selected
    share_mask = (out[selected] == tok.mask_token_id).mean()
    share_same = (out[selected] == ids[selected]).mean()
    assert 0.75 < share_mask < 0.85 and 0.06 < share_same < 0.14
    assert (out[~selected] == ids[~selected]).all()


def test_whole_word_masking_masks_complete_words():
    tok = word_tokenizer("bert", WORDS)
    masker = Masker(tok, whole_word=True)
    ids = np.array([tok.cls_token_id] + list(range(5, 65)) + [tok.sep_token_id])
    starts = np.array([1] + [1 if i % 3 == 0 else 0 for i in range(60)] + [1])  # words of 3 tokens
    _, labels = masker.mask_row(ids, starts, row_rng(0, 0, 0))
    selected = (labels[1:-1] != -100).reshape(20, 3)
    assert selected.any()
    assert (selected.all(axis=1) | ~selected.any(axis=1)).all()


def test_packed_collate_has_block_mask_and_restarting_positions():
    tok = word_tokenizer("roberta", WORDS)
    rows = [{"input_ids": [0, 10, 11, 2, 0, 12, 2], "word_start": [1] * 7, "seg_lengths": [4, 3]},
            {"input_ids": [0, 13, 2], "word_start": [1] * 3, "seg_lengths": [3]}]
    batch = collate(rows, [0, 1], masker=Masker(tok), seed=0, epoch=0, pad_id=tok.pad_token_id,
                    position_offset=2, packing=True)
    assert batch["position_ids"].tolist() == [[2, 3, 4, 5, 2, 3, 4], [2, 3, 4, 1, 1, 1, 1]]
    mask = batch["attention_mask"]
    assert mask.shape == (2, 7, 7)
    assert mask[0, 1, 3] and not mask[0, 1, 4] and mask[0, 5, 4]
    assert not mask[1, 0, 3] and not mask[1, 4].any()


def test_batch_schedule_is_a_function_of_the_step():
    s1, s2 = BatchSchedule(100, 8, seed=3), BatchSchedule(100, 8, seed=3)
    assert s1.steps_per_epoch == 12
    for step in (0, 5, 11, 12, 30):
        e1, r1 = s1.global_batch_rows(step)
        e2, r2 = s2.global_batch_rows(step)
        assert e1 == e2 == step // 12 and np.array_equal(r1, r2)
    epoch0 = np.concatenate([s1.global_batch_rows(i)[1] for i in range(12)])
    assert len(set(epoch0.tolist())) == 96  # no row twice within an epoch
    grouped = BatchSchedule(100, 8, seed=3, lengths=[i % 17 for i in range(100)])
    _, rows = grouped.global_batch_rows(0)
    assert len(rows) == 8


def test_rows_left_out_of_a_length_grouped_epoch_are_random_not_the_shortest():
    """1,007 rows in batches of 8 (windows of 400 rows): 7 sit out each epoch. Grouped by length, they must be
    the permutation's random 7 (as without grouping), not the 7 shortest of the last window, never trained."""
    schedule = BatchSchedule(1007, 8, seed=3, lengths=list(range(1007)))  # row i has length i
    for epoch in range(3):
        used = np.concatenate([schedule.global_batch_rows(epoch * 125 + i)[1] for i in range(125)])
        left_out = set(range(1007)) - set(used.tolist())
        assert len(used) == 1000 and left_out == set(np.random.default_rng([3, epoch]).permutation(1007)[1000:].tolist())


def test_word_order_shuffle_keeps_masked_and_special_tokens_and_sentences():
    from training.mlm_batches import shuffle_word_order

    special = np.array([0, 1, 2])
    ids = np.array([0] + list(range(10, 50)) + [2, 0] + list(range(60, 100)) + [2])
    labels = np.full_like(ids, -100)
    labels[[3, 7, 50]] = ids[[3, 7, 50]]
    original = ids.copy()
    targets = shuffle_word_order(ids, labels, [42, 42], special, 0.15, np.random.default_rng(0))
    moved = np.flatnonzero(targets != -100)
    assert moved.size >= 4 and not np.isin(moved, [0, 3, 7, 41, 42, 50, 83]).any()
    for pos in moved:  # the token now at pos came from its sentence's position targets[pos]
        sentence_start = 0 if pos < 42 else 42
        assert original[sentence_start + targets[pos]] == ids[pos]
    assert sorted(ids[moved]) == sorted(original[moved])  # a permutation within the chosen positions
    assert (ids[targets == -100] == original[targets == -100]).all()


def test_the_tokenizer_fingerprint_ignores_truncation_and_padding_state():
    """A tokenizer.json saved with truncation (sentence-transformers' do) loses it at the first call; the row
    cache key and a resume's check must not see another tokenizer then. Another vocabulary still changes it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from training.mlm_data import tokenizer_fingerprint

    def made(words):
        backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        backend.enable_truncation(128)
        return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")

    tok = made(["[UNK]", "[PAD]", "영화", "좋다"])
    before = tokenizer_fingerprint(tok)
    tok(["영화 좋다"])  # the call changes the backend's truncation state
    tok.backend_tokenizer.enable_padding(pad_id=1, pad_token="[PAD]")
    assert tokenizer_fingerprint(tok) == before
    assert tokenizer_fingerprint(made(["[UNK]", "[PAD]", "영화", "싫다"])) != before


def test_a_jsonl_without_the_text_field_names_post_trainings_option(tmp_path):
    rows = tmp_path / "reviews.jsonl"
    rows.write_text("\n".join(f'{{"id": {i}, "document": "문장 {i}"}}' for i in range(30)) + "\n", encoding="utf-8")
    from training.run_setup import _root_cause

    with pytest.raises(Exception) as raised:  # datasets wraps what its generator raised; post-training unwraps it
        load_text_splits(str(rows), valid_size=2, test_size=2, cache_dir=str(tmp_path / ".hf"))
    assert _root_cause(raised.value).startswith("InputError: ") and \
        "no string field 'text' (its keys: id, document); name the text field with --text-column" in _root_cause(
            raised.value)
    assert len(load_text_splits(str(rows), text_column="document", valid_size=2, test_size=2,
                                cache_dir=str(tmp_path / ".hf"))["train"]) == 26
