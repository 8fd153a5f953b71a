#!/usr/bin/env bash
# Create .venv (if needed) and install the project with everything the demo and the tests use.
# Idempotent: a second run only checks. Needs python3 >= 3.10 and pip access to PyPI.
#   XPT_TORCH_SPEC  torch requirement to install when torch is missing (default: torch==2.13.0,
#                   the CPU build available on this project's machines; on a GPU machine install
#                   your CUDA build of torch into .venv first and it is kept).
# As root on Debian/Ubuntu it also installs chromium for the Space's browser test (skipped,
# with its reason, where chromium is absent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # Pinned: an unpinned torch pulls a multi-GB CUDA build where a CPU build is wanted.
  .venv/bin/python -m pip install -q "${XPT_TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e ".[offline-source,dev,space]"
# konlpy's bundled Korean text is the demo's fallback corpus; only its files are read, so its Java
# bridge (JPype) is not needed.
.venv/bin/python -m pip install -q --no-deps "konlpy>=0.6"
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "note: chromium could not be installed; the Space browser test will skip"
fi
