"""Masked MLM batches of post-training, from the token rows of `training/mlm_data.py`.

1. `BatchSchedule`: global batch `step` = a fixed slice of the epoch's seeded permutation of rows, so
   the data position is a pure function of the step (exact resume needs no loader state).
2. `mask_row`: dynamic masking whose randomness comes only from (seed, epoch, row index): the same
   row gets the same mask on any number of processes, in any loader worker, before and after a
   resume. 15% of the non-special tokens (or whole words) are selected; of those 80% become the
   mask token, 10% a random non-special token, 10% stay. Evaluation uses (eval_seed, 0, row).

`collate` pads masked rows into a batch (a block attention mask and per-sentence positions for packed
rows); `TrainMicroBatches` and `train_loader` deal a process its training micro-batches, and
`eval_batches` its fixed-masked evaluation batches.
"""
from __future__ import annotations

import numpy as np
import torch

from tokenization.errors import ConfigError


# ----------------------------------------------------------------------------------------------
# 1. Batch schedule (data position = f(step))
# ----------------------------------------------------------------------------------------------


class BatchSchedule:
    """Rows of global batch `step`: epoch = step // steps_per_epoch, a slice of a permutation seeded by
    (seed, epoch). With `lengths` (no packing) each window of 50 batches is sorted by length so a
    batch holds sentences of similar length (less padding); batch order within the window is then
    shuffled with the same seed."""

    def __init__(self, num_rows: int, global_batch: int, seed: int, lengths: list[int] | None = None):
        if num_rows < global_batch:
            raise ConfigError("global_batch_size", f"only {num_rows} training rows for a global batch of "
                                                   f"{global_batch}: use more data or a smaller global_batch_size")
        self.num_rows, self.global_batch, self.seed, self.lengths = num_rows, global_batch, seed, lengths
        self.steps_per_epoch = num_rows // global_batch
        self._epoch, self._order = None, None

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self._epoch != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(self.num_rows)
            if self.lengths is not None:
                lengths = np.asarray(self.lengths)
                window, used = 50 * self.global_batch, self.steps_per_epoch * self.global_batch
                batches = []
                for w in range(0, used, window):  # the rows past `used` (a random few) sit this epoch out,
                    chunk = order[w:min(w + window, used)]  # not the shortest of the last window
                    chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
                    batches += [chunk[i:i + self.global_batch] for i in range(0, len(chunk), self.global_batch)
                                if len(chunk[i:i + self.global_batch]) == self.global_batch]
                perm = rng.permutation(len(batches))
                order = np.concatenate([batches[i] for i in perm]) if batches else order
            self._epoch, self._order = epoch, order
        return self._order

    def global_batch_rows(self, step: int) -> tuple[int, np.ndarray]:
        epoch, offset = divmod(step, self.steps_per_epoch)
        order = self._epoch_order(epoch)
        return epoch, order[offset * self.global_batch:(offset + 1) * self.global_batch]


# ----------------------------------------------------------------------------------------------
# 2. Masking and collation
# ----------------------------------------------------------------------------------------------


class Masker:
    """80/10/10 dynamic masking from an explicit numpy Generator (derived from (seed, epoch, row))."""

    def __init__(self, tokenizer, mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1,
                 whole_word=False):
        self.mask_id = tokenizer.mask_token_id
        if self.mask_id is None:
            raise ValueError("the tokenizer has no mask token")
        self.special = np.array(sorted(set(tokenizer.all_special_ids)), dtype=np.int64)
        vocab = len(tokenizer)
        # a lookup table: one gather per row instead of np.isin's sort (collation feeds a GPU step
        # of ~20 ms from CPU workers, so its per-row cost matters)
        self.is_special = np.zeros(max(vocab, int(self.special.max()) + 1), dtype=bool)
        self.is_special[self.special] = True
        self.random_ids = np.setdiff1d(np.arange(vocab, dtype=np.int64), self.special)
        self.p, self.p_mask, self.p_random, self.whole_word = (mlm_probability, mask_replace_prob,
                                                               random_replace_prob, whole_word)

    def mask_row(self, ids: np.ndarray, word_start: np.ndarray, rng: np.random.Generator):
        """(masked input ids, labels with -100 at unselected positions)."""
        ids = np.asarray(ids, dtype=np.int64)
        labels = np.full_like(ids, -100)
        positions = np.flatnonzero(~self.is_special[ids])
        if positions.size == 0:
            return ids.copy(), labels
        if self.whole_word:
            starts = np.asarray(word_start, dtype=bool)[positions]
            prev_gap = np.diff(positions, prepend=-2) != 1  # a special token in between starts a new word
            unit_of = np.cumsum(starts | prev_gap) - 1
            n_units = int(unit_of[-1]) + 1
        else:
            unit_of, n_units = np.arange(positions.size), positions.size
        k = max(1, int(round(self.p * n_units)))
        picked = np.zeros(n_units, dtype=bool)
        picked[rng.choice(n_units, size=k, replace=False)] = True
        chosen = positions[picked[unit_of]]
        labels[chosen] = ids[chosen]
        out = ids.copy()
        r = rng.random(chosen.size)
        to_mask = chosen[r < self.p_mask]
        to_random = chosen[(r >= self.p_mask) & (r < self.p_mask + self.p_random)]
        out[to_mask] = self.mask_id
        out[to_random] = self.random_ids[rng.integers(0, self.random_ids.size, size=to_random.size)]
        return out, labels


def row_rng(seed: int, epoch: int, row: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, int(row)])


def shuffle_word_order(ids: np.ndarray, labels: np.ndarray, seg_lengths, special: np.ndarray, fraction: float,
                       rng: np.random.Generator) -> np.ndarray:
    """Word-order prediction (KoreALBERT's WOP), in place on `ids`: within each sentence of the row,
    permute up to `fraction` of the tokens that are neither special nor selected for MLM (masked
    tokens never move and nothing crosses a sentence). Returns the WOP targets: at every shuffled
    position, the original in-sentence position of the token now there; -100 elsewhere."""
    targets = np.full_like(ids, -100)
    start = 0
    for seg_len in seg_lengths:
        span = np.arange(start, start + seg_len)
        start += seg_len
        movable = span[(labels[span] == -100) & ~np.isin(ids[span], special)]
        k = int(fraction * movable.size)
        if k < 2:
            continue
        chosen = np.sort(rng.choice(movable, size=int(rng.integers(2, k + 1)), replace=False))
        origin = chosen[rng.permutation(chosen.size)]
        ids[chosen] = ids[origin].copy()
        targets[chosen] = origin - span[0]
    return targets


def collate(rows: list[dict], row_indices, *, masker: Masker, seed: int, epoch: int, pad_id: int,
            position_offset: int, packing: bool, wop_probability: float = 0.0,
            wop_fraction: float = 0.15, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """Masked, padded batch. Packed rows get a (B, T, T) block mask and per-sentence positions.
    With `wop_probability` > 0 that share of rows also gets word-order shuffling (`wop_labels`).
    `pad_to`: pad every batch to at least this length (one shape for compiled training)."""
    length = max(max(len(r["input_ids"]) for r in rows), pad_to or 0)
    b = len(rows)
    input_ids = np.full((b, length), pad_id, dtype=np.int64)
    labels = np.full((b, length), -100, dtype=np.int64)
    pad_position = position_offset - 1 if position_offset > 0 else 0
    position_ids = np.full((b, length), pad_position, dtype=np.int64)
    segment = np.full((b, length), -1, dtype=np.int64)
    wop_labels = np.full((b, length), -100, dtype=np.int64) if wop_probability > 0 else None
    for i, (row, index) in enumerate(zip(rows, row_indices)):
        rng = row_rng(seed, epoch, index)
        ids, lab = masker.mask_row(np.asarray(row["input_ids"]), row["word_start"], rng)
        n = len(ids)
        if wop_labels is not None and rng.random() < wop_probability:
            wop_labels[i, :n] = shuffle_word_order(ids, lab, row["seg_lengths"], masker.special, wop_fraction, rng)
        input_ids[i, :n], labels[i, :n] = ids, lab
        seg_lengths = np.asarray(row["seg_lengths"], dtype=np.int64)
        used = int(seg_lengths.sum())
        segment[i, :used] = np.repeat(np.arange(seg_lengths.size), seg_lengths)
        seg_starts = np.cumsum(seg_lengths) - seg_lengths
        position_ids[i, :used] = np.arange(used) - np.repeat(seg_starts, seg_lengths) + position_offset
    batch = {"input_ids": torch.from_numpy(input_ids), "labels": torch.from_numpy(labels),
             "position_ids": torch.from_numpy(position_ids)}
    if wop_labels is not None:
        batch["wop_labels"] = torch.from_numpy(wop_labels)
    seg = torch.from_numpy(segment)
    if packing:
        batch["attention_mask"] = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    else:
        batch["attention_mask"] = (seg >= 0).long()
    return batch


class TrainMicroBatches(torch.utils.data.Dataset):
    """Item i = micro-batch (i % accumulation) of global step (i // accumulation) for this process.

    Global batch rows are dealt to (micro-batch a, process r) as slice (a * world + r) * micro; every
    process and worker computes the same schedule and the same masks, so a DataLoader with workers
    can prefetch and resume starts at item `start_step * accumulation` with no loader state."""

    def __init__(self, rows, schedule: BatchSchedule, *, rank: int, world: int, micro: int, accumulation: int,
                 collate_kwargs: dict):
        self.rows, self.schedule = rows, schedule
        self.rank, self.world, self.micro, self.accumulation = rank, world, micro, accumulation
        self.collate_kwargs = collate_kwargs

    def __len__(self):  # effectively unbounded: epochs repeat
        return 10 ** 12

    def __getitem__(self, i: int):
        step, a = divmod(i, self.accumulation)
        epoch, indices = self.schedule.global_batch_rows(step)
        start = (a * self.world + self.rank) * self.micro
        mine = [int(x) for x in indices[start:start + self.micro]]
        batch = self.rows[mine]
        rows = [dict(zip(batch.keys(), values)) for values in zip(*batch.values())]
        out = collate(rows, mine, seed=self.collate_kwargs["seed"], epoch=epoch, **{
            k: v for k, v in self.collate_kwargs.items() if k != "seed"})
        out["step"] = torch.tensor(step)
        return out


class _RangeSampler(torch.utils.data.Sampler):
    def __init__(self, start: int, stop: int):
        self.start, self.stop = start, stop

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def __len__(self):
        return self.stop - self.start


def train_loader(dataset: TrainMicroBatches, start_step: int, stop_step: int, num_workers: int = 0):
    sampler = _RangeSampler(start_step * dataset.accumulation, stop_step * dataset.accumulation)
    # Every iterator draws a base seed from `generator`, by default torch's global one, which dropout
    # also uses: a resumed run would then draw its dropout masks one number later than the run it
    # continues. Batches do not depend on that seed (masks come from `row_rng`), so a private
    # generator keeps the global stream for dropout alone.
    return torch.utils.data.DataLoader(dataset, batch_size=None, sampler=sampler, num_workers=num_workers,
                                       generator=torch.Generator())


def eval_batches(rows, *, batch_size: int, rank: int, world: int, collate_kwargs: dict):
    """Fixed-masked evaluation batches of this process (batches rank, rank + world, ...)."""
    n = len(rows)
    for b, start in enumerate(range(0, n, batch_size)):
        if b % world != rank:
            continue
        idx = list(range(start, min(n, start + batch_size)))
        batch = rows[idx]
        items = [dict(zip(batch.keys(), values)) for values in zip(*batch.values())]
        yield collate(items, idx, epoch=0, **collate_kwargs)
