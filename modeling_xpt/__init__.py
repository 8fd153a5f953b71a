"""XPT model package: configuration, model classes, conversion from BERT/RoBERTa, stock export.

`configuration_xpt.py` and `modeling_xpt.py` hold the model and travel with every saved folder as
Hub remote code; `conversion.py` (`from_source`, `to_stock`) and the command lines stay here.

Importing the package registers the XPT classes with the transformers Auto classes in this
process, and marks them for `save_pretrained` to copy `configuration_xpt.py` and
`modeling_xpt.py` next to the weights (with `auto_map`), so saved folders load anywhere with
`trust_remote_code=True`.
"""
import transformers

from . import modeling_xpt as _modeling

from .configuration_xpt import SUPPORTED_SOURCE_FAMILIES, XPT_AUTO_MAP, XPTConfig
from .conversion import from_source, to_stock
from .modeling_xpt import (
    XPTForMaskedLM,
    XPTForQuestionAnswering,
    XPTForSequenceClassification,
    XPTForTokenClassification,
    XPTModel,
    XPTPreTrainedModel,
)
from .parameter_groups import PARAMETER_GROUPS, parameter_group_of, parameter_groups, set_trainable_groups, trainable_groups
from .tokenizer_files import save_model_folder, save_tokenizer

# The Auto classes an XPT config maps to, as the saved config's auto_map names them (one list for both)
transformers.AutoConfig.register(XPTConfig.model_type, XPTConfig, exist_ok=True)
XPTConfig.register_for_auto_class()
for _auto_name, _reference in XPT_AUTO_MAP.items():
    if _auto_name != "AutoConfig":
        _model_class = getattr(_modeling, _reference.rsplit(".", 1)[1])
        getattr(transformers, _auto_name).register(XPTConfig, _model_class, exist_ok=True)
        _model_class.register_for_auto_class(_auto_name)

__all__ = [
    "PARAMETER_GROUPS",
    "SUPPORTED_SOURCE_FAMILIES",
    "XPTConfig",
    "XPTForMaskedLM",
    "XPTForQuestionAnswering",
    "XPTForSequenceClassification",
    "XPTForTokenClassification",
    "XPTModel",
    "XPTPreTrainedModel",
    "XPT_AUTO_MAP",
    "from_source",
    "parameter_group_of",
    "parameter_groups",
    "save_model_folder",
    "save_tokenizer",
    "set_trainable_groups",
    "to_stock",
    "trainable_groups",
]
