"""The licence of a model's weights: given by the user, or the known licence of the English source
(or of the model a fine-tune started from). Nothing is guessed: an unknown licence is an error
where one is required (the CLIs, the push) and "not stated" in a card built from Python.
"""
from __future__ import annotations

from pathlib import Path

from .folder import CARD_FILE, FolderInfo, hub_source_id
from .public import public_ref

# Licences of English sources, by Hub id prefix (the `license` tag of each model's Hub page). A model
# made from one of them carries its licence unless --license says otherwise; any other source (KLUE's
# models among them: their pages carry no licence tag) must be given one.
SOURCE_LICENSES = (
    (("FacebookAI/roberta-", "roberta-", "FacebookAI/xlm-roberta-", "xlm-roberta-"), "mit"),
    (("google-bert/", "bert-base-", "bert-large-", "google/electra-", "sentence-transformers/all-MiniLM-",
      "distilroberta-", "distilbert/distilroberta-"), "apache-2.0"),
)
# `license_name` of a card whose weights have no known licence (its `license` is "other").
UNSPECIFIED_LICENSE = "unspecified"
# The Hub's licence identifiers (hub-docs, repositories-licenses.md): the Hub refuses a card whose `license`
# is not one of them. The list only catches a known id written another way ("Apache-2.0"); an id it lacks
# (one the Hub added since) is left to the Hub.
HUB_LICENSES = frozenset("""
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib
pddl lgpl-lr deepfloyd-if-license llama2 gemma unknown other
""".split())


def license_id_problem(licence: str) -> str | None:
    """Why the Hub would refuse `licence` as a card's `license` id, when it is a known id written otherwise."""
    if licence in HUB_LICENSES:
        return None
    written = "-".join(licence.strip().lower().replace("_", " ").split())
    if written in HUB_LICENSES:
        return f"licence {licence!r} is not a Hub licence id: the Hub writes it {written!r}"
    return None


class LicenseUnknown(ValueError):
    """No --license was given and the source model's licence is not known."""


def source_license(source: str | None) -> str | None:
    """The licence of an English source given as a Hub id (known prefixes) or as a local folder whose
    own model card states one."""
    if not source:
        return None
    hub = hub_source_id(source)
    if hub:
        for prefixes, licence in SOURCE_LICENSES:
            if hub.startswith(prefixes):
                return licence
    folder = Path(str(source).split(" (")[-1].rstrip(")")) if "(" in str(source) else Path(str(source))
    card = folder / CARD_FILE
    if card.is_file():
        try:
            from huggingface_hub import ModelCard

            licence = ModelCard.load(card).data.to_dict().get("license")
            # "other" names no licence here (a card this package wrote without one says "other")
            return licence if isinstance(licence, str) and licence != "other" else None
        except Exception:  # an unreadable card states nothing
            return None
    return None


def known_license(explicit: str | None, method: str | None, sources) -> str | None:
    """The licence of the weights: `explicit`, else the first known licence among `sources` (Hub
    ids, ``package:NAME`` or local folders with a model card: the English source, or the model a
    fine-tune started from). A scratch model reuses no source weights: only `explicit` counts."""
    if explicit:
        return explicit
    if method == "scratch":
        return None
    for candidate in sources:
        licence = source_license(candidate)
        if licence:
            return licence
    return None


def license_unknown(method: str | None, source: str | None, fix: str = "pass --license ID") -> LicenseUnknown:
    """The one-line error for weights whose licence is neither given nor known; `fix` names the option."""
    why = ("a scratch model has no source licence" if method == "scratch"
           else f"source {public_ref(source, 'model')!r} has no recorded licence")
    return LicenseUnknown(f"licence of the weights unknown ({why}): {fix} (the source model's licence, compatible "
                          "with the post-training data's terms)")


def resolve_license(info: FolderInfo, explicit: str | None = None, *, required: bool = False,
                    base_model: str | None = None, fix: str = "pass --license ID") -> str | None:
    """The licence of the weights: `explicit`, else the known licence of the model a fine-tune
    started from, else the English source's (a scratch model has no source: it needs `explicit`).
    None when unknown, or LicenseUnknown (whose message ends with `fix`) when `required`."""
    method = info.method
    fine_tuned_from = (info.own_results or {}).get("model") if info.is_fine_tuned else None
    licence = known_license(explicit, method, [base_model, fine_tuned_from, info.config.get("source_name_or_path"),
                                               info.source])
    if licence is None and required:
        raise license_unknown(method, info.source, fix)
    return licence
