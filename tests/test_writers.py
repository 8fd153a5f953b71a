"""Every command that writes a folder refuses to overwrite what is there, or to write into its own inputs,
unless asked (`--overwrite`): one line, exit code 2, nothing changed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import KOREAN_SENTENCES, REPO_ROOT
from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer


def run(module: str, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("writers")
    tok = word_tokenizer("bert", KOREAN_WORDS)
    tok.save_pretrained(root / "tok")
    tiny_source("bert", tok, root / "source")
    (root / "text.txt").write_text("\n".join(KOREAN_SENTENCES * 20) + "\n", encoding="utf-8")
    return root


def command(case: str, inputs, out):
    if case == "convert":
        return "training.convert", ["--source", inputs / "source", "--tokenizer", inputs / "tok", "--out", out]
    if case == "train_tokenizer":
        return "tokenization.train_tokenizer", ["--corpus", inputs / "text.txt", "--vocab-size", 132, "--family",
                                                "bert", "--out", out, "--no-progress"]
    if case == "prepare_corpus":
        return "tokenization.prepare_corpus", ["--input", inputs / "text.txt", "--out", out, "--no-progress",
                                               "--valid", 2, "--test", 2, "--min-chars", 2]
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["convert", "train_tokenizer", "prepare_corpus"])
def test_a_folder_with_files_is_kept_unless_overwrite_is_given(inputs, tmp_path, case):
    out = tmp_path / "out"
    out.mkdir()
    (out / "training_summary.json").write_text("{}")  # e.g. an earlier run's record
    module, args = command(case, inputs, out)
    refused = run(module, *args)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "already holds files" in lines[0], refused.stderr
    assert [p.name for p in out.iterdir()] == ["training_summary.json"]
    done = run(module, *args, "--overwrite")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (out / "training_summary.json").exists() and any(out.iterdir())  # nothing stale beside the new files


def test_a_failed_overwrite_puts_the_earlier_contents_back(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stats.json").write_text("earlier run")
    (tmp_path / "short.txt").write_text("짧다.\n" * 50, encoding="utf-8")  # every sentence too short: no corpus
    failed = run("tokenization.prepare_corpus", "--input", tmp_path / "short.txt", "--out", out, "--overwrite",
                 "--no-progress", "--valid", 2, "--test", 2)
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert [p.name for p in out.iterdir()] == ["stats.json"] and (out / "stats.json").read_text() == "earlier run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "short.txt"]  # nothing left aside
    (tmp_path / ".out.replaced").mkdir()  # what a killed --overwrite run leaves: named, never deleted
    refused = run("tokenization.prepare_corpus", "--input", tmp_path / "short.txt", "--out", out, "--overwrite")
    assert refused.returncode == 2 and ".out.replaced holds what" in refused.stderr, refused.stderr


def test_overwrite_never_deletes_the_corpus_a_glob_reads(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(KOREAN_SENTENCES * 20) + "\n", encoding="utf-8")
    refused = run("tokenization.prepare_corpus", "--input", f"{corpus}/*.txt", "--out", corpus, "--overwrite",
                  "--no-progress", "--valid", 2, "--test", 2, "--min-chars", 2)
    assert refused.returncode == 2 and "overlaps the input" in refused.stderr, refused.stderr
    assert (corpus / "a.txt").is_file()


def test_export_into_its_own_input_is_refused(inputs, tmp_path):
    model = tmp_path / "xpt"
    assert run("training.convert", "--source", inputs / "source", "--tokenizer", inputs / "tok",
               "--out", model).returncode == 0
    before = (model / "config.json").read_text()
    refused = run("training.export_stock", model, model)
    assert refused.returncode == 2 and "overlaps the input" in refused.stderr, refused.stderr
    assert (model / "config.json").read_text() == before


def test_make_card_keeps_a_hand_written_card(inputs, tmp_path):
    model = tmp_path / "xpt"
    assert run("training.convert", "--source", inputs / "source", "--tokenizer", inputs / "tok",
               "--out", model).returncode == 0
    (model / "README.md").write_text("# My own card\n", encoding="utf-8")
    refused = run("cards.make_card", "--model-dir", model, "--license", "mit")
    assert refused.returncode == 2 and "written or edited by hand" in refused.stderr, refused.stderr
    assert (model / "README.md").read_text(encoding="utf-8") == "# My own card\n"
    assert run("cards.make_card", "--model-dir", model, "--license", "mit", "--overwrite").returncode == 0
    assert "My own card" not in (model / "README.md").read_text(encoding="utf-8")


def test_overwrite_of_the_current_folder_is_refused(tmp_path):
    """`--out . --overwrite` would move the working folder aside and write the new corpus into what is then
    deleted: refused, nothing touched."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "old.txt").write_text("earlier run")
    (tmp_path / "text.txt").write_text("\n".join(KOREAN_SENTENCES * 20) + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    refused = subprocess.run([sys.executable, "-m", "tokenization.prepare_corpus", "--input", str(tmp_path / "text.txt"),
                              "--out", ".", "--overwrite", "--no-progress", "--valid", "2", "--test", "2",
                              "--min-chars", "2"], cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "run the command from another folder" in refused.stderr, refused.stderr
    assert sorted(p.name for p in here.iterdir()) == ["old.txt"] and sorted(p.name for p in tmp_path.iterdir()) == [
        "here", "text.txt"]
