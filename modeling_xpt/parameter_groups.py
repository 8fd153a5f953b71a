"""The parameter groups of an XPT model that post-training phases train or freeze (Section 3.2: phase 1
trains E_T and the ITLs, the reused source parameters frozen; phase 2 trains everything).

Groups are named by parameter name, so they are plain data for configs and cards, and they cover
every parameter exactly once (a tied weight once). Not part of the Hub remote code: a model loaded
for use never needs them.
"""
from __future__ import annotations

from torch import nn

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


def parameter_groups(model: nn.Module) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Every parameter of `model`, exactly once (tied weights count once), under its group name.
    All names of `PARAMETER_GROUPS` are present; groups the model lacks are empty lists."""
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {name: [] for name in PARAMETER_GROUPS}
    for name, param in model.named_parameters():
        groups[parameter_group_of(name)].append((name, param))
    return groups


def set_trainable_groups(model: nn.Module, group_names) -> None:
    """`requires_grad=True` on the parameters of `group_names`, False on all others."""
    group_names = [group_names] if isinstance(group_names, str) else list(group_names)
    unknown = sorted(set(group_names) - set(PARAMETER_GROUPS))
    if unknown:
        raise ValueError(f"Unknown parameter group(s) {unknown}; valid groups are {list(PARAMETER_GROUPS)}")
    for group, params in parameter_groups(model).items():
        for _, param in params:
            param.requires_grad_(group in group_names)


def trainable_groups(model: nn.Module) -> list[str]:
    """Groups with at least one parameter that requires grad."""
    return [g for g, ps in parameter_groups(model).items() if any(p.requires_grad for _, p in ps)]
