"""Shared fixtures: paths to the optional ../shared/data folder and small Korean text.

Tests that need the real Korean data use ``shared_data`` and skip, with the reason, when the
folder is absent (it lives beside the checkout, never inside it).
"""
from __future__ import annotations

import os
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
