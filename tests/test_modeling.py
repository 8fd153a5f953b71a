"""The XPT model (`modeling_xpt.py`, `configuration_xpt.py`): parameter groups, sparse MLM, attention,
heads, save and load in a process without the project, and what the remote-code files may import."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from modeling_xpt import (PARAMETER_GROUPS, parameter_groups, set_trainable_groups, trainable_groups,
                          XPTConfig, XPTForMaskedLM, XPTForQuestionAnswering, XPTForSequenceClassification,
                          XPTForTokenClassification, from_source, save_model_folder)
from tests.conftest import REPO_ROOT
from tests.model_factories import (  # noqa: F401 (family, source, tok: pytest fixtures)
    FAMILIES,
    KOREAN_WORDS,
    TEXTS,
    family,
    padded_batch,
    source,
    tiny_source,
    tok,
    word_tokenizer,
)
from training.methods import PHASE1_GROUPS


# ---------------------------------------------------------------- parameter groups


def test_every_parameter_in_exactly_one_group(source, tok):
    for kwargs in ({}, {"adapter_size": 8, "use_itl_in": False, "use_itl_out": False}):
        model = from_source(source, tok, **kwargs)
        groups = parameter_groups(model)
        assert set(groups) == set(PARAMETER_GROUPS)
        seen = [id(p) for params in groups.values() for _, p in params]
        assert len(seen) == len(set(seen)) == len(list(model.parameters()))
        assert bool(groups["adapters"]) == bool(kwargs) and bool(groups["itl"]) != bool(kwargs)


def test_phase1_freezes_everything_reused(source, tok):
    model = from_source(source, tok)
    set_trainable_groups(model, PHASE1_GROUPS)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {n for g in PHASE1_GROUPS for n, _ in parameter_groups(model)[g]}
    assert trainable == expected
    assert all(n.startswith(("xpt.embeddings.target_embeddings", "xpt.encoder.itl_", "lm_head.bias")) for n in trainable)
    assert trainable_groups(model) == list(PHASE1_GROUPS)
    with pytest.raises(ValueError, match="Unknown parameter group.*'itls'"):
        set_trainable_groups(model, ["itls"])


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


def test_labels_give_standard_logits_and_the_mean_loss_of_the_masked_positions(source, tok):
    model = from_source(source, tok).eval()
    ids, mask, labels = random_batch(model.config)
    with torch.no_grad():
        standard = model(ids, attention_mask=mask, labels=labels)
        dense = model(ids, attention_mask=mask).logits
    assert standard.logits.shape == (*ids.shape, model.config.vocab_size)  # like every transformers MLM
    assert dense.shape[-1] == model.config.vocab_size < model.config.padded_vocab_size
    torch.testing.assert_close(standard.logits, dense)
    expected = F.cross_entropy(dense.view(-1, dense.shape[-1]), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(standard.loss, expected, atol=1e-6, rtol=1e-6)


def test_sdpa_equals_eager_and_attentions_are_returned(source, tok):
    sdpa = from_source(source, tok, attn_implementation="sdpa").eval()
    eager = XPTForMaskedLM(XPTConfig.from_dict({**sdpa.config.to_dict(), "attn_implementation": "eager"})).eval()
    eager.load_state_dict(sdpa.state_dict())
    ids, mask, _ = random_batch(sdpa.config)
    with torch.no_grad():
        a, b = sdpa(ids, attention_mask=mask), eager(ids, attention_mask=mask, output_attentions=True)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    probs = b.attentions[0]
    assert len(b.attentions) == sdpa.config.num_total_layers
    assert torch.all(probs[1, :, :, 8:] < 1e-6) and torch.allclose(probs.sum(-1), torch.ones(()))
    with torch.no_grad():  # in the model's dtype, as the hidden states (stock models do the same)
        half = eager.to(torch.bfloat16)(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    assert half.attentions[0].dtype == half.hidden_states[-1].dtype == torch.bfloat16


def test_padding_does_not_change_real_tokens(source, tok):
    model = from_source(source, tok).eval()
    alone = tok(TEXTS[1], return_tensors="pt")
    batch = padded_batch(tok, TEXTS)
    with torch.no_grad():
        a = model(**alone).logits[0]
        b = model(**batch).logits[1, : alone["input_ids"].shape[1]]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_block_mask_packing_equals_separate_sequences(source, tok):
    model = from_source(source, tok).eval()
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


def test_activation_checkpointing_recomputes_layers_and_gives_same_gradients(source, tok):
    torch.manual_seed(0)
    model = from_source(source, tok, attn_implementation="eager").train()
    calls = []
    for layer in model.xpt.encoder.ordered_layers():  # inside the checkpointed region: runs again in backward
        layer.intermediate.register_forward_hook(lambda *_: calls.append(1))
    ids, mask, labels = random_batch(model.config)
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    plain_calls = len(calls)
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # transformers 5.17 names it gradient_checkpointing_enable; later 5.x releases activation_checkpointing_enable
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model(ids, attention_mask=mask, labels=labels).loss.backward()
    assert plain_calls == model.config.num_total_layers and len(calls) == 3 * plain_calls  # forward + recompute
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, reference[name], atol=1e-6, rtol=1e-5, msg=name)


def test_adapters_start_as_identity(source, tok):
    plain = from_source(source, tok, use_itl_in=False, use_itl_out=False, init="overlap",
                                       source_tokenizer=tok).eval()
    with_adapters = from_source(source, tok, use_itl_in=False, use_itl_out=False, init="overlap",
                                               source_tokenizer=tok, adapter_size=4).eval()
    with_adapters.lm_head.load_state_dict(plain.lm_head.state_dict())
    ids, mask, _ = random_batch(plain.config)
    with torch.no_grad():
        torch.testing.assert_close(with_adapters(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)




@pytest.mark.parametrize("labels,problem", [(torch.tensor([1.5, 3.0]), "regression"), (torch.tensor([0, 1]), "single"),
                                            (torch.tensor([0, 1], dtype=torch.int32), "single")])  # e.g. from numpy
def test_sequence_classification_losses(source, tok, labels, problem, tmp_path):
    xpt = from_source(source, tok)
    xpt.save_pretrained(tmp_path)
    num_labels = 1 if problem == "regression" else 2
    model = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=num_labels).eval()
    batch = padded_batch(tok, TEXTS[:2])
    out = model(**batch, labels=labels)
    expected = (F.mse_loss(out.logits.squeeze(-1), labels) if problem == "regression"
                else F.cross_entropy(out.logits, labels.long()))
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(model.xpt.encoder.layer[0].output.dense.weight, xpt.xpt.encoder.layer[0].output.dense.weight)


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_sentence_head_reads_the_pooled_states_and_ignores_padding(source, tok, pooling, tmp_path):
    from_source(source, tok).save_pretrained(tmp_path)
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


def test_pair_head_reads_each_sentence_of_a_cross_encoded_pair(source, tok, tmp_path):
    """classifier_pooling="pair": [u, v, |u - v|, u * v] of the mean states before and after the separator that ends
    the first sentence (token types for BERT, the separator for RoBERTa); padding changes nothing, and the saved
    folder reloads the same head."""
    from_source(source, tok).save_pretrained(tmp_path)
    model = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=3, classifier_pooling="pair").eval()
    first, second = TEXTS[:2], [TEXTS[2], TEXTS[1] + " " + TEXTS[0]]
    batch = tok(first, second, padding=True, return_tensors="pt", return_token_type_ids=True)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    if model.config.type_vocab_size > 1:
        inputs["token_type_ids"] = batch["token_type_ids"]
    with torch.no_grad():
        logits = model(**inputs).logits
        hidden = model.xpt(**inputs).last_hidden_state
        alone = model(**{k: v[1:2, :int(batch["attention_mask"][1].sum())] for k, v in inputs.items()}).logits[0]
    expected = []
    for row in range(2):
        ids = batch.sequence_ids(row)
        separator = max(i for i, s in enumerate(ids) if s == 0) + 1  # the separator after the first sentence
        real = [i for i, m in enumerate(batch["attention_mask"][row].tolist()) if m]
        u = hidden[row, [i for i in real if i <= separator]].mean(0)
        v = hidden[row, [i for i in real if i > separator]].mean(0)
        expected.append(torch.cat([u, v, (u - v).abs(), u * v]))
    head = model.classifier
    torch.testing.assert_close(logits, head.out_proj(torch.tanh(head.dense(torch.stack(expected)))), atol=1e-5, rtol=0)
    torch.testing.assert_close(alone, logits[1], atol=1e-5, rtol=0)
    model.save_pretrained(tmp_path / "pair")
    again = XPTForSequenceClassification.from_pretrained(tmp_path / "pair").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).logits, logits)


@pytest.mark.parametrize("field, value, says", [
    ("classifier_pooling", "max", "expected one of ('first', 'mean', 'pair'), got max"),
    ("use_itl_in", "yes", "expected bool"),  # a string would count as true and build an ITL
    ("hidden_size", "abc", "expected int"),
    ("source_architecture", "gpt2", "expected one of ('bert', 'roberta', 'xlm-roberta', 'electra')"),
    ("adapter_size", -3, "adapter_size=-3: use 0 (no adapters) or a bottleneck width > 0"),
    ("pad_vocab_to_multiple_of", 0, "pad_vocab_to_multiple_of=0: use 1"),
    ("num_attention_heads", 5, "hidden_size=768 is not a multiple of num_attention_heads=5"),
])
def test_a_mistyped_config_value_is_refused_by_name_when_made_or_loaded(tmp_path, field, value, says):
    from huggingface_hub.errors import StrictDataclassError

    with pytest.raises(StrictDataclassError, match=field) as made:
        XPTConfig(**{field: value})
    assert says in str(made.value)
    XPTConfig().save_pretrained(tmp_path)  # a config.json edited by hand, then loaded
    edited = {**json.loads((tmp_path / "config.json").read_text()), field: value}
    (tmp_path / "config.json").write_text(json.dumps(edited))
    with pytest.raises(StrictDataclassError, match=field):
        XPTConfig.from_pretrained(tmp_path)


# ---------------------------------------------------------------- what users do with a loaded model


def test_resizing_the_vocabulary_keeps_the_mlm_head_and_the_saved_folder_loadable(source, tok, tmp_path):
    model = from_source(source, tok).eval()
    old = model.config.vocab_size
    bias = model.lm_head.bias.detach().clone()
    model.lm_head.bias.requires_grad_(False)  # frozen, as in a training phase that leaves it out: it stays frozen
    for new in (old + 30, old - 7):  # add tokens (`len(tokenizer)` after add_tokens), then drop some
        model.resize_token_embeddings(new)
        assert model.config.vocab_size == new and model.config.padded_vocab_size % 64 == 0
        assert model.get_input_embeddings().weight.shape[0] == model.config.padded_vocab_size >= new
        assert model.lm_head.decoder.weight is model.get_input_embeddings().weight  # still tied to E_T
        ids = torch.tensor([[2, 5, new - 1, 3]])
        with torch.no_grad():
            assert model(ids, labels=ids).logits.shape == (1, 4, new)
    torch.testing.assert_close(model.lm_head.bias[: old - 7], bias[: old - 7])  # kept for the surviving tokens
    assert not model.lm_head.bias.requires_grad
    with torch.no_grad():  # trained rows far from the padding rows' random init
        model.get_input_embeddings().weight[: old - 7] += 5.0
    model.resize_token_embeddings(old - 5)  # two tokens added inside the padded rows: they start at the mean
    rows = model.get_input_embeddings().weight
    torch.testing.assert_close(rows[old - 7: old - 5], rows[: old - 7].mean(0).expand(2, -1))
    model.save_pretrained(tmp_path)
    reloaded = XPTForMaskedLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[2, 5, old - 8, 3]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits)


def test_every_head_takes_int32_targets_as_int64_ones(source, tok, tmp_path):
    """Targets built with numpy or pandas are often int32; torch's cross-entropy takes only int64."""
    from_source(source, tok).save_pretrained(tmp_path)
    ids, mask, labels = random_batch(XPTConfig.from_pretrained(tmp_path))
    tags = torch.where(labels == -100, labels, labels % 3)
    span = {"start_positions": torch.tensor([1, 2, 0]), "end_positions": torch.tensor([3, 2, 0])}
    for head, kwargs in ((XPTForMaskedLM, {"labels": labels}), (XPTForTokenClassification, {"labels": tags}),
                         (XPTForQuestionAnswering, span)):
        model = head.from_pretrained(tmp_path, **({"num_labels": 3} if head is XPTForTokenClassification else {})).eval()
        with torch.no_grad():
            wide = model(ids, attention_mask=mask, **kwargs).loss
            narrow = model(ids, attention_mask=mask, **{k: v.int() for k, v in kwargs.items()}).loss
        torch.testing.assert_close(narrow, wide)


def test_the_trainer_scales_the_loss_for_gradient_accumulation(source, tok, tmp_path):
    """transformers' Trainer divides a model's loss by the accumulation steps unless the model says it
    normalises by `num_items_in_batch` itself: XPT's losses are plain means, so one micro-batch of 4 must
    give the gradient of loss / 4."""
    from transformers import Trainer, TrainingArguments

    model = from_source(source, tok).train()
    ids, mask, labels = random_batch(model.config)
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    args = TrainingArguments(output_dir=str(tmp_path), gradient_accumulation_steps=4, use_cpu=True, report_to=[])
    trainer = Trainer(model=model, args=args)
    trainer.current_gradient_accumulation_steps = 4  # what its training loop sets
    torch.manual_seed(0)
    trainer.training_step(model, dict(inputs), num_items_in_batch=int(labels.ne(-100).sum()))
    via_trainer = model.lm_head.bias.grad.clone()
    model.zero_grad()
    torch.manual_seed(0)
    (model(**inputs).loss / 4).backward()
    torch.testing.assert_close(via_trainer, model.lm_head.bias.grad, atol=1e-7, rtol=1e-5)


def test_mean_pooling_runs_in_bf16_without_an_attention_mask(source, tok, tmp_path):
    from_source(source, tok).save_pretrained(tmp_path)
    model = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=2, classifier_pooling="mean",
                                                         dtype=torch.bfloat16).eval()
    ids = tok(TEXTS[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert model(ids).logits.dtype == torch.bfloat16


def test_a_saved_folder_has_one_embedding_row_per_token_and_the_model_keeps_its_padding(source, tok, tmp_path):
    """E_T, its tied decoder and the MLM bias are padded to a multiple of 64 rows while training; the saved folder
    has `vocab_size` rows, as a stock checkpoint, so PEFT's prompt tuning finds the word embeddings."""
    from peft import PromptTuningConfig, TaskType, get_peft_model
    from safetensors import safe_open

    model = from_source(source, tok).eval()
    vocab, rows = model.config.vocab_size, model.config.padded_vocab_size
    assert rows > vocab
    save_model_folder(model, tok, tmp_path)
    assert model.get_input_embeddings().weight.shape[0] == rows and model.config.pad_vocab_to_multiple_of == 64
    with safe_open(tmp_path / "model.safetensors", "pt") as saved:
        shapes = {name: saved.get_slice(name).get_shape()[0] for name in saved.keys()}
    assert shapes["xpt.embeddings.target_embeddings.weight"] == shapes["lm_head.bias"] == vocab
    assert "lm_head.decoder.weight" not in shapes  # tied: saved once
    reloaded = XPTForMaskedLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.pad_vocab_to_multiple_of == 1 and reloaded.get_input_embeddings().weight.shape[0] == vocab
    assert reloaded.lm_head.decoder.weight is reloaded.get_input_embeddings().weight
    batch = padded_batch(tok, TEXTS[:2])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids, attention_mask=mask).logits, model(ids, attention_mask=mask).logits)
    classifier = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    prompted = get_peft_model(classifier, PromptTuningConfig(task_type=TaskType.SEQ_CLS, num_virtual_tokens=4))
    out = prompted(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1]))
    assert out.logits.shape == (2, 2) and torch.isfinite(out.loss)


def test_a_saved_tokenizer_keeps_no_truncation_from_its_last_call(tok, tmp_path):
    """Fine-tuning encodes with truncation at its max_length; the saved tokenizer.json must not carry that state,
    or a user of the `tokenizers` library alone would cut every text at that length."""
    from tokenizers import Tokenizer

    from modeling_xpt import save_tokenizer

    tok(TEXTS, truncation=True, max_length=4, padding="max_length")
    save_tokenizer(tok, tmp_path)
    saved = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert saved.truncation is None and saved.padding is None
    long_text = " ".join(TEXTS)
    assert len(saved.encode(long_text).ids) == len(tok(long_text)["input_ids"]) > 4


def test_a_mistyped_keyword_or_an_additive_mask_is_refused_not_ignored(source, tok):
    """`attention_masks=` (a typo) would otherwise run the model unmasked, and a 2-D additive mask (0 / -10000)
    would be read backwards; transformers' own keywords (`num_items_in_batch`) are accepted."""
    model = from_source(source, tok).eval()
    batch = padded_batch(tok, TEXTS[:2])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
        with pytest.raises(TypeError, match="XPTForMaskedLM.forward.. got unexpected keyword argument.s. attention_masks"):
            model(ids, attention_masks=mask)
        with pytest.raises(TypeError, match="XPTModel.forward.. got unexpected keyword argument.s. labels"):
            model.xpt(ids, labels=ids)
        with pytest.raises(ValueError, match=r"additive mask pass `attention_mask == 0`"):
            model(ids, attention_mask=(1.0 - mask.float()) * -10000.0)
        torch.testing.assert_close(model(ids, attention_mask=mask.float(), num_items_in_batch=4).logits, expected)


def test_set_attn_implementation_switches_a_loaded_model(source, tok):
    from transformers import AttentionInterface
    from modeling_xpt.modeling_xpt import sdpa_attention

    calls = []

    def counting(module, query, key, value, attention_mask, **kwargs):
        calls.append(query.shape)
        return sdpa_attention(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("xpt_test_counting", counting)
    model = from_source(source, tok).eval()
    ids, mask, _ = random_batch(model.config)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
        model.set_attn_implementation("xpt_test_counting")
        torch.testing.assert_close(model(ids, attention_mask=mask).logits, expected)
    assert model.config._attn_implementation == "xpt_test_counting" and len(calls) == model.config.num_total_layers


def test_a_float_block_mask_is_refused_and_return_dict_false_gives_tuples(source, tok):
    model = from_source(source, tok).eval()
    ids, mask, _ = random_batch(model.config)
    additive = torch.zeros(ids.shape[0], ids.shape[1], ids.shape[1])
    with pytest.raises(ValueError, match=r"attention_mask \(3-D torch.float32\) must be .*boolean when 3-D .*attention_mask == 0"):
        model(ids, attention_mask=additive)
    model.config.return_dict = False
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
    assert isinstance(out, tuple) and out[0].shape == (*ids.shape, model.config.vocab_size)


def test_inputs_embeds_give_the_logits_of_their_ids_and_peft_prompt_tuning_trains_on_them(source, tok, tmp_path):
    model = from_source(source, tok).eval()
    ids = tok(TEXTS[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(inputs_embeds=model.get_input_embeddings()(ids)).logits, model(ids).logits)
    for both_or_neither in ({"input_ids": ids, "inputs_embeds": model.get_input_embeddings()(ids)}, {}):
        with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
            model(**both_or_neither)
    # PEFT finds the word embeddings by their row count, so this needs E_T without padding rows
    model.save_pretrained(tmp_path)
    classifier = XPTForSequenceClassification.from_pretrained(tmp_path, num_labels=2, classifier_pooling="mean")
    classifier.resize_token_embeddings(len(tok), pad_to_multiple_of=1)
    from peft import PromptTuningConfig, TaskType, get_peft_model
    prompted = get_peft_model(classifier, PromptTuningConfig(task_type=TaskType.SEQ_CLS, num_virtual_tokens=4))
    frozen = classifier.xpt.encoder.layer[0].output.dense.weight.clone()
    prompt = prompted.prompt_encoder["default"].embedding.weight
    prompt_before = prompt.detach().clone()
    optimizer = torch.optim.AdamW([p for p in prompted.parameters() if p.requires_grad], lr=0.01)
    batch, labels = padded_batch(tok, TEXTS[:2]), torch.tensor([0, 1])
    losses = []
    for _ in range(8):
        loss = prompted(**batch, labels=labels).loss
        loss.backward(), optimizer.step(), optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    torch.testing.assert_close(classifier.xpt.encoder.layer[0].output.dense.weight, frozen, atol=0, rtol=0)
    assert not torch.equal(prompt.detach(), prompt_before)  # the virtual tokens reached the encoder as inputs_embeds


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
    model = from_source(source, tok).eval()
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
    model = from_source(tiny_source("bert", word_tokenizer("bert", ["the", "a", "of"])), tok)
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
    model = from_source(source, tokenizer).eval()
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


# ---------------------------------------------------------------- the remote-code files

REMOTE_CODE = ("configuration_xpt.py", "modeling_xpt.py")


def test_saved_folders_carry_only_the_two_model_files(source, tok, tmp_path):
    from_source(source, tok).save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.py")) == sorted(REMOTE_CODE)


def test_remote_code_imports_only_torch_and_public_transformers_names():
    """What a Hub user reads before trusting `trust_remote_code`: the two files import the standard library's
    `math` and `typing`, torch, public transformers names, huggingface_hub's `strict` (as transformers' own
    configs do) and each other, nothing of this package; the only private
    transformers names they touch are the two every stock model touches (the attention implementation
    transformers chose, and the weight-init hook)."""
    import ast

    private = set()
    for name in REMOTE_CODE:
        tree = ast.parse((REPO_ROOT / "modeling_xpt" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {a.name.split(".")[0] for a in node.names} <= {"math", "torch"}, (name, ast.unparse(node))
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: the sibling remote-code file only
                    assert node.module == "configuration_xpt", (name, ast.unparse(node))
                    continue
                parts = node.module.split(".")
                assert parts[0] in {"__future__", "typing", "torch", "transformers"} or (
                    node.module == "huggingface_hub.dataclasses" and [a.name for a in node.names] == ["strict"]), (
                    name, ast.unparse(node))
                assert not any(p.startswith("_") for p in parts[1:]), (name, ast.unparse(node))
                assert not any(a.name.startswith("_") for a in node.names), (name, ast.unparse(node))
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                private.add(node.attr)
    assert private == {"_attn_implementation", "_init_weights"}
