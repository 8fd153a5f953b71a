"""Train a Korean tokenizer with the ``tokenizers`` library and save it as a standard fast tokenizer.

    xpt-train-tokenizer --corpus DIR_OR_FILE --vocab-size 50000 --family roberta --out DIR

Design
------
* Model: Unigram (default) or BPE; pre-tokeniser and decoder: ``Metaspace`` ("▁", SentencePiece
  style, ``prepend_scheme="first"``), so Korean words keep their word-initial marker and decoding
  restores the spaces exactly.
* Normaliser: NFKC (default), NFC or none, then whitespace runs collapsed to one space and
  trailing space removed; with the Metaspace decoder, ``decode(encode(x))`` is
  ``" ".join(nfkc(x).split())`` (SentencePiece's normalisation) for text without unknown characters.
  NFKC maps Korean compatibility jamo (U+3131-U+318E, as typed alone: ``ㅋㅋ``, ``ㅠㅠ``) to conjoining
  jamo, so decoded text and fill-mask predictions show ``ᄏᄏ`` for ``ㅋㅋ``, and composes a typed
  ``ㄱㅏ`` into ``가``. ``--normalizer nfc`` keeps them as typed (and full-width Latin and other
  compatibility characters too); NFKC stays the default, with which the published figures were measured.
* Special tokens and post-processor of the source family:

  - ``roberta``: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, ``<mask>`` 4; single
    ``<s> A </s>``, pair ``<s> A </s></s> B </s>``, no token types (as RobertaTokenizer).
  - ``bert``: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4; single
    ``[CLS] A [SEP]``, pair ``[CLS] A [SEP] B [SEP]`` with token types 0/1 (as BertTokenizer).

  The mask token is an ``AddedToken`` with ``lstrip=True`` (RoBERTa's own setting), also for the
  BERT family: with Metaspace, a space left in front of the mask would become a stray ``▁``
  piece (BERT's whitespace pre-tokeniser drops it; Metaspace does not).
* Saved with ``PreTrainedTokenizerFast.save_pretrained`` (:func:`save_tokenizer`): ``tokenizer.json`` +
  ``tokenizer_config.json``. transformers v5 would label this ``TokenizersBackend``, a name v4
  does not know; the saved label is ``PreTrainedTokenizerFast`` (the same class in v5), and
  ``AutoTokenizer.from_pretrained(dir)`` loads exactly this ``tokenizer.json`` (Unigram/Metaspace)
  with no custom code in both. Relabelling it as ``RobertaTokenizer``/``BertTokenizer`` would make v5
  rebuild a byte-level BPE / WordPiece from the vocabulary and Korean would collapse, so the
  label stays the generic fast tokenizer (the tests check the loaded class and the token counts).
* Training streams the texts through ``train_from_iterator``; only the trainer's word counts
  are held in memory, never the corpus.
* Same text, same ``tokenizer.json``: the ``tokenizers`` Unigram trainer visits words in a hash
  order seeded afresh in every process, which changes its scores in the last digits and the
  order (ids) of pieces with near-equal scores, and it hands the fallback scores of characters
  that EM dropped out in that order too. The trained Unigram model is therefore rewritten in a
  canonical form: fallback scores given to those characters in code-point order, scores rounded
  to ``SCORE_DECIMALS`` places, pieces ordered by (score, piece). A score within about 1e-11 of
  a rounding boundary could still come out differently; BPE training is deterministic as is.

Tiny data: when ``vocab_size`` is more than the text supports, the ``tokenizers`` trainers stop
early, so :func:`train_tokenizer` returns a tokenizer with a *smaller* vocabulary (logged as a
warning; check ``len(tok)``). The CLI refuses that case with exit code 2. Unigram may also
end slightly *above* ``vocab_size`` on small data, because the trainer keeps every character of
the text as a piece (e.g. 132 for 120 on 44 sentences); use ``len(tok)``, not the request. A ``vocab_size`` smaller
than the number of distinct characters (+ special tokens) raises ``InputError`` (a
``ValueError``-like user error), for Unigram and BPE alike (BPE's trainer would keep every character
and learn no merge at all; Unigram's would never end where the characters exceed the vocabulary by
a tenth, so that case is refused as soon as the text is read).
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# One implementation for every folder the package writes: tokenizer_config.json names
# PreTrainedTokenizerFast, which transformers 4.x loads too.
from modeling_xpt.tokenizer_files import TRAINING_INFO, recorded_language, save_tokenizer

from .corpus_io import SPLITS, STATS_FILE, Utf8Counter, corpus_split, iter_texts
from .errors import InputError, command

logger = logging.getLogger(__name__)

FAMILIES = {
    # name: (ordered special tokens -> ids 0..4, attribute names for transformers)
    "roberta": {
        "order": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        "attrs": dict(bos_token="<s>", cls_token="<s>", pad_token="<pad>", eos_token="</s>",
                      sep_token="</s>", unk_token="<unk>", mask_token="<mask>"),
        "single": "<s> $A:0 </s>:0",
        "pair": "<s>:0 $A:0 </s>:0 </s>:0 $B:0 </s>:0",
        "template_tokens": ["<s>", "</s>"],
        "model_input_names": ["input_ids", "attention_mask"],
    },
    "bert": {
        "order": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        "attrs": dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]",
                      mask_token="[MASK]"),
        "single": "[CLS]:0 $A:0 [SEP]:0",
        "pair": "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        "template_tokens": ["[CLS]", "[SEP]"],
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
    },
}
MODELS = ("unigram", "bpe")
NORMALIZERS = ("nfkc", "nfc", "none")


def build_normalizer(name: str) -> normalizers.Normalizer:
    if name not in NORMALIZERS:
        raise InputError(f"normalizer {name!r} unknown: choose one of {', '.join(NORMALIZERS)}")
    steps = {"nfkc": [normalizers.NFKC()], "nfc": [normalizers.NFC()], "none": []}[name]
    # SentencePiece-style whitespace handling: any whitespace run -> one space, no trailing space.
    # Not a left strip: the normaliser runs on each section between special tokens, and
    # stripping " 입니다" after "<mask>" would turn the word-initial "▁입니다" into "입니다".
    # A leading space is harmless (Metaspace gives "▁x" either way, the decoder drops it).
    steps += [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip(left=False, right=True)]
    return normalizers.Sequence(steps)


def _special(token: str, mask: bool) -> AddedToken:
    return AddedToken(token, lstrip=mask, rstrip=False, single_word=False, normalized=False, special=True)


def _empty_tokenizer(model: str, normalizer: str, unk: str) -> Tokenizer:
    if model == "unigram":
        tok = Tokenizer(models.Unigram())
    elif model == "bpe":
        tok = Tokenizer(models.BPE(unk_token=unk))
    else:
        raise InputError(f"model {model!r} unknown: choose one of {', '.join(MODELS)}")
    tok.normalizer = build_normalizer(normalizer)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    return tok


# Decimal places kept of each Unigram log-probability (see _canonical_unigram).
SCORE_DECIMALS = 6


def _canonical_unigram(tok: Tokenizer, n_special: int) -> Tokenizer:
    """The trained Unigram model with scores rounded to ``SCORE_DECIMALS`` places and the pieces
    after the special tokens ordered by (score descending, piece), so that ids do not depend on
    the order in which the trainer happened to visit the words.

    The ``tokenizers`` Unigram trainer keeps its word counts in a hash map whose seed is drawn at
    random in every process and runs EM over the words in that map's order; floating-point sums
    in another order differ in the last bits (about 1e-11 here), and pieces whose scores nearly
    tie swap places when the trainer sorts them, so the same text gave different ids in two runs.
    Rounding removes that noise (a score differing by 1e-11 changes its rounded value only when
    it lies within 1e-11 of a rounding boundary), and the secondary key orders equal scores.
    """
    state = json.loads(tok.to_str())
    pieces = state["model"]["vocab"]
    head = pieces[:n_special]
    rest = [[p, round(float(score), SCORE_DECIMALS)] for p, score in _unseen_chars_in_order(pieces[n_special:])]
    rest.sort(key=lambda ps: (-ps[1], ps[0]))
    state["model"]["vocab"] = head + rest
    return Tokenizer.from_str(json.dumps(state, ensure_ascii=False))


def _unseen_chars_in_order(pieces: list) -> list:
    """``pieces`` with the trainer's fallback scores for dropped characters handed out in code-point order.

    Every character of the text must stay in a Unigram vocabulary. Characters that EM dropped are
    put back by the trainer with the scores ``min_score``, ``min_score + 1e-4``, ``+ 2e-4``, ... in
    the order of a randomly seeded hash set, so the same character got a different score (and id)
    in every run. Those pieces are the single characters whose scores continue that sequence above
    the lowest score, plus one of the characters tied at the lowest score (which one cannot be
    told apart). This gives that whole group the same scores as before, to its characters sorted
    by code point, so each gets the same score in every run.
    """
    if not pieces:
        return pieces
    lowest = min(score for _, score in pieces)
    singles: dict[float, list[int]] = {}
    for i, (piece, score) in enumerate(pieces):
        if len(piece) == 1:
            singles.setdefault(score, []).append(i)
    raised, penalty = [], 0.0
    while True:  # the trainer's own arithmetic: min_score + 0.0001 added up k times
        penalty += 0.0001
        if lowest + penalty not in singles:
            break
        raised += singles[lowest + penalty]
    if not raised:
        return pieces
    # Ties at the lowest score (EM's summation noise is far below 1e-8), the first fallback among them.
    group = raised + [i for i, (piece, score) in enumerate(pieces) if len(piece) == 1 and score - lowest <= 1e-8]
    chars = sorted(pieces[i][0] for i in group)
    scores = sorted((pieces[i][1] for i in group), reverse=True)
    members = set(group)
    return [pc for i, pc in enumerate(pieces) if i not in members] + [[c, sc] for c, sc in zip(chars, scores)]


def _non_empty(texts: Iterable[str], seen: list[int], at_end=None) -> Iterator[str]:
    """The non-blank texts, counted in `seen`; `at_end(chars)` is called with their distinct characters once
    the last one has been read (before the trainer starts on them), and may raise to stop the training."""
    chars: set[str] = set()
    for t in texts:
        if t and not t.isspace():
            seen[0] += 1
            if at_end is not None:
                chars.update(t)
            yield t
    if at_end is not None:
        at_end(chars)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    family: str = "roberta",
    out_dir: str | Path | None = None,
    model: str = "unigram",
    normalizer: str = "nfkc",
    model_max_length: int = 512,
    *,
    vocab_flag: str = "--vocab-size",
) -> PreTrainedTokenizerFast:
    """Train a tokenizer on ``texts`` (streamed once) and return it as a transformers fast tokenizer.

    Special tokens get ids 0-4 in the family's order (see the module docstring). When ``out_dir``
    is given the tokenizer is saved there (``AutoTokenizer.from_pretrained(out_dir)`` loads it).
    If the text supports fewer than ``vocab_size`` pieces the returned vocabulary is smaller
    (a warning is logged). Raises :class:`InputError` for no text at all, an unknown family,
    model or normaliser, or a ``vocab_size`` below the number of distinct characters; its message names
    ``vocab_flag``, the option or field that set ``vocab_size`` (post-training: ``--tokenizer-vocab-size``).
    """
    return _train(texts, vocab_size, family, out_dir, model, normalizer, model_max_length, vocab_flag=vocab_flag)


def _alphabet_size(texts: Iterable[str], normalizer: str) -> int:
    """The distinct characters of `texts` as the trainer counts them: normalised, spaces as the "▁" marker.
    Its own normaliser object: the trainer holds the tokenizer's while it reads the texts."""
    chars, norm = {"▁"}, build_normalizer(normalizer)
    for t in texts:
        if t and not t.isspace():
            chars.update(norm.normalize_str(t).replace(" ", "▁"))
    return len(chars)


def _train(texts, vocab_size, family, out_dir, model, normalizer, model_max_length,
           show_progress: bool = False, length: int | None = None, vocab_flag: str = "--vocab-size",
           reread=None, warn_small: bool = True) -> PreTrainedTokenizerFast:
    """`reread`: a function giving the texts again, to count their characters for an error message when
    `texts` can be read only once; `warn_small`: log a vocabulary smaller than asked for (the CLI refuses it)."""
    if family not in FAMILIES:
        raise InputError(f"family {family!r} unknown: choose one of {', '.join(FAMILIES)}")
    if vocab_size <= len(FAMILIES[family]["order"]):
        raise InputError(f"vocab size {vocab_size} is too small: it must exceed the "
                         f"{len(FAMILIES[family]['order'])} special tokens; raise {vocab_flag}")
    fam = FAMILIES[family]
    order = fam["order"]
    unk, mask = fam["attrs"]["unk_token"], fam["attrs"]["mask_token"]
    tok = _empty_tokenizer(model, normalizer, unk)
    specials = [_special(t, t == mask) for t in order]
    if model == "unigram":
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token=unk,
                                          show_progress=show_progress)
    else:
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=show_progress)
    seen = [0]

    def too_small(approx: int | None = None) -> InputError:
        """The refusal, with the exact count of characters where the texts can be read again, else `approx`."""
        again = reread() if reread is not None else None if isinstance(texts, Iterator) else texts
        n_chars = _alphabet_size(again, normalizer) if again is not None else approx
        if n_chars is None:
            return InputError(f"vocab size {vocab_size} is smaller than the number of distinct characters in the "
                              f"corpus plus {len(order)} special tokens; raise {vocab_flag}")
        return InputError(f"vocab size {vocab_size} is smaller than the {n_chars} distinct characters in the corpus "
                          f"plus {len(order)} special tokens; raise {vocab_flag} to at least {n_chars + len(order)}")

    def refuse_an_endless_unigram(chars: set[str]) -> None:
        # Hand-written because the trainer cannot say it: tokenizers' Unigram trainer prunes pieces until at
        # most vocab_size * 1.1 are left but never prunes a single character, so with more characters than
        # that it loops forever (huggingface/tokenizers#1179) instead of raising "not large enough to contain
        # all chars" as it does below that. Counted while the text is read (each distinct character
        # normalised alone), checked before the trainer's EM starts.
        approx = _alphabet_size(chars, normalizer)
        if approx + 1 > vocab_size * 11 // 10:
            raise too_small(approx)

    try:
        tok.train_from_iterator(_non_empty(texts, seen, refuse_an_endless_unigram if model == "unigram" else None),
                                trainer=trainer, length=length)
    except InputError:
        raise
    except Exception as e:  # the Rust trainer raises a bare Exception
        if "not large enough to contain all chars" not in str(e):
            raise
        raise too_small() from None
    if seen[0] == 0:
        raise InputError("no text to train on: the corpus is empty (check the input or the split)")
    if model == "unigram":
        tok = _canonical_unigram(tok, len(order))
    elif tok.get_vocab_size() > vocab_size:  # BPE keeps every character, then merges only up to vocab_size
        raise InputError(f"vocab size {vocab_size} is smaller than the {tok.get_vocab_size() - len(order)} distinct "
                         f"characters in the corpus plus {len(order)} special tokens, so BPE would learn no merge; "
                         f"raise {vocab_flag} above {tok.get_vocab_size()}")
    vocab = tok.get_vocab()
    for i, t in enumerate(order):  # the trainers put special tokens first, in order
        if vocab.get(t) != i:
            raise RuntimeError(f"special token {t!r} got id {vocab.get(t)}, expected {i}")
    if tok.get_vocab_size() < vocab_size and warn_small:
        logger.warning("the text supports only %d pieces; vocabulary is %d, not the requested %d",
                       tok.get_vocab_size(), tok.get_vocab_size(), vocab_size)
    tok.post_processor = processors.TemplateProcessing(
        single=fam["single"], pair=fam["pair"],
        special_tokens=[(t, vocab[t]) for t in fam["template_tokens"]])
    attrs = {k: (_special(v, k == "mask_token")) for k, v in fam["attrs"].items()}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=model_max_length,
                                   model_input_names=fam["model_input_names"], padding_side="right",
                                   clean_up_tokenization_spaces=False, **attrs)
    if out_dir is not None:
        save_tokenizer(fast, out_dir)
    return fast


@command
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="xpt-train-tokenizer", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True,
                   help="prepared corpus folder or a folder with split folders or files (its --split is used), or a "
                        ".txt/.jsonl[.gz] file or a folder of them (read whole)")
    p.add_argument("--vocab-size", type=int, default=50000, help="vocabulary size incl. special tokens (default 50000)")
    p.add_argument("--family", choices=sorted(FAMILIES), default="roberta",
                   help="special tokens and post-processor of the English source's family: bert ([CLS] ... [SEP]) "
                        "for BERT, ELECTRA and MiniLM sources, roberta (<s> ... </s>) for RoBERTa and XLM-RoBERTa "
                        "ones (default %(default)s)")
    p.add_argument("--out", required=True, help="output folder (AutoTokenizer.from_pretrained loads it)")
    p.add_argument("--model", choices=MODELS, default="unigram")
    p.add_argument("--normalizer", choices=NORMALIZERS, default="nfkc",
                   help="Unicode normalisation (default nfkc, that of the published figures; it turns Korean compatibility "
                        "jamo such as ㅋㅋ or ㅠㅠ into conjoining jamo, decoded as ᄏᄏ; nfc keeps them as typed)")
    p.add_argument("--model-max-length", type=int, default=512)
    p.add_argument("--language", help="ISO 639 code of the target language, recorded in training_info.json and from "
                   "there in the models' config.json (default: the one the prepared corpus's stats.json records)")
    p.add_argument("--split", default="train", choices=SPLITS,
                   help="split of a corpus folder with splits to train on (default train)")
    p.add_argument("--text-field", default="text", help="field holding the text in .jsonl files (default text)")
    p.add_argument("--max-texts", type=int, default=0, help="train on the first N texts only (0 = all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--overwrite", action="store_true", help="replace the contents of an existing --out folder")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from tokenization.folders import check_output_folder

    try:
        check_output_folder(args.out, overwrite=args.overwrite, reads=(args.corpus,))
    except ValueError as error:
        raise InputError(str(error)) from None

    bad = Utf8Counter()
    files, split = corpus_split(args.corpus, args.split)  # split None: a file or a folder without splits, read whole

    def read(counter: Utf8Counter) -> Iterable[str]:
        texts = iter_texts(files, counter, args.text_field)
        return itertools.islice(texts, args.max_texts) if args.max_texts > 0 else texts

    texts = read(bad)
    counted = [0, 0]

    def counting(it: Iterable[str]) -> Iterator[str]:
        for t in it:
            counted[0] += 1
            counted[1] += len(t)
            yield t

    t0 = time.perf_counter()
    length = None
    stats_file = Path(args.corpus) / STATS_FILE
    if split and stats_file.is_file():  # prepared corpus: the split size gives the progress bar a total
        try:
            length = json.loads(stats_file.read_text())["splits"][split]["sentences"]
        except (KeyError, ValueError, TypeError):
            length = None
    if args.max_texts > 0 and length:
        length = min(length, args.max_texts)
    tok = _train(counting(texts), args.vocab_size, args.family, None, args.model, args.normalizer,
                 args.model_max_length, show_progress=not args.no_progress, length=length,
                 reread=lambda: read(Utf8Counter()), warn_small=False)  # a smaller vocabulary is refused below
    dt = time.perf_counter() - t0
    bad.warn()
    if len(tok) < args.vocab_size:
        raise InputError(f"{args.corpus}: the text supports only {len(tok)} tokens, fewer than --vocab-size "
                         f"{args.vocab_size}; lower --vocab-size to at most {len(tok)} or add more text")
    out = Path(args.out)
    save_tokenizer(tok, out)
    info = {"corpus": str(args.corpus), "split": split, "texts": counted[0], "characters": counted[1],
            "skipped_invalid_utf8_lines": bad.lines, "vocab_size": len(tok), "family": args.family,
            "model": args.model, "normalizer": args.normalizer, "model_max_length": args.model_max_length,
            "language": args.language or recorded_language(args.corpus), "train_seconds": round(dt, 2)}
    (out / TRAINING_INFO).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"trained {args.model} tokenizer, vocab {len(tok)}, on {counted[0]:,} texts in {dt:.1f}s -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
