"""The table of post-training methods (training/methods.py): each entry builds its model, plans its
phases and describes itself on the model card, and a new method is one entry."""
from __future__ import annotations

import pytest

from modeling_xpt import PARAMETER_GROUPS, parameter_groups, set_trainable_groups, trainable_groups
from tests.model_factories import family, source, tok  # noqa: F401 (pytest fixtures)
from training.config import PostTrainConfig, describe_plan
from training.config_checks import validate_config
from training.methods import ALL_GROUPS, METHODS, PHASE1_GROUPS, Method


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_builds_the_model_its_entry_describes(name, source, tok):
    method = METHODS[name]
    model = method.build(source, tok, adapter_size=8)
    groups = parameter_groups(model)
    assert bool(groups["itl"]) == method.itl
    assert bool(groups["adapters"]) == method.adapters
    assert model.conversion_report["scratch"] == method.scratch
    if method.phase1_groups is not None:
        set_trainable_groups(model, method.phase1_groups)  # names the model knows
        assert set(trainable_groups(model)) <= set(method.phase1_groups)


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_plans_its_phases_from_the_config(name):
    config = PostTrainConfig(method=name, data="corpus", train_steps=10, phase1_steps=4, learning_rate=1e-3,
                             phase1_learning_rate=5e-3)
    phases = config.resolved_phases()
    assert sum(p.steps for p in phases) == 10  # every method spends the same budget
    if METHODS[name].phase1_groups is None:
        assert [(p.name, p.trainable_groups, p.learning_rate) for p in phases] == [("train", ALL_GROUPS, 1e-3)]
    else:
        assert [(p.name, p.steps, p.learning_rate) for p in phases] == [("phase1", 4, 5e-3), ("phase2", 6, 1e-3)]
        assert phases[0].groups() == list(METHODS[name].phase1_groups)
        assert phases[1].groups() == list(PARAMETER_GROUPS)


def test_xpt_phase1_trains_only_what_is_new():
    assert METHODS["xpt"].phase1_groups == PHASE1_GROUPS == ("target_embeddings", "itl", "lm_head_bias")
    assert METHODS["xpt-no-itl"].phase1_groups == PHASE1_GROUPS and not METHODS["xpt-no-itl"].itl


def test_the_card_describes_the_method_from_the_table(tok, tmp_path):
    from cards.folder import FolderInfo
    from cards.make_card import build_card_from
    from training.run_record import RunRecord

    for name, method in METHODS.items():
        info = FolderInfo(path=tmp_path, config={}, record=RunRecord(method=name))
        assert f"- **Method**: `{name}` — {method.card}." in build_card_from(info, tok, license="mit").text


def test_a_new_method_is_one_entry(monkeypatch, source, tok):
    entry = Method("xpt-adapters", "XPT with adapters too", PHASE1_GROUPS, adapters=True)
    monkeypatch.setitem(METHODS, entry.name, entry)
    config = PostTrainConfig(method=entry.name, data="corpus", train_steps=6, phase1_steps=2, adapter_size=8)
    validate_config(config, world_size=1, check_data=False)
    assert [p.name for p in config.resolved_phases()] == ["phase1", "phase2"]
    assert "xpt-adapters" in describe_plan(config, 1)
    groups = parameter_groups(entry.build(source, tok, adapter_size=config.adapter_size))
    assert groups["adapters"] and groups["itl"]

