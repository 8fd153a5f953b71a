"""PyTorch XPT: cross-lingual post-training of BERT/RoBERTa encoders (Lee et al. 2021).

An XPT model is an English encoder whose word embeddings are replaced by target-language
embeddings E_T, with one Implicit Translation Layer (ITL) on each side of the reused layers:

    h^0     = LayerNorm(E_T[x] + P[pos] + S[type])           embeddings (E_T new, P/S/LN reused)
    h^1     = ITL_in(h^0)                                     new layer, encoder-layer architecture
    h^{l+1} = Layer_l(h^l),  l = 1..C                         reused source layers
    h^{C+2} = ITL_out(h^{C+1})                                new layer
    p(x_i)  = softmax(E_T g(h_i^{C+2}) + b)                   Eq. 5: MLM decoder tied to E_T

Post-training trains E_T, the ITLs and b first (reused parameters frozen), then everything; the
parameter groups that phases refer to are data (`XPTPreTrainedModel.xpt_parameter_groups`).

Hub remote code: this file imports only torch, public transformers API and `.configuration_xpt`,
and has no side effects at import. Parameter names of a layer are those of a BERT/RoBERTa layer
(`attention.self.query`, ..., `output.LayerNorm`), so weights map 1:1 onto stock checkpoints.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    ElectraConfig,
    ElectraForMaskedLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaConfig,
    RobertaForMaskedLM,
    XLMRobertaConfig,
    XLMRobertaForMaskedLM,
)
from transformers import logging as transformers_logging
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from .configuration_xpt import XPTConfig

logger = logging.getLogger(__name__)

PARAMETER_GROUPS = (
    "target_embeddings",  # E_T (and the decoder tied to it)
    "itl",  # ITL_in and ITL_out
    "reused_encoder",  # the C source layers (without adapters)
    "reused_embeddings",  # position and token-type embeddings, embedding LayerNorm
    "lm_head_transform",  # g(.) of Eq. 5: dense + LayerNorm
    "lm_head_bias",  # b of Eq. 5
    "adapters",  # bottleneck adapters (Adapters baseline)
    "task_head",  # heads of downstream models
)
# Phase 1 of XPT: only what is new for the target language trains.
PHASE1_GROUPS = ("target_embeddings", "itl", "lm_head_bias")
SUPPORTED_SOURCE_FAMILIES = ("bert", "roberta", "xlm-roberta", "electra")
# Source family -> (layer layout recorded as config.source_model_type, state-dict prefix of the encoder).
# XLM-RoBERTa is RoBERTa-shaped; an ELECTRA discriminator is BERT-shaped (embedding_size == hidden_size).
_SOURCE_LAYOUT = {"bert": ("bert", "bert"), "roberta": ("roberta", "roberta"), "xlm-roberta": ("roberta", "roberta"),
                  "electra": ("bert", "electra")}


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def position_ids_for(input_ids: torch.Tensor, pad_token_id: int | None, position_offset: int) -> torch.Tensor:
    """Position ids of the source family.

    BERT (`position_offset == 0`): 0, 1, 2, ... RoBERTa: real tokens are numbered from
    `position_offset` and padding tokens get `position_offset - 1` (its padding index).
    """
    if position_offset == 0 or pad_token_id is None:
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    real = input_ids.ne(pad_token_id).int()
    return (torch.cumsum(real, dim=1) * real + (position_offset - 1)).long()


class XPTEmbeddings(nn.Module):
    """h^0 = LayerNorm(E_T[x] + P[pos] + S[type]): new target embeddings, reused P, S and LayerNorm."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.config = config
        self.target_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size > 0 else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        if position_ids is None:
            position_ids = position_ids_for(input_ids, self.config.pad_token_id, self.config.position_offset)
        embeddings = self.target_embeddings(input_ids) + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))


class XPTSelfAttention(nn.Module):
    """Multi-head self-attention: softmax(Q K^T / sqrt(d_head) masked) V.

    SDPA by default; the eager path (`attn_implementation="eager"`, or `output_attentions=True`)
    computes the same function and also returns the attention probabilities.
    """

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        batch, length, _ = hidden_states.shape
        q, k, v = (
            proj(hidden_states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
            for proj in (self.query, self.key, self.value)
        )
        dropout = self.dropout_prob if self.training else 0.0
        if output_attentions or self.config._attn_implementation == "eager":
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            if attention_mask is not None:
                scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
            probs = F.dropout(scores.softmax(dim=-1), p=dropout, training=self.training)
            context = torch.matmul(probs, v)
        else:
            probs = None
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=dropout)
        context = context.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)
        return context, probs


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
    """LayerNorm(dropout(W x + b) + residual), with an optional adapter before the residual sum.

    Used after attention (BERT's `attention.output`) and after the feed-forward block (`output`).
    """

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


class XPTLayer(nn.Module):
    """One post-LN Transformer encoder layer, parameter-for-parameter a BERT/RoBERTa layer.

    ITL_in and ITL_out are instances of this class too ("exactly the encoder-layer architecture").
    """

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
        self.gradient_checkpointing = False

    def ordered_layers(self) -> list[XPTLayer]:
        return [layer for layer in (self.itl_in, *self.layer, self.itl_out) if layer is not None]

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, output_hidden_states=False):
        all_hidden = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.ordered_layers():
            if self.gradient_checkpointing and self.training:
                hidden_states, probs = self._gradient_checkpointing_func(
                    layer.__call__, hidden_states, attention_mask, output_attentions
                )
            else:
                hidden_states, probs = layer(hidden_states, attention_mask, output_attentions)
            if output_hidden_states:
                all_hidden += (hidden_states,)
            if output_attentions:
                all_attentions += (probs,)
        return BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden, attentions=all_attentions)


def expand_attention_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Boolean (B, 1, T|1, T) mask, True where attention is allowed.

    Accepts a (B, T) padding mask or a (B, T, T) / (B, 1, T, T) block mask (packed sequences:
    each token attends within its own sequence). Every token may attend to itself, so a fully
    masked row never turns SDPA's softmax into NaN. An all-ones padding mask becomes None, which
    lets SDPA pick its fastest kernel.
    """
    if attention_mask is None:
        return None
    mask = attention_mask.bool()
    if mask.dim() == 2:
        return None if bool(mask.all()) else mask[:, None, None, :]
    if mask.dim() == 3:
        mask = mask[:, None]
    eye = torch.eye(mask.shape[-1], dtype=torch.bool, device=mask.device)
    return mask | eye


# --------------------------------------------------------------------------------------------
# Pretrained-model plumbing and parameter groups
# --------------------------------------------------------------------------------------------


class XPTPreTrainedModel(PreTrainedModel):
    config_class = XPTConfig
    base_model_prefix = "xpt"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["XPTEmbeddings", "XPTLayer"]
    # A post-trained folder holds the MLM head; heads that do not use it load without complaint.
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, with a clear error when weight shapes disagree with the config."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error):
                raise
            raise ValueError(
                f"The weights in {pretrained_model_name_or_path} do not fit its config (see the load report above). "
                "For XPT this is almost always the vocabulary: config.json's vocab_size must equal len(tokenizer) of "
                "the tokenizer the weights were trained with (embedding rows are padded to pad_vocab_to_multiple_of). "
                "Restore the matching config/tokenizer, or convert again with `python -m modeling_xpt.convert`."
            ) from error

    @torch.no_grad()
    def _init_weights(self, module):
        """Normal(0, initializer_range) for linear/embedding weights, LayerNorm at identity (transformers'
        default), MLM output bias at zero and adapters at identity (up-projection zero)."""
        # transformers marks a tensor as initialised once an init function touched it, so the adapter's
        # up-projection is zeroed when the Linear itself is visited, not later from its parent.
        if isinstance(module, nn.Linear) and getattr(module, "zero_init", False):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)
            return
        super()._init_weights(module)
        if isinstance(module, XPTLMHead):
            nn.init.zeros_(module.bias)

    @staticmethod
    def parameter_group_of(name: str) -> str:
        """The group of a parameter name (with or without the `xpt.` base-model prefix)."""
        name = name.removeprefix("xpt.")
        if ".adapter." in name:
            return "adapters"
        if name.startswith("embeddings.target_embeddings.") or name == "lm_head.decoder.weight":
            return "target_embeddings"
        if name.startswith(("encoder.itl_in.", "encoder.itl_out.")):
            return "itl"
        if name.startswith("encoder.layer."):
            return "reused_encoder"
        if name.startswith("embeddings."):
            return "reused_embeddings"
        if name == "lm_head.bias":
            return "lm_head_bias"
        if name.startswith("lm_head."):
            return "lm_head_transform"
        return "task_head"

    def xpt_parameter_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """Every parameter, exactly once (tied weights count once), under its group name.

        All names of `PARAMETER_GROUPS` are present; groups the model lacks are empty lists.
        """
        groups: dict[str, list[tuple[str, nn.Parameter]]] = {name: [] for name in PARAMETER_GROUPS}
        for name, param in self.named_parameters():
            groups[self.parameter_group_of(name)].append((name, param))
        return groups

    def set_trainable_groups(self, group_names) -> None:
        """`requires_grad=True` on the parameters of `group_names`, False on all others."""
        group_names = [group_names] if isinstance(group_names, str) else list(group_names)
        unknown = sorted(set(group_names) - set(PARAMETER_GROUPS))
        if unknown:
            raise ValueError(f"Unknown parameter group(s) {unknown}; valid groups are {list(PARAMETER_GROUPS)}")
        for group, params in self.xpt_parameter_groups().items():
            for _, param in params:
                param.requires_grad_(group in group_names)

    def trainable_groups(self) -> list[str]:
        """Groups with at least one parameter that requires grad."""
        return [g for g, ps in self.xpt_parameter_groups().items() if any(p.requires_grad for _, p in ps)]


class XPTModel(XPTPreTrainedModel):
    """The bare XPT encoder: embeddings with E_T, ITL_in, reused layers, ITL_out. No pooler: sentence
    tasks use the first token through their own head, as RoBERTa does."""

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.embeddings = XPTEmbeddings(config)
        self.encoder = XPTEncoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.target_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.target_embeddings = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        r"""
        input_ids: `(batch, length)` token ids of the target tokenizer.
        attention_mask: `(batch, length)` 1 for real tokens, 0 for padding; or a `(batch, length, length)`
            boolean block mask for packed sequences (then pass `position_ids` restarting per sequence).
        """
        output_attentions = bool(output_attentions if output_attentions is not None else self.config.output_attentions)
        output_hidden_states = bool(
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        hidden_states = self.embeddings(input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        outputs = self.encoder(
            hidden_states,
            attention_mask=expand_attention_mask(attention_mask),
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        return outputs if return_dict is not False else outputs.to_tuple()


# --------------------------------------------------------------------------------------------
# Masked language modelling, conversion from English checkpoints, stock export
# --------------------------------------------------------------------------------------------


class XPTLMHead(nn.Module):
    """Eq. 5: p(x_i | h_i) = softmax(E_T g(h_i) + b), g = LayerNorm(act(W h + c)), decoder tied to E_T.

    The decoder has `padded_vocab_size` rows (tensor-core friendly); logits are cut to `vocab_size`
    so the padding rows are never predicted.
    """

    def __init__(self, config: XPTConfig):
        super().__init__()
        self.vocab_size = config.vocab_size
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.padded_vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))

    def forward(self, hidden_states):
        features = self.layer_norm(self.act(self.dense(hidden_states)))
        return (self.decoder(features) + self.bias)[..., : self.vocab_size]


class XPTForMaskedLM(XPTPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "xpt.embeddings.target_embeddings.weight"}

    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.lm_head = XPTLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        masked_only: bool = False,
        masked_capacity: int | None = None,
        **kwargs,
    ) -> MaskedLMOutput | tuple:
        r"""
        labels: `(batch, length)` target ids at masked positions, -100 elsewhere; `loss` is the mean
            cross-entropy over the masked positions (Eq. 5). `logits` is `(batch, length, vocab_size)`
            as in every transformers masked LM.
        masked_only: with labels, run the LM head only at the masked positions (the post-training
            fast path, asked for by the training loop): `logits` is then `(num_masked, vocab_size)` in
            the row-major order of `labels != -100`, and `loss` is unchanged.
        masked_capacity: implies `masked_only`; run the LM head on exactly this many rows (at least
            the number of masked tokens): the masked positions first, in the same order, then unmasked
            filler rows that the loss ignores. `loss` is unchanged; `logits` is `(masked_capacity,
            vocab_size)`. A static shape: no data-dependent sizes for torch.compile, no host sync.
        """
        outputs = self.xpt(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        hidden_states = outputs.last_hidden_state
        loss = None
        if labels is None or not (masked_only or masked_capacity is not None):
            logits = self.lm_head(hidden_states)
            if labels is not None:
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                       reduction="sum", ignore_index=-100) / labels.ne(-100).sum().clamp(min=1)
        else:
            # The vocabulary projection is the largest matmul of the model; at 15% masking,
            # computing it only where a loss is taken saves ~85% of it and of its activations.
            masked = labels.ne(-100)
            if masked_capacity is None:
                logits = self.lm_head(hidden_states[masked])
                targets = labels[masked]
            else:
                # stable sort puts the masked positions first, in row-major order, with a static size
                flat = masked.reshape(-1)
                rows = torch.argsort((~flat).to(torch.uint8), stable=True)[: min(masked_capacity, flat.numel())]
                logits = self.lm_head(hidden_states.reshape(-1, hidden_states.shape[-1])[rows])
                targets = labels.reshape(-1)[rows]
            # Sum over masked tokens / their count (at least 1): the mean cross-entropy, without a
            # data-dependent branch (torch.compile) and 0 with a graph when nothing is masked.
            loss = F.cross_entropy(logits.float(), targets, reduction="sum", ignore_index=-100) / masked.sum().clamp(min=1)
        output = MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output if return_dict is not False else output.to_tuple()

    @classmethod
    def from_source(
        cls,
        source: str | Path | PreTrainedModel,
        tokenizer: str | Path | PreTrainedTokenizerBase,
        *,
        init: str = "random",
        itl_init: str = "random",
        use_itl_in: bool = True,
        use_itl_out: bool = True,
        adapter_size: int = 0,
        scratch: bool = False,
        source_tokenizer: str | Path | PreTrainedTokenizerBase | None = None,
        attn_implementation: str = "sdpa",
    ) -> "XPTForMaskedLM":
        """Build an XPT model from an English BERT or RoBERTa checkpoint (Hub id, folder or model).

        Copied bit-exactly from the source: every encoder layer, position and token-type embeddings,
        the embedding LayerNorm and the MLM head transform (a source without an MLM head, such as a
        bare `BertModel`, gets a fresh transform and a warning). New: target embeddings E_T sized to
        `tokenizer` (`init="random"` as in the paper, or `"overlap"`: source vectors, and output biases, for tokens
        whose string exists in both vocabularies), ITLs (`itl_init="random"`, or `"copy"` of the first/last
        source layer), the output bias, and adapters when `adapter_size > 0`. `scratch=True` returns the
        same architecture with every weight random (the Scratch baseline).

        A summary of what was copied is left in `model.conversion_report`.
        """
        if init not in ("random", "overlap"):
            raise ValueError(f"init={init!r}: use 'random' (paper) or 'overlap'")
        if itl_init not in ("random", "copy"):
            raise ValueError(f"itl_init={itl_init!r}: use 'random' (paper) or 'copy'")
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        for role in ("mask_token", "pad_token"):
            if getattr(tokenizer, f"{role}_id") is None:
                raise ValueError(
                    f"The target tokenizer has no {role}; XPT needs one for MLM. Train it with "
                    "`python -m tokenization.train_tokenizer` or add it with tokenizer.add_special_tokens()."
                )
        source_model, has_mlm_head = _load_source(source)
        src = source_model.config
        family = src.model_type
        layout = _SOURCE_LAYOUT[family][0]
        config = XPTConfig(
            vocab_size=len(tokenizer),
            hidden_size=src.hidden_size,
            num_hidden_layers=src.num_hidden_layers,
            num_attention_heads=src.num_attention_heads,
            intermediate_size=src.intermediate_size,
            hidden_act=src.hidden_act,
            hidden_dropout_prob=src.hidden_dropout_prob,
            attention_probs_dropout_prob=src.attention_probs_dropout_prob,
            max_position_embeddings=src.max_position_embeddings,
            type_vocab_size=src.type_vocab_size,
            initializer_range=src.initializer_range,
            layer_norm_eps=src.layer_norm_eps,
            position_offset=src.pad_token_id + 1 if layout == "roberta" else 0,
            use_itl_in=use_itl_in,
            use_itl_out=use_itl_out,
            adapter_size=adapter_size,
            source_model_type=layout,
            source_architecture=family,  # the stock family to_stock() writes (xlm-roberta, electra: own classes)
            source_name_or_path=str(source) if isinstance(source, (str, Path)) else src.name_or_path or None,
            mask_token_id=tokenizer.mask_token_id,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id,
            eos_token_id=tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id,
            attn_implementation=attn_implementation,
        )
        model = cls(config)
        report = {"source": config.source_name_or_path, "family": family, "scratch": scratch,
                  "source_has_mlm_head": has_mlm_head, "copied_tensors": 0, "overlap_tokens": 0}
        model.conversion_report = report
        if scratch:
            return model

        source_state = _prefixed_state_dict(source_model)
        reused = {"reused_encoder", "reused_embeddings"} | ({"lm_head_transform"} if has_mlm_head else set())
        with torch.no_grad():
            for name, param in model.named_parameters():
                if model.parameter_group_of(name) in reused:
                    param.copy_(source_state[stock_parameter_name(name, family)])
                    report["copied_tensors"] += 1
            if itl_init == "copy":
                last = src.num_hidden_layers - 1
                for itl, index in ((model.xpt.encoder.itl_in, 0), (model.xpt.encoder.itl_out, last)):
                    if itl is not None:
                        itl.load_state_dict(source_model.base_model.encoder.layer[index].state_dict())
            if init == "overlap":
                if source_tokenizer is None:
                    source_tokenizer = source if isinstance(source, (str, Path)) else src.name_or_path
                if isinstance(source_tokenizer, (str, Path)):
                    source_tokenizer = AutoTokenizer.from_pretrained(str(source_tokenizer))
                pairs = overlapping_tokens(tokenizer, source_tokenizer)
                source_embeddings = source_state[f"{_SOURCE_LAYOUT[family][1]}.embeddings.word_embeddings.weight"]
                target = torch.tensor([t for t, _ in pairs], dtype=torch.long)
                origin = torch.tensor([s for _, s in pairs], dtype=torch.long)
                model.xpt.embeddings.target_embeddings.weight[target] = source_embeddings[origin].to(
                    model.xpt.embeddings.target_embeddings.weight.dtype
                )
                if has_mlm_head:  # the source's output bias of a shared token belongs with its vector
                    model.lm_head.bias[target] = source_state[stock_parameter_name("lm_head.bias", family)][origin]
                report["overlap_tokens"] = len(pairs)
        if not has_mlm_head:
            logger.warning(
                "Source %s has no MLM head (e.g. a bare BertModel): the MLM head transform is freshly "
                "initialised and must be learnt in post-training.",
                config.source_name_or_path,
            )
        return model

    def to_stock(self) -> PreTrainedModel:
        """The same network as a stock `BertForMaskedLM` / `RobertaForMaskedLM` (`XLMRobertaForMaskedLM`,
        `ElectraForMaskedLM` for those sources) with C + 2 layers (ITL_in first, ITL_out last), for hosts
        that do not run custom code. Not possible with adapters."""
        c = self.config
        if c.adapter_size:
            raise ValueError("An XPT model with bottleneck adapters has no stock equivalent (adapter_size > 0).")
        family = getattr(c, "source_architecture", None) or c.source_model_type
        if _SOURCE_LAYOUT[family][0] == "roberta" and c.position_offset != (c.pad_token_id or 0) + 1:
            raise ValueError(
                f"Stock RoBERTa numbers positions from pad_token_id + 1 = {(c.pad_token_id or 0) + 1}, but this model "
                f"uses position_offset={c.position_offset}; use a RoBERTa-family tokenizer (<pad> = 1)."
            )
        stock_config_class, stock_class = _STOCK_CLASSES[family]
        extra = {"embedding_size": c.hidden_size} if family == "electra" else {}
        if family == "electra" and c.hidden_act != "gelu":
            raise ValueError(f"ElectraForMaskedLM applies gelu in its head; this model's head uses {c.hidden_act!r}")
        stock_config = stock_config_class(
            **extra,
            vocab_size=c.vocab_size,
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_total_layers,
            num_attention_heads=c.num_attention_heads,
            intermediate_size=c.intermediate_size,
            hidden_act=c.hidden_act,
            hidden_dropout_prob=c.hidden_dropout_prob,
            attention_probs_dropout_prob=c.attention_probs_dropout_prob,
            max_position_embeddings=c.max_position_embeddings,
            type_vocab_size=max(1, c.type_vocab_size),
            initializer_range=c.initializer_range,
            layer_norm_eps=c.layer_norm_eps,
            pad_token_id=c.pad_token_id,
            bos_token_id=c.bos_token_id,
            eos_token_id=c.eos_token_id,
            tie_word_embeddings=True,
        )
        stock_config.mask_token_id = c.mask_token_id
        stock = stock_class(stock_config)
        layout = {"layer_shift": int(c.use_itl_in), "itl_out_index": c.num_total_layers - 1}
        state = {}
        for name, tensor in self.state_dict().items():
            if name == "lm_head.decoder.weight":  # tied to the target embeddings
                continue
            if self.parameter_group_of(name) in ("target_embeddings", "lm_head_bias"):
                tensor = tensor[: c.vocab_size]
            state[stock_parameter_name(name, family, **layout)] = tensor
        missing, unexpected = stock.load_state_dict(state, strict=False)
        untied = [k for k in missing if not k.endswith(("decoder.weight", "decoder.bias", "generator_lm_head.weight"))]
        if untied or unexpected:
            raise RuntimeError(f"Stock export mismatch: missing {untied}, unexpected {unexpected}")
        stock.tie_weights()
        return stock.eval() if not self.training else stock


_STOCK_HEAD_NAMES = {
    "bert": {"lm_head.dense": "cls.predictions.transform.dense", "lm_head.layer_norm": "cls.predictions.transform.LayerNorm",
             "lm_head.bias": "cls.predictions.bias"},
    "roberta": {"lm_head.dense": "lm_head.dense", "lm_head.layer_norm": "lm_head.layer_norm", "lm_head.bias": "lm_head.bias"},
    "electra": {"lm_head.dense": "generator_predictions.dense", "lm_head.layer_norm": "generator_predictions.LayerNorm",
                "lm_head.bias": "generator_lm_head.bias"},
}
_STOCK_HEAD_NAMES["xlm-roberta"] = _STOCK_HEAD_NAMES["roberta"]
_STOCK_CLASSES = {"bert": (BertConfig, BertForMaskedLM), "roberta": (RobertaConfig, RobertaForMaskedLM),
                  "xlm-roberta": (XLMRobertaConfig, XLMRobertaForMaskedLM), "electra": (ElectraConfig, ElectraForMaskedLM)}


def stock_parameter_name(name: str, family: str, layer_shift: int = 0, itl_out_index: int | None = None) -> str:
    """Name of an XPT parameter in a stock `{Bert,Roberta}ForMaskedLM` state dict.

    With the defaults this is where a reused tensor comes from in the source checkpoint; with
    `layer_shift=1, itl_out_index=C+1` it is the stock layout of the export (ITL_in = layer 0).
    """
    if name.startswith("lm_head."):
        module, _, leaf = name.rpartition(".")
        if name == "lm_head.bias":
            return _STOCK_HEAD_NAMES[family][name]
        return f"{_STOCK_HEAD_NAMES[family][module]}.{leaf}"
    rest = name.removeprefix("xpt.")
    if rest.startswith("embeddings.target_embeddings."):
        rest = rest.replace("target_embeddings", "word_embeddings", 1)
    elif rest.startswith("encoder.layer."):
        index, _, tail = rest.removeprefix("encoder.layer.").partition(".")
        rest = f"encoder.layer.{int(index) + layer_shift}.{tail}"
    elif rest.startswith("encoder.itl_in."):
        rest = "encoder.layer.0." + rest.removeprefix("encoder.itl_in.")
    elif rest.startswith("encoder.itl_out."):
        if itl_out_index is None:
            raise KeyError(f"{name} has no counterpart in the source checkpoint")
        rest = f"encoder.layer.{itl_out_index}." + rest.removeprefix("encoder.itl_out.")
    return f"{_SOURCE_LAYOUT[family][1]}.{rest}"


def _load_source(source) -> tuple[PreTrainedModel, bool]:
    """The source model and whether its checkpoint has an MLM head."""
    head_prefixes = ("cls.predictions.transform", "lm_head.dense", "lm_head.layer_norm", "generator_predictions")
    if isinstance(source, PreTrainedModel):  # an MLM head is there when its tensors are
        model, has_head = source, any(k.startswith(head_prefixes) for k in source.state_dict())
    else:
        # A bare encoder checkpoint makes transformers print a long "missing head" report; the
        # conversion says that itself in one line, so its logging is lowered while loading.
        verbosity = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()
        try:
            model, info = AutoModelForMaskedLM.from_pretrained(str(source), output_loading_info=True, dtype=torch.float32)
        except RuntimeError as error:  # e.g. config.json and weights of different sizes
            first = (str(error).strip().splitlines() or [""])[0].split(" For details")[0]
            raise ValueError(f"cannot load the source {source} ({first}); check that its config.json matches "
                             "its weights") from None
        finally:
            transformers_logging.set_verbosity(verbosity)
        has_head = not any(k.startswith(head_prefixes) for k in info["missing_keys"])
    family = model.config.model_type
    if family not in SUPPORTED_SOURCE_FAMILIES:
        raise ValueError(
            f"Unsupported source architecture {family!r} ({type(model).__name__}); XPT converts BERT, RoBERTa, "
            f"XLM-RoBERTa and ELECTRA-discriminator checkpoints ({', '.join(SUPPORTED_SOURCE_FAMILIES)})."
        )
    if family == "electra":
        if model.config.embedding_size != model.config.hidden_size:
            raise ValueError(
                f"ELECTRA source with embedding_size {model.config.embedding_size} != hidden_size "
                f"{model.config.hidden_size} (a projected embedding, as in electra-small): XPT supports ELECTRA "
                "checkpoints whose embedding size equals the hidden size (electra-base, electra-large)."
            )
        if has_head and model.config.hidden_act != "gelu":
            raise ValueError(f"ELECTRA source with hidden_act {model.config.hidden_act!r}: its MLM head applies gelu, "
                             "and XPT's head uses hidden_act; convert from the discriminator (no MLM head) instead.")
    return model, has_head


def _prefixed_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """State dict with the stock `{family}.` prefix, also for a bare BertModel/RobertaModel."""
    state = model.state_dict()
    if model.base_model is model:
        state = {f"{model.base_model_prefix}.{k}": v for k, v in state.items()}
    return state


def overlapping_tokens(target_tokenizer, source_tokenizer) -> list[tuple[int, int]]:
    """(target id, source id) for target tokens whose string also exists in the source vocabulary.

    Special tokens are matched by role (mask to mask, ...). Word-boundary conventions are translated:
    SentencePiece "▁x" (word start) matches "x" in WordPiece and "Ġx" in byte-level BPE; a
    WordPiece-continuation "##x" is tried for pieces without "▁". Digits, Latin script and
    punctuation are what typically overlaps with an English vocabulary.
    """
    source_vocab = source_tokenizer.get_vocab()
    pairs = {}
    for role in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token", "bos_token", "eos_token"):
        t, s = getattr(target_tokenizer, f"{role}_id", None), getattr(source_tokenizer, f"{role}_id", None)
        if t is not None and s is not None:
            pairs[t] = s
    special = set(target_tokenizer.all_special_tokens)
    for token, target_id in target_tokenizer.get_vocab().items():
        if target_id in pairs or token in special:
            continue
        bare = token.removeprefix("▁")
        candidates = [token, bare, "Ġ" + bare] if token.startswith("▁") else [token, "##" + token]
        for candidate in candidates:
            if candidate and candidate in source_vocab:
                pairs[target_id] = source_vocab[candidate]
                break
    return sorted(pairs.items())


# --------------------------------------------------------------------------------------------
# Downstream heads
# --------------------------------------------------------------------------------------------


class XPTClassificationHead(nn.Module):
    """Sentence head W_o dropout(tanh(W dropout(h))), where h is the first token's state (RoBERTa's head,
    `classifier_pooling="first"`) or the mean of the non-padding states (`"mean"`)."""

    def __init__(self, config: XPTConfig):
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)
        self.pooling = config.classifier_pooling

    def forward(self, hidden_states, attention_mask=None):
        if self.pooling == "mean":
            if attention_mask is not None and attention_mask.dim() != 2:
                raise ValueError("classifier_pooling='mean' needs a (batch, length) padding mask, "
                                 f"got attention_mask of shape {tuple(attention_mask.shape)}")
            weights = (torch.ones(hidden_states.shape[:2], device=hidden_states.device) if attention_mask is None
                       else attention_mask.to(hidden_states.dtype))
            x = (hidden_states * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp(min=1)
        else:
            x = hidden_states[:, 0]
        x = self.dropout(x)
        return self.out_proj(self.dropout(torch.tanh(self.dense(x))))


def sequence_classification_loss(logits, labels, config) -> torch.Tensor:
    """Regression (MSE), single-label (cross-entropy) or multi-label (BCE) loss, chosen from
    `config.problem_type` and inferred as transformers' stock heads do when it is unset.
    Written out because transformers exposes this logic only inside its own model classes."""
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
        return F.cross_entropy(logits.view(-1, config.num_labels).float(), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class XPTForSequenceClassification(XPTPreTrainedModel):
    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.xpt = XPTModel(config)
        self.classifier = XPTClassificationHead(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        outputs = self.xpt(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                           position_ids=position_ids, output_attentions=output_attentions,
                           output_hidden_states=output_hidden_states)
        logits = self.classifier(outputs.last_hidden_state, attention_mask)
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                          attentions=outputs.attentions)
        return output if return_dict is not False else output.to_tuple()


class XPTForTokenClassification(XPTPreTrainedModel):
    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.xpt = XPTModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        outputs = self.xpt(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                           position_ids=position_ids, output_attentions=output_attentions,
                           output_hidden_states=output_hidden_states)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels).float(), labels.view(-1), ignore_index=-100)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                       attentions=outputs.attentions)
        return output if return_dict is not False else output.to_tuple()


class XPTForQuestionAnswering(XPTPreTrainedModel):
    def __init__(self, config: XPTConfig):
        super().__init__(config)
        self.xpt = XPTModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                start_positions=None, end_positions=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        outputs = self.xpt(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                           position_ids=position_ids, output_attentions=output_attentions,
                           output_hidden_states=output_hidden_states)
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            # Answers outside the (truncated) input point at an ignored index, as in transformers' QA heads.
            ignored = start_logits.size(1)
            start = start_positions.view(-1).clamp(0, ignored)
            end = end_positions.view(-1).clamp(0, ignored)
            loss = (F.cross_entropy(start_logits.float(), start, ignore_index=ignored)
                    + F.cross_entropy(end_logits.float(), end, ignore_index=ignored)) / 2
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return output if return_dict is not False else output.to_tuple()


__all__ = [
    "PARAMETER_GROUPS",
    "PHASE1_GROUPS",
    "XPTForMaskedLM",
    "XPTForQuestionAnswering",
    "XPTForSequenceClassification",
    "XPTForTokenClassification",
    "XPTModel",
    "XPTPreTrainedModel",
]
