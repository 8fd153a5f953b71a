"""The options a generated card was written with, kept beside it so that `xpt-push` rewrites the card
with them (its own options override them, and it says what changes).

`xpt-card` (`cards.make_card.write_card`) records its options in `card_options.json` next to README.md;
that file is not one of the files a push uploads (`cards.folder.UPLOAD_NAMES`), so the paths it may
hold (`--results` files) stay on this machine. A generated card written before the file existed still
says its licence, base model and language in its metadata: those are read from it instead.
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenization.errors import UserError
from training.inputs import looks_like_hub_id
from training.run_record import CARD_FILE, hand_written_card
from training.run_record import CARD_OPTIONS_FILE as OPTIONS_FILE

# build_card's options that describe the model (not where this copy of the card goes: repo id, revision, variant)
CARD_OPTIONS = ("license", "base_model", "datasets", "results", "stock_repo_id", "custom_repo_id", "language", "widgets")
# how each option is spelled on the command line, for the log
FLAGS = {"license": "--license", "base_model": "--base-model", "datasets": "--dataset", "results": "--results",
         "stock_repo_id": "--stock-repo-id", "custom_repo_id": "--custom-repo-id", "language": "--language",
         "widgets": "--widget"}


def given(options: dict) -> dict:
    """The card options among `options` that were set (None and empty lists are not)."""
    return {key: options[key] for key in CARD_OPTIONS if options.get(key) not in (None, [], (), "")}


def save_card_options(model_dir: str | Path, options: dict) -> Path:
    """Record the card options of `write_card` (the `--results` files by absolute path)."""
    kept = given(options)
    if "results" in kept:
        kept["results"] = [str(Path(p).resolve()) for p in kept["results"]]
    for key in ("datasets", "widgets"):
        if key in kept:
            kept[key] = list(kept[key])
    out = Path(model_dir) / OPTIONS_FILE
    out.write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def recorded_card_options(model_dir: str | Path) -> dict:
    """The options the folder's generated card was written with: `card_options.json`, else the licence,
    base model and language in the card's own metadata. Empty for a hand-written card or none."""
    folder = Path(model_dir)
    if hand_written_card(folder):
        return {}
    sidecar = folder / OPTIONS_FILE
    if sidecar.is_file():
        try:
            data = json.loads(sidecar.read_text(encoding="utf-8"))
        except ValueError as error:
            raise UserError(f"{sidecar} does not parse ({error}): delete it, or write the card again with xpt-card") from None
        return given(data) if isinstance(data, dict) else {}
    card = folder / CARD_FILE
    if not card.is_file():
        return {}
    from huggingface_hub import ModelCard

    try:
        meta = ModelCard.load(card).data.to_dict()
    except Exception:  # metadata that does not parse states no option (the card is written anew)
        return {}
    found = {"license": meta.get("license") if meta.get("license") != "other" else None,
             "base_model": meta.get("base_model") if looks_like_hub_id(meta.get("base_model")) else None,
             "language": meta.get("language") if isinstance(meta.get("language"), str) else None}
    return given(found)


def _shown(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _comparable(key: str, value):
    if key == "results":
        return [str(Path(p).resolve()) for p in value]
    return list(value) if isinstance(value, (list, tuple)) else value


def merge_card_options(model_dir: str | Path, options: dict, log=print) -> dict:
    """`options` (a push's card options) over the ones the folder's card was written with; logs what is
    kept and what the push changes. A recorded `--results` file that is gone is refused in one line."""
    recorded = recorded_card_options(model_dir)
    merged = dict(options)
    kept, changed = [], []
    for key, value in recorded.items():
        if options.get(key) in (None, [], (), ""):
            merged[key] = value
            kept.append(f"{FLAGS[key]} {_shown(value)}")
        elif _comparable(key, options[key]) != _comparable(key, value):
            changed.append(f"{FLAGS[key]} {_shown(options[key])} (was {_shown(value)})")
    for path in recorded.get("results", []) if "results" not in given(options) else []:
        if not Path(path).is_file():
            raise UserError(f"results file {path}, which the card was written with, does not exist: pass --results "
                            "with its new path, or write the card again with xpt-card")
    if kept:
        log(f"README.md keeps the options it was written with: {'; '.join(kept)}")
    if changed:
        log(f"README.md changes: {'; '.join(changed)}")
    return merged
