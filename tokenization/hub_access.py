"""Whether the Hugging Face Hub can be asked at all, known before a download is tried: offline mode, or a host
name that does not resolve (no network). Used wherever a command would otherwise wait through huggingface_hub's
retries (about 23 s per file) before it fails: the corpus's ``hf:`` inputs (`tokenization.prepare_corpus`) and
the Hub ids of post-training and fine-tuning (`training.inputs`)."""
from __future__ import annotations

import os
import socket


def hub_offline() -> bool:
    """Offline mode: HF_HUB_OFFLINE as huggingface_hub read it when imported, or as set since."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "")
    return bool(constants.HF_HUB_OFFLINE) or value.strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_resolves() -> bool:
    """Whether the Hub's host name resolves here: one name lookup, no request. Without it, huggingface_hub
    retries each file five times over about 23 s before it reports the Hub unreachable. Behind a proxy,
    which looks names up itself, the answer is True."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def in_hub_cache(repo_id: str, filenames: tuple[str, ...]) -> bool:
    """Whether one of `filenames` of the Hub model repo is in the local Hub cache (read from disk, no network);
    False for a name that is no valid repo id."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in filenames)
    except HFValidationError:
        return False
