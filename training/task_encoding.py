"""Task data as model inputs and model outputs as predictions, for the five task types of fine-tuning.

Encoding: examples to token features (sequence tasks with their labels, token tasks with word-aligned
tags, QA with overlapping context windows, their answer positions and character offsets), and their
collation into padded batches. Decoding: logits to labels, scores, tags or answer spans, and the task
metrics over them (`score`).
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from training import metrics_downstream, sentence_similarity
from training.tasks import TaskDataError, TaskSpec

if TYPE_CHECKING:
    import torch

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# token_type_ids are always requested: some fast tokenizers (e.g. a bare PreTrainedTokenizerFast in
# transformers v5) leave them out by default, and BERT-style models would then see the pair as one segment.


# --- encoding ------------------------------------------------------------------------------------------------
def encode_sequence_task(spec: TaskSpec, rows, tokenizer, max_length: int, labels: list[str] | None):
    columns = spec.text_columns
    first = [str(row[columns[0]]) for row in rows]
    second = [str(row[columns[1]]) for row in rows] if len(columns) == 2 else None
    encoded = tokenizer(first, second, truncation=True, max_length=max_length, return_token_type_ids=True)
    label_ids = {label: i for i, label in enumerate(labels or [])}
    features = []
    for i, row in enumerate(rows):
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        value = row[spec.label_column]
        feature["labels"] = float(value) if spec.task_type == "regression" else label_ids[str(value)]
        features.append(feature)
    return features


def encode_token_task(spec: TaskSpec, rows, tokenizer, max_length: int, labels: list[str]):
    """Tagged words (or characters, ``spec.character_tags``: KLUE-NER tags every character, spaces included)
    -> the sentence tokenized whole, its words joined by spaces (characters as they are).

    A word's first token (found by its characters' offsets) carries the word's tag; its later tokens carry
    none (-100), nor do tokens that hold only a space. Handing each word to the tokenizer on its
    own instead (`is_split_into_words`) lets a SentencePiece-style tokenizer split a word it only knows
    inside a sentence into a bare "▁" piece, which would carry the tag, and the word; for characters every
    one becomes such a word, so sentences came out about twice as long, in pieces the encoder never saw.
    `token_tags` maps the predictions back: a word takes its first token's tag, and a character that shares
    a token with the one before continues it. An entity boundary inside a token cannot be predicted, as
    with any sub-word tagger.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TaskDataError(f"task {spec.name!r}: token tasks need the character offsets of a fast tokenizer "
                            f"(tokenizer.json); {type(tokenizer).__name__} gives none")
    label_ids = {label: i for i, label in enumerate(labels)}
    separator = "" if spec.character_tags else " "
    words = [[str(w) for w in row[spec.tokens_column]] for row in rows]
    texts = [separator.join(row_words) for row_words in words]
    encoded = tokenizer(texts, truncation=True, max_length=max_length, return_offsets_mapping=True,
                        return_token_type_ids=True)
    features = []
    for i, row in enumerate(rows):
        text, tags = texts[i], row[spec.label_column]
        word_of_char = []  # separators belong to no word
        for w, word in enumerate(words[i]):
            word_of_char += [w] * len(word) + [None] * len(separator)
        positions, continues, label_row = [None] * len(tags), [False] * len(tags), []
        pieces = encoded.tokens(i)
        for position, (start, end) in enumerate(encoded["offset_mapping"][i]):
            chars = [c for c in range(start, end) if not text[c].isspace() and word_of_char[c] is not None]
            if not chars or not pieces[position].strip("▁"):  # a special token, or a lone "▁" (its offsets
                label_row.append(-100)                           # are the next character's at a text's start)
                continue
            first = word_of_char[chars[0]]  # the first token of a word carries its tag (byte-level BPE may
            label_row.append(label_ids[tags[first]] if positions[first] is None else -100)  # split a character)
            for w in dict.fromkeys(word_of_char[c] for c in chars):
                if positions[w] is None:
                    positions[w], continues[w] = position, w != first
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        feature.update(labels=label_row, tag_positions=positions, tag_continues=continues)
        features.append(feature)
    return features


def encode_qa_task(spec: TaskSpec, rows, tokenizer, max_length: int, stride: int):
    """SQuAD-style windows over the context. Each feature has start/end token positions of the first
    answer (0 = the first token when the answer is not inside the window), its example index and the
    character offsets of its context tokens (None elsewhere) for span decoding.

    A question keeps at most half the window (longer ones are cut, with a warning), and the windows'
    overlap stays below what the longest question leaves for the context, with a token to spare for a cut
    question that tokenizes one longer: `tokenizers` stops the whole process otherwise."""
    questions = [str(row[spec.question_column]).strip() for row in rows]
    contexts = [str(row[spec.context_column]) for row in rows]
    limit = max_length // 2
    alone = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    cut = [k for k, ids in enumerate(alone["input_ids"]) if len(ids) > limit]
    for k in cut:
        questions[k] = questions[k][: alone["offset_mapping"][k][limit - 1][1]]
    if cut:
        warnings.warn(f"task {spec.name!r}: {len(cut)} question(s) longer than {limit} tokens (half of --max-length "
                      f"{max_length}) cut to their first {limit} tokens, e.g. row {cut[0]}", stacklevel=2)
    longest = max([min(len(ids), limit) for ids in alone["input_ids"]], default=0)
    room = max_length - longest - tokenizer.num_special_tokens_to_add(pair=True)
    if room < 3:
        raise TaskDataError(f"task {spec.name!r}: --max-length {max_length} leaves no room for the context next to "
                            f"questions of {longest} tokens: raise --max-length")
    encoded = tokenizer(questions, contexts, truncation="only_second", max_length=max_length, stride=min(stride, room - 2),
                        return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True)
    features = []
    for i in range(len(encoded["input_ids"])):
        example = encoded["overflow_to_sample_mapping"][i]
        sequence_ids = encoded.sequence_ids(i)
        offsets = [tuple(o) if sequence_ids[k] == 1 else None for k, o in enumerate(encoded["offset_mapping"][i])]
        answers = rows[example][spec.answers_column]
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        start_token = end_token = 0
        context_tokens = [k for k, o in enumerate(offsets) if o is not None]
        if context_tokens and offsets[context_tokens[0]][0] <= start_char and offsets[context_tokens[-1]][1] >= end_char:
            start_token = next(k for k in context_tokens if offsets[k][1] > start_char)
            end_token = next(k for k in reversed(context_tokens) if offsets[k][0] < end_char)
        feature = {k: encoded[k][i] for k in MODEL_INPUTS if k in encoded}
        feature.update(start_positions=start_token, end_positions=end_token, example=example, offsets=offsets)
        features.append(feature)
    return features


def build_features(spec: TaskSpec, splits, tokenizer, max_length: int, doc_stride: int, config=None,
                   pair_encoding: str = "cross"):
    out = {}
    for split, rows in splits.items():
        if pair_encoding == "bi":
            out[split] = sentence_similarity.encode_pairs(spec.text_columns, spec.label_column, rows, tokenizer,
                                                          max_length)
        elif spec.task_type == "token":
            out[split] = encode_token_task(spec, rows, tokenizer, max_length, spec.labels)
        elif spec.task_type == "qa":
            out[split] = encode_qa_task(spec, rows, tokenizer, max_length, min(doc_stride, max_length // 4))
        else:
            out[split] = encode_sequence_task(spec, rows, tokenizer, max_length, spec.labels)
    if config is not None and getattr(config, "type_vocab_size", 2) < 2:
        # One segment embedding (RoBERTa, XPT from RoBERTa): a BERT-style tokenizer's segment ids 1 would
        # index past it, and all-zero ids add nothing, so the model gets none.
        for features in out.values():
            for feature in features:
                feature.pop("token_type_ids", None)
    return out


def collate(features, pad_token_id: int, task_type: str) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence of the batch; token labels pad with -100."""
    import torch

    length = max(len(f["input_ids"]) for f in features)
    batch = {}
    for key, pad in (("input_ids", pad_token_id), ("attention_mask", 0), ("token_type_ids", 0)):
        if key in features[0]:
            batch[key] = torch.tensor([f[key] + [pad] * (length - len(f[key])) for f in features], dtype=torch.long)
    if "input_ids_b" in features[0]:  # a bi-encoder pair: the second sentences padded on their own
        batch.update(sentence_similarity.pad_second(features, pad_token_id))
    if task_type == "token":
        batch["labels"] = torch.tensor([f["labels"] + [-100] * (length - len(f["labels"])) for f in features])
    elif task_type == "qa":
        batch["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        batch["end_positions"] = torch.tensor([f["end_positions"] for f in features])
    elif task_type == "regression":
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.float)
    else:
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
    return batch


# --- decoding ------------------------------------------------------------------------------------------------
def decode_qa(features, outputs, rows, spec: TaskSpec, n_best: int = 20, max_answer_tokens: int = 30) -> list[str]:
    """Best-scoring valid span (start <= end, both in the context, at most `max_answer_tokens`) per example."""
    best: dict[int, tuple[float, str]] = {}
    for feature, (start_logits, end_logits) in zip(features, outputs):
        offsets = feature["offsets"]
        length = len(offsets)
        starts = np.argsort(start_logits[:length])[::-1][:n_best]
        ends = np.argsort(end_logits[:length])[::-1][:n_best]
        context = rows[feature["example"]][spec.context_column]
        for s in starts:
            for e in ends:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_tokens:
                    continue
                score = float(start_logits[s] + end_logits[e])
                if feature["example"] not in best or score > best[feature["example"]][0]:
                    best[feature["example"]] = (score, context[offsets[s][0]:offsets[e][1]])
    return [best.get(i, (0.0, ""))[1] for i in range(len(rows))]


def token_tags(labels: list[str], feature, logits) -> list[str]:
    """The tag of each word (character) from a token task's logits, as `encode_token_task` aligned them.

    A word's first token gives its tag; a later character of the same token continues it (``B-X``/``I-X``
    -> ``I-X``). Words without a token (spaces, text cut off by truncation) are ``O``, except a space
    between an entity and a character predicted to continue it (``I-`` of the same type), which joins
    the entity as KLUE tags it.
    """
    tags = []
    for position, continues in zip(feature["tag_positions"], feature["tag_continues"]):
        tag = None if position is None else labels[int(np.argmax(logits[position]))]
        if continues and tag is not None:
            tag = "I-" + tag[2:] if tag[:2] in ("B-", "I-") else "O"
        tags.append(tag)
    for i, tag in enumerate(tags):
        if tag is None:
            before = tags[i - 1] if i else "O"
            after = next((t for t in tags[i + 1:] if t is not None), "O")
            inside = before[:2] in ("B-", "I-") and after == "I-" + before[2:]
            tags[i] = after if inside else "O"
    return tags


def score(spec: TaskSpec, features, outputs, rows) -> dict[str, float]:
    names = [spec.metric] + [m for m in spec.extra_metrics if m != spec.metric]
    if spec.task_type == "regression":
        predictions = [float(o.reshape(-1)[0]) for o in outputs]
        references = [float(r[spec.label_column]) for r in rows]
    elif spec.task_type in ("single", "pair"):
        predictions = [spec.labels[int(np.argmax(o))] for o in outputs]
        references = [str(r[spec.label_column]) for r in rows]
    elif spec.task_type == "token":
        predictions = [token_tags(spec.labels, feature, logits) for feature, logits in zip(features, outputs)]
        references = [list(r[spec.label_column]) for r in rows]
    else:
        predictions = decode_qa(features, outputs, rows, spec)
        references = [list(r[spec.answers_column]["text"]) for r in rows]
    return metrics_downstream.compute(names, predictions, references)
