"""Linear reads of a task: the no-model floor and linear probes of a frozen encoder.

Both turn every text into a vector u, then fit the same linear estimator on the train split, choose
its regularisation on the dev split only, and score dev and test with the task's metric:

    single-text classification   logistic regression on u(s)
    pair classification          logistic regression on [|u(s1) - u(s2)|, u(s1) * u(s2)]  (or [u1, u2])
    pair regression (STS)        ridge on [|u1 - u2|, u1 * u2], and, with nothing trained,
                                 cos(u1, u2) ranked against the gold scores (Spearman)

The floor (`floor`): u(s) is the TF-IDF vector of the character 1-3-grams of s inside word
boundaries (scikit-learn's `analyzer="char_wb"`, `sublinear_tf=True`), fitted on the train texts.
No model at all: an encoder is worth using on a task only where it scores above this.

The probe (`probe`): u(s) is the frozen encoder's last hidden states, mean-pooled over the real
tokens (`pooling="mean"`) or at the first token (`"first"`), standardised on the train split. A few
seconds per task on a CPU and no seeds to average over: what post-training alone left in the encoder.

scikit-learn does the fitting (`LogisticRegression`, `Ridge`, `TfidfVectorizer`); written here is
only the shared protocol, so that the floor, the probes and fine-tuning see the same splits.

    from training.linear_reads import floor, probe
    floor(spec, splits)                        # splits: training.tasks.load_task_data(...)
    probe("runs/xpt", spec, splits, max_length=64)
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from training import metrics_downstream
from training.tasks import TaskDataError, TaskSpec

C_GRID = (0.1, 1.0, 10.0)  # logistic regression: inverse regularisation, chosen on dev
ALPHA_GRID = (0.1, 1.0, 10.0, 100.0)  # ridge: regularisation, chosen on dev
POOLINGS = ("mean", "first")  # sentence vectors of `encode`
ROUND_COSINE = 6  # decimals: far above fp32 rounding noise (about 1e-7), far below any real difference
TFIDF = {"analyzer": "char_wb", "ngram_range": (1, 3), "sublinear_tf": True}


def applies_to(spec: TaskSpec) -> bool:
    """Sentence-level tasks: one or two texts in, a label or a score out."""
    return spec.task_type in ("single", "pair", "regression")


def _texts(spec: TaskSpec, rows: list[dict[str, Any]]) -> list[list[str]]:
    return [[str(r[c]) for r in rows] for c in spec.text_columns]


def _pair_features(u, v, combine: str):
    """[|u-v|, u*v] (or [u, v]) for dense arrays and scipy sparse matrices alike."""
    import scipy.sparse as sp

    if sp.issparse(u):
        parts = [abs(u - v), u.multiply(v)] if combine == "diff-product" else [u, v]
        return sp.hstack(parts).tocsr()
    return np.hstack([np.abs(u - v), u * v] if combine == "diff-product" else [u, v])


def _cosine(u, v) -> np.ndarray:
    import scipy.sparse as sp

    if sp.issparse(u):
        dot = np.asarray(u.multiply(v).sum(1)).ravel()
        norms = np.sqrt(np.asarray(u.multiply(u).sum(1)).ravel() * np.asarray(v.multiply(v).sum(1)).ravel())
    else:
        dot = (u * v).sum(1)
        norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    # rounded (ROUND_COSINE): identical sentences must tie exactly, whatever the order of the fp32 sums
    return np.round(dot / np.maximum(norms, 1e-12), ROUND_COSINE)


def _score(spec: TaskSpec, predictions, rows) -> dict[str, float]:
    names = [spec.metric] + [m for m in spec.extra_metrics if m != spec.metric]
    if spec.task_type == "regression":
        references = [float(r[spec.label_column]) for r in rows]
        predictions = [float(p) for p in predictions]
    else:
        references = [str(r[spec.label_column]) for r in rows]
    return metrics_downstream.compute(names, list(predictions), references)


def fit_and_score(spec: TaskSpec, splits: dict[str, list[dict[str, Any]]],
                  vectorise: Callable[[str, int, list[str]], Any], pair_combine: str = "diff-product",
                  scale: bool = False) -> dict[str, Any]:
    """The shared protocol. `vectorise(split, column, texts)` returns one row per text (dense or sparse);
    it is called on the train split first, so a vectoriser may fit itself there. `scale`: standardise
    dense features with the train split's mean and deviation."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.preprocessing import StandardScaler

    if not applies_to(spec):
        raise ValueError(f"task {spec.name!r} ({spec.task_type}) has no sentence-level linear read")
    order = [s for s in ("train", "dev", "test") if s in splits]
    vectors = {s: [vectorise(s, c, texts) for c, texts in enumerate(_texts(spec, splits[s]))] for s in order}
    if len(spec.text_columns) == 2:
        features = {s: _pair_features(*vectors[s], pair_combine) for s in order}
    else:
        features = {s: vectors[s][0] for s in order}
    if scale:
        scaler = StandardScaler().fit(features["train"])
        features = {s: scaler.transform(x) for s, x in features.items()}
    regression = spec.task_type == "regression"
    if regression:
        y = np.array([float(r[spec.label_column]) for r in splits["train"]])
        candidates = [(f"ridge alpha={a:g}", Ridge(alpha=a)) for a in ALPHA_GRID]
    else:
        y = np.array([str(r[spec.label_column]) for r in splits["train"]])
        candidates = [(f"logistic regression C={c:g}", LogisticRegression(C=c, max_iter=2000)) for c in C_GRID]
    best = None
    for name, estimator in candidates:
        estimator.fit(features["train"], y)
        dev = _score(spec, estimator.predict(features["dev"]), splits["dev"])
        if best is None or dev[spec.metric] > best[2][spec.metric]:
            best = (name, estimator, dev)
    name, estimator, dev = best
    result: dict[str, Any] = {"estimator": name, "selected_on": "dev", "dev": dev[spec.metric], "dev_metrics": dev,
                              "train_examples": len(splits["train"])}
    if "test" in features:
        test = _score(spec, estimator.predict(features["test"]), splits["test"])
        result.update(test=test[spec.metric], test_metrics=test)
    if regression and len(spec.text_columns) == 2:  # nothing trained: the cosine of the two vectors
        result["zero_shot"] = {s: metrics_downstream.spearman(_cosine(*vectors[s]).tolist(),
                                                              [float(r[spec.label_column]) for r in splits[s]])
                               for s in order if s != "train"}
    result["split"] = "test" if "test" in features else "dev"
    result["score"] = result[result["split"]]
    return result


def floor(spec: TaskSpec, splits: dict[str, list[dict[str, Any]]], pair_combine: str = "diff-product") -> dict[str, Any]:
    """The no-model floor on these splits (see the module docstring)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    started = time.time()
    vectoriser = TfidfVectorizer(**TFIDF)
    fitted = [False]

    def vectorise(split: str, column: int, texts: list[str]):
        if split == "train" and not fitted[0]:
            # one vocabulary for both texts of a pair: fitted on all train texts of every column
            vectoriser.fit([t for column in _texts(spec, splits["train"]) for t in column])
            fitted[0] = True
        return vectoriser.transform(texts)

    result = fit_and_score(spec, splits, vectorise, pair_combine)
    return {"kind": "floor", "features": "TF-IDF of character 1-3-grams (char_wb, sublinear tf)",
            "pair_features": pair_combine if len(spec.text_columns) == 2 else None, **result,
            "wall_s": round(time.time() - started, 2)}


COSINE_READING = "TF-IDF cosine, no training"


def floor_bar(floor: dict[str, Any], split: str | None = None) -> tuple[float, str]:
    """The bar a score faces on a task, with how it is described: the floor's score on `split` (by default the
    split it reports), or for STS the cosine without training (`zero_shot`) where that scores higher, so that
    "above the floor" holds against both no-model reads. `floor` as `floor` returns it (scores and `zero_shot`
    by split), or one split's reading as a study's report keeps it ({"score", "estimator", "zero_shot": a
    number or None})."""
    split = split or floor.get("split")
    score = floor[split] if split in floor else floor["score"]
    cosine = floor.get("zero_shot")
    if isinstance(cosine, dict):
        cosine = cosine.get(split)
    if cosine is not None and cosine > score:
        return cosine, COSINE_READING
    return score, f"TF-IDF, {floor['estimator']}" if floor.get("estimator") else "TF-IDF"


def encode(model, tokenizer, texts: list[str], max_length: int, batch_size: int = 64,
           device: str = "cpu") -> dict[str, np.ndarray]:
    """Frozen sentence vectors by pooling: {"mean": last hidden states averaged over the real tokens,
    "first": the first token's}, each (len(texts), hidden) in fp32."""
    import torch

    pooled: dict[str, list] = {"mean": [], "first": []}
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt").to(device)
            hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled["mean"].append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).float().cpu())
            pooled["first"].append(hidden[:, 0].float().cpu())
    return {name: torch.cat(parts).numpy() for name, parts in pooled.items()}


def probe(model_dir: str | Path, spec: TaskSpec, splits: dict[str, list[dict[str, Any]]], max_length: int,
          poolings: tuple[str, ...] = POOLINGS, pair_combine: str = "diff-product", trust_remote_code: bool = True,
          device: str = "cpu") -> dict[str, dict[str, Any]]:
    """Linear probes of the frozen encoder in `model_dir`, one per pooling (see the module docstring).
    Every text is encoded once."""
    from transformers import AutoModel, AutoTokenizer

    unknown = [p for p in poolings if p not in POOLINGS]
    if unknown:
        raise ValueError(f"pooling {unknown} is not one of {POOLINGS}")
    started = time.time()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    model = AutoModel.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code).to(device).eval()
    states = {(split, column): encode(model, tokenizer, texts, max_length, device=device)
              for split in splits if split in ("train", "dev", "test")
              for column, texts in enumerate(_texts(spec, splits[split]))}
    encoded_s = time.time() - started
    for (split, _), pooled in states.items():
        if not all(np.isfinite(vectors).all() for vectors in pooled.values()):
            raise TaskDataError(f"{model_dir}: the encoder's hidden states on the {split} split are not finite "
                                "(NaN or infinity: its training diverged); probe a model whose training converged")
    results = {}
    for pooling in poolings:
        started = time.time()
        result = fit_and_score(spec, splits, lambda split, column, texts: states[(split, column)][pooling],
                               pair_combine, scale=True)
        results[pooling] = {"kind": "probe", "features": f"{pooling}-pooled last hidden states (frozen, standardised)",
                            "pair_features": pair_combine if len(spec.text_columns) == 2 else None, **result,
                            "max_length": max_length, "encode_s": round(encoded_s, 2),
                            "wall_s": round(time.time() - started, 2)}
    return results
