"""What post-training runs forward (`training.masked_lm`): the MLM loss at the masked positions only,
the static-capacity head, the threshold dropout masks and the eager attention that draws them, put on
a plain model at training time. None of it changes the function the model computes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from modeling_xpt import XPTConfig, XPTForMaskedLM, from_source, to_stock
from modeling_xpt.modeling_xpt import XPTSelfAttention, expand_attention_mask
from tests.model_factories import family, source, tok  # noqa: F401 (pytest fixtures)
from tests.test_modeling import random_batch
from training.masked_lm import (
    THRESHOLD_EAGER,
    MaskedLMTraining,
    ThresholdDropout,
    set_dropout,
    use_speed_paths,
)


def test_training_forward_is_the_models_loss_with_the_head_at_the_masked_positions_only(source, tok):
    model = from_source(source, tok).eval()
    ids, mask, labels = random_batch(model.config)
    with torch.no_grad():
        standard = model(ids, attention_mask=mask, labels=labels)
        sparse = MaskedLMTraining(model)(ids, labels, attention_mask=mask)
    torch.testing.assert_close(sparse.loss, standard.loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(sparse.logits, standard.logits[labels != -100], atol=1e-5, rtol=0)


def test_training_module_holds_the_models_parameters_under_the_models_names(source, tok):
    """Checkpoints of the training module load into the model as they are (and the other way round)."""
    model = from_source(source, tok)
    training = MaskedLMTraining(model)
    assert training.state_dict().keys() == model.state_dict().keys()
    assert all(a is b for a, b in zip(training.parameters(), model.parameters()))
    assert "wop_head.weight" in MaskedLMTraining(model, wop_positions=16).state_dict()


def test_static_capacity_head_equals_exact_head(source, tok):
    """`masked_capacity` (static LM-head shape for compiled training): same loss and gradients; the
    first rows of `logits` are the exact head's, the filler rows are ignored by the loss."""
    model = from_source(source, tok).train()  # the tiny sources have no dropout
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.0
    training = MaskedLMTraining(model)
    ids, mask, labels = random_batch(model.config)
    n = int(labels.ne(-100).sum())
    exact = training(ids, labels, attention_mask=mask)
    exact.loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for capacity in (n, n + 5, 10 ** 6):
        out = training(ids, labels, attention_mask=mask, masked_capacity=capacity)
        assert out.logits.shape[0] == min(capacity, ids.numel())
        torch.testing.assert_close(out.loss, exact.loss, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(out.logits[:n], exact.logits, atol=1e-5, rtol=0)
        out.loss.backward()
        for k, p in model.named_parameters():
            if k in grads:
                torch.testing.assert_close(p.grad, grads[k], atol=1e-6, rtol=1e-5)
        model.zero_grad()


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_threshold_dropout_keeps_at_its_rate_scales_to_the_mean_and_repeats_under_a_seed(p, dtype):
    dropout = ThresholdDropout(p).train()
    x = torch.full((1000, 1000), 2.0, dtype=dtype, requires_grad=True)
    torch.manual_seed(0)
    out = dropout(x)
    keep = out != 0
    q = 1 - round(p * 65536) / 65536
    assert abs(keep.float().mean().item() - q) < 5 * (q * (1 - q) / keep.numel()) ** 0.5
    torch.testing.assert_close(out[keep], torch.full_like(out[keep], 2.0 / q))  # kept elements scaled by 1/q
    assert out.dtype == dtype and out.shape == x.shape
    mask, _ = dropout.keep_mask(x)  # in the input's dtype: no dtype copy before each product
    assert mask.dtype == dtype and set(mask.unique().tolist()) == {0.0, 1.0}
    out.float().sum().backward()
    torch.testing.assert_close(x.grad, out.detach() / 2.0)  # d out / d x = keep / q
    torch.manual_seed(0)
    torch.testing.assert_close(dropout(x), out)  # the same seed, the same mask
    assert not torch.equal(dropout(x) != 0, keep)  # the next draw differs
    torch.manual_seed(1)
    rows_kept = (dropout(x) != 0).float().mean(1)  # no pattern along the flattened order
    assert rows_kept.min() > q - 0.1 and rows_kept.max() < q + 0.1
    assert torch.equal(dropout.eval()(x), x)


def test_eager_attention_with_threshold_masks_is_dropout_of_the_softmax(source, tok):
    """With the speed paths on, training on CPU, the eager attention outputs
    dropout(softmax(Q K^T / sqrt(d) + mask)) V with the threshold mask drawn from the same seed,
    computed here the plain way; with torch's masks it is the same computation with torch's dropout;
    SDPA returns no probabilities, and without dropout it gives the eager path's output."""
    model = from_source(source, tok).train()
    attention = model.xpt.encoder.ordered_layers()[0].attention.self
    attention.dropout.p = 0.1
    use_speed_paths(model, "eager", "threshold")
    assert model.config._attn_implementation == THRESHOLD_EAGER and isinstance(attention.dropout, ThresholdDropout)
    config = model.config
    ids, mask, _ = random_batch(config)
    block = expand_attention_mask(mask)
    hidden = torch.randn(ids.shape[0], ids.shape[1], config.hidden_size)
    torch.manual_seed(3)
    out, probs = attention(hidden, block)
    heads, d = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    q, k, v = (proj(hidden).view(*ids.shape, heads, d).transpose(1, 2)
               for proj in (attention.query, attention.key, attention.value))
    scores = (q @ k.transpose(-1, -2) / d ** 0.5).masked_fill(~block, float("-inf"))
    expected_probs = scores.softmax(-1)
    torch.manual_seed(3)
    keep, scale = attention.dropout.keep_mask(expected_probs)
    expected = ((expected_probs * keep * scale) @ v).transpose(1, 2).reshape(*ids.shape, -1)
    torch.testing.assert_close(probs, expected_probs, atol=1e-6, rtol=1e-5)  # returned before dropout
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    use_speed_paths(model, "eager", "torch")  # the model's own eager attention and nn.Dropout again
    assert config._attn_implementation == "eager" and type(attention.dropout) is torch.nn.Dropout
    torch.manual_seed(3)
    reference = F.dropout(expected_probs, 0.1)
    torch.manual_seed(3)
    out, probs = attention(hidden, block)
    torch.testing.assert_close(out, (reference @ v).transpose(1, 2).reshape(*ids.shape, -1), atol=1e-5, rtol=1e-5)
    eager_without_dropout = attention.eval()(hidden, block)[0]
    use_speed_paths(model, "sdpa", "threshold")
    sdpa, sdpa_probs = attention(hidden, block)
    assert sdpa_probs is None
    torch.testing.assert_close(sdpa, eager_without_dropout, atol=1e-5, rtol=1e-5)


def test_threshold_masks_give_the_gradients_of_torch_masks_in_expectation():
    """Over 300 dropout draws each, the whole model's mean gradient with threshold masks (eager
    attention) and with torch's masks (SDPA) agree within Monte-Carlo error, parameter by parameter,
    and so do their variances: the same estimator, drawn more cheaply."""
    torch.manual_seed(0)
    config = XPTConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=64, mask_token_id=3)
    model = XPTForMaskedLM(config).train()
    ids = torch.randint(4, 200, (4, 24))
    labels = ids.masked_fill(torch.arange(24) % 3 == 0, -100)
    segment = torch.tensor([0] * 7 + [1] * 9 + [2] * 8)
    block = (segment[:, None] == segment[None, :])[None].expand(4, 24, 24)

    def gradients(attention: str, masks: str, draws: int = 300) -> torch.Tensor:
        use_speed_paths(model, attention, masks)
        rows = []
        for _ in range(draws):
            model.zero_grad()
            model(input_ids=ids, attention_mask=block, labels=labels).loss.backward()
            rows.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        return torch.stack(rows)

    threshold, reference = gradients("eager", "threshold"), gradients("sdpa", "torch")
    z = (threshold.mean(0) - reference.mean(0)) / ((threshold.var(0) + reference.var(0)) / 300).sqrt().clamp_min(1e-12)
    assert 0.7 < z.abs().mean() < 0.9  # |N(0, 1)| has mean 0.80: no bias beyond sampling error
    assert (z.abs() > 4).float().mean() < 1e-3
    assert 0.95 < threshold.var(0).sum() / reference.var(0).sum() < 1.05


def test_dropout_overrides_and_speed_paths_reach_the_right_modules(source, tok):
    """set_dropout sets attention-probability and hidden dropouts apart; use_speed_paths swaps every
    dropout of the model (embeddings, attention, residual outputs) with its p, and back; a stock
    model gets the same swap and still computes its function."""
    model = from_source(source, tok)
    attention = [m.dropout for m in model.modules() if isinstance(m, XPTSelfAttention)]
    others = [m for m in model.modules() if isinstance(m, torch.nn.Dropout) and all(m is not a for a in attention)]
    assert len(attention) == model.config.num_total_layers and len(others) == 1 + 2 * len(attention)
    set_dropout(model, 0.0, 0.3)
    assert {m.p for m in attention} == {0.3} and {m.p for m in others} == {0.0}
    set_dropout(model, None, 0.2)
    assert {m.p for m in attention} == {0.2} and {m.p for m in others} == {0.0}
    use_speed_paths(model, "eager", "threshold")
    swapped = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(swapped) == len(attention) + len(others) and all(type(m) is ThresholdDropout for m in swapped)
    assert sorted(m.p for m in swapped) == sorted([0.2] * len(attention) + [0.0] * len(others))
    use_speed_paths(model, "sdpa", "torch")
    assert all(type(m) is torch.nn.Dropout for m in model.modules() if isinstance(m, torch.nn.Dropout))
    stock = to_stock(model).eval()
    ids, mask, _ = random_batch(model.config)
    with torch.no_grad():
        before = stock(ids, attention_mask=mask).logits
        use_speed_paths(stock, "sdpa", "threshold")
        assert all(type(m) is ThresholdDropout for m in stock.modules() if isinstance(m, torch.nn.Dropout))
        torch.testing.assert_close(stock(ids, attention_mask=mask).logits, before)
