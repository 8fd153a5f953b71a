"""Intrinsic masked-LM metrics of the XPT paper (Table 2): loss, perplexity, Hits@1/3/5/10, MRR, mean rank.

All are computed over masked tokens from the sparse logits `(num_masked, vocab)` that
`XPTForMaskedLM` returns with labels. The gold token's rank is its expected rank when tied logits are
ordered at random: with `a` entries scoring above it and `t` scoring the same (itself included) it is
any of a+1..a+t with equal chance, so hits@k counts `clamp((k - a) / t, 0, 1)` and the reciprocal
rank is the mean of 1/r over those places. Counting ties in the gold token's favour would give a
model with constant logits perfect hits@1, and flatter the frequency baseline (every token unseen in
training scores the same) and low-precision logits. Batches are reduced
to sums (`MetricSums`), which add up across batches and processes; `MetricSums.compute()` turns
them into the final numbers, so the result does not depend on how tokens were split into batches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from training.masked_lm import MaskedLMTraining
from training.mlm_batches import eval_batches

HITS_AT = (1, 3, 5, 10)
METRIC_NAMES = ("loss", "perplexity") + tuple(f"hits@{k}" for k in HITS_AT) + ("mrr", "mean_rank")


def gold_ranks(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row: how many logits are larger than the gold token's (`a`), and how many equal it,
    the gold token itself included (`t` >= 1). Its rank is a+1..a+t, each with chance 1/t. A NaN (a
    diverged model's) is a miss, never a hit: a NaN logit counts as larger than the gold one, and a NaN
    gold logit ranks last (NaN compares as neither larger nor equal, so `t` would be 0 and (k - a) / t
    would count a hit at every k)."""
    logits = logits.float()
    gold = logits.gather(1, labels.view(-1, 1))
    above, tied = ((logits > gold) | logits.isnan()).sum(dim=1), (logits == gold).sum(dim=1)
    lost = gold.squeeze(1).isnan()
    return above.masked_fill(lost, logits.shape[1] - 1), tied.masked_fill(lost, 1)


@dataclass
class MetricSums:
    """Additive statistics over masked tokens."""

    count: float = 0.0
    loss_sum: float = 0.0
    reciprocal_rank_sum: float = 0.0
    rank_sum: float = 0.0
    hits: dict = field(default_factory=lambda: {k: 0.0 for k in HITS_AT})

    def add_batch(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """`logits` (n, vocab) and `labels` (n,) of the masked tokens (the sparse MLM output)."""
        if labels.numel() == 0:
            return
        above, tied = (n.double() for n in gold_ranks(logits, labels))
        self.count += labels.numel()
        self.loss_sum += F.cross_entropy(logits.float(), labels, reduction="sum").item()
        # mean of 1/r for r in a+1..a+t: (H(a+t) - H(a)) / t, with H(n) = digamma(n + 1) + Euler's constant
        self.reciprocal_rank_sum += ((torch.digamma(above + tied + 1) - torch.digamma(above + 1)) / tied).sum().item()
        self.rank_sum += (above + (tied + 1) / 2).sum().item()
        for k in HITS_AT:
            self.hits[k] += ((k - above) / tied).clamp(0, 1).sum().item()

    def as_tensor(self) -> torch.Tensor:
        return torch.tensor([self.count, self.loss_sum, self.reciprocal_rank_sum, self.rank_sum,
                             *(self.hits[k] for k in HITS_AT)], dtype=torch.float64)

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> "MetricSums":
        values = t.double().tolist()
        return cls(values[0], values[1], values[2], values[3], dict(zip(HITS_AT, values[4:])))

    def compute(self) -> dict[str, float]:
        if not self.count:
            return {name: float("nan") for name in METRIC_NAMES}
        loss = self.loss_sum / self.count
        out = {"loss": loss, "perplexity": math.exp(min(loss, 700.0))}
        out.update({f"hits@{k}": self.hits[k] / self.count for k in HITS_AT})
        out["mrr"] = self.reciprocal_rank_sum / self.count
        out["mean_rank"] = self.rank_sum / self.count
        out["num_tokens"] = int(self.count)
        return out


def masked_lm_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Metrics of one toy batch. `labels` may be (n,) aligned with sparse `logits` (n, vocab), or the
    full (B, T) labels with -100 at unmasked positions (then `logits` are the sparse ones in row-major
    order of `labels != -100`, or dense (B, T, vocab))."""
    if labels.dim() > 1:
        masked = labels.ne(-100)
        if logits.dim() == 3:
            logits = logits[masked]
        labels = labels[masked]
    sums = MetricSums()
    sums.add_batch(logits, labels)
    return sums.compute()


def unigram_log_probs(train_rows, special_ids, vocab_size: int, size: int) -> torch.Tensor:
    """log p(v): the add-one-smoothed frequency of token v in the training rows, as a float64 tensor of
    `size` entries (>= vocab_size: padded embedding rows); special tokens, never MLM labels, and the
    padding rows get the smallest value."""
    counts = np.zeros(max(size, vocab_size), dtype=np.int64)
    for batch in train_rows.iter(batch_size=8192):
        counts += np.bincount(np.concatenate([np.asarray(ids) for ids in batch["input_ids"]]), minlength=counts.size)
    counts[list(special_ids)] = 0
    log_p = np.log((counts[:vocab_size] + 1) / (counts[:vocab_size].sum() + vocab_size))
    values = np.full(counts.size, log_p.min())
    values[:vocab_size] = log_p
    values[list(special_ids)] = log_p.min()
    return torch.from_numpy(values[:size])


def init_output_bias(model, train_rows, special_ids) -> None:
    """b of Eq. 5 := log p(v) (`unigram_log_probs`). Softmax(b) is then the unigram distribution at
    step 0. With b = 0 a small-budget run reaches that distribution through E_T g(h) instead, by
    pushing every hidden state towards one direction, and fine-tuning starts from a collapsed
    encoder. Written here because no library offers a prior-initialised output bias."""
    bias = model.lm_head.bias
    with torch.no_grad():
        bias.copy_(unigram_log_probs(train_rows, special_ids, model.config.vocab_size, bias.numel()).to(bias.dtype))


def evaluate(model, rows, *, accelerator, batch_size: int, collate_kwargs: dict) -> dict:
    """Intrinsic metrics on `rows` with fixed masks; every process takes a share, sums are reduced."""
    was_training = model.training
    model.eval()
    scorer = MaskedLMTraining(model)  # the LM head at the masked positions only
    sums = MetricSums()
    with torch.no_grad(), accelerator.autocast():
        for batch in eval_batches(rows, batch_size=batch_size, rank=accelerator.process_index,
                                  world=accelerator.num_processes, collate_kwargs=collate_kwargs):
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            out = scorer(**batch)
            sums.add_batch(out.logits, batch["labels"][batch["labels"].ne(-100)])
    total = accelerator.reduce(sums.as_tensor().to(accelerator.device), reduction="sum")
    model.train(was_training)
    return MetricSums.from_tensor(total.cpu()).compute()


def frequency_baseline(rows, log_p, *, accelerator, batch_size: int, collate_kwargs: dict) -> dict:
    """The metrics of `evaluate` for a predictor that ignores the context: every masked token scored by
    its training-split log frequency `log_p` (`unigram_log_probs`), on the same fixed masks. A model that
    has learnt nothing beyond token frequencies scores this; a run's metrics are read against it."""
    sums = MetricSums()
    scores = log_p.float()
    for batch in eval_batches(rows, batch_size=batch_size, rank=accelerator.process_index,
                              world=accelerator.num_processes, collate_kwargs=collate_kwargs):
        labels = batch["labels"][batch["labels"].ne(-100)]
        sums.add_batch(scores.expand(labels.numel(), -1), labels)
    total = accelerator.reduce(sums.as_tensor().to(accelerator.device), reduction="sum")
    return MetricSums.from_tensor(total.cpu()).compute()
