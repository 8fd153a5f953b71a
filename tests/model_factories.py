"""Tiny source checkpoints and tokenizers for tests: real BERT/RoBERTa classes, random weights.

Used by several test files; nothing here is a stub: the sources are stock transformers models
and the tokenizers are `tokenizers` word-level models wrapped as transformers fast tokenizers.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

SPECIALS = {
    "roberta": {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"},
    "bert": {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"},
}


def word_tokenizer(family: str, words: list[str]) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer with the special tokens and template of `family`."""
    specials = list(SPECIALS[family].values())
    vocab = {token: i for i, token in enumerate(specials + [w for w in dict.fromkeys(words) if w not in specials])}
    unk = SPECIALS[family]["unk_token"]
    backend = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if family == "roberta":
        backend.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])],
        )
        extra = {"cls_token": "<s>", "sep_token": "</s>"}
    else:
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        extra = {}
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=64, **SPECIALS[family], **extra)


def tiny_source(family: str, tokenizer, out_dir: Path | None = None, seed: int = 0, dropout: float = 0.0,
                hidden_act: str = "gelu"):
    """A random stock `{Bert,Roberta}ForMaskedLM` (hidden 32, 2 layers) sized to `tokenizer`."""
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                  hidden_act=hidden_act)
    if family == "roberta":
        config = RobertaConfig(max_position_embeddings=66, type_vocab_size=1, pad_token_id=tokenizer.pad_token_id,
                               bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5, **common)
        model = RobertaForMaskedLM(config)
    else:
        config = BertConfig(max_position_embeddings=64, type_vocab_size=2, pad_token_id=tokenizer.pad_token_id, **common)
        model = BertForMaskedLM(config)
    with torch.no_grad():  # LayerNorms and biases start at 1/0; perturb them so copies are really checked
        for name, param in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    model.eval()
    if out_dir is not None:
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return model


KOREAN_WORDS = "나는 학교에 간다 오늘 날씨가 좋다 서울은 한국의 수도 이다 책을 읽었다 영화가 재미있다 우리 내일 만나자 문장 입니다 .".split()

# ---------------------------------------------------------------- shared by the model and conversion tests
# (pytest fixtures: a test module imports the ones it uses)

FAMILIES = ["bert", "roberta"]
TEXTS = ["나는 학교에 간다 .", "오늘 날씨가 좋다", "서울은 한국의 수도 이다 . 책을 읽었다"]


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
