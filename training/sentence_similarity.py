"""Sentence-pair regression (STS) fine-tuned as a bi-encoder: the cosine of two sentence vectors.

A cross-encoder reads both sentences in one sequence and regresses the score from a new, random
head: at a few thousand pairs it starts from nothing and, on this package's small encoders, ended
below the same encoder's cosine without any training. The bi-encoder starts *at* that cosine and
trains it directly (Reimers and Gurevych 2019, Sentence-BERT; sentence-transformers'
`CosineSimilarityLoss`):

    u = mean-pool(encoder(s1)),  v = mean-pool(encoder(s2))       (over the real tokens)
    prediction = low + (high - low) * cos(u, v)
    loss = MSE(cos(u, v), (score - low) / (high - low))

so before the first step its dev Spearman is the zero-shot cosine's. Fine-tuning's default,
`loss="cosent"` (CoSENT, Su 2022; sentence-transformers' `CoSENTLoss`), trains only the order of the
cosines within a batch, which is what Spearman scores, instead of their values:

    loss = log(1 + sum over pairs of pairs (i, j) with score_i < score_j of exp(20 (cos_i - cos_j)))

On KorSTS's 5,749 training pairs it scored higher than MSE on dev with every seed of two encoders
(by 1.0-1.8 points), and on test by 0.1-1.8 (docs/BENCHMARKS.md).

Written here because sentence-transformers is not a dependency of this package and the module is a
few dozen lines; the encoder is any `AutoModel` (XPT or stock), and `save_pretrained` saves that
encoder, which `AutoModel.from_pretrained` loads as a sentence encoder (mean pooling), in the folder
layout of sentence-transformers (`SENTENCE_TRANSFORMERS_FILES`), so that
`SentenceTransformer(folder, trust_remote_code=True)` gives the same sentence vectors.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers.modeling_outputs import SequenceClassifierOutput

from training.linear_reads import ROUND_COSINE

SECOND = ("input_ids_b", "attention_mask_b")  # the second sentence's inputs in a batch


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


LOSSES = ("mse", "cosent")
COSENT_SCALE = 20.0  # CoSENT's and sentence-transformers' scale


def cosent_loss(cosine: torch.Tensor, labels: torch.Tensor, scale: float = COSENT_SCALE) -> torch.Tensor:
    """CoSENT over a batch (the formula above): every pair of pairs whose gold scores are ordered
    adds a term that grows as their cosines take the opposite order; log(1 + ...) as a logsumexp
    with a zero term. Ties and a batch with one score contribute nothing (loss log 1 = 0)."""
    gap = scale * (cosine[:, None] - cosine[None, :])  # gap[i, j] = scale * (cos_i - cos_j)
    ordered = labels[:, None] < labels[None, :]
    terms = gap.masked_select(ordered)
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


class CosineSimilarityRegressor(torch.nn.Module):
    """The bi-encoder above around `encoder`; `label_range` is the task's (low, high) score range;
    `loss` "cosent" (the order of the scores) or "mse" (the score's place in the range)."""

    def __init__(self, encoder: torch.nn.Module, label_range: tuple[float, float], loss: str = "cosent",
                 max_seq_length: int = 512):
        super().__init__()
        self.max_seq_length = max_seq_length  # the longest input it was trained on, saved for sentence-transformers
        if loss not in LOSSES:
            raise ValueError(f"loss {loss!r} is not one of {LOSSES}")
        self.encoder = encoder
        self.config = encoder.config
        self.low, self.high = float(label_range[0]), float(label_range[1])
        self.loss = loss

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return mean_pool(hidden, attention_mask)

    def forward(self, input_ids, attention_mask, input_ids_b, attention_mask_b, labels=None) -> SequenceClassifierOutput:
        cosine = torch.nn.functional.cosine_similarity(self.embed(input_ids, attention_mask).float(),
                                                       self.embed(input_ids_b, attention_mask_b).float())
        loss = None
        if labels is not None and self.loss == "cosent":
            loss = cosent_loss(cosine, labels.float())
        elif labels is not None:
            target = (labels.float() - self.low) / (self.high - self.low)
            loss = torch.nn.functional.mse_loss(cosine, target)
        # the prediction rounded as training/linear_reads.py rounds cosines: identical sentences tie exactly
        rounded = torch.round(cosine.detach(), decimals=ROUND_COSINE)
        return SequenceClassifierOutput(loss=loss, logits=(self.low + (self.high - self.low) * rounded).unsqueeze(-1))

    def save_pretrained(self, folder: str, state_dict: dict[str, torch.Tensor] | None = None, **kwargs) -> None:
        """The encoder's folder; a `state_dict` given (this module's, as `modeling_xpt.save_model_folder` passes
        one to trim XPT's padding rows) is the encoder's under the prefix ``encoder.``, saved without it."""
        if state_dict is not None:
            state_dict = {name.removeprefix("encoder."): weight for name, weight in state_dict.items()}
        self.encoder.save_pretrained(folder, state_dict=state_dict, **kwargs)
        write_sentence_transformers_layout(folder, self.config.hidden_size, self.max_seq_length)


# The files of a sentence-transformers folder beside the encoder's own: the encoder at the folder's root, then mean
# pooling; the names sentence-transformers 2.x to 6.x read (6.x moved the classes and still loads these names).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json",
                               "config_sentence_transformers.json")


def write_sentence_transformers_layout(folder: str | Path, hidden_size: int, max_seq_length: int) -> None:
    """`SENTENCE_TRANSFORMERS_FILES` in `folder`: the sentence vector is the mean of the last hidden states over the
    real tokens (`mean_pool`), compared by cosine."""
    folder = Path(folder)
    contents = {
        "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}],
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        "1_Pooling/config.json": {"word_embedding_dimension": hidden_size, "pooling_mode_cls_token": False,
                                  "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                                  "pooling_mode_mean_sqrt_len_tokens": False},
        "config_sentence_transformers.json": {"similarity_fn_name": "cosine"},
    }
    for name in SENTENCE_TRANSFORMERS_FILES:
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(json.dumps(contents[name], indent=2) + "\n", encoding="utf-8")


def encode_pairs(text_columns: list[str], label_column: str, rows: list[dict[str, Any]], tokenizer,
                 max_length: int) -> list[dict[str, Any]]:
    """Each sentence tokenised on its own: input_ids / attention_mask of the first, *_b of the second."""
    first = tokenizer([str(r[text_columns[0]]) for r in rows], truncation=True, max_length=max_length)
    second = tokenizer([str(r[text_columns[1]]) for r in rows], truncation=True, max_length=max_length)
    return [{"input_ids": first["input_ids"][i], "attention_mask": first["attention_mask"][i],
             "input_ids_b": second["input_ids"][i], "attention_mask_b": second["attention_mask"][i],
             "labels": float(row[label_column])} for i, row in enumerate(rows)]


def pad_second(features: list[dict[str, Any]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """The second sentences of a batch, right-padded to their longest."""
    length = max(len(f["input_ids_b"]) for f in features)
    return {"input_ids_b": torch.tensor([f["input_ids_b"] + [pad_token_id] * (length - len(f["input_ids_b"]))
                                         for f in features], dtype=torch.long),
            "attention_mask_b": torch.tensor([f["attention_mask_b"] + [0] * (length - len(f["attention_mask_b"]))
                                              for f in features], dtype=torch.long)}
