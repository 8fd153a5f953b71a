"""Cleaning of Wikipedia-style paragraphs and a rule-based Korean sentence splitter.

Splitter choice
---------------
``kss`` (6.0.6, the maintained Korean splitter on PyPI) was measured against this rule set on
real paragraphs (``../shared/data/corpus/ko_formal.txt.gz``); see ``docs/BENCHMARKS.md``,
section "Tokenizer and corpus", for the numbers and the command. kss pulls in 16
dependencies (scipy, networkx, pytest, an exact pin ``emoji==1.2.0``, the pure-Python
morphological analyser ``pecab``...) and without the C++ ``mecab`` backend it split about 2
paragraphs per CPU-second on a 2-core Xeon: Korean Wikipedia (~600K articles, several million
paragraphs) would take weeks. Wikipedia and news text ends sentences with punctuation, where the
rules below agree with kss on nearly all boundaries (precision 0.99, recall 0.95 against it),
thousands of times faster, with no dependency. kss's extra strength (sentences without punctuation, as in
colloquial reviews) matters little for the paper's Wikipedia corpus, and those short texts stay
whole, which is what the post-training wants anyway.

Rules (applied per paragraph; a line break is always a boundary):

1. A boundary follows a run of ``.``, ``!``, ``?`` (or ``。！？``), optionally followed by closing
   quotes/brackets, then whitespace; or follows such a run directly when a Hangul syllable is
   on both sides (``했다.그리고``, common in unedited text).
2. Not after an ellipsis (``..``, ``…``): it usually marks a pause inside a sentence.
3. Not when the word before the period is a number (``2009. 8. 11.`` dates, ``1.`` list items),
   a single Latin letter or dotted initials (``J. R. R.``, ``U.S.``), or a known Latin
   abbreviation (``Mr.``, ``Dr.``, ``St.``, ``vs.``, ``e.g.``...).
4. Not inside balanced quotes or brackets (“ ” ‘ ’ " ' ( ) [ ] 「 」 『 』 《 》 〈 〉): a quoted
   sentence stays inside the sentence that quotes it. A quote type that is unbalanced in the
   paragraph is ignored (an apostrophe must not switch the splitter off).
"""
from __future__ import annotations

import bisect
import html
import re
import unicodedata

# ---------------------------------------------------------------------------------- cleaning

# Tags removed with their content (<ref>...</ref>, <math>...</math>; self-closing <ref name=a/> too).
_CONTENT_TAGS = "ref|math|code|pre|score|syntaxhighlight|gallery|timeline"
_TAG = re.compile(r"<\s*(/\s*)?(" + _CONTENT_TAGS + r")\b([^<>]*)>", re.I)
# HTML and wiki tags removed, their content kept: only these names, with attributes as HTML writes them, so
# that text in angle brackets (<YLE>, <Avatar>, <UN 2030 의제>) stays.
_HTML_TAGS = (_CONTENT_TAGS + "|a|abbr|b|bdi|bdo|big|blockquote|br|caption|categorytree|ce|center|chem|cite|col|colgroup|"
              "dd|del|dfn|div|dl|dt|em|font|h[1-6]|hiero|hr|i|imagemap|img|includeonly|indicator|ins|kbd|li|mapframe|"
              "mark|noinclude|nowiki|ol|onlyinclude|p|poem|q|rb|references|rp|rt|rtc|ruby|s|samp|section|small|"
              "source|span|strike|strong|sub|sup|table|tbody|td|templatestyles|tfoot|th|thead|tr|tt|u|ul|var|wbr|"
              # the rest of HTML's elements, for web text; and namespaced tags (Word's <o:p>)
              "address|area|article|aside|audio|base|body|button|canvas|data|datalist|details|dialog|embed|"
              "fieldset|figcaption|figure|footer|form|head|header|hgroup|html|iframe|input|label|legend|link|main|"
              "map|menu|meta|meter|nav|nobr|noscript|object|optgroup|option|output|param|picture|progress|script|"
              "search|select|slot|style|summary|svg|template|textarea|time|title|track|video|[a-z]+:[a-z]+")
_HTML = re.compile(r"</?\s*(?:" + _HTML_TAGS + r")"
                   r"(?:\s+[^\s<>=/\"']+(?:\s*=\s*(?:\"[^\"<>]*\"|'[^'<>]*'|[^\s<>\"']+))?)*\s*(?:/\s*)?>", re.I)
_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_LINK = re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]")
_EXTLINK = re.compile(r"\[(?:https?:)?//[^\s\]]+\s*([^\]]*)\]")
_BOLD = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\s*[(（]\s*[,;:、·/\s]*\s*[)）]")  # "(, )" left where templates were removed
_LEAD_PUNCT_IN_PARENS = re.compile(r"([(（])\s*[,;:、]\s*")  # "( , 1950년)" -> "(1950년)"
_CTRL = re.compile(r"[\u0000-\u0008\u000e-\u001b\u007f\u200b-\u200f\u202a-\u202e\ufeff]")
_WS = re.compile(r"\s+")
_HEADING = re.compile(r"^\s*=+[^=].*=+\s*$")
_TABLE = re.compile(r"^\s*(\{\||\|\}|\|[-+]|\|.*\s\|\|\s|!\s.*\s!!\s)")  # {| |} |- |+, "| a || b", "! a !! b"
_NAMESPACE = re.compile(r"^\s*(분류|파일|File|Category|그림|Image|틀|Template)\s*:", re.I)
_LIST = re.compile(r"^\s*[*#:;]+\s*")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")

# Script filters of the corpus preparation, by name: a kept sentence has at least one character of
# its language's script. Korean (Hangul syllables) is the default and the tested case.
SCRIPTS = {
    "hangul": r"[\uac00-\ud7a3]",
    "kana-han": r"[\u3040-\u30ff\u4e00-\u9fff]",
    "han": r"[\u3400-\u4dbf\u4e00-\u9fff]",
    "thai": r"[\u0e00-\u0e7f]",
    "cyrillic": r"[\u0400-\u04ff]",
    "devanagari": r"[\u0900-\u097f]",
    "arabic": r"[\u0600-\u06ff\u0750-\u077f]",
    "hebrew": r"[\u0590-\u05ff]",
    "greek": r"[\u0370-\u03ff]",
    "bengali": r"[\u0980-\u09ff]",
    "tamil": r"[\u0b80-\u0bff]",
    "georgian": r"[\u10a0-\u10ff]",
    "armenian": r"[\u0530-\u058f]",
    "latin": r"[A-Za-z\u00c0-\u024f]",
}
# ISO 639-1 language code -> script name (languages not listed: choose --script yourself).
LANGUAGE_SCRIPTS = {
    "ko": "hangul", "ja": "kana-han", "zh": "han", "th": "thai",
    **dict.fromkeys(("ru", "uk", "be", "bg", "sr", "mk", "kk", "ky", "mn", "tg"), "cyrillic"),
    **dict.fromkeys(("hi", "mr", "ne", "sa"), "devanagari"),
    **dict.fromkeys(("ar", "fa", "ur", "ps"), "arabic"),
    "he": "hebrew", "el": "greek", "bn": "bengali", "ta": "tamil", "ka": "georgian", "hy": "armenian",
    **dict.fromkeys(("de", "fr", "es", "it", "pt", "nl", "pl", "cs", "sv", "da", "fi", "tr", "vi", "id", "ms", "ro",
                     "hu", "sw", "tl", "en"), "latin"),
}


def script_filter(language: str | None, script: str | None = "auto"):
    """(script name or None, compiled pattern or None) for `language` and `script` ("auto": the
    language's script from LANGUAGE_SCRIPTS; "none" or language "none": no filter). Unknown
    names are a ValueError saying what to pass."""
    if script in (None, "none") or language in (None, "none"):
        if script not in (None, "none", "auto"):
            return script_filter("x", script)
        return None, None
    if script == "auto":
        script = LANGUAGE_SCRIPTS.get(language)
        if script is None:
            raise ValueError(f"no script filter is known for language {language!r}: pass --script with one of "
                             f"{', '.join(SCRIPTS)}, or --script none")
    if script not in SCRIPTS:
        raise ValueError(f"unknown script {script!r}: choose one of {', '.join(SCRIPTS)} or none")
    return script, re.compile(SCRIPTS[script])


def _drop_content_tags(text: str) -> str:
    """``text`` without the tags of ``_CONTENT_TAGS`` and their content: each opening tag up to the first
    closing tag of its name after it, or a self-closing tag alone. An opening tag never closed stays (the HTML
    rule removes the tag, not the text after it). One pass over the tags, so linear in the length of
    ``text`` however many tags are left open."""
    tags = list(_TAG.finditer(text))
    if not tags:
        return text
    closer_after: list[int | None] = [None] * len(tags)  # the first closing tag of the same name after each tag
    next_closer: dict[str, int] = {}
    for i in range(len(tags) - 1, -1, -1):
        name = tags[i].group(2).lower()
        closer_after[i] = next_closer.get(name)
        if tags[i].group(1):
            next_closer[name] = i
    kept, pos = [], 0
    for i, m in enumerate(tags):
        if m.start() < pos or m.group(1):  # inside a removed span, or a closing tag without its opening tag
            continue
        if m.group(3).rstrip().endswith("/"):
            end = m.end()
        elif closer_after[i] is not None:
            end = tags[closer_after[i]].end()
        else:
            continue
        kept.append(text[pos:m.start()])
        pos = end
    kept.append(text[pos:])
    return "".join(kept)


def clean_paragraph(line: str) -> tuple[str, str | None]:
    """Clean one paragraph (a line of text). Returns ``(text, None)`` or ``("", reason)``.

    Reasons: ``empty``, ``heading`` (``== ... ==``), ``markup`` (table rows, category/file lines).
    The text is NFC-normalised, HTML entities decoded, tags/templates/link brackets removed,
    empty parentheses left by removed templates deleted and whitespace collapsed.
    """
    if not line or line.isspace():
        return "", "empty"
    if _HEADING.match(line):
        return "", "heading"
    if _TABLE.match(line) or _NAMESPACE.match(line):
        return "", "markup"
    t = unicodedata.normalize("NFC", line)
    if "&" in t:
        t = html.unescape(t)
    if "<" in t:
        t = _drop_content_tags(t)
        t = _HTML.sub("", t)
    if "{{" in t:
        for _ in range(3):  # nested templates, innermost first
            t2 = _TEMPLATE.sub("", t)
            if t2 == t:
                break
            t = t2
    if "[" in t:
        t = _LINK.sub(r"\1", t)
        t = _EXTLINK.sub(r"\1", t)
    if "''" in t:
        t = _BOLD.sub("", t)
    t = _LIST.sub("", t)
    if "(" in t or "（" in t:
        t = _WS.sub(" ", t)  # runs of one space first: long runs made _EMPTY_PARENS backtrack for minutes
        t = _EMPTY_PARENS.sub("", t)
        t = _LEAD_PUNCT_IN_PARENS.sub(r"\1", t)
    t = _CTRL.sub("", t)
    t = _WS.sub(" ", t).strip()
    if not t:
        return "", "empty"
    return t, None


# ------------------------------------------------------------------------- sentence splitting

_CLOSERS = "\"'”’」』》〉)]）］"
# A run of terminators is matched from its first character only and never given back (a lookahead and its
# backreference, the atomic group of Python 3.10): a long run of periods ("가" + 8,000 "." + "x") made the
# plain pattern retry every shorter run at every position, quadratic in the run's length. Giving characters
# back could never help: neither a terminator nor a closer is whitespace or Hangul.
_TERMINATORS = "[.!?。！？…]"
_CAND = re.compile(r"(?<!" + _TERMINATORS + r")(?=(?P<term>" + _TERMINATORS + r"+))(?P=term)"
                   r"(?=(?P<close>[" + re.escape(_CLOSERS) + r"]*))(?P=close)(?P<ws>\s+|(?=[\uac00-\ud7a3]))")
_ABBREV = {
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "eg", "e.g", "i.e", "ie", "no", "vol",
    "pp", "p", "fig", "inc", "ltd", "co", "corp", "dept", "est", "approx", "jan", "feb", "mar", "apr",
    "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mt", "ft", "gen", "col", "lt", "sgt", "rev",
    "op", "cf", "al", "ed", "eds", "ph.d", "u.s", "u.k", "a.m", "p.m", "d.c",
}
_PAIRS = {"“": "”", "‘": "’", "「": "」", "『": "』", "《": "》", "〈": "〉", "(": ")", "[": "]", "（": "）", "［": "］"}
_SYMMETRIC = "\"'"
_QUOTE_CHARS = re.compile("[" + re.escape("".join(_PAIRS) + "".join(_PAIRS.values()) + _SYMMETRIC) + "]")
_LAST_WORD = re.compile(r"(\S+)$")
_NUMBER = re.compile(r"^[\d.,:/-]+$")
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)*[A-Za-z]$")


def _protected(text: str) -> list[tuple[int, int]]:
    """Spans inside balanced quotes/brackets (outermost only); unbalanced types are ignored."""
    marks = [(m.start(), m.group()) for m in _QUOTE_CHARS.finditer(text)]
    if not marks:
        return []
    counts: dict[str, int] = {}
    for _, c in marks:
        counts[c] = counts.get(c, 0) + 1
    ok = {o for o, c in _PAIRS.items() if counts.get(o, 0) == counts.get(c, 0) and counts.get(o, 0)}
    ok |= {q for q in _SYMMETRIC if counts.get(q, 0) and counts[q] % 2 == 0}
    closer_of = {c: o for o, c in _PAIRS.items()}
    spans, stack = [], []  # stack of (opener, start)
    for pos, c in marks:
        if c in _SYMMETRIC:
            if c not in ok:
                continue
            if stack and stack[-1][0] == c:
                o, start = stack.pop()
                if not stack:
                    spans.append((start, pos))
            else:
                # an apostrophe between letters (don't, 1990's) does not open a quote
                if c == "'" and 0 < pos < len(text) - 1 and text[pos - 1].isalnum() and text[pos + 1].isalnum():
                    continue
                stack.append((c, pos))
        elif c in _PAIRS:
            if c in ok:
                stack.append((c, pos))
        elif closer_of.get(c) in ok and stack and stack[-1][0] == closer_of[c]:
            o, start = stack.pop()
            if not stack:
                spans.append((start, pos))
    return spans


def _is_abbreviation(before: str) -> bool:
    m = _LAST_WORD.search(before)
    if not m:
        return False
    w = m.group(1).lstrip("\"'“‘([（")
    if not w:
        return False
    if _NUMBER.match(w):
        return True
    if _INITIALS.match(w):
        return True
    return w.lower().rstrip(".") in _ABBREV


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with the rules in the module docstring."""
    out: list[str] = []
    for para in text.splitlines():
        para = para.strip()
        if not para:
            continue
        start = 0
        spans = None
        for m in _CAND.finditer(para):
            term = m.group("term")
            if "…" in term or ".." in term:
                continue  # ellipsis
            end_term = m.start("ws")
            if not m.group("ws"):  # no space: only between Hangul syllables, and not after a closer
                if m.group("close") or not (m.start() > 0 and _HANGUL.match(para[m.start() - 1])):
                    continue
            # the last 64 characters hold any abbreviation or number that ends there, and a window keeps a
            # paragraph with many periods and no spaces (a base64 blob, minified code) linear, not quadratic
            if term[0] in ".。" and _is_abbreviation(para[max(start, m.start() - 64):m.start()]):
                continue
            if spans is None:
                spans = _protected(para)  # in order and disjoint: the last one starting before end_term decides
                starts = [a for a, _ in spans]
            i = bisect.bisect_left(starts, end_term) - 1
            if i >= 0 and end_term <= spans[i][1]:  # still inside quotes/brackets after the closers
                continue
            sent = para[start:end_term].strip()
            if sent:
                out.append(sent)
            start = m.end()
        rest = para[start:].strip()
        if rest:
            out.append(rest)
    return out
