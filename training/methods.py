"""The post-training methods: one entry each says how its model is built from the English source,
which phases it runs with which parameter groups, and how the model card describes it.

| method | model | phases (trainable groups) |
| --- | --- | --- |
| `xpt` | ITLs in and out | phase1 (`PHASE1_GROUPS`: `target_embeddings`, `itl`, `lm_head_bias`), phase2 (all) |
| `xpt-no-itl` | no ITLs (ablation) | as `xpt` |
| `xpt-sp` | ITLs in and out | one phase, all groups |
| `scratch` | same architecture, every weight random | one phase, all groups |
| `adapters` | bottleneck adapters (`adapter_size`), no ITLs | one phase, all groups |

Steps, learning rates and warmup come from the config (`PostTrainConfig.resolved_phases`): phase 1
runs `phase1_steps` at `phase1_learning_rate`, phase 2 (or the single phase) the rest of `train_steps`,
so every method spends the same `train_steps` on the same batches, and sweeps only override
`--phase1-steps` / `--phase1-learning-rate`. Adding a method is one entry in `METHODS`.

This module imports nothing heavy and nothing else of the project when it loads: the config
(`--help`, `--dry-run`) and the model card read it without torch; `Method.build` loads the model
package when a run builds its model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from modeling_xpt import XPTForMaskedLM

ALL_GROUPS = "all"  # a phase that trains every parameter group (`modeling_xpt.PARAMETER_GROUPS`)
# Phase 1 of XPT: only what is new for the target language trains.
PHASE1_GROUPS = ("target_embeddings", "itl", "lm_head_bias")


@dataclass(frozen=True)
class Method:
    name: str
    card: str  # what the model card says the method is
    # two phases, "phase1" training these groups and "phase2" training all; None: one phase, "train", training all
    phase1_groups: tuple[str, ...] | None
    itl: bool = True  # ITL_in and ITL_out around the reused layers
    adapters: bool = False  # bottleneck adapters of `adapter_size` in the reused layers
    scratch: bool = False  # every weight random: nothing of the English model is used

    def build(self, source: str, tokenizer, *, embedding_init: str = "random", itl_init: str = "random",
              adapter_size: int = 64) -> XPTForMaskedLM:
        """The model this method starts from, converted from the English `source` for `tokenizer`
        (`embedding_init`, `itl_init`, `adapter_size`: as the config fields of those names)."""
        from modeling_xpt import from_source  # loads torch and transformers: only when a model is built

        return from_source(source, tokenizer, init=embedding_init, itl_init=itl_init,
                           use_itl_in=self.itl, use_itl_out=self.itl,
                           adapter_size=adapter_size if self.adapters else 0, scratch=self.scratch)


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("xpt", "XPT: new Korean embeddings and two Implicit Translation Layers around the reused English layers, "
                  "two-phase post-training (phase 1 trains only the new parts, phase 2 trains everything)", PHASE1_GROUPS),
    Method("xpt-sp", "XPT-SP: the XPT architecture trained in a single phase with nothing frozen", None),
    Method("scratch", "Scratch baseline: the same architecture with every weight random, trained on Korean only "
                      "(no English weights are used)", None, scratch=True),
    Method("adapters", "Adapters baseline: new Korean embeddings and bottleneck adapters in the reused English layers",
           None, itl=False, adapters=True),
    Method("xpt-no-itl", "XPT without Implicit Translation Layers (ablation): new Korean embeddings, reused English "
                         "layers", PHASE1_GROUPS, itl=False),
)}
