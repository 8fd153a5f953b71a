"""Example texts of a model card: the Hub widget examples (`widget` in the card's metadata) and the
sentence of its usage code, from the user's texts, the post-training corpus's held-out sentences or
hand-written Korean sentences.
"""
from __future__ import annotations

import json
from pathlib import Path

from .data_sources import locate_spec
from .folder import FolderInfo
from .language import DEFAULT_LANGUAGE, language_name

# Sentences for fill-mask widgets: (sentence, word to mask). Hand-written Korean.
MASK_CANDIDATES = [
    ("대한민국의 수도는 서울이다.", "서울"),
    ("나는 도서관에서 책을 읽었다.", "책"),
    ("이 영화는 정말 재미있었다.", "영화"),
    ("오늘은 날씨가 맑고 따뜻하다.", "날씨"),
    ("우리는 내일 부산으로 여행을 간다.", "여행"),
    ("학생들이 운동장에서 축구를 하고 있다.", "축구"),
    ("봄이 오면 꽃이 피고 새가 운다.", "꽃"),
]
USAGE_EXAMPLE = MASK_CANDIDATES[0][0]  # the usage code's input when the card has no widget example
PAIR_EXAMPLE = ("한 남자가 기타를 치고 있다.", "남자가 악기를 연주하고 있다.")  # hand-written Korean
CLASSIFICATION_EXAMPLES = [
    "이 영화는 정말 재미있었다.",
    "배우들의 연기가 어색해서 너무 지루했다.",
    "음식은 맛있었지만 서비스가 느렸다.",
]


PUNCTUATION = ".,!?;:\"'()«»「」。、！？"


def _mask_candidates(texts: list[str], tokenizer) -> list[tuple[str, str]]:
    """(sentence, word to mask) for given sentences: the longest whitespace word that is one token
    of this tokenizer (else the longest word). A sentence that already holds the mask token is kept as it is.
    In a script written without spaces (Japanese, Chinese, Thai) the words are the tokenizer's pieces."""
    out = []
    for text in texts:
        text = text.strip()
        if tokenizer.mask_token in text:
            out.append((text, ""))
            continue
        words = [w.strip(PUNCTUATION) for w in text.split()]
        words = [w for w in words if w]
        if len(words) == 1:  # no spaces: mask a piece as the tokenizer cut it, never the whole sentence
            pieces = [p.lstrip("▁").removeprefix("##").strip(PUNCTUATION) for p in tokenizer.tokenize(text)]
            words = [p for p in pieces if p and p in text and p != words[0]]
        if not words:
            continue
        single = [w for w in words if len(tokenizer.tokenize(w)) == 1 and tokenizer.unk_token not in tokenizer.tokenize(w)]
        out.append((text, max(single or words, key=len)))
    return out


def unspaced_script(text: str) -> bool:
    """Mostly Chinese, Japanese kana or Thai characters: scripts that do not separate words by spaces."""
    letters = [ch for ch in text if ch.isalpha()]
    unspaced = [ch for ch in letters if "\u4e00" <= ch <= "\u9fff" or "\u3040" <= ch <= "\u30ff" or "\u0e00" <= ch <= "\u0e7f"]
    return bool(letters) and len(unspaced) > len(letters) / 2


def held_out_sentences(spec: str | None, count: int = 20) -> list[str]:
    """The first sentences of a prepared corpus's test split (else valid), for widget examples."""
    if not spec:
        return []
    for split in ("test", "valid"):
        folder = Path(spec) / split
        if not folder.is_dir():
            continue
        sentences = []
        for shard in sorted(folder.glob("*.jsonl")):
            with open(shard, encoding="utf-8") as handle:
                for line in handle:
                    text = json.loads(line).get("text", "")
                    # 3-30 words; a text in a script written without spaces counts its characters (8-80)
                    if 3 <= len(text.split()) <= 30 or (unspaced_script(text) and 8 <= len(text) <= 80):
                        sentences.append(text)
                    if len(sentences) >= count:
                        return sentences
        if sentences:
            return sentences
    return []


def fill_mask_widgets(tokenizer, count: int = 3, texts: list[str] | None = None) -> list[dict]:
    """Widget sentences with one word replaced by `tokenizer.mask_token`: from `texts` (given by
    the user, or held-out sentences of the corpus), else the hand-written Korean ones. Sentences
    whose masked word is a single token of this tokenizer come first (the model can predict them exactly)."""
    mask = tokenizer.mask_token
    if not mask:
        raise ValueError("the tokenizer has no mask token: a fill-mask widget is impossible")
    candidates = _mask_candidates(texts, tokenizer) if texts else MASK_CANDIDATES
    scored = []
    for index, (sentence, word) in enumerate(candidates):
        if not word:  # the user's own masked sentence
            scored.append((-1, index, sentence, mask))
            continue
        single = len(tokenizer.tokenize(word)) == 1 and tokenizer.unk_token not in tokenizer.tokenize(word)
        scored.append((0 if single else 1, index, sentence.replace(word, mask, 1), word))
    scored.sort()
    return [{"text": text, "example_title": f"{word} ({mask})" if word != mask else f"example {rank + 1}"}
            for rank, (_, _, text, word) in enumerate(scored[:count])]


def classification_widgets(texts: list[str] | None = None) -> list[dict]:
    """Widget examples of a text classifier: the first three of `texts`, else hand-written Korean reviews."""
    if texts:
        return [{"text": text, "example_title": f"example {i + 1}"} for i, text in enumerate(texts[:3])]
    return [{"text": text, "example_title": f"예시 {i + 1}"} for i, text in enumerate(CLASSIFICATION_EXAMPLES)]


def task_spec(info: FolderInfo) -> dict:
    """The task a fine-tuned folder was trained on (its results.json's `task_spec`; empty otherwise)."""
    return ((info.own_results or {}).get("task_spec") or {}) if info.is_fine_tuned else {}


def is_sentence_pair(info: FolderInfo) -> bool:
    """Fine-tuned on pairs of texts: its pipeline, and its card's usage code, take both."""
    return len(task_spec(info).get("text_columns") or []) == 2


def pair_example(info: FolderInfo, language: str = DEFAULT_LANGUAGE, texts: list[str] | None = None) -> tuple[str, str]:
    """The two texts of a sentence-pair example: the first two of `texts` (given by the user), else for a
    language other than Korean two held-out sentences of the post-training corpus, else a hand-written
    Korean pair that belongs together."""
    if not texts and language != DEFAULT_LANGUAGE:
        texts = held_out_sentences(locate_spec(info.data_spec))
    return (texts[0], texts[1]) if texts and len(texts) > 1 else PAIR_EXAMPLE


def visible_token(text) -> str:
    """A fill-mask answer as a reader can see it: the bare word-start piece decodes to nothing."""
    text = str(text)
    return text if text.strip() else "[word start]"


def widgets_for(info: FolderInfo, tokenizer, language: str = DEFAULT_LANGUAGE, texts: list[str] | None = None) -> list[dict]:
    """Widget examples: `texts` (given by the user), else for a language other than Korean the
    held-out sentences of the post-training corpus, else the hand-written Korean sentences. Empty
    for pipelines other than fill-mask and text classification, and for a sentence-pair model (the
    Hub's text-classification widget takes one text)."""
    if info.pipeline_tag not in ("fill-mask", "text-classification") or is_sentence_pair(info):
        return []
    if not texts and language != DEFAULT_LANGUAGE:
        texts = held_out_sentences(locate_spec(info.data_spec))
        if not texts:
            raise ValueError(f"no {language_name(language)} widget examples: the post-training corpus has no held-out "
                             "split here; pass --widget TEXT (repeatable)")
    if info.pipeline_tag == "fill-mask":
        return fill_mask_widgets(tokenizer, texts=texts)
    return classification_widgets(texts)
