"""Exact sentence de-duplication in 8 bytes per unique sentence, and the keyed hash that splits a corpus
(`tokenization.prepare_corpus` explains both choices)."""
from __future__ import annotations

import hashlib

import numpy as np


class DigestSet:
    """Exact set of 64-bit digests: sorted ``uint64`` array (8 B/entry) + a pending Python set."""

    def __init__(self, batch: int = 1 << 16):
        self.main = np.empty(0, dtype=np.uint64)
        self.pending: set[int] = set()
        self.batch = batch

    def add(self, d: int) -> bool:
        """Add ``d``; True if it was new."""
        if d in self.pending:
            return False
        m = self.main
        if len(m):
            i = int(np.searchsorted(m, np.uint64(d)))
            if i < len(m) and int(m[i]) == d:
                return False
        self.pending.add(d)
        if len(self.pending) >= self.batch:
            self._merge()
        return True

    def _merge(self) -> None:
        new = np.fromiter(self.pending, dtype=np.uint64, count=len(self.pending))
        new.sort()
        self.main = np.insert(self.main, np.searchsorted(self.main, new), new)
        self.pending = set()

    def __len__(self) -> int:
        return len(self.main) + len(self.pending)

    @property
    def nbytes(self) -> int:
        return self.main.nbytes


def sentence_hashes(sentence: str, seed: int) -> tuple[int, int]:
    """(dedup digest, split key): two 64-bit halves of a keyed BLAKE2b of the UTF-8 text."""
    h = hashlib.blake2b(sentence.encode("utf-8"), digest_size=16, key=b"xpt-corpus-%d" % seed).digest()
    return int.from_bytes(h[:8], "little"), int.from_bytes(h[8:], "little")
