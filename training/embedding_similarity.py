"""Sentence similarity without fine-tuning: what an encoder's sentence vectors already carry.

For a sentence-pair regression task (KorSTS), every pair is scored by the cosine of its two
mean-pooled sentence vectors and the scores are ranked against the gold similarities:

    u(s) = sum_t m_t h_t(s) / sum_t m_t            (h_t: last hidden state, m_t: 1 on real tokens)
    score = 100 x Spearman( cos(u(s1), u(s2)), gold )

Mean pooling is how the MiniLM source (sentence-transformers/all-MiniLM-L6-v2) was trained, and the
protocol is MTEB's STS evaluation. Nothing is trained, so there are no seeds and no seed spread: the
figure says what post-training alone left in the encoder, before fine-tuning adds its own noise.

The reference an encoder has to beat is the same score with u(s) replaced by the sentence's token
counts under the same tokenizer (`token_overlap_similarity`): shared word pieces alone, no model.

    from training.embedding_similarity import zero_shot_similarity
    zero_shot_similarity("runs/study/models/xpt-4500", get_task("korsts"), rows, max_length=48)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from training.metrics_downstream import spearman
from training.tasks import TaskSpec


def applies_to(spec: TaskSpec) -> bool:
    """Pair regression tasks only: the gold label is a similarity of the two texts."""
    return spec.task_type == "regression" and len(spec.text_columns) == 2


@torch.inference_mode()
def mean_pooled(model, tokenizer, texts: list[str], max_length: int, batch_size: int = 64) -> torch.Tensor:
    """u(s) above for every text, in fp32, shape (len(texts), hidden)."""
    vectors = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        vectors.append((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0))
    return torch.cat(vectors).float()


def zero_shot_similarity(model_dir: str | Path, spec: TaskSpec, rows: list[dict[str, Any]], max_length: int,
                         trust_remote_code: bool = True) -> dict[str, Any]:
    """Spearman x 100 of the pairs' cosine similarities against their gold scores (see the module docstring)."""
    from transformers import AutoModel, AutoTokenizer

    if not applies_to(spec):
        raise ValueError(f"task {spec.name!r} is not a sentence-pair regression task")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    model = AutoModel.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code).eval()
    first, second = spec.text_columns
    u = mean_pooled(model, tokenizer, [str(r[first]) for r in rows], max_length)
    v = mean_pooled(model, tokenizer, [str(r[second]) for r in rows], max_length)
    return _score(u, v, spec, rows) | {"max_length": max_length, "pooling": "mean"}


def token_overlap_similarity(tokenizer, spec: TaskSpec, rows: list[dict[str, Any]], max_length: int) -> dict[str, Any]:
    """The no-model reference: u(s) is the count vector of the tokens of s (the same truncation)."""
    if not applies_to(spec):
        raise ValueError(f"task {spec.name!r} is not a sentence-pair regression task")
    first, second = spec.text_columns

    def counts(texts: list[str]) -> torch.Tensor:
        ids = tokenizer(texts, truncation=True, max_length=max_length - tokenizer.num_special_tokens_to_add(),
                        add_special_tokens=False)["input_ids"]
        bags = torch.zeros(len(texts), len(tokenizer))
        for row, sentence in enumerate(ids):
            bags[row].index_add_(0, torch.tensor(sentence, dtype=torch.long), torch.ones(len(sentence)))
        return bags

    return _score(counts([str(r[first]) for r in rows]), counts([str(r[second]) for r in rows]), spec, rows) | {
        "max_length": max_length, "pooling": "token counts"}


def _score(u: torch.Tensor, v: torch.Tensor, spec: TaskSpec, rows: list[dict[str, Any]]) -> dict[str, Any]:
    similarities = torch.nn.functional.cosine_similarity(u, v).tolist()
    return {"spearman": spearman(similarities, [float(r[spec.label_column]) for r in rows]), "pairs": len(rows),
            "similarity": "cosine"}
