"""What post-training and fine-tuning call to publish the folder they wrote: the checks they make
before training (repo id, licence, token) and the push itself. Training finds this module through the
installed project's `xpt.publishers` entry point (`training/publishing.py`), so training/ imports
nothing from cards/, which builds on it.
"""
from __future__ import annotations

from tokenization.errors import UserError
from training.inputs import hub_offline

from .licenses import known_license, license_id_problem, license_unknown
from .make_card import check_base_model
from .push import PushError, check_repo_id, find_token, push_to_hub

Error = PushError


def check(repo_id: str, *, needs_token: bool = False, sources: list | None = None, license: str | None = None,
          method: str | None = None, fix: str = "pass --license ID", base_model: str | None = None) -> None:
    """Before any training: `repo_id` valid on the Hub; when `needs_token`, the Hub reachable with a
    token; when `sources` is given, a licence for the weights (`license`, else the first known one among
    `sources`: the English source and the models a fine-tune started from; `fix` names the option that
    sets it); `base_model` (the card's, when given) a Hub id. Raises `PushError` with `field` "repo_id",
    "token", "license" or "base_model" and a one-line message."""
    problem = None
    try:
        check_repo_id(repo_id)
    except PushError as error:
        problem = ("repo_id", str(error).removesuffix(" (nothing uploaded)"))
    if problem is None and sources is not None and known_license(license, method, sources) is None:
        problem = ("license", str(license_unknown(method, next((s for s in sources if s), None), fix=fix)))
    if problem is None and license and license_id_problem(license):
        problem = ("license", license_id_problem(license))
    if problem is None:
        try:
            check_base_model(base_model)
        except UserError as error:
            problem = ("base_model", str(error))
    if problem is None and needs_token:  # last: the options first, then what this machine lacks
        if hub_offline():
            problem = ("token", "offline mode (HF_HUB_OFFLINE is set) cannot reach the Hub; unset it")
        elif not find_token():
            problem = ("token", "no Hugging Face token; run `hf auth login` (or set HF_TOKEN)")
    if problem is not None:
        error = PushError(problem[1])
        error.field = problem[0]
        raise error


def push(model_dir, repo_id: str, **kwargs):
    """`cards.push.push_to_hub`: card, validation, fresh-process load check, upload (or dry run)."""
    return push_to_hub(model_dir, repo_id, **kwargs)
