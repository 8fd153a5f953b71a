"""Shared fixtures: paths to the optional ../shared/data folder, small Korean text, and the tiny
inputs of post-training runs.

Tests that need the real Korean data use ``shared_data`` and skip, with the reason, when the
folder is absent (it lives beside the checkout, never inside it). Post-training tests use ``tiny``
(small random BERT/RoBERTa sources, word-level tokenizers and a corpus) and, where they run
training in this process, ``fresh_accelerate_state``; their helpers are in tests/post_train_helpers.py.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("XPT_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

if str(REPO_ROOT) not in sys.path:  # scripts and tests run from the repo root, like the CLIs
    sys.path.insert(0, str(REPO_ROOT))

# Hand-written Korean sentences (not taken from ../shared) for tests that must run anywhere.
KOREAN_SENTENCES = [
    "대한민국의 수도는 서울이다.",
    "오늘은 날씨가 맑고 따뜻하다.",
    "나는 아침마다 공원에서 산책을 한다.",
    "이 영화는 정말 재미있었다.",
    "한국어는 교착어에 속하는 언어이다.",
    "도서관에서 책을 빌려 읽었다.",
    "우리는 내일 부산으로 여행을 간다.",
    "그 식당의 음식은 맛있지만 비싸다.",
    "학생들이 운동장에서 축구를 하고 있다.",
    "컴퓨터 프로그램은 사람이 작성한 명령의 집합이다.",
    "봄이 오면 꽃이 피고 새가 운다.",
    "지하철을 타고 회사에 출근했다.",
    "1945년 8월 15일에 광복을 맞이하였다.",
    "서울 Seoul 은 인구가 많은 도시이다.",
]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA}: real Korean corpus/task tests need it")
    return SHARED_DATA


@pytest.fixture(scope="session")
def korean_sentences() -> list[str]:
    return list(KOREAN_SENTENCES)


@pytest.fixture(autouse=True)
def allocator_left_alone(request, monkeypatch):
    """Fine-tuning in this process would keep freed memory in it for good (`retain_freed_memory`, part
    of its CPU speed settings); the test process keeps glibc's defaults instead, except in the module
    that tests that setting itself."""
    if request.module.__name__ != "tests.test_speed_settings":
        monkeypatch.setattr("training.step.retain_freed_memory", lambda: False)


@pytest.fixture
def fresh_accelerate_state():
    """Resets Accelerate's process-wide state after the test. Modules that run post-training in this
    process apply it to every test with `pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")`."""
    yield
    from tests.post_train_helpers import reset_accelerate  # not at the top: post_train_helpers imports this module

    reset_accelerate()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """{family: (source dir, tokenizer dir)}, a corpus folder and a shared token cache.

    Tiny real models (stock BERT/RoBERTa, hidden 32, 2 layers, random weights) and word-level Korean
    tokenizers from tests/model_factories.py; the corpus is random word sequences over the hand-written
    Korean sentences' vocabulary. Everything runs on the CPU in seconds per run."""
    from tests.model_factories import tiny_source, word_tokenizer
    from tests.post_train_helpers import WORDS

    root = tmp_path_factory.mktemp("tiny")
    out = {}
    for family in ("bert", "roberta"):
        tok = word_tokenizer(family, WORDS)
        tiny_source(family, tok, root / f"{family}-source")
        tok.save_pretrained(root / f"{family}-tok")
        out[family] = (root / f"{family}-source", root / f"{family}-tok")
    rnd = random.Random(0)
    corpus = root / "corpus"
    corpus.mkdir()
    lines = [" ".join(rnd.sample(WORDS, rnd.randint(3, 9))) for _ in range(400)]
    (corpus / "part-0.txt").write_text("\n".join(lines[:200]) + "\n", encoding="utf-8")
    (corpus / "part-1.txt").write_text("\n".join(lines[200:]) + "\n", encoding="utf-8")
    out["corpus"] = corpus
    out["cache"] = root / "cache"
    return out


@pytest.fixture
def unresolvable(monkeypatch, tmp_path) -> Path:
    """No offline mode, but the Hub's name does not resolve (no network, no proxy), over an empty Hub cache
    (returned)."""
    import socket

    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))

    def no_name(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_name)
    return tmp_path / "empty-hub-cache"
