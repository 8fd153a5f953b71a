"""Configuration of XPT models (cross-lingual post-training, Lee et al. 2021).

This file is copied next to the weights of every saved XPT model and runs as Hub remote code, so
it imports nothing but `transformers` and `huggingface_hub` (which transformers requires). Like
transformers' own configs it is a `@strict` dataclass: each field's type is checked when the config is
made, loaded or changed, so a mistyped `config.json` value is refused by name (no `__future__`
annotations here: `@strict` reads the annotations as types).
"""
from typing import Literal, get_args

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

# Written into every config so that a saved folder loads through each Auto class with
# `trust_remote_code=True`. `save_pretrained` would otherwise record only the saved class.
XPT_AUTO_MAP = {
    "AutoConfig": "configuration_xpt.XPTConfig",
    "AutoModel": "modeling_xpt.XPTModel",
    "AutoModelForMaskedLM": "modeling_xpt.XPTForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_xpt.XPTForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_xpt.XPTForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_xpt.XPTForQuestionAnswering",
}
# Model types of the English sources XPT converts (the values `XPTConfig.source_architecture` takes).
SourceFamily = Literal["bert", "roberta", "xlm-roberta", "electra"]
SUPPORTED_SOURCE_FAMILIES = get_args(SourceFamily)


@strict
class XPTConfig(PreTrainedConfig):
    r"""Configuration of an XPT encoder: a BERT/RoBERTa encoder whose word embeddings are replaced by
    target-language embeddings E_T, with Implicit Translation Layers (ITL) around the reused layers.

    Args:
        vocab_size (`int`, *optional*, defaults to 50000):
            Size of the target-language vocabulary (the tokenizer's `len()`). Logits always have this width.
        hidden_size (`int`, *optional*, defaults to 768):
            Width of the encoder; equals the source model's.
        num_hidden_layers (`int`, *optional*, defaults to 12):
            Number of reused source encoder layers C. The model has C + `use_itl_in` + `use_itl_out` layers.
        num_attention_heads (`int`, *optional*, defaults to 12):
            Attention heads per layer.
        intermediate_size (`int`, *optional*, defaults to 3072):
            Width of the feed-forward block.
        hidden_act (`str`, *optional*, defaults to `"gelu"`):
            Activation of the feed-forward block and of the MLM head transform.
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on embeddings and on the outputs of attention and feed-forward blocks.
        attention_probs_dropout_prob (`float`, *optional*, defaults to 0.1):
            Dropout on attention probabilities.
        max_position_embeddings (`int`, *optional*, defaults to 514):
            Rows of the position-embedding table (RoBERTa: 512 + `position_offset`).
        type_vocab_size (`int`, *optional*, defaults to 1):
            Rows of the token-type table (BERT: 2, RoBERTa: 1; 0 disables token types).
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialiser (new embeddings, ITLs, heads).
        layer_norm_eps (`float`, *optional*, defaults to 1e-5):
            LayerNorm epsilon (RoBERTa: 1e-5, BERT: 1e-12).
        position_offset (`int`, *optional*, defaults to 2):
            Index of the first position embedding. RoBERTa reserves rows up to its padding index and numbers
            real tokens from `padding_idx + 1` (= 2), padding tokens getting `padding_idx`; BERT numbers from 0.
        use_itl_in (`bool`, *optional*, defaults to `True`):
            Insert ITL_in between the embeddings and the first reused layer (Eq. 2).
        use_itl_out (`bool`, *optional*, defaults to `True`):
            Insert ITL_out after the last reused layer (Eq. 4).
        adapter_size (`int`, *optional*, defaults to 0):
            Bottleneck width of Houlsby adapters after the attention and feed-forward blocks of the reused
            layers (the paper's Adapters baseline); 0 means no adapters.
        pad_vocab_to_multiple_of (`int`, *optional*, defaults to 64):
            Rows of the embedding/decoder weights are padded to a multiple of this while training (tensor-core
            friendly matmuls); padding rows are never predicted (logits are cut to `vocab_size`). Folders the
            `xpt` package saves hold one row per token and say 1 here.
        classifier_dropout (`float`, *optional*):
            Dropout of classification heads; `hidden_dropout_prob` when unset.
        classifier_pooling (`str`, *optional*, defaults to `"first"`):
            What the sentence head reads: `"first"` the first token's state (RoBERTa's head), `"mean"` the
            mean over non-padding tokens (the pooling of sentence-transformers sources such as all-MiniLM-L6-v2),
            `"pair"` for a sentence pair in one sequence the mean states u, v of each sentence as
            `[u, v, |u - v|, u * v]` (needs `input_ids`, or `token_type_ids` marking the second sentence).
        source_model_type (`str`, *optional*, defaults to `"roberta"`):
            Layer layout of the English source checkpoint: `"bert"` (BERT, ELECTRA) or `"roberta"` (RoBERTa,
            XLM-RoBERTa).
        source_architecture (`str`, *optional*):
            Model type of the English source checkpoint (`"bert"`, `"roberta"`, `"xlm-roberta"` or `"electra"`):
            the stock class a stock export is written as. Unset: `source_model_type`.
        source_name_or_path (`str`, *optional*):
            Hub id or path of the English source checkpoint (provenance, used by model cards).
        language (`str`, *optional*):
            ISO 639 code of the target language of the tokenizer and embeddings (as recorded by the corpus
            preparation and the tokenizer training; model cards read it). `None`: not recorded.
        mask_token_id (`int`, *optional*):
            Id of the tokenizer's mask token.
        pad_token_id, bos_token_id, eos_token_id (`int`, *optional*):
            Special-token ids of the target tokenizer (RoBERTa layout by default).
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Tie the MLM decoder to the target embeddings (Eq. 5).

    The attention implementation is chosen with `attn_implementation="sdpa"` (default), `"eager"`
    (the explicit softmax(QK^T)V in fp32), or a name registered with transformers' `AttentionInterface`.

    Example:

    ```python
    >>> from transformers import AutoConfig, AutoModelForMaskedLM

    >>> config = AutoConfig.from_pretrained("org/xpt-ko", trust_remote_code=True)  # any XPT repo or folder
    >>> config.num_hidden_layers  # reused English layers; ITL_in and ITL_out come on top
    >>> model = AutoModelForMaskedLM.from_config(config, trust_remote_code=True)  # that shape, random weights
    ```

    (With the `xpt` package installed: `from modeling_xpt import XPTConfig, XPTForMaskedLM`.)
    """

    model_type = "xpt"

    vocab_size: int = 50000
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    position_offset: int = 2
    use_itl_in: bool = True
    use_itl_out: bool = True
    adapter_size: int = 0
    pad_vocab_to_multiple_of: int = 64
    classifier_dropout: float | int | None = None
    classifier_pooling: Literal["first", "mean", "pair"] = "first"
    source_model_type: Literal["bert", "roberta"] = "roberta"
    source_architecture: SourceFamily | None = None
    source_name_or_path: str | None = None
    language: str | None = None
    mask_token_id: int | None = None
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = True

    def __post_init__(self, **kwargs):
        kwargs.setdefault("auto_map", dict(XPT_AUTO_MAP))
        super().__post_init__(**kwargs)

    def validate_architecture(self):
        """Checks beyond the field types (run by `@strict` whenever the config is made or loaded)."""
        super().validate_architecture()
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not a multiple of "
                             f"num_attention_heads={self.num_attention_heads}")
        if self.adapter_size < 0:
            raise ValueError(f"adapter_size={self.adapter_size}: use 0 (no adapters) or a bottleneck width > 0")
        if self.pad_vocab_to_multiple_of < 1:
            raise ValueError(f"pad_vocab_to_multiple_of={self.pad_vocab_to_multiple_of}: use 1 (no padding rows) or more")

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding and decoder weights: `vocab_size` rounded up to `pad_vocab_to_multiple_of`."""
        multiple = self.pad_vocab_to_multiple_of
        return -(-self.vocab_size // multiple) * multiple

    @property
    def head_dropout_prob(self) -> float:
        """Dropout of the task heads: `classifier_dropout`, else `hidden_dropout_prob`."""
        return self.classifier_dropout if self.classifier_dropout is not None else self.hidden_dropout_prob

    @property
    def num_total_layers(self) -> int:
        """Reused layers plus the ITLs that are switched on."""
        return self.num_hidden_layers + int(self.use_itl_in) + int(self.use_itl_out)
