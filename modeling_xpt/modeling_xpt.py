"""PyTorch XPT: cross-lingual post-training of BERT/RoBERTa encoders (Lee et al. 2021).

An XPT model is an English encoder whose word embeddings are replaced by target-language
embeddings E_T, with one Implicit Translation Layer (ITL) on each side of the reused layers:

    h^0     = LayerNorm(E_T[x] + P[pos] + S[type])           embeddings (E_T new, P/S/LN reused)
    h^1     = ITL_in(h^0)                                     new layer, encoder-layer architecture
    h^{l+1} = Layer_l(h^l),  l = 1..C                         reused source layers
    h^{C+2} = ITL_out(h^{C+1})                                new layer
    p(x_i)  = softmax(E_T g(h_i^{C+2}) + b)                   Eq. 5: MLM decoder tied to E_T

Hub remote code: this file and `configuration_xpt.py`; they import only torch and public transformers
API, with no side effects at import (conversion from an English checkpoint and training live in the
`xpt` package, not here). Layer parameter names are a BERT/RoBERTa layer's (`attention.self.query`,
..., `output.LayerNorm`), so weights map 1:1 onto stock checkpoints.
"""
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GradientCheckpointingLayer, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (BaseModelOutput, MaskedLMOutput, QuestionAnsweringModelOutput,
                                           SequenceClassifierOutput, TokenClassifierOutput)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import TransformersKwargs

from .configuration_xpt import XPTConfig

TRANSFORMERS_KEYWORDS = TransformersKwargs.__required_keys__ | TransformersKwargs.__optional_keys__


def refuse_unknown_keywords(kwargs: dict, forward: str) -> None:
    """A mistyped keyword (`attention_masks=`) raises, as for a plain Python function, instead of being ignored;
    the keywords transformers itself passes (`TransformersKwargs`: `num_items_in_batch`, ...) are accepted."""
    if unknown := sorted(set(kwargs) - TRANSFORMERS_KEYWORDS):
        raise TypeError(f"{forward}.forward() got unexpected keyword argument(s) {', '.join(unknown)}")


def position_ids_for(input_ids, words: torch.Tensor, pad_token_id: int | None, position_offset: int) -> torch.Tensor:
    """Position ids of the source family for `words`, the (batch, length, hidden) word embeddings.

    BERT (`position_offset == 0`): 0, 1, 2, ... RoBERTa: real tokens are numbered from `position_offset`
    and padding tokens get `position_offset - 1` (its padding index). Where padding cannot be read (no
    `input_ids`, only `inputs_embeds`), every token counts from `position_offset`, as in transformers' RoBERTa.
    """
    if input_ids is None or position_offset == 0 or pad_token_id is None:
        return torch.arange(words.shape[1], device=words.device).expand(words.shape[:2]) + position_offset
    real = input_ids.ne(pad_token_id).int()
    return (torch.cumsum(real, dim=1) * real + (position_offset - 1)).long()


class XPTEmbeddings(nn.Module):
    """h^0 = LayerNorm(E_T[x] + P[pos] + S[type]): new target embeddings, reused P, S and LayerNorm."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.config = config
        self.target_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        types = config.type_vocab_size
        self.token_type_embeddings = nn.Embedding(types, config.hidden_size) if types > 0 else None
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        """`inputs_embeds` (batch, length, hidden), when given instead of `input_ids`, replaces E_T[x]."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        words = self.target_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        if position_ids is None:
            position_ids = position_ids_for(input_ids, words, self.config.pad_token_id, self.config.position_offset)
        embeddings = words + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            token_type_ids = torch.zeros_like(position_ids) if token_type_ids is None else token_type_ids
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


def eager_attention(module, query, key, value, attention_mask, dropout: float = 0.0, **kwargs):
    """dropout(softmax(Q K^T / sqrt(d_head) + mask)) V as SDPA's math path computes it: scores, softmax and P V
    in fp32 (autocast off), cast back to the query's dtype. `query`, `key`, `value`: (batch, heads, length, d_head);
    `attention_mask`: boolean, True where attention is allowed. Returns (output (batch, length, heads, d_head),
    probabilities before dropout, which `output_attentions` reports), as `AttentionInterface` functions do."""
    with torch.autocast(query.device.type, enabled=False):
        scores = torch.matmul(query.float() * query.shape[-1] ** -0.5, key.float().transpose(-1, -2))
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        output = torch.matmul(F.dropout(probs, p=dropout, training=dropout > 0), value.float())
    return output.to(query.dtype).transpose(1, 2), probs.to(query.dtype)


def sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, **kwargs):
    """The same function through `F.scaled_dot_product_attention` (no probabilities returned)."""
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout)
    return output.transpose(1, 2), None


class XPTSelfAttention(nn.Module):
    """Multi-head self-attention: softmax(Q K^T / sqrt(d_head) + mask) V, with dropout on the probabilities.
    `config._attn_implementation` picks the function: "sdpa" (default), "eager" (`eager_attention`; also whenever
    `output_attentions=True`), or a name registered with transformers' `AttentionInterface`, called as
    `eager_attention` is (with `expand_attention_mask`'s boolean mask, not transformers' additive masks).
    `model.set_attn_implementation(name)` switches it on a loaded model."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.is_causal = False

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        batch, length, _ = hidden_states.shape
        q, k, v = (proj(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        implementation = "eager" if output_attentions else self.config._attn_implementation or "sdpa"
        attention = {"eager": eager_attention, "sdpa": sdpa_attention}.get(implementation)
        if attention is None:  # KeyError if not registered; transformers finds this call to allow set_attn_implementation
            attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention)
        context, probs = attention(self, q, k, v, attention_mask, dropout=self.dropout.p if self.training else 0.0)
        return context.reshape(batch, length, self.num_heads * self.head_dim), probs


class XPTAdapter(nn.Module):
    """Bottleneck adapter (Houlsby et al. 2019): h + W_up act(W_down h); W_up starts at zero (identity)."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.down = nn.Linear(config.hidden_size, config.adapter_size)
        self.act = ACT2FN[config.hidden_act]
        self.up = nn.Linear(config.adapter_size, config.hidden_size)
        self.up.zero_init = True  # read by XPTPreTrainedModel._init_weights

    def forward(self, hidden_states):
        return hidden_states + self.up(self.act(self.down(hidden_states)))


class XPTResidualOutput(nn.Module):
    """LayerNorm(dropout(W x + b) + residual), with an optional adapter before the residual sum: after
    attention (BERT's `attention.output`) and after the feed-forward block (`output`)."""

    def __init__(self, config: XPTConfig, in_features: int, with_adapter: bool):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.adapter = XPTAdapter(config) if with_adapter else None

    def forward(self, hidden_states, residual):
        hidden_states = self.dropout(self.dense(hidden_states))
        if self.adapter is not None:
            hidden_states = self.adapter(hidden_states)
        return self.LayerNorm(hidden_states + residual)


class XPTAttention(nn.Module):
    def __init__(self, config: XPTConfig, with_adapter: bool):
        super().__init__()
        self.self = XPTSelfAttention(config)
        self.output = XPTResidualOutput(config, config.hidden_size, with_adapter)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        context, probs = self.self(hidden_states, attention_mask, output_attentions)
        return self.output(context, hidden_states), probs


class XPTIntermediate(nn.Module):
    def __init__(self, config: XPTConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.act(self.dense(hidden_states))


class XPTLayer(GradientCheckpointingLayer):
    """One post-LN Transformer encoder layer, parameter-for-parameter a BERT/RoBERTa layer; ITL_in and
    ITL_out are instances of it too ("exactly the encoder-layer architecture"). With activation
    checkpointing on (`GradientCheckpointingLayer`), it recomputes its activations in the backward pass."""

    def __init__(self, config: XPTConfig, with_adapter: bool = False):
        super().__init__()
        self.attention = XPTAttention(config, with_adapter)
        self.intermediate = XPTIntermediate(config)
        self.output = XPTResidualOutput(config, config.intermediate_size, with_adapter)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        attended, probs = self.attention(hidden_states, attention_mask, output_attentions)
        return self.output(self.intermediate(attended), attended), probs


class XPTEncoder(nn.Module):
    """ITL_in, the C reused layers, ITL_out, applied in that order."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        adapters = config.adapter_size > 0
        self.itl_in = XPTLayer(config) if config.use_itl_in else None
        self.layer = nn.ModuleList([XPTLayer(config, with_adapter=adapters) for _ in range(config.num_hidden_layers)])
        self.itl_out = XPTLayer(config) if config.use_itl_out else None

    def ordered_layers(self) -> list[XPTLayer]:
        return [layer for layer in (self.itl_in, *self.layer, self.itl_out) if layer is not None]

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, output_hidden_states=False):
        all_hidden = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.ordered_layers():
            hidden_states, probs = layer(hidden_states, attention_mask=attention_mask, output_attentions=output_attentions)
            if output_hidden_states:
                all_hidden += (hidden_states,)
            if output_attentions:
                all_attentions += (probs,)
        return BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden, attentions=all_attentions)


def expand_attention_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Boolean (B, 1, T|1, T) mask, True where attention is allowed, from a (B, T) padding mask of 0/1 or a
    boolean (B, T, T) / (B, 1, T, T) block mask (packed sequences:
    each token attends within its own sequence); additive float masks are refused, not read backwards. In a block
    mask every token may attend to itself, so a row of padding never turns SDPA's softmax into NaN. An all-ones
    padding mask becomes None (outside `torch.compile`): SDPA then picks its fastest kernel."""
    if attention_mask is None:
        return None
    additive = attention_mask.is_floating_point() and bool(((attention_mask != 0) & (attention_mask != 1)).any())
    if additive or (attention_mask.dim() > 2 and attention_mask.dtype != torch.bool):
        raise ValueError(f"attention_mask ({attention_mask.dim()}-D {attention_mask.dtype}) must be 1 (attend) / 0 "
                         "(padding), or boolean when 3-D or 4-D; for an additive mask pass `attention_mask == 0`")
    mask = attention_mask.bool()
    if mask.dim() == 2:
        return None if not torch.compiler.is_compiling() and bool(mask.all()) else mask[:, None, None, :]
    if mask.dim() == 3:
        mask = mask[:, None]
    eye = torch.eye(mask.shape[-1], dtype=torch.bool, device=mask.device)
    return mask | eye


def per_call(value: bool | None, config_value) -> bool:
    """A forward argument (`output_attentions`, `return_dict`, ...), else the config's value."""
    return bool(value if value is not None else config_value)


class XPTPreTrainedModel(PreTrainedModel):
    config_class = XPTConfig
    base_model_prefix = "xpt"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["XPTEmbeddings", "XPTLayer"]
    # A post-trained folder holds the MLM head; the other heads load it without complaint (XPTForMaskedLM: None).
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]
    accepts_loss_kwargs = False  # losses are means over the call: transformers' Trainer scales them for accumulation

    @torch.no_grad()
    def _init_weights(self, module):
        """Normal(0, initializer_range) for linear/embedding weights, LayerNorm at identity (transformers'
        default), MLM output bias at zero and adapters at identity (up-projection zero)."""
        # transformers marks a tensor initialised once an init touched it: the adapter's Linear is zeroed on its own visit
        if isinstance(module, nn.Linear) and getattr(module, "zero_init", False):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)
            return
        super()._init_weights(module)
        if isinstance(module, XPTLMHead):
            nn.init.zeros_(module.bias)

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """E_T (and the tied decoder) for a tokenizer of `new_num_tokens` tokens (`len(tokenizer)`): the weights
        get that many rows rounded up to `pad_to_multiple_of` (default `config.pad_vocab_to_multiple_of`), new
        tokens start at the mean of the old tokens' rows with `mean_resizing` (else N(0, initializer_range)),
        `config.vocab_size` becomes `new_num_tokens`, and the MLM output bias b follows (its mean, or 0)."""
        if new_num_tokens is None:
            return self.get_input_embeddings()
        self.config.pad_vocab_to_multiple_of = pad_to_multiple_of or self.config.pad_vocab_to_multiple_of
        old_vocab, self.config.vocab_size = self.config.vocab_size, new_num_tokens
        # the parent only resizes (its mean_resizing samples rows, overwritten below, from a width^2 covariance)
        embeddings = super().resize_token_embeddings(self.config.padded_vocab_size, None, mean_resizing=False)
        self.config.vocab_size = self.vocab_size = new_num_tokens  # the parent sets them to the row count
        with torch.no_grad():  # every new token's row, also those that were padding rows (the parent skips them)
            added = embeddings.weight[min(old_vocab, new_num_tokens):new_num_tokens]
            std = self.config.initializer_range
            added.copy_(embeddings.weight[:old_vocab].mean(0) if mean_resizing else torch.randn_like(added) * std)
        if isinstance(getattr(self, "lm_head", None), XPTLMHead):
            bias = self.lm_head.bias.data[: min(old_vocab, new_num_tokens)]
            fill = float(bias.mean()) if mean_resizing else 0.0
            self.lm_head.bias = nn.Parameter(torch.cat([bias, bias.new_full((len(embeddings.weight) - len(bias),), fill)]),
                                             requires_grad=self.lm_head.bias.requires_grad)
        return embeddings


class XPTModel(XPTPreTrainedModel):
    """The bare XPT encoder: embeddings with E_T, ITL_in, reused layers, ITL_out. No pooler: sentence
    heads pool the first token (as RoBERTa does) or the mean of the states (`classifier_pooling`)."""

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.embeddings = XPTEmbeddings(config)
        self.encoder = XPTEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.target_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.target_embeddings = value

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.LongTensor | None = None, position_ids: torch.LongTensor | None = None,
                inputs_embeds: torch.FloatTensor | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                **kwargs) -> BaseModelOutput | tuple:
        r"""
        input_ids: `(batch, length)` token ids of the target tokenizer (or `inputs_embeds`, rows of E_T).
        attention_mask: `(batch, length)` 1 for real tokens, 0 for padding; or a `(batch, length, length)`
            boolean block mask for packed sequences (then pass `position_ids` restarting per sequence).
        """
        refuse_unknown_keywords(kwargs, "XPTModel")
        output_attentions = per_call(output_attentions, self.config.output_attentions)
        output_hidden_states = per_call(output_hidden_states, self.config.output_hidden_states)
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        outputs = self.encoder(hidden_states, attention_mask=expand_attention_mask(attention_mask),
                               output_attentions=output_attentions, output_hidden_states=output_hidden_states)
        return outputs if per_call(return_dict, self.config.return_dict) else outputs.to_tuple()


class XPTLMHead(nn.Module):
    """Eq. 5: p(x_i | h_i) = softmax(E_T g(h_i) + b), g = LayerNorm(act(W h + c)), decoder tied to E_T. Logits are
    cut to `vocab_size`: the rows padding E_T to `padded_vocab_size` while training are never predicted."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.config = config
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.padded_vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))

    def forward(self, hidden_states):
        features = self.layer_norm(self.act(self.dense(hidden_states)))
        return (self.decoder(features) + self.bias)[..., : self.config.vocab_size]


class XPTForMaskedLM(XPTPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "xpt.embeddings.target_embeddings.weight"}
    _keys_to_ignore_on_load_unexpected = None

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.lm_head = XPTLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.LongTensor | None = None, position_ids: torch.LongTensor | None = None,
                labels: torch.LongTensor | None = None, inputs_embeds: torch.FloatTensor | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, **kwargs) -> MaskedLMOutput | tuple:
        r"""
        labels: `(batch, length)` target ids at masked positions, -100 elsewhere; `loss` is the mean
            cross-entropy over the masked positions (Eq. 5). `logits` is `(batch, length, vocab_size)`
            as in every transformers masked LM.
        """
        refuse_unknown_keywords(kwargs, type(self).__name__)
        outputs = self.xpt(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                           output_hidden_states, return_dict=True)
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None if labels is None else F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                            labels.reshape(-1).long(), ignore_index=-100)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                attentions=outputs.attentions)
        return output if per_call(return_dict, self.config.return_dict) else output.to_tuple()


class XPTClassificationHead(nn.Module):
    """Sentence head W_o dropout(tanh(W dropout(x))). x is the first token's state h_0 (RoBERTa's head,
    `classifier_pooling="first"`), the mean of the non-padding states (`"mean"`), or for a sentence pair in one
    sequence `[u, v, |u - v|, u * v]`, u and v the mean states of each sentence (`"pair"`: the comparison features
    of Sentence-BERT's classifier, read from the cross-encoded pair; `segments` marks the second sentence)."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.pooling = config.classifier_pooling
        self.dense = nn.Linear(config.hidden_size * (4 if self.pooling == "pair" else 1), config.hidden_size)
        self.dropout = nn.Dropout(config.head_dropout_prob)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states, attention_mask=None, segments=None):
        if self.pooling in ("mean", "pair"):
            if attention_mask is not None and attention_mask.dim() != 2:
                raise ValueError(f"classifier_pooling={self.pooling!r} needs a (batch, length) padding mask, "
                                 f"got attention_mask of shape {tuple(attention_mask.shape)}")
            weights = (hidden_states.new_ones(hidden_states.shape[:2]) if attention_mask is None
                       else attention_mask.to(hidden_states.dtype))
            parts = [weights] if self.pooling == "mean" else [weights * (1 - segments), weights * segments]
            means = [(hidden_states * w.unsqueeze(-1)).sum(1) / w.sum(1, keepdim=True).clamp(min=1) for w in parts]
            x = means[0] if self.pooling == "mean" else torch.cat([*means, (means[0] - means[1]).abs(), means[0] * means[1]], -1)
        else:
            x = hidden_states[:, 0]
        x = self.dropout(x)
        return self.out_proj(self.dropout(torch.tanh(self.dense(x))))


def second_segment(input_ids, token_type_ids, sep_token_id) -> torch.Tensor:
    """1.0 where a token belongs to the second sentence of a pair, else 0.0: token type 1 where the tokenizer gives
    types (BERT family), otherwise the tokens after the first separator (RoBERTa's `<s> A </s></s> B </s>`)."""
    if token_type_ids is not None and bool(token_type_ids.any()):
        return token_type_ids.ne(0).float()
    separators = input_ids.eq(sep_token_id).int()
    return (separators.cumsum(1) - separators).gt(0).float()


def sequence_classification_loss(logits, labels, config) -> torch.Tensor:
    """Regression (MSE), single-label (cross-entropy) or multi-label (BCE) loss, chosen from
    `config.problem_type` and inferred as transformers' stock heads do when it is unset. Written out
    because transformers' `ForSequenceClassificationLoss` computes it in the logits' dtype; this one in fp32."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1) if config.num_labels == 1 else labels.float())
    if config.problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, config.num_labels).float(), labels.view(-1).long())
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class XPTForSequenceClassification(XPTPreTrainedModel):
    """The encoder with `XPTClassificationHead`: label scores (or one regression value) per text or text pair."""

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.classifier = XPTClassificationHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                inputs_embeds=None, output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        refuse_unknown_keywords(kwargs, type(self).__name__)
        outputs = self.xpt(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                           output_hidden_states, return_dict=True)
        segments = (second_segment(input_ids, token_type_ids, self.config.eos_token_id).to(outputs.last_hidden_state.dtype)
                    if self.config.classifier_pooling == "pair" else None)
        logits = self.classifier(outputs.last_hidden_state, attention_mask, segments)
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                          attentions=outputs.attentions)
        return output if per_call(return_dict, self.config.return_dict) else output.to_tuple()


class XPTForTokenClassification(XPTPreTrainedModel):
    """The encoder with a linear tag classifier on each token's final state; labels of -100 carry no loss."""

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.dropout = nn.Dropout(config.head_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                inputs_embeds=None, output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        refuse_unknown_keywords(kwargs, type(self).__name__)
        outputs = self.xpt(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                           output_hidden_states, return_dict=True)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = (F.cross_entropy(logits.view(-1, self.config.num_labels).float(), labels.view(-1).long(), ignore_index=-100)
                if labels is not None else None)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                       attentions=outputs.attentions)
        return output if per_call(return_dict, self.config.return_dict) else output.to_tuple()


class XPTForQuestionAnswering(XPTPreTrainedModel):
    """The encoder with a linear layer scoring each token as the answer's start and end; loss: their mean CE."""

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                start_positions=None, end_positions=None, inputs_embeds=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        refuse_unknown_keywords(kwargs, type(self).__name__)
        outputs = self.xpt(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions,
                           output_hidden_states, return_dict=True)
        start_logits, end_logits = (x.contiguous() for x in self.qa_outputs(outputs.last_hidden_state).unbind(-1))
        loss, ignored = None, start_logits.size(1)  # answers outside the (truncated) input: ignored, as transformers'
        if start_positions is not None and end_positions is not None:
            loss = sum(F.cross_entropy(logits.float(), at.view(-1).long().clamp(0, ignored), ignore_index=ignored)
                       for logits, at in ((start_logits, start_positions), (end_logits, end_positions))) / 2
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return output if per_call(return_dict, self.config.return_dict) else output.to_tuple()


__all__ = ["XPTForMaskedLM", "XPTForQuestionAnswering", "XPTForSequenceClassification", "XPTForTokenClassification",
           "XPTModel", "XPTPreTrainedModel"]
