"""Measure the rule-based splitter (:mod:`tokenization.korean_text`) against kss on real paragraphs.

    python -m tokenization.compare_splitters --input ../shared/data/corpus/ko_formal.txt.gz --n 300

Needs ``kss`` importable (it is *not* a project dependency; a throwaway venv with
``pip install kss`` is enough: this module imports only the standard library, kss and
``tokenization.korean_text``). Paragraphs are a deterministic sample (every k-th line with at
least one sentence-final punctuation mark inside). Boundaries are compared as positions in the
paragraph with all whitespace removed, so the two splitters' different trimming does not count.
Prints boundary precision/recall of the rules taking kss as the reference, the share of
paragraphs split identically, a few disagreements, and both speeds.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import time

from .korean_text import split_sentences


def boundaries(sents: list[str]) -> set[int]:
    out, pos = set(), 0
    for s in sents[:-1]:
        pos += len(re.sub(r"\s", "", s))
        out.add(pos)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--backend", default="pecab", help="kss backend (pecab: pure Python; mecab if installed)")
    p.add_argument("--show", type=int, default=8)
    p.add_argument("--budget", type=float, default=600.0, help="stop kss after this many seconds (it is slow)")
    a = p.parse_args(argv)
    import kss

    opener = gzip.open if a.input.endswith(".gz") else open
    with opener(a.input, "rt", encoding="utf-8") as f:
        lines = [l.strip() for l in f if re.search(r"[.!?]\s", l.strip())]
    step = max(1, len(lines) // a.n)
    paras = lines[::step][: a.n]
    kss.split_sentences("워밍업 문장이다. 끝.", backend=a.backend)  # warm-up (model loading)
    t0, c0 = time.perf_counter(), time.process_time()
    ref = []
    for x in paras:
        ref.append(kss.split_sentences(x, backend=a.backend))
        if time.perf_counter() - t0 > a.budget:
            break
    t_kss, c_kss = time.perf_counter() - t0, time.process_time() - c0
    paras = paras[: len(ref)]
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(20):
        ours = [split_sentences(x) for x in paras]
    t_ours, c_ours = (time.perf_counter() - t0) / 20, (time.process_time() - c0) / 20
    tp = fp = fn = same = 0
    diffs = []
    for x, o, r in zip(paras, ours, ref):
        bo, br = boundaries(o), boundaries(r)
        tp += len(bo & br)
        fp += len(bo - br)
        fn += len(br - bo)
        if bo == br:
            same += 1
        elif len(diffs) < a.show:
            diffs.append({"rules": o, "kss": r})
    res = {
        "paragraphs": len(paras), "characters": sum(map(len, paras)),
        "kss_sentences": sum(map(len, ref)), "rule_sentences": sum(map(len, ours)),
        "boundary_precision_vs_kss": round(tp / max(1, tp + fp), 4),
        "boundary_recall_vs_kss": round(tp / max(1, tp + fn), 4),
        "paragraphs_identical": round(same / len(paras), 4),
        "rules_paragraphs_per_s": round(len(paras) / t_ours, 1),
        "rules_paragraphs_per_cpu_s": round(len(paras) / c_ours, 1),
        "kss_paragraphs_per_s": round(len(paras) / t_kss, 2), "kss_paragraphs_per_cpu_s": round(len(paras) / c_kss, 2),
        "kss_backend": a.backend,
        "kss_version": getattr(kss, "__version__", "?"),
    }
    print(json.dumps(res, indent=2, ensure_ascii=False))
    for d in diffs:
        print(json.dumps(d, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
