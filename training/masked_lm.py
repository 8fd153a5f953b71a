"""What post-training runs forward, and the speed paths it puts on the model for that.

The saved model (`modeling_xpt.py`, the Hub remote code) has plain `nn.Dropout` and SDPA / eager
attention. Post-training changes three things, none of which changes the function computed:

- `MaskedLMTraining`: the MLM loss with the LM head run only at the masked positions (optionally on a
  static number of rows for compiled graphs), plus the optional word-order-prediction head. It holds
  the model's own `xpt` and `lm_head` modules under the model's names, so checkpoints keep the
  model's parameter names.
- `ThresholdDropout`: cheaper dropout masks on CPU, swapped in for the model's `nn.Dropout` modules.
- `threshold_eager_attention`: the eager attention with those masks on the attention probabilities,
  registered with transformers' `AttentionInterface` and selected through the model config.

`use_speed_paths(model, attention, dropout_mask)` applies the last two; `resolve_speed`
(`training/step.py`) decides per machine. `set_dropout` overrides the dropout rates for one run.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.modeling_outputs import MaskedLMOutput

THRESHOLD_EAGER = "xpt_threshold_eager"  # the AttentionInterface name of `threshold_eager_attention`


class ThresholdDropout(nn.Dropout):
    """`nn.Dropout` with a cheaper mask on CPU: each 64-bit random draw gives four 16-bit numbers, and an
    element is kept when its number is at or above round(p * 2^16) (kept with probability
    q = 1 - round(p * 2^16) / 2^16, 0.899994 for p = 0.1, and scaled by 1 / q, so E[output] = input).

    Hand-written because torch's CPU dropout samples one Bernoulli variable per element (`bernoulli_`),
    which took a fifth of the post-training step on a 2-core CPU; this mask costs about half of that,
    forward and backward (benchmarks/dropout_cost.py). Off CPU, in eval mode, under `torch.compile`
    (Dynamo cannot trace `random_`; inductor draws its own masks), `inplace` or p outside (0, 1), it is
    `nn.Dropout`. The numbers come from torch's default generator, so `torch.manual_seed` repeats them.
    """

    def uses_threshold_mask(self, hidden_states: torch.Tensor) -> bool:
        return (self.training and hidden_states.device.type == "cpu" and 0 < self.p < 1 and not self.inplace
                and not torch.compiler.is_compiling())

    def keep_mask(self, like: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(mask of `like`'s shape, dtype and device: 1 where an element is kept, 0 where dropped; 1 / q).

        The comparison writes the mask in `like`'s dtype directly: multiplied by a boolean mask, torch's
        CPU kernels first copy it to the other operand's dtype, forward and backward, which made that
        product about ten times as slow on attention probabilities. The price: the mask kept for the
        backward pass takes the dtype's bytes per element instead of one."""
        numbers, threshold = self.draw(like)
        keep = torch.empty(like.shape, dtype=like.dtype, device=like.device)
        torch.ge(numbers, threshold - 32768, out=keep)
        return keep, 65536 / (65536 - threshold)

    def draw(self, like: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(uniform signed 16-bit numbers of `like`'s shape, four from each 64-bit draw; round(p * 2^16))."""
        count = like.numel()
        draws = torch.empty((count + 3) // 4, dtype=torch.int64, device=like.device).random_(-(2**63), None)
        return draws.view(torch.int16)[:count].view(like.shape), round(self.p * 65536)

    def forward(self, hidden_states):
        if not self.uses_threshold_mask(hidden_states):
            return super().forward(hidden_states)
        keep, scale = self.keep_mask(hidden_states)
        return hidden_states * keep * scale


def threshold_eager_attention(module, query, key, value, attention_mask, dropout: float = 0.0, **kwargs):
    """`modeling_xpt.eager_attention` (fp32 scores, softmax and P V, autocast off) with the module's
    `ThresholdDropout` mask on the probabilities; the 1 / q goes on P V, a quarter of P's size, and the
    boolean mask is added in place as a bias. Trained 1.2x faster than SDPA on CPU, with dropout and
    without. Returns (output (batch, length, heads, d_head), probabilities before dropout)."""
    with torch.autocast(query.device.type, enabled=False):
        scores = torch.matmul(query.float() * query.shape[-1] ** -0.5, key.float().transpose(-1, -2))
        if attention_mask is not None:
            scores += torch.zeros(attention_mask.shape, device=scores.device).masked_fill_(
                ~attention_mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        masks = module.dropout
        if dropout > 0 and isinstance(masks, ThresholdDropout) and masks.uses_threshold_mask(probs):
            keep, scale = masks.keep_mask(probs)
            output = torch.matmul(probs * keep, value.float()) * scale
        else:
            output = torch.matmul(F.dropout(probs, p=dropout, training=dropout > 0), value.float())
    return output.to(query.dtype).transpose(1, 2), probs


AttentionInterface.register(THRESHOLD_EAGER, threshold_eager_attention)


def use_speed_paths(model: nn.Module, attention: str, dropout_mask: str) -> None:
    """Train `model` with `attention` ("sdpa" or "eager") and `dropout_mask` ("threshold" or "torch").

    "threshold" replaces every `nn.Dropout` module by a `ThresholdDropout` of the same p, and eager
    attention then draws its masks the same way (`threshold_eager_attention`); "torch" puts plain
    `nn.Dropout` back. The attention is set as `config._attn_implementation`, which XPT's attention
    (and transformers' own models) read at every forward; it is not written to config.json, so a saved
    model loads with the default (sdpa) again."""
    wanted = ThresholdDropout if dropout_mask == "threshold" else nn.Dropout
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) in (nn.Dropout, ThresholdDropout) and type(child) is not wanted:
                setattr(parent, name, wanted(child.p, child.inplace))
    if attention == "eager" and dropout_mask == "threshold":
        attention = THRESHOLD_EAGER
    model.config._attn_implementation = attention


def set_dropout(model: nn.Module, hidden: float | None, attention: float | None) -> None:
    """Set the attention-probability dropouts (the `dropout` of XPT's self-attention modules) to
    `attention` and every other dropout of `model` to `hidden`; None leaves that kind as it is. For
    this run only: `model.config` keeps the source's values, which the saved config.json carries to
    fine-tuning."""
    attention_dropouts = {id(m.dropout) for m in model.modules() if type(m).__name__ == "XPTSelfAttention"}
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            value = attention if id(module) in attention_dropouts else hidden
            if value is not None:
                module.p = value


@dataclass
class TrainingOutput(MaskedLMOutput):
    """The MLM loss and logits (at the masked positions only), plus the summed word-order-prediction
    loss. A field of its own, so that it survives Accelerate's conversion of outputs to fp32."""

    wop_loss_sum: torch.Tensor | None = None


class MaskedLMTraining(nn.Module):
    """Eq. 5's MLM loss for post-training, the LM head only where a loss is taken: at 15% masking the
    vocabulary projection, the largest matmul of the model, and its activations shrink by ~85%.

    `model`: an `XPTForMaskedLM`, whose `xpt` and `lm_head` modules this module holds under the same
    names. `wop_positions > 0` adds KoreALBERT's word-order prediction head: from the last hidden state
    of every shuffled token, predict its original in-sentence position (`wop_labels`); the head is
    checkpointed with the run but not part of the saved model.
    """

    def __init__(self, model: nn.Module, wop_positions: int = 0):
        super().__init__()
        self.config = model.config
        self.xpt = model.xpt
        self.lm_head = model.lm_head
        self.wop_head = nn.Linear(model.config.hidden_size, wop_positions) if wop_positions else None

    def forward(self, input_ids, labels, attention_mask=None, token_type_ids=None, position_ids=None,
                masked_capacity: int | None = None, wop_labels=None) -> TrainingOutput:
        """`loss`: mean cross-entropy over the masked positions (`labels != -100`); `logits`: the LM
        head's rows for them, in row-major order. `masked_capacity`: run the head on exactly this many
        rows (at least the masked count): the masked positions first, then filler rows the loss
        ignores; a static shape, so no data-dependent sizes for torch.compile and no host sync."""
        hidden = self.xpt(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids).last_hidden_state
        masked = labels.ne(-100)
        if masked_capacity is None:
            logits, targets = self.lm_head(hidden[masked]), labels[masked]
        else:  # a stable sort puts the masked positions first, in row-major order
            flat = masked.reshape(-1)
            rows = torch.argsort((~flat).to(torch.uint8), stable=True)[: min(masked_capacity, flat.numel())]
            logits = self.lm_head(hidden.reshape(-1, hidden.shape[-1])[rows])
            targets = labels.reshape(-1)[rows]
        # the sum over masked tokens / their count (at least 1): no data-dependent branch for
        # torch.compile, and 0 with a graph when nothing is masked
        loss = F.cross_entropy(logits.float(), targets, reduction="sum", ignore_index=-100) / masked.sum().clamp(min=1)
        wop_loss_sum = None
        if self.wop_head is not None and wop_labels is not None:
            chosen = wop_labels.ne(-100)
            wop_logits = self.wop_head(hidden[chosen]).float()
            # an empty selection still runs the head, so DDP sees its (zero) gradient
            wop_loss_sum = (F.cross_entropy(wop_logits, wop_labels[chosen], reduction="sum")
                            if wop_logits.shape[0] else wop_logits.sum())
        return TrainingOutput(loss=loss, logits=logits, wop_loss_sum=wop_loss_sum)
