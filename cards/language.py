"""The target language of a model card: its ISO 639 code (the card's `language`) and the English
name the card's text uses for it.
"""
from __future__ import annotations

from .data_sources import locate_spec
from .folder import FolderInfo
from .public import corpus_stats

DEFAULT_LANGUAGE = "ko"
# ISO 639-1 code -> English name, for the card's words (other codes are shown as they are).
LANGUAGE_NAMES = {
    "ko": "Korean", "ja": "Japanese", "zh": "Chinese", "th": "Thai", "ru": "Russian", "uk": "Ukrainian",
    "hi": "Hindi", "ar": "Arabic", "fa": "Persian", "he": "Hebrew", "el": "Greek", "bn": "Bengali", "ta": "Tamil",
    "ka": "Georgian", "hy": "Armenian", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
    "pt": "Portuguese", "nl": "Dutch", "pl": "Polish", "tr": "Turkish", "vi": "Vietnamese", "id": "Indonesian",
    "sw": "Swahili", "kk": "Kazakh", "mn": "Mongolian", "ur": "Urdu", "mr": "Marathi", "ne": "Nepali",
}


def language_name(code: str | None) -> str:
    """The English name of an ISO 639 code (Korean when none is given; an unlisted code as it is)."""
    return LANGUAGE_NAMES.get(code or DEFAULT_LANGUAGE, code or "")


def resolve_language(info: FolderInfo, explicit: str | None = None) -> str:
    """The target language: `explicit`, else the one recorded by the corpus preparation
    (stats.json of the post-training data), else the model's config.json (`language`, recorded from
    the corpus or the tokenizer's training_info.json when the model was made; a fine-tuned model
    inherits it), else Korean."""
    if explicit:
        return explicit
    stats = corpus_stats(locate_spec(info.data_spec)) or {}
    return stats.get("language") or info.config.get("language") or DEFAULT_LANGUAGE
